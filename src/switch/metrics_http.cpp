// SPDX-License-Identifier: Apache-2.0
#include "switch/metrics_http.hpp"

#include <arpa/inet.h>

#include <atomic>
#include <thread>

#include <httplib.h>

#include "dpa/error.hpp"
#include "switch/metrics_text.hpp"

namespace dpa::sw {
namespace {

constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";
// Two scrapers at once (a Prometheus pair, or one and a person with curl) without a thread per
// hardware core, which httplib would start by default.
constexpr std::size_t kServerThreads = 2;
constexpr time_t kTimeoutSeconds = 5;

}  // namespace

struct MetricsServer::Impl {
  httplib::Server server;
  std::uint16_t port = 0;
  std::atomic<bool> finished{false};
  std::thread thread;
};

MetricsServer::MetricsServer(const SoftwareSwitch& target, const std::string& host, std::uint16_t port)
    : impl_(std::make_unique<Impl>()) {
  in_addr address{};
  if (inet_pton(AF_INET, host.c_str(), &address) != 1) {
    throw ConfigError("metrics host \"" + host + "\" is not an IPv4 address");
  }
  httplib::Server& server = impl_->server;
  server.new_task_queue = [] { return new httplib::ThreadPool(kServerThreads); };
  server.set_read_timeout(kTimeoutSeconds, 0);
  server.set_write_timeout(kTimeoutSeconds, 0);
  server.set_keep_alive_timeout(kTimeoutSeconds);
  server.Get("/metrics", [&target](const httplib::Request&, httplib::Response& response) {
    response.set_content(metrics_text(target), kContentType);
  });
  const auto not_allowed = [](const httplib::Request&, httplib::Response& response) {
    response.status = 405;
    response.set_header("Allow", "GET, HEAD");
  };
  server.Post("/metrics", not_allowed);
  server.Put("/metrics", not_allowed);
  server.Patch("/metrics", not_allowed);
  server.Delete("/metrics", not_allowed);
  server.Options("/metrics", not_allowed);
  server.set_error_handler([](const httplib::Request&, httplib::Response& response) {
    const char* text = response.status == 405 ? "dpa-switch: /metrics is read-only (GET)\n"
                                               : "dpa-switch: only GET /metrics is served here\n";
    response.set_content(text, "text/plain; charset=utf-8");
  });
  const int bound = port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    throw Error("cannot serve metrics on " + host + ":" + std::to_string(port) +
                ": the port is taken or the address is not one of this host's");
  }
  impl_->port = static_cast<std::uint16_t>(bound);
  impl_->thread = std::thread([impl = impl_.get()] {
    impl->server.listen_after_bind();
    impl->finished.store(true, std::memory_order_release);
  });
}

MetricsServer::~MetricsServer() {
  // stop() only takes effect once the loop runs: wait until it does (or has already ended).
  while (!impl_->finished.load(std::memory_order_acquire) && !impl_->server.is_running()) std::this_thread::yield();
  impl_->server.stop();
  impl_->thread.join();
}

std::uint16_t MetricsServer::port() const { return impl_->port; }

}  // namespace dpa::sw

#include "switch/control_channel.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "api/logging.hpp"
#include "dpa/error.hpp"

namespace dpa::sw {

namespace {

using nlohmann::json;

constexpr int kPollMs = 100;                 // how often the thread checks for shutdown
constexpr int kIdleConnectionMs = 30000;     // an idle client is disconnected after this
constexpr std::size_t kMaxRequestBytes = 1 << 20;

json counters_json(const SwitchCounters& counters) {
  json object = json::object();
  std::istringstream lines(counters.to_string());
  std::string name;
  std::uint64_t value = 0;
  while (lines >> name >> value) object[name] = value;
  return object;
}

json failure(const std::string& message) { return {{"ok", false}, {"error", message}}; }

}  // namespace

ControlChannel::ControlChannel(SoftwareSwitch& target, const std::string& host, std::uint16_t port)
    : switch_(target) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) {
    throw ConfigError("control channel host \"" + host + "\" is not an IPv4 address");
  }
  listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int on = 1;
  setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  if (listener_ < 0 || bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      listen(listener_, 4) != 0) {
    const std::string reason = std::strerror(errno);
    if (listener_ >= 0) close(listener_);
    throw Error("cannot listen for control connections on " + host + ":" + std::to_string(port) +
                ": " + reason);
  }
  socklen_t length = sizeof address;
  getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
  port_ = ntohs(address.sin_port);
  thread_ = std::thread([this] { serve(); });
}

ControlChannel::~ControlChannel() {
  stop_.store(true, std::memory_order_relaxed);
  thread_.join();
  close(listener_);
}

std::string ControlChannel::handle(const std::string& request) {
  json reply;
  try {
    const json message = json::parse(request);
    if (!message.is_object() || !message.contains("op") || !message["op"].is_string()) {
      return failure("a request is a JSON object with a string \"op\"").dump();
    }
    const std::string op = message["op"];
    if (op == "add_session") {
      if (!message.contains("session")) return failure("add_session needs \"session\"").dump();
      switch_.add_session(SessionConfig::from_json(message["session"].dump(), "session"));
      reply = {{"ok", true}};
    } else if (op == "remove_session") {
      if (!message.contains("id") || !message["id"].is_number_unsigned()) {
        return failure("remove_session needs a numeric \"id\"").dump();
      }
      switch_.remove_session(message["id"].get<std::uint32_t>());
      reply = {{"ok", true}};
    } else if (op == "sessions") {
      reply = {{"ok", true}, {"sessions", switch_.session_ids()}};
    } else if (op == "counters") {
      reply = {{"ok", true}, {"counters", counters_json(switch_.counters())}};
    } else if (op == "set_clock") {
      if (!message.contains("ticks") || !message["ticks"].is_number_unsigned() ||
          message["ticks"].get<std::uint64_t>() > 0xffffffffu) {
        return failure("set_clock needs \"ticks\", an integer in [0, 2^32)").dump();
      }
      switch_.set_clock(message["ticks"].get<std::uint32_t>());
      reply = {{"ok", true}};
    } else {
      return failure("unknown op \"" + op + "\" (add_session, remove_session, sessions, counters, set_clock)")
          .dump();
    }
  } catch (const json::exception& error) {
    return failure(std::string("invalid request: ") + error.what()).dump();
  } catch (const Error& error) {
    return failure(error.what()).dump();
  }
  return reply.dump();
}

void ControlChannel::serve() {
  while (!stop_.load(std::memory_order_relaxed)) {
    pollfd listening{listener_, POLLIN, 0};
    if (poll(&listening, 1, kPollMs) <= 0) continue;
    const int connection = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) continue;
    serve_connection(connection);
    close(connection);
  }
}

void ControlChannel::serve_connection(int connection) {
  std::string pending;
  char buffer[4096];
  int idle_ms = 0;
  while (!stop_.load(std::memory_order_relaxed) && idle_ms < kIdleConnectionMs) {
    pollfd readable{connection, POLLIN, 0};
    if (poll(&readable, 1, kPollMs) <= 0) {
      idle_ms += kPollMs;
      continue;
    }
    const ssize_t received = recv(connection, buffer, sizeof buffer, 0);
    if (received <= 0) return;
    idle_ms = 0;
    pending.append(buffer, static_cast<std::size_t>(received));
    if (pending.size() > kMaxRequestBytes) return;
    for (auto newline = pending.find('\n'); newline != std::string::npos; newline = pending.find('\n')) {
      const std::string request = pending.substr(0, newline);
      pending.erase(0, newline + 1);
      if (request.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string reply = handle(request) + "\n";
      detail::log().info("control: {} -> {}", request, reply.substr(0, reply.size() - 1));
      if (send(connection, reply.data(), reply.size(), MSG_NOSIGNAL) < 0) return;
    }
  }
}

}  // namespace dpa::sw

// SPDX-License-Identifier: Apache-2.0
#include "join_storm.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <random>
#include <stdexcept>
#include <vector>

#include "common/unique_fd.hpp"
#include "protocol/wire.hpp"
#include "transport/endpoint.hpp"

namespace dpa::storm {

namespace {

// One socket per storm source: a small receive buffer, never read (the kernel drops the
// replies), like an attacker who does not care about them.
detail::UniqueFd storm_socket() {
  detail::UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0));
  if (!fd.valid()) throw std::runtime_error("join storm: cannot open a UDP socket (raise ulimit -n)");
  const int small = 4096;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0) {
    throw std::runtime_error("join storm: cannot bind a UDP socket");
  }
  return fd;
}

void raise_file_limit(int sockets) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < static_cast<rlim_t>(sockets) + 64) {
    limit.rlim_cur = std::min<rlim_t>(limit.rlim_max, static_cast<rlim_t>(sockets) + 64);
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

JoinStorm::JoinStorm(StormSettings settings) : settings_(std::move(settings)) {
  raise_file_limit(settings_.sockets);
  for (int i = 0; i < settings_.sockets; ++i) sockets_.push_back(storm_socket());
  thread_ = std::thread([this] { run(); });
}

JoinStorm::~JoinStorm() { stop(); }

void JoinStorm::stop() {
  stop_.store(true, std::memory_order_relaxed);
  if (thread_.joinable()) thread_.join();
}

void JoinStorm::wait() {
  if (thread_.joinable()) thread_.join();
}

void JoinStorm::run() {
  const std::vector<detail::UniqueFd>& sockets = sockets_;
  const transport::Endpoint target = transport::Endpoint::resolve(settings_.switch_host, settings_.switch_port, "storm");
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(target.address);
  to.sin_port = htons(target.port);

  std::mt19937 random{std::random_device{}()};
  std::vector<std::uint32_t> nonces(sockets.size());
  for (auto& nonce : nonces) nonce = static_cast<std::uint32_t>(random()) | 1;

  protocol::JoinRequest request;
  request.world_size = settings_.world_size;
  request.threads = settings_.threads;
  request.window = settings_.window;
  protocol::Header header;
  header.flags = protocol::flag::kJoin;
  header.session = settings_.session;
  std::array<std::byte, protocol::kHeaderSize + 4 * 64> packet{};

  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto end = start + settings_.duration;
  std::uint64_t count = 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    const auto now = clock::now();
    if (now >= end) break;
    // Paced by the clock: as many JOINs as the rate allows by now, then a short nap.
    const auto due = static_cast<std::uint64_t>(
        settings_.rate * std::chrono::duration<double>(now - start).count());
    for (; count < due && !stop_.load(std::memory_order_relaxed); ++count) {
      const std::size_t source = count % sockets.size();
      const bool fresh = settings_.mode == StormSettings::Mode::fresh;
      request.nonce = fresh ? (static_cast<std::uint32_t>(random()) | 1) : nonces[source];
      for (std::uint32_t t = 0; t < request.threads; ++t) request.ports[t] = static_cast<std::uint16_t>(40000 + t);
      header.rank = static_cast<std::uint8_t>(fresh ? count % settings_.world_size : settings_.rank);
      header.count = static_cast<std::uint16_t>(request.words());
      protocol::encode(header, packet.data());
      protocol::encode(request, packet.data() + protocol::kHeaderSize);
      ::sendto(sockets[source].get(), packet.data(), protocol::kHeaderSize + 4 * request.words(), 0,
               reinterpret_cast<const sockaddr*>(&to), sizeof to);
      sent_.fetch_add(1, std::memory_order_relaxed);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace dpa::storm

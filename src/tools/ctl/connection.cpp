// SPDX-License-Identifier: Apache-2.0
#include "tools/ctl/connection.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "dpa/error.hpp"

namespace dpa::tools::ctl {

using nlohmann::json;

std::variant<UnixPath, dpa::HostPort> control_address(const std::string& text, const std::string& source) {
  if (text.starts_with("unix:")) return UnixPath(text.substr(5));
  if (text.find('/') != std::string::npos) return UnixPath(text);
  const bool port_only = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  return dpa::parse_host_port(port_only ? "127.0.0.1:" + text : text, source, 0, 1);
}

Connection::Connection(const std::variant<UnixPath, dpa::HostPort>& to, Clock::time_point deadline)
    : deadline_(deadline) {
  sockaddr_storage storage{};
  socklen_t address_length = 0;
  if (const auto* path = std::get_if<UnixPath>(&to)) {
    where_ = "unix:" + *path;
    auto& address = reinterpret_cast<sockaddr_un&>(storage);
    address.sun_family = AF_UNIX;
    if (path->empty() || path->size() >= sizeof address.sun_path) {
      throw dpa::ConfigError(fmt::format("--control \"{}\": a Unix socket path has 1 to {} bytes", where_,
                                         sizeof address.sun_path - 1));
    }
    path->copy(address.sun_path, path->size());
    address_length = sizeof address;
  } else {
    const dpa::HostPort& host_port = std::get<dpa::HostPort>(to);
    where_ = host_port.to_string();
    auto& address = reinterpret_cast<sockaddr_in&>(storage);
    address.sin_family = AF_INET;
    address.sin_port = htons(host_port.port);
    if (inet_pton(AF_INET, host_port.host.c_str(), &address.sin_addr) != 1) {
      throw dpa::ConfigError("--control \"" + where_ + "\": the host is not an IPv4 address");
    }
    address_length = sizeof address;
  }
  fd_ = detail::UniqueFd(socket(storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd_.valid()) throw Failure{fmt::format("socket: {}", std::strerror(errno))};
  if (connect(fd_.get(), reinterpret_cast<const sockaddr*>(&storage), address_length) != 0) {
    if (errno != EINPROGRESS) fail_with_errno("cannot connect to");
    wait_for(POLLOUT, "connecting to");
    int error = 0;
    socklen_t length = sizeof error;
    getsockopt(fd_.get(), SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) {
      errno = error;
      fail_with_errno("cannot connect to");
    }
  }
}

json Connection::request(const json& message) {
  const std::string line = message.dump() + "\n";
  for (std::size_t sent = 0; sent < line.size();) {
    wait_for(POLLOUT, "sending to");
    const ssize_t n = send(fd_.get(), line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) fail_with_errno("cannot send to");
    if (n > 0) sent += static_cast<std::size_t>(n);
  }
  std::string reply;
  char buffer[4096];
  while (reply.find('\n') == std::string::npos) {
    wait_for(POLLIN, "waiting for a reply from");
    const ssize_t n = recv(fd_.get(), buffer, sizeof buffer, 0);
    if (n == 0) throw Failure{fmt::format("dpa-switch at {} closed the connection without a reply", where_)};
    if (n < 0 && errno != EAGAIN && errno != EINTR) fail_with_errno("cannot read from");
    if (n > 0) reply.append(buffer, static_cast<std::size_t>(n));
  }
  try {
    return json::parse(reply.substr(0, reply.find('\n')));
  } catch (const json::exception& error) {
    throw Failure{fmt::format("{} replied something other than JSON: {}", where_, error.what())};
  }
}

void Connection::fail_with_errno(const char* doing) const {
  const char* hint = errno == EACCES || errno == EPERM
                         ? "only the switch's user may open its control socket"
                         : "is dpa-switch running with --control or --control-port?";
  throw Failure{fmt::format("{} {}: {} ({})", doing, where_, std::strerror(errno), hint)};
}

void Connection::wait_for(short events, const char* doing) const {
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - Clock::now());
    if (left.count() <= 0) throw Failure{fmt::format("timed out {} {}", doing, where_)};
    pollfd polled{fd_.get(), events, 0};
    const int ready = poll(&polled, 1, static_cast<int>(left.count()));
    if (ready > 0) return;
    if (ready < 0 && errno != EINTR) fail_with_errno(doing);
  }
}

}  // namespace dpa::tools::ctl

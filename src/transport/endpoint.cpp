// SPDX-License-Identifier: Apache-2.0
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <memory>

#include <fmt/format.h>

#include "dpa/error.hpp"
#include "transport/endpoint.hpp"

namespace dpa::transport {

Endpoint Endpoint::resolve(const std::string& host, std::uint16_t port, std::string_view what) {
  // Numeric addresses never touch the resolver (no DNS latency, no surprises).
  in_addr numeric{};
  if (inet_pton(AF_INET, host.c_str(), &numeric) == 1) {
    return Endpoint{ntohl(numeric.s_addr), port};
  }

  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const int status = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  const std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(found, &freeaddrinfo);
  if (status != 0 || found == nullptr) {
    const char* reason = status != 0 ? gai_strerror(status) : "no IPv4 address";
    throw ConfigError(fmt::format("{} \"{}\": cannot resolve ({})", what, host, reason));
  }
  const auto* address = reinterpret_cast<const sockaddr_in*>(found->ai_addr);
  return Endpoint{ntohl(address->sin_addr.s_addr), port};
}

std::string Endpoint::to_string() const {
  return fmt::format("{}.{}.{}.{}:{}", address >> 24, (address >> 16) & 0xffU, (address >> 8) & 0xffU,
                     address & 0xffU, port);
}

}  // namespace dpa::transport

// SPDX-License-Identifier: Apache-2.0
// An IPv4 UDP endpoint, the address every transport speaks in.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dpa::transport {

// Address and port in host byte order.
struct Endpoint {
  std::uint32_t address = 0;
  std::uint16_t port = 0;

  // "a.b.c.d" or a host name, with `port`; throws dpa::ConfigError naming `what` on failure.
  static Endpoint resolve(const std::string& host, std::uint16_t port, std::string_view what);
  [[nodiscard]] std::string to_string() const;
  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

}  // namespace dpa::transport

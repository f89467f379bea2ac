// SPDX-License-Identifier: Apache-2.0
// "host:port" text, as DPA_SWITCH, config files and command lines give an address.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dpa {

struct HostPort {
  std::string host;
  std::uint16_t port = 0;

  [[nodiscard]] std::string to_string() const;  // "host:port", what parse_host_port reads
  friend bool operator==(const HostPort&, const HostPort&) = default;
};

// Reads "host" or "host:port" (the port in decimal after the colon); "host" alone gets
// `default_port`. The host must be non-empty and hold no colon, the port lie in
// [min_port, 65535]. Otherwise throws ConfigError
//   <source>"<text>": expected host or host:port with a port in [<min_port>, 65535]
// where `source` names where the text came from, in the style of the caller's other messages:
// "DPA_SWITCH=" for a variable, "config.json: switch: " for a key, "--switch " for an option.
HostPort parse_host_port(std::string_view text, std::string_view source, std::uint16_t default_port,
                         std::uint16_t min_port = 1);

// Reads a comma-separated list of them, "host[:port][,host[:port]...]" (several switch servers),
// each entry as parse_host_port reads it. An empty entry or an address listed twice is a
// ConfigError naming `source` and the text.
std::vector<HostPort> parse_host_port_list(std::string_view text, std::string_view source,
                                           std::uint16_t default_port, std::uint16_t min_port = 1);

// Throws ConfigError "<origin>: ..." when `addresses` is empty or names an address twice.
void require_distinct(const std::vector<HostPort>& addresses, std::string_view origin);

// "host:port,host:port", what parse_host_port_list reads.
std::string to_string(const std::vector<HostPort>& addresses);

}  // namespace dpa

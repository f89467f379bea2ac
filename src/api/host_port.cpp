// SPDX-License-Identifier: Apache-2.0
#include "dpa/host_port.hpp"

#include <charconv>
#include <system_error>

#include <fmt/format.h>

#include "dpa/error.hpp"

namespace dpa {

std::string HostPort::to_string() const { return host + ":" + std::to_string(port); }

HostPort parse_host_port(std::string_view text, std::string_view source, std::uint16_t default_port,
                         std::uint16_t min_port) {
  const auto reject = [&]() -> HostPort {
    throw ConfigError(fmt::format("{}\"{}\": expected host or host:port with a port in [{}, 65535]", source,
                                  text, min_port));
  };
  const auto colon = text.find(':');
  HostPort address{std::string(text.substr(0, colon)), default_port};
  if (address.host.empty()) return reject();
  if (colon == std::string_view::npos) return address;
  const std::string_view port_text = text.substr(colon + 1);
  const char* const end = port_text.data() + port_text.size();
  const auto [stop, error] = std::from_chars(port_text.data(), end, address.port);
  if (error != std::errc{} || stop != end || port_text.empty() || address.port < min_port) return reject();
  return address;
}

// Two entries naming the same server would make it serve two threads' shares of a job as if it
// were two servers: a mistake in the list, so an error.
void require_distinct(const std::vector<HostPort>& addresses, std::string_view origin) {
  if (addresses.empty()) {
    throw ConfigError(fmt::format("{}: no address given (expected host[:port][,host[:port]...])", origin));
  }
  for (std::size_t i = 0; i < addresses.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (addresses[i] == addresses[j]) {
        throw ConfigError(fmt::format("{}: {} is listed twice (entries {} and {}); list each server once", origin,
                                      addresses[i].to_string(), j + 1, i + 1));
      }
    }
  }
}

std::vector<HostPort> parse_host_port_list(std::string_view text, std::string_view source,
                                           std::uint16_t default_port, std::uint16_t min_port) {
  std::vector<HostPort> addresses;
  std::size_t begin = 0;
  while (true) {
    const std::size_t comma = text.find(',', begin);
    const std::string_view entry = text.substr(begin, comma == std::string_view::npos ? comma : comma - begin);
    if (entry.empty()) {
      throw ConfigError(fmt::format("{}\"{}\": entry {} of the list is empty (expected host[:port][,host[:port]...])",
                                    source, text, addresses.size() + 1));
    }
    addresses.push_back(parse_host_port(entry, source, default_port, min_port));
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  require_distinct(addresses, fmt::format("{}\"{}\"", source, text));
  return addresses;
}

std::string to_string(const std::vector<HostPort>& addresses) {
  std::string text;
  for (const HostPort& address : addresses) {
    if (!text.empty()) text += ',';
    text += address.to_string();
  }
  return text;
}

}  // namespace dpa

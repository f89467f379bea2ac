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

}  // namespace dpa

// SPDX-License-Identifier: Apache-2.0
// Validation of the typed transport sections; every message names "<section>.<key>".
#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "dpa/error.hpp"
#include "dpa/transport_config.hpp"

namespace dpa {
namespace {

// The protocol's largest packet (header + payload) fits in 16 KiB; sockets accept up to 64 KiB.
constexpr std::uint32_t kMaxUdpPayload = 65507;
constexpr std::uint32_t kMaxShmPayload = 8u << 20;

bool is_ipv4(const std::string& text) {
  in_addr address{};
  return inet_pton(AF_INET, text.c_str(), &address) == 1;
}

bool is_mac(const std::string& text) {
  unsigned bytes[6];
  char tail = 0;
  return text.size() == 17 && std::sscanf(text.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &bytes[0], &bytes[1], &bytes[2],
                                          &bytes[3], &bytes[4], &bytes[5], &tail) == 6;
}

[[noreturn]] void reject(const std::string& section, const char* key, const std::string& why) {
  throw ConfigError(fmt::format("{}.{}: {}", section, key, why));
}

}  // namespace

void UdpTransportConfig::validate(const std::string& section) const {
  if (bind_host.empty()) reject(section, "bind_host", "must not be empty");
  // The floor (the largest control packet) is validate_transport's.
  if (max_payload > kMaxUdpPayload) {
    reject(section, "max_payload", fmt::format("{} above {}, the largest UDP datagram", max_payload, kMaxUdpPayload));
  }
  if (batch == 0 || batch > 1024) reject(section, "batch", fmt::format("{} outside 1..1024", batch));
  if (buffers == 0 || buffers > 65536) reject(section, "buffers", fmt::format("{} outside 1..65536", buffers));
  if (socket_buffer_bytes < 0) reject(section, "socket_buffer_bytes", "must not be negative");
}

void DpdkTransportConfig::validate(const std::string& section) const {
  if (local_ip.empty()) reject(section, "local_ip", "required (this host's IPv4 address on the DPDK port)");
  if (!is_ipv4(local_ip)) reject(section, "local_ip", fmt::format("\"{}\" is not an IPv4 address", local_ip));
  if (local_port == 0) reject(section, "local_port", "must be a UDP port (1..65535); queue q uses local_port + q");
  for (const DpdkNeighbour& neighbour : neighbours) {
    if (!is_ipv4(neighbour.ip)) {
      reject(section, "neighbours", fmt::format("ip \"{}\" is not an IPv4 address", neighbour.ip));
    }
    if (!is_mac(neighbour.mac)) {
      reject(section, "neighbours", fmt::format("mac \"{}\" is not aa:bb:cc:dd:ee:ff", neighbour.mac));
    }
  }
  if (mtu < 576 || mtu > 9600) reject(section, "mtu", fmt::format("{} outside 576..9600", mtu));
  if (queues > 1024) reject(section, "queues", fmt::format("{} outside 0..1024 (0: one per thread)", queues));
  if (rx_descriptors < 32 || tx_descriptors < 32) {
    reject(section, rx_descriptors < 32 ? "rx_descriptors" : "tx_descriptors", "must be at least 32");
  }
  if (burst == 0 || burst > 512) reject(section, "burst", fmt::format("{} outside 1..512", burst));
  if (mbufs < 2u * burst + 64) {
    reject(section, "mbufs", fmt::format("{} is too few for burst {} (at least 2 * burst + 64)", mbufs, burst));
  }
  if (tx_flush.count() < 0) reject(section, "tx_flush_us", "must not be negative");
  if (monitor && monitor_interval.count() <= 0) reject(section, "monitor_interval_us", "must be positive");
  if (monitor && monitor_output.empty()) reject(section, "monitor_output", "must name a file");
  if (!file_prefix.empty() && file_prefix.find('/') != std::string::npos) {
    reject(section, "file_prefix", "must be a plain name (no '/')");
  }
}

void ShmTransportConfig::validate(const std::string& section) const {
  const auto plain = [](const std::string& name) {
    return !name.empty() && name.size() <= 64 && std::ranges::all_of(name, [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_' || c == '.';
    });
  };
  if (!plain(fabric)) reject(section, "fabric", fmt::format("\"{}\" is not 1..64 letters, digits, '-', '_' or '.'", fabric));
  if (directory.empty()) reject(section, "directory", "must name a directory (a tmpfs such as /dev/shm)");
  if (max_payload > kMaxShmPayload) {
    reject(section, "max_payload", fmt::format("{} above {}", max_payload, kMaxShmPayload));
  }
  if (buffers < 16 || buffers > 65536) reject(section, "buffers", fmt::format("{} outside 16..65536", buffers));
  if (ring < 64 || ring > (1u << 20) || (ring & (ring - 1)) != 0) {
    reject(section, "ring", fmt::format("{} is not a power of two in 64..{}", ring, 1u << 20));
  }
}

void validate_transport(const TransportConfig& transport, int threads, const std::string& prefix,
                        const std::string& port_variable, const std::string& threads_variable,
                        std::uint32_t control_bytes) {
  const auto last_port_exists = [&](const std::string& key, std::uint32_t base, const std::string& variables) {
    if (std::int64_t{base} + threads - 1 <= 65535) return;
    throw ConfigError(fmt::format("{}{} {} + threads {} - 1 exceeds 65535{}", prefix, key, base, threads,
                                  variables.empty() ? "" : " (" + variables + ")"));
  };
  // The variables that set a base port and the thread count, for a worker's message.
  const std::string variables = port_variable.empty() || threads_variable.empty()
                                    ? port_variable + threads_variable
                                    : port_variable + ", " + threads_variable;
  if (const auto* udp = std::get_if<UdpTransportConfig>(&transport)) {
    udp->validate(prefix + "udp");
    if (udp->bind_port != 0) last_port_exists("udp.bind_port", udp->bind_port, variables);
  } else if (const auto* shm = std::get_if<ShmTransportConfig>(&transport)) {
    shm->validate(prefix + "shm");
    if (shm->base_port != 0) last_port_exists("shm.base_port", shm->base_port, variables);
  } else {
    const auto& dpdk = std::get<DpdkTransportConfig>(transport);
    dpdk.validate(prefix + "dpdk");
    last_port_exists("dpdk.local_port", dpdk.local_port, threads_variable);
  }
  // A JOIN that does not fit would never leave (or arrive cut short), and the join would time out
  // blaming the switch.
  if (const PacketLimit limit = packet_limit(transport, prefix); limit.bytes < control_bytes) {
    throw ConfigError(fmt::format("{}: below {} bytes, the largest control packet (a sealed JOIN reply listing "
                                  "the most ports): raise it",
                                  limit.setting, control_bytes));
  }
}

PacketLimit packet_limit(const TransportConfig& transport, const std::string& prefix) {
  if (const auto* udp = std::get_if<UdpTransportConfig>(&transport)) {
    return {udp->max_payload, fmt::format("{}udp.max_payload {}", prefix, udp->max_payload)};
  }
  if (const auto* shm = std::get_if<ShmTransportConfig>(&transport)) {
    return {shm->max_payload, fmt::format("{}shm.max_payload {}", prefix, shm->max_payload)};
  }
  const auto& dpdk = std::get<DpdkTransportConfig>(transport);
  constexpr std::uint32_t kIpv4AndUdpBytes = 20 + 8;
  const std::uint32_t bytes = dpdk.mtu > kIpv4AndUdpBytes ? dpdk.mtu - kIpv4AndUdpBytes : 0;
  return {bytes, fmt::format("{}dpdk.mtu {} (UDP payloads of up to {} bytes)", prefix, dpdk.mtu, bytes)};
}

}  // namespace dpa

// SPDX-License-Identifier: Apache-2.0
#include "dpa/job_layout.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "common/boot_id.hpp"
#include "common/unique_fd.hpp"
#include "dpa/error.hpp"
#include "transport/endpoint.hpp"

namespace dpa {
namespace {

// Where a route's MTU is unknown (no store host to route to): Ethernet's, which every IPv4
// network between hosts carries.
constexpr std::uint32_t kConservativeMtu = 1500;

std::string file_identity(const char* path) {
  struct stat status {};
  if (::stat(path, &status) != 0) return "none";
  return fmt::format("{}:{}", status.st_dev, status.st_ino);
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

std::string ipv4_text(const in_addr& address) {
  char text[INET_ADDRSTRLEN] = {};
  return inet_ntop(AF_INET, &address, text, sizeof(text)) != nullptr ? text : "";
}

}  // namespace

RankPlacement RankPlacement::probe(const Config& config, const std::string& toward,
                                   const std::string& shm_directory, bool authenticated) {
  RankPlacement placement;
  placement.hostname = host_name();
  // Without a boot id the hostname stands in for the kernel: the initial network namespace has
  // the same inode on every host, and tmpfs device numbers repeat between hosts.
  placement.host_key = "boot=" + detail::boot_id().value_or("host:" + placement.hostname) +
                       " net=" + file_identity("/proc/self/ns/net") + " shm=" + file_identity(shm_directory.c_str());
  Route route{"", kConservativeMtu};
  if (!toward.empty()) {
    try {
      route = route_to(toward, "the c10d store's host");
    } catch (const Error&) {
      // Only a packet size and a hint are at stake here; the rank reached the store somehow.
    }
  }
  placement.address = route.local_address;
  if (std::holds_alternative<DpdkTransportConfig>(config.transport)) placement.transport = "dpdk";
  if (std::holds_alternative<ShmTransportConfig>(config.transport)) placement.transport = "shm";
  placement.max_payload = payload_for_mtu(route.mtu != 0 ? route.mtu : kConservativeMtu, authenticated);
  return placement;
}

std::string RankPlacement::to_text() const {
  return fmt::format("{} address={} transport={} max_payload={} host={}", host_key, address.empty() ? "-" : address,
                     transport, max_payload, hostname);
}

RankPlacement RankPlacement::from_text(const std::string& text) {
  std::map<std::string, std::string> fields;
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    const auto equals = word.find('=');
    if (equals == std::string::npos) throw Error("dpa: malformed rank placement: " + text);
    fields[word.substr(0, equals)] = word.substr(equals + 1);
  }
  const auto get = [&](const char* name) {
    const auto found = fields.find(name);
    if (found == fields.end()) throw Error("dpa: rank placement lacks " + std::string(name) + ": " + text);
    return found->second;
  };
  RankPlacement placement;
  placement.host_key = "boot=" + get("boot") + " net=" + get("net") + " shm=" + get("shm");
  placement.address = get("address") == "-" ? "" : get("address");
  placement.transport = get("transport");
  placement.max_payload = static_cast<std::uint32_t>(std::stoul(get("max_payload")));
  placement.hostname = get("host");
  return placement;
}

JobLayout JobLayout::single_host(int world_size) {
  JobLayout layout;
  layout.world_size = world_size;
  layout.ranks_per_host = world_size;
  return layout;
}

JobLayout JobLayout::of(const std::vector<RankPlacement>& ranks) {
  JobLayout layout;
  layout.world_size = static_cast<int>(ranks.size());
  std::map<std::string, int> per_host;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    layout.ranks_per_host = std::max(layout.ranks_per_host, ++per_host[ranks[r].host_key]);
    // Ranks on rank 0's host reach its switch over loopback: only the others' paths limit packets.
    if (ranks[r].same_host(ranks.front())) continue;
    layout.remote_ranks.push_back(static_cast<int>(r));
    if (ranks[r].max_payload != 0) {
      layout.max_payload = layout.max_payload == 0 ? ranks[r].max_payload
                                                   : std::min(layout.max_payload, ranks[r].max_payload);
    }
  }
  return layout;
}

Route route_to(const std::string& host, const std::string& what) {
  // Any port: connecting a UDP socket only picks the route.
  const transport::Endpoint target = transport::Endpoint::resolve(host, 9, what);
  const detail::UniqueFd socket(::socket(AF_INET, SOCK_DGRAM, 0));
  if (socket.get() < 0) throw Error(fmt::format("cannot create a UDP socket: {}", std::strerror(errno)));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(target.port);
  address.sin_addr.s_addr = htonl(target.address);
  if (::connect(socket.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    throw ConfigError(fmt::format("{} \"{}\": no route to it from this host ({})", what, host, std::strerror(errno)));
  }
  sockaddr_in local{};
  socklen_t length = sizeof(local);
  int mtu = 0;
  socklen_t mtu_length = sizeof(mtu);
  if (::getsockname(socket.get(), reinterpret_cast<sockaddr*>(&local), &length) != 0 ||
      ::getsockopt(socket.get(), IPPROTO_IP, IP_MTU, &mtu, &mtu_length) != 0) {
    throw Error(fmt::format("{} \"{}\": cannot read the route to it ({})", what, host, std::strerror(errno)));
  }
  return Route{ipv4_text(local.sin_addr), static_cast<std::uint32_t>(std::max(mtu, 0))};
}

std::string resolve_ipv4(const std::string& host, const std::string& what) {
  in_addr address{};
  address.s_addr = htonl(transport::Endpoint::resolve(host, 0, what).address);
  return ipv4_text(address);
}

std::uint32_t interface_mtu(const std::string& address) {
  in_addr wanted{};
  if (inet_pton(AF_INET, address.c_str(), &wanted) != 1) return 0;
  ifaddrs* interfaces = nullptr;
  if (::getifaddrs(&interfaces) != 0) return 0;
  const std::unique_ptr<ifaddrs, decltype(&freeifaddrs)> owned(interfaces, &freeifaddrs);
  for (const ifaddrs* entry = interfaces; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    if (reinterpret_cast<const sockaddr_in*>(entry->ifa_addr)->sin_addr.s_addr != wanted.s_addr) continue;
    const detail::UniqueFd socket(::socket(AF_INET, SOCK_DGRAM, 0));
    ifreq request{};
    std::strncpy(request.ifr_name, entry->ifa_name, IFNAMSIZ - 1);
    if (socket.get() < 0 || ::ioctl(socket.get(), SIOCGIFMTU, &request) != 0) return 0;
    return static_cast<std::uint32_t>(std::max(request.ifr_mtu, 0));
  }
  return 0;
}

bool is_loopback(const std::string& address) {
  in_addr parsed{};
  return inet_pton(AF_INET, address.c_str(), &parsed) == 1 && (ntohl(parsed.s_addr) >> 24) == 127;
}

}  // namespace dpa

// SPDX-License-Identifier: Apache-2.0
// Where a job's ranks run relative to the switch that rank 0 embeds (the PyTorch backend's
// default): which ranks share rank 0's host, and how large a packet every path to the switch
// carries. Each rank probes its own facts (RankPlacement::probe), the ranks exchange them (the
// backend does so through its c10d store), and rank 0 sizes the job from the JobLayout they make
// (dpa/job_sizing.hpp). docs/multi-host.md describes the rule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dpa/config.hpp"

namespace dpa {

// Header bytes in front of a packet's payload on an IPv4 path: IPv4 (20), UDP (8), dpa (48).
inline constexpr std::uint32_t kPacketOverheadBytes = 20 + 8 + 48;
// The MAC trailer after the payload of an authenticated session's data packets, the largest a
// generation may choose (protocol.md §6.6): AES-256-GCM's 12-byte nonce and 16-byte tag.
inline constexpr std::uint32_t kAuthTagBytes = 28;
// Values per packet that a path of `mtu` bytes carries unfragmented: 356 at MTU 1500, 349 in a
// session that authenticates data.
[[nodiscard]] constexpr std::uint32_t payload_for_mtu(std::uint32_t mtu, bool authenticated = false) {
  const std::uint32_t overhead = kPacketOverheadBytes + (authenticated ? kAuthTagBytes : 0);
  return mtu > overhead + 4 ? (mtu - overhead) / 4 : 1;
}

// What one rank tells the others about where it runs.
struct RankPlacement {
  // Two ranks share a host, for the embedded switch, when they can reach it over loopback and
  // share its memory segments: the same kernel (its boot id), the same network namespace and the
  // same shared-memory directory (its device and inode), all three in the key. A hostname alone
  // is no identity: network namespaces and containers on one host share it, and two hosts may
  // have the same one. (It stands in for the boot id only where the kernel hides that.)
  std::string host_key;
  std::string hostname;  // for messages
  // This rank's address on the route to `toward` (below); empty if unknown. Rank 0 routes to a
  // remote rank's when its own route to the store's host is loopback (a hostname that
  // /etc/hosts maps to 127.0.1.1 on its own host).
  std::string address;
  std::string transport = "udp";  // what this rank's config selects: "udp", "dpdk" or "shm"
  // Values per packet that this rank's path toward the switch's host carries (the MTU of its
  // route to `toward`); 0: no limit short of the 64 KB datagram.
  std::uint32_t max_payload = 0;

  // This rank's placement. `toward` is the host that every rank reaches (the c10d store's host,
  // usually rank 0's): the route to it gives the path MTU. Empty, or no route to it: a
  // conservative MTU of 1500.
  // `shm_directory`: the shared-memory directory this rank would use (DPA_SHM_DIR or /dev/shm).
  // `authenticated`: the job's packets carry a tag (protocol.md §6.6), which max_payload leaves room for.
  static RankPlacement probe(const Config& config, const std::string& toward,
                             const std::string& shm_directory, bool authenticated = false);
  [[nodiscard]] bool same_host(const RankPlacement& other) const { return host_key == other.host_key; }

  // One line; the hostname last (it holds no space). from_text throws Error on a malformed line.
  [[nodiscard]] std::string to_text() const;
  static RankPlacement from_text(const std::string& text);
};

struct JobLayout {
  int world_size = 1;
  int ranks_per_host = 1;         // the most ranks on one host (they share its cores)
  std::vector<int> remote_ranks;  // ranks on other hosts than rank 0's
  // The smallest limit of a remote rank's path (the others reach the switch over loopback); 0: none.
  std::uint32_t max_payload = 0;
  // The switch listens on a network address (DPA_SWITCH_BIND), not loopback or shared memory,
  // even if every rank shares its host.
  bool switch_on_network = false;

  [[nodiscard]] bool spans_hosts() const { return !remote_ranks.empty(); }
  // Packets cross a network to the switch: UDP (or DPDK), within max_payload.
  [[nodiscard]] bool over_network() const { return spans_hosts() || switch_on_network; }
  static JobLayout single_host(int world_size);
  // `ranks[r]` is rank r's placement.
  static JobLayout of(const std::vector<RankPlacement>& ranks);
};

// The local IPv4 address that the route to `host` leaves from, and that route's MTU, learnt
// from a connected UDP socket (nothing is sent). Throws ConfigError naming `what` and `host`
// when the name does not resolve or no route leads there.
struct Route {
  std::string local_address;
  std::uint32_t mtu = 0;
};
Route route_to(const std::string& host, const std::string& what);

// `host` (a name or IPv4 text) as IPv4 text; ConfigError naming `what` when it does not resolve.
std::string resolve_ipv4(const std::string& host, const std::string& what);

// The MTU of the interface that holds the local IPv4 address `address`; 0 when no interface
// holds it (0.0.0.0 included).
std::uint32_t interface_mtu(const std::string& address);

// Whether `address` (IPv4 text) lies in 127.0.0.0/8.
bool is_loopback(const std::string& address);

}  // namespace dpa

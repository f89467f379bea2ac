// SPDX-License-Identifier: Apache-2.0
#include "transport/dpdk/dpdk_device.hpp"

#include <arpa/inet.h>
#include <unistd.h>
#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/logging.hpp"
#include "dpa/error.hpp"
#include "transport/dpdk/dpdk_queue.hpp"
#include "transport/dpdk/eal.hpp"
#include "transport/dpdk/flow_steering.hpp"
#include "transport/dpdk/nic_monitor.hpp"

namespace dpa::transport::dpdk {
namespace {

constexpr unsigned kPoolCache = 256;
constexpr unsigned kInboxSize = 4096;

unsigned pool_cache(const DpdkTransportConfig& config) { return std::min(kPoolCache, config.mbufs / 4); }

// A queue's pool fills its RX queues on every port (RX descriptors hold mbufs), its sent
// packets wait in its TX queue of every port until the NIC is done, a per-core cache keeps some,
// and the queue holds a received burst and a burst being built: fewer mbufs than that and the
// port stops receiving once the rings are full, with no error anywhere.
void check_pool_size(const DpdkTransportConfig& config, std::size_t ports, std::uint16_t rx_queues_per_thread) {
  const std::uint64_t needed = ports * (std::uint64_t{rx_queues_per_thread} * config.rx_descriptors +
                                        config.tx_descriptors) +
                               pool_cache(config) + 2u * config.burst;
  if (config.mbufs < needed) {
    throw ConfigError(fmt::format(
        "dpdk.mbufs {} is too few for {} port(s) x ({} RX queue(s) per thread x dpdk.rx_descriptors {} + "
        "dpdk.tx_descriptors {}) + a cache of {} + 2 x dpdk.burst {} = {}: raise dpdk.mbufs, or lower the "
        "descriptors (virtual devices such as net_memif and net_af_packet size their rings themselves)",
        config.mbufs, ports, rx_queues_per_thread, config.rx_descriptors, config.tx_descriptors, pool_cache(config),
        config.burst, needed));
  }
}

// A memif port's side of its connection, from its devargs (the PMD's defaults where not given).
struct MemifPort {
  std::string role;
  std::string socket;
  bool abstract = true;

  [[nodiscard]] std::string describe() const {
    return fmt::format("memif {} of socket {}{}", role, socket, abstract ? ", abstract" : "");
  }
  // Why a client has no server to talk to, where the file system can tell.
  [[nodiscard]] std::string missing_server() const {
    if (abstract) return "";
    if (::access(socket.c_str(), F_OK) != 0) return "the socket does not exist: start the server side (dpa-switch) first";
    if (::access(socket.c_str(), R_OK | W_OK) != 0) {
      return fmt::format("no permission to connect to it ({})", std::strerror(errno));
    }
    return "";
  }
};

std::optional<MemifPort> memif_port(std::uint16_t port_id, std::string_view driver, const DpdkTransportConfig& config) {
  if (driver != "net_memif") return std::nullopt;
  char name[RTE_ETH_NAME_MAX_LEN]{};
  rte_eth_dev_get_name_by_port(port_id, name);
  std::string devargs;
  for (const std::string& vdev : config.vdevs) {
    if (vdev.starts_with(fmt::format("{},", name))) devargs = vdev;
  }
  const auto value_of = [&](std::string_view key) -> std::string {
    const std::string field = fmt::format(",{}=", key);
    const std::size_t at = devargs.find(field);
    if (at == std::string::npos) return "";
    const std::size_t start = at + field.size();
    return devargs.substr(start, devargs.find(',', start) - start);
  };
  return MemifPort{value_of("role").empty() ? "client" : value_of("role"),
                   value_of("socket").empty() ? "/run/memif.sock" : value_of("socket"),
                   value_of("socket-abstract") != "no"};
}

// What a memif port's trouble may come from: the socket's state where the file system tells, else
// `server_why` or `client_why` by the port's role. Empty for other drivers.
std::string memif_hint(std::uint16_t port_id, std::string_view driver, const DpdkTransportConfig& config,
                       std::string_view server_why, std::string_view client_why) {
  const std::optional<MemifPort> memif = memif_port(port_id, driver, config);
  if (!memif) return "";
  const bool client = memif->role == "client";
  const std::string missing = client ? memif->missing_server() : "";
  return fmt::format(" ({}: {})", memif->describe(), !missing.empty() ? missing : client ? client_why : server_why);
}

// Why a port that would not start may have failed.
std::string start_failure_hint(std::uint16_t port_id, std::string_view driver, const DpdkTransportConfig& config) {
  return memif_hint(port_id, driver, config, "is its directory there and writable, and no other server listening on it?",
                    "no memif server accepts it: is the server side (dpa-switch) running, with role=server on this "
                    "socket?");
}

// Why a started port may still have no link.
std::string no_link_hint(std::uint16_t port_id, std::string_view driver, const DpdkTransportConfig& config) {
  return memif_hint(port_id, driver, config, "no client has connected; are the peers running, each a client of this socket?",
                    "its server has not accepted it: is the server side (dpa-switch) running with role=server on "
                    "this socket, the same id, and at least as many queue pairs? The server says why it refused at "
                    "DPDK log level pmd.net.memif:debug");
}

// A memif server with more queue pairs than its client points the extra ones at the client's
// first ring (DPDK 22.11): it receives the client's packets several times, some torn. A client
// whose queue pairs follow its thread count matches its server only by chance.
void warn_of_memif_queue_pairs(std::uint16_t port_id, std::string_view driver, const DpdkTransportConfig& config,
                               std::uint16_t queue_pairs) {
  const std::optional<MemifPort> memif = memif_port(port_id, driver, config);
  if (!memif || memif->role != "client" || config.queues != 0) return;
  detail::log().warn(
      "dpdk: {} has {} queue pair(s), one per thread, as dpdk.queues is not set: its server must have exactly as "
      "many, or it receives this client's packets several times and some torn (wrong results); set dpdk.queues to "
      "the server's (scripts/dpa-memif-config.sh --queues writes one value for both; docs/troubleshooting.md)",
      memif->describe(), queue_pairs);
}

std::uint32_t parse_ipv4(const std::string& text) {
  in_addr address{};
  inet_pton(AF_INET, text.c_str(), &address);  // validated by DpdkTransportConfig::validate
  return ntohl(address.s_addr);
}

std::uint64_t parse_mac(const std::string& text) {
  unsigned bytes[6]{};
  std::sscanf(text.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x", &bytes[0], &bytes[1], &bytes[2], &bytes[3], &bytes[4],
              &bytes[5]);
  std::uint64_t value = 0;
  for (const unsigned byte : bytes) value = value << 8 | byte;
  return value;
}

std::string port_names() {
  std::string names;
  for (std::uint16_t id = 0; id < RTE_MAX_ETHPORTS; ++id) {
    if (!rte_eth_dev_is_valid_port(id)) continue;
    char name[RTE_ETH_NAME_MAX_LEN]{};
    rte_eth_dev_get_name_by_port(id, name);
    names += fmt::format("{}{} ({})", names.empty() ? "" : ", ", id, name);
  }
  return names.empty() ? "none" : names;
}

std::vector<std::uint16_t> find_ports(const DpdkTransportConfig& config) {
  if (config.ports.empty()) {
    for (std::uint16_t id = 0; id < RTE_MAX_ETHPORTS; ++id) {
      if (rte_eth_dev_is_valid_port(id)) return {id};
    }
    throw ConfigError("dpdk.ports: no DPDK port exists (bind a NIC to vfio-pci, or add dpdk.vdevs; "
                      "see scripts/dpa-worker-check.sh)");
  }
  std::vector<std::uint16_t> ids;
  for (const std::string& name : config.ports) {
    std::uint16_t id = 0;
    if (rte_eth_dev_get_port_by_name(name.c_str(), &id) != 0) {
      throw ConfigError(fmt::format("dpdk.ports: no port named \"{}\" (ports: {})", name, port_names()));
    }
    if (std::find(ids.begin(), ids.end(), id) != ids.end()) {
      throw ConfigError(fmt::format("dpdk.ports: \"{}\" is listed twice", name));
    }
    ids.push_back(id);
  }
  if (ids.size() > 255) throw ConfigError("dpdk.ports: at most 255 ports");
  return ids;
}

// Mempools and inbox rings outlive devices: another port's RX ring may still hold our mbufs
// (net_ring passes pointers), and a device reopened in the same process finds them by name.
rte_mempool* queue_pool(std::uint16_t port_id, std::uint16_t queue, const DpdkTransportConfig& config) {
  const std::string name = fmt::format("dpa_p{}_q{}", port_id, queue);
  if (rte_mempool* existing = rte_mempool_lookup(name.c_str())) return existing;
  // At least DPDK's default room: some drivers (af_packet) size their frames by it.
  const auto data_room = static_cast<std::uint16_t>(
      std::max<std::uint32_t>(RTE_MBUF_DEFAULT_BUF_SIZE, RTE_PKTMBUF_HEADROOM + kEthernetBytes + config.mtu));
  const unsigned cache = pool_cache(config);
  const int socket = rte_eth_dev_socket_id(port_id);
  // Last in, first out behind the per-core caches: mbufs cross cores one way (a switch allocates
  // replies, the worker frees them), so each passes through the pool's common store, and a
  // ring there (DPDK's default, first in, first out) cycles through the whole pool (8191 mbufs,
  // ~19 MB: beyond the caches) while a stack hands out those freed last, still in cache. The
  // lock-free one: a spinlock's holder may be preempted (a VM's vCPU). The default where the
  // stack driver is not loaded (a bundle without librte_mempool_stack).
  rte_mempool* pool =
      rte_pktmbuf_pool_create_by_ops(name.c_str(), config.mbufs, cache, 0, data_room, socket, "lf_stack");
  if (pool == nullptr) pool = rte_pktmbuf_pool_create(name.c_str(), config.mbufs, cache, 0, data_room, socket);
  if (pool == nullptr) {
    throw Error(fmt::format("dpdk.mbufs: cannot create a pool of {} mbufs of {} bytes for queue {}: {} (more "
                            "hugepages, dpdk.memory_mb, or fewer dpdk.mbufs)",
                            config.mbufs, data_room, queue, rte_strerror(rte_errno)));
  }
  return pool;
}

rte_ring* queue_inbox(std::uint16_t port_id, std::uint16_t queue) {
  const std::string name = fmt::format("dpa_in_p{}_q{}", port_id, queue);
  rte_ring* ring = rte_ring_lookup(name.c_str());
  if (ring == nullptr) ring = rte_ring_create(name.c_str(), kInboxSize, SOCKET_ID_ANY, RING_F_SC_DEQ);
  if (ring == nullptr) throw Error(fmt::format("dpdk: cannot create ring {}: {}", name, rte_strerror(rte_errno)));
  rte_mbuf* stale = nullptr;
  while (rte_ring_dequeue(ring, reinterpret_cast<void**>(&stale)) == 0) rte_pktmbuf_free(stale);
  return ring;
}

// Ports held by a live device of this process: a second device would reconfigure them under the
// first one's queues.
class PortClaims {
 public:
  static void claim(const std::vector<std::uint16_t>& ports) {
    std::lock_guard lock(mutex());
    for (const std::uint16_t port : ports) {
      if (held().contains(port)) {
        throw ConfigError(fmt::format("dpdk.ports: port {} is already used by another DPDK device of this process "
                                      "(one device per port: give each context its own port)",
                                      port));
      }
    }
    held().insert(ports.begin(), ports.end());
  }
  static void release(const std::vector<std::uint16_t>& ports) {
    std::lock_guard lock(mutex());
    for (const std::uint16_t port : ports) held().erase(port);
  }

 private:
  static std::mutex& mutex() {
    static std::mutex instance;
    return instance;
  }
  static std::set<std::uint16_t>& held() {
    static std::set<std::uint16_t> instance;
    return instance;
  }
};

class DpdkDevice final : public Device {
 public:
  DpdkDevice(const DpdkTransportConfig& config, std::uint16_t queues) : config_(config) {
    start_eal(config, queues);
    const std::vector<std::uint16_t> port_ids = find_ports(config);
    PortClaims::claim(port_ids);
    claimed_ = port_ids;
    try {
      set_up(config, queues, port_ids);
    } catch (...) {
      PortClaims::release(claimed_);
      throw;
    }
  }

 private:
  void set_up(const DpdkTransportConfig& config, std::uint16_t queues, const std::vector<std::uint16_t>& port_ids) {
    state_ = std::make_shared<PortState>(queues);
    PortState& state = *state_;
    state.link_of_port.fill(-1);
    state.local_ip = parse_ipv4(config.local_ip);
    state.base_port = config.local_port;
    state.queues = queues;
    state.port_queues = std::max<std::uint16_t>(queues, config.queues);
    state.burst = config.burst;
    state.tx_flush_cycles = static_cast<std::uint64_t>(static_cast<double>(config.tx_flush.count()) * 1e-6 *
                                                       static_cast<double>(rte_get_tsc_hz()));
    state.max_payload = config.mtu - kIpv4Bytes - kUdpBytes;
    state.checksum_offload = config.checksum_offload;
    state.check_udp_checksum = config.check_udp_checksum;
    state.chained_transmit = true;
    if (static_cast<std::uint32_t>(config.local_port) + queues - 1 > 65535) {
      throw ConfigError(fmt::format("dpdk.local_port {} + {} queues exceeds port 65535", config.local_port, queues));
    }
    // Offloads every port has: queues build one kind of frame whichever port it leaves by.
    std::vector<rte_eth_dev_info> infos(port_ids.size());
    constexpr std::uint64_t kChecksums = RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM;
    for (std::size_t i = 0; i < port_ids.size(); ++i) {
      rte_eth_dev_info& info = infos[i];
      if (const int status = rte_eth_dev_info_get(port_ids[i], &info); status != 0) {
        throw Error(fmt::format("dpdk.ports: port {} has no device information: {}", port_ids[i], rte_strerror(-status)));
      }
      const char* driver = info.driver_name != nullptr ? info.driver_name : "?";
      if (info.max_rx_queues < state.port_queues || info.max_tx_queues < state.port_queues) {
        throw ConfigError(fmt::format("dpdk.ports: port {} ({}) has {} RX and {} TX queues; {} requested (one per "
                                      "thread, or dpdk.queues)",
                                      port_ids[i], driver, info.max_rx_queues, info.max_tx_queues, state.port_queues));
      }
      state.checksum_offload = state.checksum_offload && (info.tx_offload_capa & kChecksums) == kChecksums;
      // net_ring hands mbufs over by pointer, so chains arrive intact without the capability bit.
      state.chained_transmit = state.chained_transmit && ((info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) != 0 ||
                                                          std::string_view(driver) == "net_ring");
      // net_memif reports Ethernet's 1514-byte frame as its limit but carries any frame (over
      // several of its buffers, or one of dpdk.vdevs' bsize): jumbo MTUs work on it.
      if (info.max_rx_pktlen > kFrameHeaderBytes && std::string_view(driver) != "net_memif") {
        state.max_payload = std::min<std::uint32_t>(state.max_payload, info.max_rx_pktlen - kFrameHeaderBytes);
      }
    }
    state.software_udp_checksum = config.software_udp_checksum && !state.checksum_offload;
    check_pool_size(config, port_ids.size(), static_cast<std::uint16_t>((state.port_queues + queues - 1) / queues));
    for (std::uint16_t queue = 0; queue < queues; ++queue) {
      pools_.push_back(queue_pool(port_ids[0], queue, config));
      state.inboxes.push_back(queue_inbox(port_ids[0], queue));
    }
    for (std::size_t i = 0; i < port_ids.size(); ++i) {
      const std::uint64_t mac = start_port(port_ids[i], infos[i], config, state.port_queues);
      state.link_of_port[port_ids[i]] = static_cast<std::int16_t>(i);
      const std::string_view driver = infos[i].driver_name != nullptr ? infos[i].driver_name : "";
      state.links.push_back(PortState::Link{port_ids[i], mac, driver == "net_memif"});
      char port_name[RTE_ETH_NAME_MAX_LEN]{};
      rte_eth_dev_get_name_by_port(port_ids[i], port_name);
      state.link_names.push_back(fmt::format("{} ({})", port_name, driver));
      state.no_link_hints.push_back(no_link_hint(port_ids[i], driver, config));
      warn_of_memif_queue_pairs(port_ids[i], driver, config, state.port_queues);
    }
    name_ = fmt::format("dpdk {}", fmt::join(state.link_names, ", "));
    for (const DpdkNeighbour& neighbour : config.neighbours) {
      state.neighbours.learn(parse_ipv4(neighbour.ip), NeighbourTable::Entry{parse_mac(neighbour.mac), 0});
    }
    if (config.flow_steering && queues > 1) {
      bool all_steered = true;
      for (const PortState::Link& link : state.links) {
        steering_.push_back(std::make_unique<FlowSteering>(link.port_id, config.local_port, queues));
        all_steered = all_steered && steering_.back()->installed();
      }
      state.hardware_steering = all_steered;
    }
    state.shared_polling = queues > 1;
    state.rx_claims = std::make_unique<PortState::RxClaim[]>(state.links.size() * state.port_queues);
    drain_receive_queues();
    if (config.monitor) {
      monitor_ = std::make_unique<NicMonitor>(port_ids, config.monitor_interval, config.monitor_output);
    }
  }

 public:
  DpdkDevice(const DpdkDevice&) = delete;
  DpdkDevice& operator=(const DpdkDevice&) = delete;

  ~DpdkDevice() override {
    monitor_.reset();
    steering_.clear();
    drain_receive_queues();
    for (const PortState::Link& link : state_->links) rte_eth_dev_stop(link.port_id);
    PortClaims::release(claimed_);
  }

  [[nodiscard]] DeviceProperties properties() const override {
    return DeviceProperties{.name = name_,
                            .max_payload = state_->max_payload,
                            .queues = state_->queues,
                            .burst = std::min<std::size_t>(state_->burst, DpdkQueue::kMaxBurst),
                            .checksum_offload = state_->checksum_offload,
                            .flow_steering = state_->hardware_steering,
                            .zero_copy_multicast = state_->chained_transmit,
                          .replies_in_place = true};
  }

  std::unique_ptr<Queue> open_queue(std::size_t index) override {
    if (index >= state_->queues || state_->opened[index].exchange(true)) {
      throw Error(fmt::format("{}: queue {} is out of range (0..{}) or already open", name_, index,
                              state_->queues - 1));
    }
    return std::make_unique<DpdkQueue>(state_, static_cast<std::uint16_t>(index), pools_[index]);
  }

  std::unique_ptr<QueueThread> launch(std::size_t /*index*/, std::function<void()> body) override {
    return launch_on_lcore(std::move(body));
  }

 private:
  // Configures, sets up and starts one port with `queues` queue pairs (RX queue q fills from
  // the pool of thread q % threads); returns its MAC.
  std::uint64_t start_port(std::uint16_t port_id, const rte_eth_dev_info& info, const DpdkTransportConfig& config,
                           std::uint16_t queues) {
    const char* driver = info.driver_name != nullptr ? info.driver_name : "?";
    rte_eth_conf conf{};
    if (state_->checksum_offload) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM;
    if ((info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) != 0) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
    // Received checksums checked by the NIC where it can (the mbuf's flags carry its verdict);
    // the queues compute those it leaves unknown.
    conf.rxmode.offloads |= info.rx_offload_capa & (RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM);
    int configured = rte_eth_dev_configure(port_id, queues, queues, &conf);
    if (configured == -EBUSY) {  // still started by an earlier device of this process
      rte_eth_dev_stop(port_id);
      configured = rte_eth_dev_configure(port_id, queues, queues, &conf);
    }
    if (configured != 0) {
      throw Error(fmt::format("dpdk.ports: port {} ({}): configure with {} queues: {}", port_id, driver, queues,
                              rte_strerror(-configured)));
    }
    std::uint16_t rx_descriptors = config.rx_descriptors;
    std::uint16_t tx_descriptors = config.tx_descriptors;
    rte_eth_dev_adjust_nb_rx_tx_desc(port_id, &rx_descriptors, &tx_descriptors);
    const auto socket = static_cast<unsigned>(rte_eth_dev_socket_id(port_id));
    for (std::uint16_t queue = 0; queue < queues; ++queue) {
      rte_eth_txconf txconf = info.default_txconf;
      txconf.offloads = conf.txmode.offloads;
      if (const int status = rte_eth_rx_queue_setup(port_id, queue, rx_descriptors, socket, nullptr,
                                                         pools_[queue % pools_.size()]);
          status != 0) {
        throw Error(fmt::format("dpdk.rx_descriptors: port {} RX queue {} setup: {}", port_id, queue, rte_strerror(-status)));
      }
      if (const int status = rte_eth_tx_queue_setup(port_id, queue, tx_descriptors, socket, &txconf); status != 0) {
        throw Error(fmt::format("dpdk.tx_descriptors: port {} TX queue {} setup: {}", port_id, queue, rte_strerror(-status)));
      }
    }
    // Virtual devices often cannot set an MTU (-ENOTSUP) and carry any frame anyway; a NIC that
    // refuses it drops the larger frames, which the user must hear about.
    if (const int status = rte_eth_dev_set_mtu(port_id, static_cast<std::uint16_t>(config.mtu));
        status != 0 && status != -ENOTSUP) {
      throw Error(fmt::format("dpdk.mtu: port {} ({}) refuses MTU {}: {} (its range: {}..{})", port_id, driver,
                              config.mtu, rte_strerror(-status), info.min_mtu, info.max_mtu));
    } else if (status == -ENOTSUP) {
      detail::log().debug("dpdk: port {} ({}) cannot set its MTU; frames up to dpdk.mtu {} are sent as they are", port_id,
                  driver, config.mtu);
    }
    if (const int status = rte_eth_dev_start(port_id); status != 0) {
      throw Error(fmt::format("dpdk.ports: port {} ({}): start: {}{}", port_id, driver, rte_strerror(-status),
                              start_failure_hint(port_id, driver, config)));
    }
    rte_ether_addr mac{};
    rte_eth_macaddr_get(port_id, &mac);
    return mac_to_u64(mac);
  }

  // Frames left from an earlier user of the port (a previous device in this process).
  void drain_receive_queues() {
    std::array<rte_mbuf*, 64> stale{};
    for (const PortState::Link& link : state_->links) {
      if (link.poll_only_when_up && !link_is_up(link.port_id)) continue;  // nothing to drain, and see Link
      for (std::uint16_t queue = 0; queue < state_->port_queues; ++queue) {
        while (const std::uint16_t n = rte_eth_rx_burst(link.port_id, queue, stale.data(), stale.size())) {
          rte_pktmbuf_free_bulk(stale.data(), n);
        }
      }
    }
  }

  DpdkTransportConfig config_;
  std::vector<std::uint16_t> claimed_;
  std::string name_;
  std::shared_ptr<PortState> state_;
  std::vector<rte_mempool*> pools_;
  std::vector<std::unique_ptr<FlowSteering>> steering_;
  std::unique_ptr<NicMonitor> monitor_;
};

}  // namespace

std::unique_ptr<Device> open_dpdk_device(const DpdkTransportConfig& config, std::size_t queues) {
  config.validate("dpdk");
  if (queues == 0 || queues > 1024) throw ConfigError(fmt::format("dpdk: {} queues outside 1..1024", queues));
  return std::make_unique<DpdkDevice>(config, static_cast<std::uint16_t>(queues));
}

}  // namespace dpa::transport::dpdk

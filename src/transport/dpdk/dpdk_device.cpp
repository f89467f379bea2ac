#include "transport/dpdk/dpdk_device.hpp"

#include <arpa/inet.h>
#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <cstdio>

#include <fmt/format.h>

#include "dpa/error.hpp"
#include "transport/dpdk/dpdk_queue.hpp"
#include "transport/dpdk/eal.hpp"
#include "transport/dpdk/flow_steering.hpp"
#include "transport/dpdk/nic_monitor.hpp"

namespace dpa::transport::dpdk {
namespace {

constexpr unsigned kPoolCache = 256;
constexpr unsigned kInboxSize = 4096;

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

std::uint16_t find_port(const DpdkTransportConfig& config) {
  std::uint16_t id = 0;
  if (config.port.empty()) {
    for (; id < RTE_MAX_ETHPORTS; ++id) {
      if (rte_eth_dev_is_valid_port(id)) return id;
    }
    throw ConfigError("dpdk.port: no DPDK port exists (bind a NIC to vfio-pci, or add dpdk.vdevs; "
                      "see scripts/dpa-worker-check.sh)");
  }
  if (rte_eth_dev_get_port_by_name(config.port.c_str(), &id) != 0) {
    throw ConfigError(fmt::format("dpdk.port: no port named \"{}\" (ports: {})", config.port, port_names()));
  }
  return id;
}

// Mempools and inbox rings outlive devices: another port's RX ring may still hold our mbufs
// (net_ring passes pointers), and a device reopened in the same process finds them by name.
rte_mempool* queue_pool(std::uint16_t port_id, std::uint16_t queue, const DpdkTransportConfig& config) {
  const std::string name = fmt::format("dpa_p{}_q{}", port_id, queue);
  if (rte_mempool* existing = rte_mempool_lookup(name.c_str())) return existing;
  // At least DPDK's default room: some drivers (af_packet) size their frames by it.
  const auto data_room = static_cast<std::uint16_t>(
      std::max<std::uint32_t>(RTE_MBUF_DEFAULT_BUF_SIZE, RTE_PKTMBUF_HEADROOM + kEthernetBytes + config.mtu));
  rte_mempool* pool = rte_pktmbuf_pool_create(name.c_str(), config.mbufs, std::min(kPoolCache, config.mbufs / 4), 0,
                                              data_room, rte_eth_dev_socket_id(port_id));
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

class DpdkDevice final : public Device {
 public:
  DpdkDevice(const DpdkTransportConfig& config, std::uint16_t queues) : config_(config) {
    start_eal(config);
    const std::uint16_t port_id = find_port(config);
    rte_eth_dev_info info{};
    if (const int status = rte_eth_dev_info_get(port_id, &info); status != 0) {
      throw Error(fmt::format("dpdk.port {}: no device information: {}", port_id, rte_strerror(-status)));
    }
    if (info.max_rx_queues < queues || info.max_tx_queues < queues) {
      throw ConfigError(fmt::format("dpdk.port {} ({}): {} queues requested (one per thread), the device has {} RX "
                                    "and {} TX",
                                    port_id, info.driver_name, queues, info.max_rx_queues, info.max_tx_queues));
    }
    const char* driver = info.driver_name != nullptr ? info.driver_name : "?";
    char port_name[RTE_ETH_NAME_MAX_LEN]{};
    rte_eth_dev_get_name_by_port(port_id, port_name);
    name_ = fmt::format("dpdk {} ({})", port_name, driver);

    state_ = std::make_shared<PortState>(queues);
    PortState& state = *state_;
    state.port_id = port_id;
    state.local_ip = parse_ipv4(config.local_ip);
    state.base_port = config.local_port;
    state.queues = queues;
    state.burst = config.burst;
    state.tx_flush_cycles = static_cast<std::uint64_t>(static_cast<double>(config.tx_flush.count()) * 1e-6 *
                                                       static_cast<double>(rte_get_tsc_hz()));
    state.max_payload = std::min<std::uint32_t>(config.mtu - kIpv4Bytes - kUdpBytes,
                                                info.max_rx_pktlen > kFrameHeaderBytes
                                                    ? info.max_rx_pktlen - kFrameHeaderBytes
                                                    : config.mtu - kIpv4Bytes - kUdpBytes);
    if (static_cast<std::uint32_t>(config.local_port) + queues - 1 > 65535) {
      throw ConfigError(fmt::format("dpdk.local_port {} + {} queues exceeds port 65535", config.local_port, queues));
    }

    constexpr std::uint64_t kChecksums = RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM;
    state.checksum_offload = config.checksum_offload && (info.tx_offload_capa & kChecksums) == kChecksums;
    // net_ring hands mbufs over by pointer, so chains arrive intact without the capability bit.
    state.chained_transmit = (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) != 0 ||
                             std::string_view(driver) == "net_ring";

    rte_eth_conf conf{};
    if (state.checksum_offload) conf.txmode.offloads |= kChecksums;
    if ((info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) != 0) {
      conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
    }
    int configured = rte_eth_dev_configure(port_id, queues, queues, &conf);
    if (configured == -EBUSY) {  // still started by an earlier device of this process
      rte_eth_dev_stop(port_id);
      configured = rte_eth_dev_configure(port_id, queues, queues, &conf);
    }
    if (const int status = configured; status != 0) {
      throw Error(fmt::format("dpdk.port {} ({}): configure with {} queues: {}", port_id, driver, queues,
                              rte_strerror(-status)));
    }
    std::uint16_t rx_descriptors = config.rx_descriptors;
    std::uint16_t tx_descriptors = config.tx_descriptors;
    rte_eth_dev_adjust_nb_rx_tx_desc(port_id, &rx_descriptors, &tx_descriptors);
    const int socket = rte_eth_dev_socket_id(port_id);
    for (std::uint16_t queue = 0; queue < queues; ++queue) {
      pools_.push_back(queue_pool(port_id, queue, config));
      state.inboxes.push_back(queue_inbox(port_id, queue));
      rte_eth_txconf txconf = info.default_txconf;
      txconf.offloads = conf.txmode.offloads;
      if (const int status = rte_eth_rx_queue_setup(port_id, queue, rx_descriptors, static_cast<unsigned>(socket),
                                                    nullptr, pools_.back());
          status != 0) {
        throw Error(fmt::format("dpdk.rx_descriptors: RX queue {} setup: {}", queue, rte_strerror(-status)));
      }
      if (const int status =
              rte_eth_tx_queue_setup(port_id, queue, tx_descriptors, static_cast<unsigned>(socket), &txconf);
          status != 0) {
        throw Error(fmt::format("dpdk.tx_descriptors: TX queue {} setup: {}", queue, rte_strerror(-status)));
      }
    }
    rte_eth_dev_set_mtu(port_id, static_cast<std::uint16_t>(config.mtu));  // vdevs may not support it
    if (const int status = rte_eth_dev_start(port_id); status != 0) {
      throw Error(fmt::format("dpdk.port {} ({}): start: {}", port_id, driver, rte_strerror(-status)));
    }
    rte_ether_addr mac{};
    rte_eth_macaddr_get(port_id, &mac);
    state.local_mac = mac_to_u64(mac);
    for (const DpdkNeighbour& neighbour : config.neighbours) {
      state.neighbours.learn(parse_ipv4(neighbour.ip), parse_mac(neighbour.mac));
    }
    if (config.flow_steering && queues > 1) {
      steering_ = std::make_unique<FlowSteering>(port_id, config.local_port, queues);
      state.hardware_steering = steering_->installed();
    }
    drain_receive_queues();
    if (config.monitor) monitor_ = std::make_unique<NicMonitor>(port_id, config.monitor_interval, config.monitor_output);
  }

  DpdkDevice(const DpdkDevice&) = delete;
  DpdkDevice& operator=(const DpdkDevice&) = delete;

  ~DpdkDevice() override {
    monitor_.reset();
    steering_.reset();
    drain_receive_queues();
    rte_eth_dev_stop(state_->port_id);
  }

  [[nodiscard]] DeviceProperties properties() const override {
    return DeviceProperties{.name = name_,
                            .max_payload = state_->max_payload,
                            .queues = state_->queues,
                            .checksum_offload = state_->checksum_offload,
                            .flow_steering = state_->hardware_steering,
                            .zero_copy_multicast = state_->chained_transmit};
  }

  std::unique_ptr<Queue> open_queue(std::size_t index) override {
    if (index >= state_->queues || state_->opened[index].exchange(true)) {
      throw Error(fmt::format("{}: queue {} is out of range (0..{}) or already open", name_, index,
                              state_->queues - 1));
    }
    return std::make_unique<DpdkQueue>(state_, static_cast<std::uint16_t>(index), pools_[index]);
  }

 private:
  // Frames left from an earlier user of the port (a previous device in this process).
  void drain_receive_queues() {
    std::array<rte_mbuf*, 64> stale{};
    for (std::uint16_t queue = 0; queue < state_->queues; ++queue) {
      while (const std::uint16_t n = rte_eth_rx_burst(state_->port_id, queue, stale.data(), stale.size())) {
        rte_pktmbuf_free_bulk(stale.data(), n);
      }
    }
  }

  DpdkTransportConfig config_;
  std::string name_;
  std::shared_ptr<PortState> state_;
  std::vector<rte_mempool*> pools_;
  std::unique_ptr<FlowSteering> steering_;
  std::unique_ptr<NicMonitor> monitor_;
};

}  // namespace

std::unique_ptr<Device> open_dpdk_device(const DpdkTransportConfig& config, std::size_t queues) {
  config.validate("dpdk");
  if (queues == 0 || queues > 1024) throw ConfigError(fmt::format("dpdk: {} queues outside 1..1024", queues));
  return std::make_unique<DpdkDevice>(config, static_cast<std::uint16_t>(queues));
}

}  // namespace dpa::transport::dpdk

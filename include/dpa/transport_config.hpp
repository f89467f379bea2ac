// SPDX-License-Identifier: Apache-2.0
// Transport settings: a worker (Config::transport) and dpa-switch (SwitchConfig::transport) each
// pick one transport by giving its typed section, "udp": {...}, "dpdk": {...} or "shm": {...}.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace dpa {

// Kernel UDP sockets (recvmmsg/sendmmsg); one socket per queue.
struct UdpTransportConfig {
  std::string bind_host = "0.0.0.0";
  std::uint16_t bind_port = 0;      // queue q binds bind_port + q; 0: ephemeral ports
  std::uint32_t max_payload = 65507;  // largest datagram sent or received (bytes): UDP's limit
  std::size_t batch = 64;           // datagrams per recvmmsg/sendmmsg
  std::size_t buffers = 64;         // transmit buffers per queue allocated at once (max_payload bytes
                                    // each); the pool grows by as many while a caller holds them all
  int socket_buffer_bytes = 16 << 20;  // SO_RCVBUF/SO_SNDBUF (forced when running as root)

  void validate(const std::string& section) const;  // ConfigError naming "<section>.<key>"
};

// A static neighbour: packets to `ip` go to Ethernet address `mac` without ARP.
struct DpdkNeighbour {
  std::string ip;
  std::string mac;  // "aa:bb:cc:dd:ee:ff"
};

// DPDK poll-mode driver on one or more Ethernet ports; one RX/TX queue pair per queue (thread)
// on each port.
struct DpdkTransportConfig {
  // EAL (started once per process, by the first DPDK device).
  // Cores for the threads that drive queues, e.g. "2-5": thread t busy-polls on a worker lcore
  // pinned to the t-th core, the calling thread keeps its CPUs (main lcore). Empty (default):
  // each thread pinned to a core of its own among the process's CPUs that no other dpa process
  // on the host holds, or all floating with a warning when too few are free. "none": worker
  // lcores that float over the process's CPUs.
  std::string cores;
  std::vector<std::string> allow;     // PCI devices to probe (-a); empty: all
  std::vector<std::string> vdevs;     // virtual devices (--vdev), e.g. "net_memif0,role=client"
  std::string file_prefix;            // --file-prefix: distinct per DPDK process on a host
  bool no_huge = false;               // --no-huge (anonymous memory; tests, memif)
  std::uint32_t memory_mb = 0;        // -m; 0: EAL's default
  std::vector<std::string> eal_args;  // anything else, passed as given

  // Port and addresses.
  // Ethernet ports by ethdev name (PCI address or vdev name); empty: the first port. Several
  // ports (one memif per worker, say) act as one: replies leave by the port their peer was
  // learned on.
  std::vector<std::string> ports;
  std::string local_ip;               // this host's IPv4 address on the port (required)
  std::uint16_t local_port = 5000;    // queue q receives on UDP local_port + q
  std::vector<DpdkNeighbour> neighbours;  // static ARP entries; others are resolved by ARP
  std::uint32_t mtu = 1500;           // IPv4 MTU; payloads up to mtu - 28 bytes
  // RX/TX queue pairs per port; 0: one per thread. More than threads: thread t also polls RX
  // queues t + threads, t + 2 * threads... (a memif server needs at least as many queue pairs
  // as its client with the most threads, or refuses the connection).
  std::uint16_t queues = 0;

  // Rings and batching.
  std::uint16_t rx_descriptors = 1024;
  std::uint16_t tx_descriptors = 1024;
  std::uint32_t mbufs = 8191;         // per queue (pool size)
  std::uint16_t burst = 32;           // packets per rx_burst / tx_burst
  std::chrono::microseconds tx_flush{20};  // longest a partial TX burst waits
  bool flow_steering = true;          // steer by UDP port with rte_flow when the port can
  bool checksum_offload = true;       // use the NIC's IPv4/UDP checksum when it has one
  // Received UDP checksums checked (IPv4 header checksums always are). Off for af_packet on a
  // veth with a kernel sender on the same host: its TX offload leaves UDP checksums partial.
  bool check_udp_checksum = true;
  // Where the port cannot checksum UDP (memif, ring, af_packet: no TX offload), compute each
  // frame's UDP checksum on the CPU, so that a receiver that checks them (check_udp_checksum)
  // drops a frame damaged on the way instead of adding it. Costs a pass over each payload.
  bool software_udp_checksum = false;

  // NIC byte rates sampled to a CSV file (DPA_DPDK_MONITOR*), by a thread of the device.
  bool monitor = false;
  std::chrono::microseconds monitor_interval{100};
  std::string monitor_output = "/tmp/nic_throughput.csv";

  void validate(const std::string& section) const;  // ConfigError naming "<section>.<key>"
};

// Shared memory between processes of one host: each queue owns a segment (a file
// `<directory>/dpa-<fabric>-<port>`) holding its inbox and its transmit buffers. A packet is a
// reference to a buffer of the sender's segment, so nothing is copied on the way and one result
// reaches every rank as one buffer. Ports name queues as UDP ports do; addresses are not used
// (every endpoint is 127.0.0.1). The embedded switch of the PyTorch backend uses it by default.
struct ShmTransportConfig {
  std::string fabric = "default";      // name shared by a switch and its workers (letters, digits, -_.)
  std::string directory = "/dev/shm";  // where the segments live (a tmpfs)
  std::uint16_t base_port = 0;         // queue q is port base_port + q; 0: free ports of the fabric
  std::uint32_t max_payload = 65536;   // largest packet (bytes); any size, as the buffers hold it
  std::uint32_t buffers = 256;         // transmit buffers per queue (reserved in `directory`)
  std::uint32_t ring = 4096;           // packets an inbox holds (a power of two)
  // Not a config key: dpa-switch sets it for its own queues. A receiver whose inbox holds this
  // many packets unread gets no more until it reads: they are dropped (counted in tx_errors) as
  // datagrams to a full socket buffer are, so a rank that sleeps (a straggler) cannot pin the
  // buffers the other ranks' results need, nor hold up a multicast to them. 0: a full inbox
  // holds the sender back instead (a worker's queue: the switch is busy, not slow).
  std::uint32_t receiver_backlog_limit = 0;

  void validate(const std::string& section) const;  // ConfigError naming "<section>.<key>"
};

using TransportConfig = std::variant<UdpTransportConfig, DpdkTransportConfig, ShmTransportConfig>;

// Validates the chosen section of a device with `threads` queues (the worker's and the switch's
// config readers both call this): its own keys, and that the base port leaves room for every
// queue (queue t uses base + t). Sections are named `prefix` + "udp" / "dpdk" / "shm" ("" or "switch.");
// `port_variable` and `threads_variable` name the environment variables that set the UDP or shm base
// port and the thread count, for the message (empty where none does). The transport must also carry
// `control_bytes`, the largest control packet its side sends or receives (a JOIN and its reply).
void validate_transport(const TransportConfig& transport, int threads, const std::string& prefix,
                        const std::string& port_variable, const std::string& threads_variable,
                        std::uint32_t control_bytes);

// The largest dpa packet (a UDP payload, or a shared-memory buffer) the transport carries, and the
// setting that limits it, named with `prefix` as validate_transport names sections.
struct PacketLimit {
  std::uint32_t bytes = 0;
  std::string setting;  // e.g. "switch.dpdk.mtu 1500 (UDP payloads of up to 1472 bytes)"
};
[[nodiscard]] PacketLimit packet_limit(const TransportConfig& transport, const std::string& prefix);

}  // namespace dpa

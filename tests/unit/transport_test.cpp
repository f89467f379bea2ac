// SPDX-License-Identifier: Apache-2.0
// One suite for every transport (as Gloo runs its tests over every transport): each case talks
// to an echo peer through two local queues. UDP on loopback, UDP through the fault injector
// (reordering and delay, no loss, so counts stay exact), DPDK net_ring in this process, and
// DPDK net_memif to a peer process. DPDK cases skip with the reason when DPDK is absent.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "dpa/error.hpp"
#include "transport/core_choice.hpp"
#include "transport/factory.hpp"
#include "transport/fault_injector.hpp"
#include "transport_echo.hpp"

#ifdef DPA_HAVE_DPDK
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include "transport/dpdk/eal.hpp"
#include "transport/dpdk/frame.hpp"
#include "transport/dpdk/ring_pair.hpp"
#endif

namespace dpa::transport {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kQueues = 2;

enum class Kind { udp, udp_with_faults, shm, dpdk_ring, dpdk_memif };

std::string kind_name(Kind kind) {
  switch (kind) {
    case Kind::udp: return "Udp";
    case Kind::udp_with_faults: return "UdpWithFaults";
    case Kind::shm: return "Shm";
    case Kind::dpdk_ring: return "DpdkRing";
    case Kind::dpdk_memif: return "DpdkMemif";
  }
  return "?";
}

std::string test_prefix() { return "dpa-transport-test-" + std::to_string(getpid()); }
std::string memif_socket() { return "/tmp/" + test_prefix() + ".sock"; }
std::string monitor_output() { return "/tmp/" + test_prefix() + "-rates.csv"; }

// Removes what a DPDK process with `prefix` leaves on disk (its runtime directory).
void remove_dpdk_files(const std::string& prefix) {
  std::error_code ignored;
  std::filesystem::remove_all("/var/run/dpdk/" + prefix, ignored);
  if (const char* runtime = std::getenv("XDG_RUNTIME_DIR")) {
    std::filesystem::remove_all(std::string(runtime) + "/dpdk/" + prefix, ignored);
  }
}

#ifdef DPA_HAVE_DPDK
DpdkTransportConfig dpdk_base(const std::string& port, const std::string& ip, std::uint16_t udp_port) {
  DpdkTransportConfig config;
  config.vdevs = {"net_memif0,role=server,socket-abstract=no,mac=02:00:00:00:00:01,socket=" + memif_socket()};
  config.file_prefix = test_prefix();
  config.no_huge = true;
  config.memory_mb = 512;
  config.eal_args = {"--no-pci", "--log-level=lib.eal:error"};
  config.ports = {port};
  config.local_ip = ip;
  config.local_port = udp_port;
  config.mbufs = 2047;
  // Virtual devices size their rings themselves; the pool need not cover 1024 descriptors each.
  config.rx_descriptors = 256;
  config.tx_descriptors = 256;
  return config;
}
#endif

// The EAL and its memif server socket live as long as the process: they go when the tests end
// (a failed test included), not after each test.
class ProcessFiles : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove(memif_socket(), ignored);
    remove_dpdk_files(test_prefix());
  }
};
[[maybe_unused]] const auto* const process_files = ::testing::AddGlobalTestEnvironment(new ProcessFiles);

class TransportTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    const Kind kind = GetParam();
    if (kind == Kind::udp || kind == Kind::udp_with_faults) {
      UdpTransportConfig config;
      config.bind_host = "127.0.0.1";
      config.max_payload = 9000;
      config.buffers = 512;
      open_local(config, "127.0.0.1");
      start_echo_thread(config, 1us);
    } else if (kind == Kind::shm) {
      ShmTransportConfig config;
      config.fabric = test_prefix();
      config.max_payload = 9000;
      config.buffers = 512;
      open_local(config, "127.0.0.1");
      start_echo_thread(config, 1ms);  // the echo thread sleeps in the inbox and is woken
    } else {
#ifndef DPA_HAVE_DPDK
      GTEST_SKIP() << "DPDK transport not built: libdpdk was not found by pkg-config at configure time "
                      "(scripts/install-deps.sh --with-dpdk)";
#else
      dpdk::start_eal(dpdk_base("", "10.99.0.1", 6000), 0);
      if (kind == Kind::dpdk_ring) {
        // Two ports wired by rings (made by the first ring test, reused by the next ones).
        const auto ports =
            dpdk::create_ring_pair(dpdk_base("", "10.99.0.1", 6000), "dpa_ring_a", "dpa_ring_b", kQueues);
        // No static neighbours: the first packets wait for ARP in both directions.
        local_dpdk_ = dpdk_base(ports.a, "10.99.0.1", 6000);
        local_dpdk_.monitor = true;  // DPA_DPDK_MONITOR: the local device samples its port's rates
        local_dpdk_.monitor_interval = 1ms;
        local_dpdk_.monitor_output = monitor_output();
        open_local(local_dpdk_, "10.99.0.1");
        start_echo_thread(dpdk_base(ports.b, "10.99.0.2", 7000), 0ns);
      } else {
        DpdkTransportConfig config = dpdk_base("net_memif0", "10.99.0.1", 6000);
        config.neighbours = {{"10.99.0.2", "02:00:00:00:00:02"}};
        open_local(config, "10.99.0.1");
        link_problems_without_peer_ = queues_[0]->link_problems();
        start_echo_process();
        wait_for_memif_link();
      }
#endif
    }
    if (!HasFatalFailure()) wait_until_echoing();
  }

  void TearDown() override {
    stop_.store(true);
    if (echo_thread_.joinable()) echo_thread_.join();
    // memif: a side that disconnects has the other side's EAL interrupt thread unmap the
    // connection's rings, which crashes that side if it still polls them. So the peer stops
    // polling first (and says so), this side then closes its port (disconnecting in this
    // thread, while nobody polls), and only then does the peer go.
    if (peer_pid_ > 0) {
      kill(peer_pid_, SIGTERM);
      wait_for_peer_line("idle", Clock::now() + 5s);
    }
    queues_.clear();
    local_.reset();
    if (peer_pid_ > 0) {
      kill(peer_pid_, SIGKILL);
      int status = 0;
      waitpid(peer_pid_, &status, 0);
      close(peer_output_);
      remove_dpdk_files(peer_prefix_);
    }
    peer_queues_.clear();
    peer_device_.reset();
    std::error_code ignored;
    std::filesystem::remove(monitor_output(), ignored);
  }

  template <class DeviceConfig>
  void open_local(const DeviceConfig& config, const std::string& ip) {
    local_ = open_device(config, kQueues);
    for (std::size_t q = 0; q < kQueues; ++q) {
      auto queue = local_->open_queue(q);
      if (GetParam() == Kind::udp_with_faults) {
        FaultOptions faults;
        faults.reorder = 0.2;
        faults.delay = 0.1;
        faults.delay_time = 300us;
        faults.seed = 7 + q;
        queue = with_faults(std::move(queue), faults);
      }
      queues_.push_back(std::move(queue));
    }
    local_ip_ = Endpoint::resolve(ip, 0, "ip").address;
  }

  template <class DeviceConfig>
  void start_echo_thread(const DeviceConfig& config, std::chrono::nanoseconds poll) {
    peer_device_ = open_device(config, kQueues);
    for (std::size_t q = 0; q < kQueues; ++q) {
      peer_queues_.push_back(peer_device_->open_queue(q));
      peer_.push_back(peer_queues_.back()->local_endpoint());
    }
    echo_thread_ = std::thread([this, poll] { test::run_echo(peer_queues_, stop_, poll); });
  }

  void start_echo_process() {
    peer_prefix_ = test_prefix() + "-peer";
    const std::string socket = memif_socket();  // named after this process, not the child
    const std::string program = std::string(DPA_BINARY_DIR) + "/tests/transport_echo_peer";
    const std::string queues = std::to_string(kQueues);
    int output[2];
    ASSERT_EQ(pipe(output), 0);
    peer_pid_ = fork();
    ASSERT_GE(peer_pid_, 0);
    if (peer_pid_ == 0) {
      dup2(output[1], STDOUT_FILENO);
      dup2(output[1], STDERR_FILENO);  // its log too: a test reads its warnings
      close(output[0]);
      close(output[1]);
      execl(program.c_str(), program.c_str(), socket.c_str(), peer_prefix_.c_str(), queues.c_str(), nullptr);
      _exit(127);
    }
    close(output[1]);
    peer_output_ = output[0];
    for (std::size_t q = 0; q < kQueues; ++q) {
      peer_.push_back(Endpoint{Endpoint::resolve("10.99.0.2", 0, "ip").address, static_cast<std::uint16_t>(7000 + q)});
    }
  }

  // Reads the peer's output until it printed `line` or the deadline passed; all of it is kept in
  // peer_text_.
  void wait_for_peer_line(const std::string& line, Clock::time_point deadline) {
    std::string& seen = peer_text_;
    while (seen.find(line + "\n") == std::string::npos && Clock::now() < deadline) {
      pollfd readable{peer_output_, POLLIN, 0};
      if (poll(&readable, 1, 100) <= 0) continue;
      char chunk[256];
      const ssize_t got = read(peer_output_, chunk, sizeof chunk);
      if (got <= 0) return;  // the peer is gone
      seen.append(chunk, static_cast<std::size_t>(got));
    }
  }

  // Sends `payloads` from local queue `from` to the peer endpoint(s) and frees the buffers
  // right after sending (a buffer in flight must survive its release).
  void send_payloads(std::size_t from, const std::vector<std::vector<std::byte>>& payloads, const Endpoint& to) {
    for (const auto& payload : payloads) {
      TxBuffer buffer;
      ASSERT_EQ(queues_[from]->allocate(std::span(&buffer, 1)), 1u);
      std::memcpy(buffer.payload, payload.data(), payload.size());
      buffer.size = static_cast<std::uint32_t>(payload.size());
      const TxRequest request{&buffer, to};
      const auto deadline = Clock::now() + 2s;
      while (queues_[from]->send(std::span(&request, 1)) == 0) {
        ASSERT_LT(Clock::now(), deadline) << "queue never took the packet";
        poll_all();
      }
      queues_[from]->release(std::span(&buffer, 1));
    }
    for (auto& queue : queues_) queue->flush();
  }

  // Polls every local queue (a queue moves packets meant for another one only while it polls),
  // recording what each received, until `count` packets or the deadline.
  std::size_t collect(std::size_t count, std::chrono::milliseconds limit = 5000ms) {
    const auto deadline = Clock::now() + limit;
    std::size_t total = 0;
    for (const auto& per_queue : received_) total += per_queue.second.size();
    while (total < count && Clock::now() < deadline) total += poll_all();
    return total;
  }

  // Echoes of set-up probes are counted apart (a probe sent before the peer was reachable may
  // still come back during a test) and never reach received_.
  std::size_t poll_all() {
    std::size_t got = 0;
    std::array<RxPacket, 32> batch;
    for (std::size_t q = 0; q < kQueues; ++q) {
      const std::size_t n = queues_[q]->receive(batch, 200us);
      for (std::size_t i = 0; i < n; ++i) {
        if (std::ranges::equal(batch[i].data, probe_payload())) {
          ++probe_echoes_[q];
          continue;
        }
        received_[q].push_back({batch[i].data.begin(), batch[i].data.end()});
        senders_[q].push_back(batch[i].from);
        ++got;
      }
    }
    return got;
  }

#ifdef DPA_HAVE_DPDK
  // DPDK 22.11's memif unmaps a connection's rings from the EAL interrupt thread when a
  // handshake fails and is retried; a queue polling them then crashes (SIGSEGV inside
  // librte_net_memif, seen in about one of 15 runs on a loaded machine). So nothing polls the
  // port until its link is up, which memif reports once the connection is complete.
  void wait_for_memif_link() {
    std::uint16_t port = 0;
    ASSERT_EQ(rte_eth_dev_get_port_by_name("net_memif0", &port), 0);
    const auto deadline = Clock::now() + 20s;
    rte_eth_link link{};
    while (rte_eth_link_get_nowait(port, &link) == 0 && link.link_status != RTE_ETH_LINK_UP) {
      ASSERT_LT(Clock::now(), deadline) << "memif link to the peer process not up";
      std::this_thread::sleep_for(1ms);
    }
    ASSERT_EQ(link.link_status, RTE_ETH_LINK_UP);
  }
#endif

  // Probes each queue until the peer answers it (ARP, memif connection): a probe every 50 ms,
  // polling meanwhile. Neither the number of probes in flight nor how late their echoes come
  // matters: the probes' payload is no test's.
  void wait_until_echoing() {
    probe_echoes_ = {};
    const auto deadline = Clock::now() + 20s;
    for (std::size_t q = 0; q < kQueues; ++q) {
      while (probe_echoes_[q] == 0) {
        ASSERT_LT(Clock::now(), deadline) << "no echo from the peer on queue " << q;
        offer_probe(q);
        if (HasFatalFailure()) return;
        for (const auto next = Clock::now() + 50ms; probe_echoes_[q] == 0 && Clock::now() < next;) poll_all();
      }
    }
  }

  // Sends one probe from queue `q` to the peer's queue q if the queue takes it: one whose link is
  // not up yet (memif connecting) holds a burst of them and refuses more, which is no failure.
  void offer_probe(std::size_t q) {
    TxBuffer buffer;
    ASSERT_EQ(queues_[q]->allocate(std::span(&buffer, 1)), 1u);
    std::memcpy(buffer.payload, probe_payload().data(), probe_payload().size());
    buffer.size = static_cast<std::uint32_t>(probe_payload().size());
    const TxRequest request{&buffer, peer_[q]};
    queues_[q]->send(std::span(&request, 1));
    queues_[q]->release(std::span(&buffer, 1));
    queues_[q]->flush();
  }

  // pattern() starts with a small index, so no test payload begins with these bytes.
  static std::span<const std::byte> probe_payload() {
    static constexpr std::array<std::byte, 9> kProbe{std::byte{'d'}, std::byte{'p'}, std::byte{'a'},
                                                     std::byte{'-'}, std::byte{'p'}, std::byte{'r'},
                                                     std::byte{'o'}, std::byte{'b'}, std::byte{'e'}};
    return kProbe;
  }

  static std::vector<std::byte> pattern(std::uint32_t index, std::size_t size) {
    std::vector<std::byte> bytes(size);
    for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>((index * 31 + i * 7) & 0xff);
    std::memcpy(bytes.data(), &index, std::min(size, sizeof index));
    return bytes;
  }

#ifdef DPA_HAVE_DPDK
  DpdkTransportConfig local_dpdk_;  // the local device's settings (net_ring)
#endif
  std::unique_ptr<Device> local_;
  std::vector<std::unique_ptr<Queue>> queues_;
  std::string link_problems_without_peer_;  // memif: what the local queue said before its peer connected
  std::uint32_t local_ip_ = 0;
  std::unique_ptr<Device> peer_device_;
  std::vector<std::unique_ptr<Queue>> peer_queues_;
  std::vector<Endpoint> peer_;
  std::thread echo_thread_;
  std::atomic<bool> stop_{false};
  pid_t peer_pid_ = 0;
  int peer_output_ = -1;  // the peer's standard output and error
  std::string peer_text_;  // what wait_for_peer_line() read of it
  std::string peer_prefix_;
  std::array<std::size_t, kQueues> probe_echoes_{};
  std::map<std::size_t, std::vector<std::vector<std::byte>>> received_;
  std::map<std::size_t, std::vector<Endpoint>> senders_;
};

TEST_P(TransportTest, APortWithoutLinkSaysWhyAndAConnectedOneSaysNothing) {
  for (const auto& queue : queues_) EXPECT_EQ(queue->link_problems(), "");
  if (GetParam() != Kind::dpdk_memif) return;  // only a memif port waits for its peer to have link
  EXPECT_THAT(link_problems_without_peer_,
              ::testing::HasSubstr("DPDK port net_memif0 (net_memif) has no link (memif server of socket " + memif_socket()));
  EXPECT_THAT(link_problems_without_peer_, ::testing::HasSubstr("no client has connected"));
}

TEST_P(TransportTest, AMemifClientWithoutQueuePairsSetWarnsThatItsServerMustMatch) {
  if (GetParam() != Kind::dpdk_memif) GTEST_SKIP() << "a memif client's warning (the peer process is one)";
  // The peer leaves dpdk.queues unset, so its queue pairs follow its threads; a server with more
  // would read its first ring once per extra queue pair.
  wait_for_peer_line("ready", Clock::now() + 5s);
  EXPECT_THAT(peer_text_, ::testing::HasSubstr("memif client of socket " + memif_socket() + " has " +
                                               std::to_string(kQueues) + " queue pair(s), one per thread, as "
                                               "dpdk.queues is not set: its server must have exactly as many"));
}

TEST_P(TransportTest, PropertiesDescribeTheDevice) {
  const DeviceProperties properties = local_->properties();
  EXPECT_EQ(properties.queues, kQueues);
  EXPECT_GE(properties.max_payload, 1400u);
  EXPECT_GT(properties.burst, 0u);
  EXPECT_FALSE(properties.name.empty());
  for (std::size_t q = 0; q < kQueues; ++q) {
    EXPECT_EQ(queues_[q]->local_endpoint().address, local_ip_);
    EXPECT_EQ(queues_[q]->max_payload(), properties.max_payload);
  }
  EXPECT_NE(queues_[0]->local_endpoint().port, queues_[1]->local_endpoint().port);
  EXPECT_THROW(local_->open_queue(0), Error);
  EXPECT_THROW(local_->open_queue(kQueues), Error);
}

TEST_P(TransportTest, RoundTripKeepsEveryByte) {
  std::vector<std::vector<std::byte>> sent;
  const std::uint32_t largest = queues_[0]->max_payload();
  for (std::uint32_t i = 0; i < 300; ++i) sent.push_back(pattern(i, 1 + (i * 97) % largest));
  sent.push_back(pattern(300, largest));
  send_payloads(0, sent, peer_[0]);
  ASSERT_EQ(collect(sent.size()), sent.size());
  EXPECT_THAT(received_[0], ::testing::UnorderedElementsAreArray(sent));
  for (const Endpoint& from : senders_[0]) EXPECT_EQ(from, peer_[0]);
}

TEST_P(TransportTest, RepliesReachTheQueueTheyAreAddressedTo) {
  // Queue 1 talks to the peer's queue 0: the echo comes back addressed to queue 1's port, on
  // whichever device queue the link delivers it to, and must end up at queue 1.
  std::vector<std::vector<std::byte>> sent;
  for (std::uint32_t i = 0; i < 64; ++i) sent.push_back(pattern(i, 200));
  send_payloads(1, sent, peer_[0]);
  send_payloads(0, sent, peer_[1]);
  ASSERT_EQ(collect(2 * sent.size()), 2 * sent.size());
  EXPECT_EQ(received_[0].size(), sent.size());
  EXPECT_EQ(received_[1].size(), sent.size());
  for (const Endpoint& from : senders_[1]) EXPECT_EQ(from, peer_[0]);
  for (const Endpoint& from : senders_[0]) EXPECT_EQ(from, peer_[1]);
}

TEST_P(TransportTest, RetransmissionSendsTheSameBufferAgain) {
  TxBuffer buffer;
  ASSERT_EQ(queues_[0]->allocate(std::span(&buffer, 1)), 1u);
  const std::vector<std::byte> payload = pattern(42, 1000);
  std::memcpy(buffer.payload, payload.data(), payload.size());
  buffer.size = static_cast<std::uint32_t>(payload.size());
  const std::byte* const where = buffer.payload;
  const TxRequest request{&buffer, peer_[0]};
  for (int copy = 0; copy < 5; ++copy) {
    ASSERT_EQ(queues_[0]->send(std::span(&request, 1)), 1u);
    queues_[0]->flush();
    EXPECT_EQ(buffer.payload, where);
  }
  ASSERT_EQ(collect(5), 5u);
  queues_[0]->release(std::span(&buffer, 1));
  for (const auto& echo : received_[0]) EXPECT_EQ(echo, payload);
}

TEST_P(TransportTest, SendToAllServesEveryEndpointFromOneBuffer) {
  TxBuffer buffer;
  ASSERT_EQ(queues_[0]->allocate(std::span(&buffer, 1)), 1u);
  const std::vector<std::byte> payload = pattern(7, 1200);
  std::memcpy(buffer.payload, payload.data(), payload.size());
  buffer.size = static_cast<std::uint32_t>(payload.size());
  const std::vector<Endpoint> everyone{peer_[0], peer_[1], peer_[0], peer_[1]};
  for (int round = 0; round < 8; ++round) {
    ASSERT_EQ(queues_[0]->send_to_all(buffer, everyone), everyone.size());
  }
  queues_[0]->flush();
  queues_[0]->release(std::span(&buffer, 1));
  ASSERT_EQ(collect(8 * everyone.size()), 8 * everyone.size());
  for (const auto& echo : received_[0]) EXPECT_EQ(echo, payload);
  EXPECT_EQ(std::count(senders_[0].begin(), senders_[0].end(), peer_[1]), 16);
}

TEST_P(TransportTest, AReplyWrittenOverTheReceivedPacketReachesItsSender) {
  // The switch's in-place reply: DPDK gives up a received mbuf nobody else holds (the echo peer
  // released its copy once sent); the other transports keep their receive buffers.
  const bool in_place = GetParam() == Kind::dpdk_ring || GetParam() == Kind::dpdk_memif;
  std::vector<std::vector<std::byte>> sent;
  for (std::uint32_t i = 0; i < 40; ++i) sent.push_back(pattern(i, 100 + 20 * i));
  send_payloads(0, sent, peer_[0]);
  // Each first echo is reversed in place and sent back; the peer echoes that too.
  std::vector<std::vector<std::byte>> expected;
  std::vector<std::vector<std::byte>> echoed;
  const auto deadline = Clock::now() + 5s;
  std::array<RxPacket, 32> batch;
  while (echoed.size() < sent.size() && Clock::now() < deadline) {
    const std::size_t n = queues_[0]->receive(batch, 200us);
    for (std::size_t i = 0; i < n; ++i) {
      const std::vector<std::byte> bytes(batch[i].data.begin(), batch[i].data.end());
      if (std::ranges::find(sent, bytes) == sent.end()) {
        if (!std::ranges::equal(bytes, probe_payload())) echoed.push_back(bytes);
        continue;
      }
      const auto size = static_cast<std::uint32_t>(bytes.size());
      TxBuffer reply = queues_[0]->take_for_reply(batch[i], size);
      if (!in_place) {
        EXPECT_EQ(reply.payload, nullptr);
        ASSERT_EQ(queues_[0]->allocate(std::span(&reply, 1)), 1u);
        std::memcpy(reply.payload, bytes.data(), size);
      }
      ASSERT_NE(reply.payload, nullptr);
      ASSERT_GE(reply.capacity, size);
      if (in_place) {
        EXPECT_EQ(reply.payload, batch[i].data.data());
      }
      // A packet is given up once: the second ask finds it taken.
      EXPECT_EQ(queues_[0]->take_for_reply(batch[i], size).payload, nullptr);
      std::reverse(reply.payload, reply.payload + size);
      expected.emplace_back(reply.payload, reply.payload + size);
      reply.size = size;
      const TxRequest request{&reply, batch[i].from};
      ASSERT_EQ(queues_[0]->send(std::span(&request, 1)), 1u);
      queues_[0]->release(std::span(&reply, 1));
    }
    queues_[0]->flush();
  }
  ASSERT_EQ(expected.size(), sent.size());
  EXPECT_THAT(echoed, ::testing::UnorderedElementsAreArray(expected));
}

TEST_P(TransportTest, AllocationStopsWhenThePoolIsEmptyAndRecovers) {
  std::vector<TxBuffer> buffers(70000);
  const std::size_t got = queues_[0]->allocate(buffers);
  EXPECT_GT(got, 0u);
  EXPECT_LT(got, buffers.size());
  TxBuffer more;
  EXPECT_EQ(queues_[0]->allocate(std::span(&more, 1)), 0u);
  queues_[0]->release(std::span(buffers.data(), got));
  EXPECT_EQ(queues_[0]->allocate(std::span(&more, 1)), 1u);
  queues_[0]->release(std::span(&more, 1));
}

TEST_P(TransportTest, ReceiveWaitsForItsTimeoutWhenNothingArrives) {
  std::array<RxPacket, 8> batch;
  // Late echoes of set-up probes may still come in: the receive that ends empty-handed is the
  // one measured.
  for (int late = 0; late < 64; ++late) {
    const auto start = Clock::now();
    const std::size_t received = queues_[0]->receive(batch, 30ms);
    if (received == 0) {
      EXPECT_GE(Clock::now() - start, 25ms);
      return;
    }
    for (std::size_t i = 0; i < received; ++i) {
      ASSERT_TRUE(std::ranges::equal(batch[i].data, probe_payload())) << "a packet nobody sent arrived";
    }
  }
  FAIL() << "echoes of set-up probes kept arriving";
}

TEST_P(TransportTest, CountersCountWhatWasSentAndReceived) {
  send_payloads(0, {pattern(1, 64), pattern(2, 64), pattern(3, 64)}, peer_[0]);
  ASSERT_EQ(collect(3), 3u);
  const QueueCounters counters = queues_[0]->counters();
  EXPECT_GE(counters.tx_packets, 3u);
  EXPECT_GE(counters.rx_packets, 3u);
}

TEST_P(TransportTest, BadDeviceSettingsAreNamed) {
  if (GetParam() == Kind::udp || GetParam() == Kind::udp_with_faults) {
    UdpTransportConfig taken;
    taken.bind_host = "127.0.0.1";
    taken.bind_port = queues_[0]->local_endpoint().port;
    EXPECT_THAT([&] { open_device(taken, 1)->open_queue(0); },
                ::testing::ThrowsMessage<Error>(::testing::HasSubstr("cannot bind UDP 127.0.0.1:")));
    taken.bind_host = "not-a-host.invalid";
    EXPECT_THAT([&] { open_device(taken, 1)->open_queue(0); },
                ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("udp.bind_host")));
    return;
  }
  if (GetParam() == Kind::shm) {
    ShmTransportConfig taken;
    taken.fabric = test_prefix();
    taken.base_port = queues_[0]->local_endpoint().port;
    EXPECT_THAT([&] { open_device(taken, 1)->open_queue(0); },
                ::testing::ThrowsMessage<Error>(::testing::HasSubstr("is in use by a live process")));
    taken.fabric = "no/slashes";
    EXPECT_THAT([&] { open_device(taken, 1); }, ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("shm.fabric")));
    taken.fabric = test_prefix();
    taken.directory = "/no/such/directory";
    EXPECT_THAT([&] { open_device(taken, 1)->open_queue(0); },
                ::testing::ThrowsMessage<Error>(::testing::HasSubstr("shm.directory /no/such/directory")));
    taken.directory = "/dev/shm";
    taken.ring = 1000;
    EXPECT_THAT([&] { open_device(taken, 1); }, ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("shm.ring")));
    return;
  }
#ifdef DPA_HAVE_DPDK
  DpdkTransportConfig config = dpdk_base("no-such-port", "10.99.0.9", 9000);
  EXPECT_THAT([&] { open_device(config, 1); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("dpdk.ports: no port named \"no-such-port\"")));
  config.ports = {"net_memif0", "net_memif0"};
  EXPECT_THAT([&] { open_device(config, 1); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("is listed twice")));
  const bool ring = GetParam() == Kind::dpdk_ring;
  config.ports = {ring ? "net_ring_dpa_ring_a" : "net_memif0"};  // the local device's port
  EXPECT_THAT([&] { open_device(config, 1); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("is already used by another DPDK device")));
  if (ring) {
    config.ports = {"net_memif0"};  // free in this case
    EXPECT_THAT([&] { open_device(config, 1000); },
                ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("1000 requested (one per thread")));
    // 1024 RX and 1024 TX descriptors cannot be filled from 2047 mbufs with a cache besides.
    DpdkTransportConfig small_pool = config;
    small_pool.rx_descriptors = 1024;
    small_pool.tx_descriptors = 1024;
    EXPECT_THAT([&] { open_device(small_pool, 1); },
                ::testing::ThrowsMessage<ConfigError>(::testing::AllOf(
                    ::testing::HasSubstr("dpdk.mbufs 2047 is too few"), ::testing::HasSubstr("dpdk.rx_descriptors 1024"),
                    ::testing::HasSubstr("dpdk.tx_descriptors 1024"), ::testing::HasSubstr("dpdk.burst"))));
    small_pool.mbufs = 4095;  // enough: the same port opens
    EXPECT_NO_THROW(open_device(small_pool, 1));
  }
  config.local_ip = "10.99.0";
  EXPECT_THAT([&] { open_device(config, 1); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("dpdk.local_ip")));
#endif
}

TEST_P(TransportTest, QueuePoolsAreLockFreeStacks) {
  if (GetParam() != Kind::dpdk_ring) GTEST_SKIP() << "mbuf pools are a DPDK queue's (run on net_ring)";
#ifdef DPA_HAVE_DPDK
  std::uint16_t port = 0;
  ASSERT_EQ(rte_eth_dev_get_port_by_name("net_ring_dpa_ring_a", &port), 0);
  rte_mempool* const pool = rte_mempool_lookup(("dpa_p" + std::to_string(port) + "_q0").c_str());
  ASSERT_NE(pool, nullptr);
  // Not the default ring: one that cycles through every mbuf of the pool (see queue_pool).
  EXPECT_STREQ(rte_mempool_get_ops(pool->ops_index)->name, "lf_stack");
#endif
}

TEST_P(TransportTest, SmallSendsWhilePacketsArriveLeaveAsOneBurst) {
  if (GetParam() != Kind::dpdk_ring) GTEST_SKIP() << "TX bursts are a DPDK queue's (run on net_ring)";
#ifdef DPA_HAVE_DPDK
  // A long interval, so that the sends below (a loop's steps: send, then poll) fall within it.
  constexpr auto kInterval = 300ms;
  queues_.clear();
  local_.reset();
  local_dpdk_.tx_flush = kInterval;
  open_local(local_dpdk_, "10.99.0.1");
  wait_until_echoing();  // the new device resolves the peer by ARP again
  if (HasFatalFailure()) return;

  // Traffic that keeps arriving: a frame in queue 0's inbox before each poll step (it is no
  // IPv4, so the queue drops it). A poll step that receives nothing would send at once.
  std::uint16_t port = 0;
  ASSERT_EQ(rte_eth_dev_get_port_by_name("net_ring_dpa_ring_a", &port), 0);
  rte_ring* const inbox = rte_ring_lookup(("dpa_in_p" + std::to_string(port) + "_q0").c_str());
  rte_mempool* const pool = rte_mempool_lookup(("dpa_p" + std::to_string(port) + "_q1").c_str());
  ASSERT_TRUE(inbox != nullptr && pool != nullptr);
  Queue& queue = *queues_[0];
  std::array<RxPacket, 8> ignored;  // late echoes of set-up probes at most
  const auto send_one = [&](std::uint32_t index) {
    TxBuffer buffer;
    ASSERT_EQ(queue.allocate(std::span(&buffer, 1)), 1u);
    const std::vector<std::byte> payload = pattern(index, 100);
    std::memcpy(buffer.payload, payload.data(), payload.size());
    buffer.size = static_cast<std::uint32_t>(payload.size());
    const TxRequest request{&buffer, peer_[0]};
    ASSERT_EQ(queue.send(std::span(&request, 1)), 1u);
    queue.release(std::span(&buffer, 1));
  };
  const auto busy_poll_step = [&] {
    rte_mbuf* const frame = rte_pktmbuf_alloc(pool);
    ASSERT_NE(frame, nullptr);
    ASSERT_EQ(rte_ring_mp_enqueue(inbox, frame), 0);
    queue.receive(ignored, 0ns);
  };

  const QueueCounters before = queue.counters();
  constexpr std::uint32_t kSends = 5;
  const auto first = Clock::now();
  busy_poll_step();  // the poll step that the burst's first packet is timed from
  for (std::uint32_t i = 0; i < kSends; ++i) {
    send_one(i);
    busy_poll_step();
  }
  // On a machine so loaded that the sends took longer than the interval, the burst may be gone.
  if (Clock::now() - first < kInterval) {
    EXPECT_EQ(queue.counters().tx_packets, before.tx_packets) << "a packet left before its burst was full or due";
  }
  while (queue.counters().tx_packets == before.tx_packets && Clock::now() - first < 10s) busy_poll_step();
  EXPECT_GE(Clock::now() - first, kInterval);
  const QueueCounters due = queue.counters();
  EXPECT_EQ(due.tx_packets - before.tx_packets, kSends);
  EXPECT_EQ(due.tx_bursts - before.tx_bursts, 1u);
  ASSERT_EQ(collect(kSends), kSends);

  // Nothing arriving: a lone packet leaves at the next poll step that receives nothing.
  send_one(kSends);
  while (queue.receive(ignored, 0ns) > 0) {
  }
  EXPECT_EQ(queue.counters().tx_packets, due.tx_packets + 1);
  ASSERT_EQ(collect(kSends + 1), kSends + 1);
#endif
}

TEST_P(TransportTest, FramesWithWrongChecksumsAreDroppedAndCounted) {
  if (GetParam() != Kind::dpdk_ring) GTEST_SKIP() << "received checksums are a DPDK queue's (run on net_ring)";
#ifdef DPA_HAVE_DPDK
  // Frames from the peer's address to queue 0, handed to queue 0 as a receiving queue would (its
  // inbox): net_ring's mbufs carry no checksum verdict, so the queue computes both checksums.
  std::uint16_t port = 0;
  ASSERT_EQ(rte_eth_dev_get_port_by_name("net_ring_dpa_ring_a", &port), 0);
  rte_ring* const inbox = rte_ring_lookup(("dpa_in_p" + std::to_string(port) + "_q0").c_str());
  rte_mempool* const pool = rte_mempool_lookup(("dpa_p" + std::to_string(port) + "_q1").c_str());
  ASSERT_TRUE(inbox != nullptr && pool != nullptr);
  const std::vector<std::byte> payload = pattern(77, 300);
  enum class Damage { none, ip_header, udp_checksum, udp_payload };
  const auto deliver = [&](Damage damage, bool udp_checksum) {
    rte_mbuf* const frame = rte_pktmbuf_alloc(pool);
    ASSERT_NE(frame, nullptr);
    auto* bytes = reinterpret_cast<std::byte*>(rte_pktmbuf_append(frame, static_cast<std::uint16_t>(dpdk::kFrameHeaderBytes + payload.size())));
    const dpdk::FrameAddresses addresses{0x020000000002, 0x020000000001, peer_[0].address, local_ip_,
                                         peer_[0].port, queues_[0]->local_endpoint().port};
    dpdk::write_frame_header(bytes, addresses, static_cast<std::uint16_t>(payload.size()), false);
    std::memcpy(bytes + dpdk::kFrameHeaderBytes, payload.data(), payload.size());
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(bytes + dpdk::kEthernetBytes);
    auto* udp = reinterpret_cast<rte_udp_hdr*>(bytes + dpdk::kEthernetBytes + dpdk::kIpv4Bytes);
    if (udp_checksum) udp->dgram_cksum = rte_ipv4_udptcp_cksum(ip, udp);
    if (damage == Damage::ip_header) ip->time_to_live = 63;  // the header checksum no longer holds
    if (damage == Damage::udp_checksum) udp->dgram_cksum = static_cast<std::uint16_t>(udp->dgram_cksum ^ 0x0100);
    if (damage == Damage::udp_payload) bytes[dpdk::kFrameHeaderBytes + 10] ^= std::byte{0x40};
    ASSERT_EQ(rte_ring_mp_enqueue(inbox, frame), 0);
  };
  // Whether queue 0 delivered the payload (late echoes of set-up probes aside) in one poll step,
  // and how many frames it dropped for their checksums meanwhile.
  std::array<RxPacket, 8> packets;
  const auto received = [&](std::uint64_t& bad_checksums) {
    const std::uint64_t before = queues_[0]->counters().rx_bad_checksum;
    const std::size_t count = queues_[0]->receive(packets, 0ns);
    bad_checksums = queues_[0]->counters().rx_bad_checksum - before;
    return std::any_of(packets.begin(), packets.begin() + static_cast<std::ptrdiff_t>(count), [&](const RxPacket& packet) {
      return std::equal(packet.data.begin(), packet.data.end(), payload.begin(), payload.end());
    });
  };
  std::uint64_t bad = 0;
  deliver(Damage::none, false);
  EXPECT_TRUE(received(bad)) << "a frame with a valid IPv4 checksum and no UDP checksum";
  EXPECT_EQ(bad, 0u);
  deliver(Damage::none, true);
  EXPECT_TRUE(received(bad)) << "a frame with valid IPv4 and UDP checksums";
  EXPECT_EQ(bad, 0u);
  for (const Damage damage : {Damage::ip_header, Damage::udp_checksum, Damage::udp_payload}) {
    deliver(damage, true);
    EXPECT_FALSE(received(bad)) << "damage " << static_cast<int>(damage);
    EXPECT_EQ(bad, 1u) << "damage " << static_cast<int>(damage);
  }
#endif
}

TEST_P(TransportTest, SoftwareUdpChecksumsLetTheReceiverDropAFrameDamagedOnTheWay) {
  if (GetParam() != Kind::dpdk_ring) GTEST_SKIP() << "sent checksums are a DPDK queue's (run on net_ring)";
#ifdef DPA_HAVE_DPDK
  // net_ring has no checksum offload: with dpdk.software_udp_checksum the local queues compute
  // every UDP checksum, and the peer (check_udp_checksum, the default) checks them.
  queues_.clear();
  local_.reset();
  local_dpdk_.software_udp_checksum = true;
  open_local(local_dpdk_, "10.99.0.1");
  wait_until_echoing();  // the echoes already pass the peer's checks
  if (HasFatalFailure()) return;
  // From here the test reads the peer's queue 0 itself.
  stop_.store(true);
  echo_thread_.join();
  Queue& peer = *peer_queues_[0];
  std::array<RxPacket, 8> packets;
  const std::vector<std::byte> payload = pattern(31, 1000);
  // Reads the peer until `frames` frames carrying `payload` arrived (each with a checksum that
  // holds), or until it dropped `drops` for their checksums; returns the frames.
  const auto read_peer = [&](std::size_t frames, std::uint64_t drops) {
    const std::uint64_t dropped_before = peer.counters().rx_bad_checksum;
    std::size_t got = 0;
    for (const auto deadline = Clock::now() + 5s; Clock::now() < deadline;) {
      const std::size_t count = peer.receive(packets, 10ms);
      for (std::size_t i = 0; i < count; ++i) {
        if (!std::ranges::equal(packets[i].data, payload)) continue;  // a late probe's echo
        const rte_mbuf* frame = *static_cast<rte_mbuf**>(packets[i].native);
        const auto* ip = rte_pktmbuf_mtod_offset(frame, const rte_ipv4_hdr*, dpdk::kEthernetBytes);
        const auto* udp = rte_pktmbuf_mtod_offset(frame, const rte_udp_hdr*, dpdk::kEthernetBytes + dpdk::kIpv4Bytes);
        EXPECT_NE(udp->dgram_cksum, 0) << "a frame without a UDP checksum";
        EXPECT_TRUE(dpdk::udp_checksum_holds(*ip, *udp, rte_be_to_cpu_16(udp->dgram_len))) << "a UDP checksum that does not hold";
        ++got;
      }
      if (got >= frames && peer.counters().rx_bad_checksum - dropped_before >= drops) break;
    }
    EXPECT_EQ(peer.counters().rx_bad_checksum - dropped_before, drops);
    return got;
  };
  TxBuffer buffer;
  ASSERT_EQ(queues_[0]->allocate(std::span(&buffer, 1)), 1u);
  std::memcpy(buffer.payload, payload.data(), payload.size());
  buffer.size = static_cast<std::uint32_t>(payload.size());
  const TxRequest request{&buffer, peer_[0]};
  ASSERT_EQ(queues_[0]->send(std::span(&request, 1)), 1u);
  queues_[0]->flush();
  EXPECT_EQ(read_peer(1, 0), 1u) << "one frame";
  // A multicast: the buffer's own frame, then a header chained to the shared payload.
  const std::vector<Endpoint> twice{peer_[0], peer_[0]};
  ASSERT_EQ(queues_[0]->send_to_all(buffer, twice), 2u);
  queues_[0]->flush();
  EXPECT_EQ(read_peer(2, 0), 2u) << "a multicast's frames";
  // The frame sits in the ring to the peer, its payload still the sender's buffer (zero copy):
  // a write into it now is the damage a torn or overwritten frame does on the way.
  ASSERT_EQ(queues_[0]->send(std::span(&request, 1)), 1u);
  queues_[0]->flush();
  buffer.payload[500] ^= std::byte{0x40};
  EXPECT_EQ(read_peer(0, 1), 0u) << "the damaged frame must be dropped, not delivered";
  queues_[0]->release(std::span(&buffer, 1));
#endif
}

TEST_P(TransportTest, NicMonitorWritesTheRatesItSampled) {
  if (GetParam() != Kind::dpdk_ring) GTEST_SKIP() << "the NIC monitor is a DPDK device's (run on net_ring)";
  // Traffic for longer than a few sampling intervals, then the device goes (the file is complete).
  const auto until = Clock::now() + 20ms;
  std::size_t sent = 0;
  while (Clock::now() < until) {
    send_payloads(0, {pattern(static_cast<std::uint32_t>(sent), 1000)}, peer_[0]);
    ++sent;
    ASSERT_EQ(collect(sent), sent);
  }
  queues_.clear();
  local_.reset();
  std::ifstream csv(monitor_output());
  std::string line;
  ASSERT_TRUE(std::getline(csv, line));
  EXPECT_EQ(line, "time_us,rx_gbps,tx_gbps,rx_mpps,tx_mpps,rx_missed");
  std::size_t rows = 0;
  double tx_mpps_total = 0;  // net_ring counts packets, not bytes
  while (std::getline(csv, line)) {
    ++rows;
    std::istringstream fields(line);
    std::string field;
    for (int column = 0; column < 5 && std::getline(fields, field, ','); ++column) {
      if (column == 4) tx_mpps_total += std::stod(field);
    }
  }
  EXPECT_GE(rows, 2u);
  EXPECT_GT(tx_mpps_total, 0.0);
}

#ifdef DPA_HAVE_DPDK
// dpdk.cores as the EAL sees it: empty (pinned later, each lcore to the core chosen for it) and
// "none" start the worker lcores over the process's CPUs; a list pins lcore t to its t-th core.
TEST(DpdkCores, TheSettingDecidesTheLcoreLayout) {
  const auto lcores = [](const std::string& cores) {
    DpdkTransportConfig config;
    config.cores = cores;
    for (const std::string& argument : dpdk::eal_arguments(config, 2)) {
      if (argument.starts_with("--lcores=")) return argument.substr(9);
    }
    return std::string();
  };
  std::string own = "(";
  for (const int cpu : allowed_cpus()) own += (own.size() > 1 ? "," : "") + std::to_string(cpu);
  own += ")";
  EXPECT_EQ(lcores(""), "0@" + own + ",1@" + own + ",2@" + own);
  EXPECT_EQ(lcores("none"), "0@" + own + ",1@" + own + ",2@" + own);
  EXPECT_EQ(lcores("2-3"), "0@" + own + ",1@2,2@3");
  try {
    lcores("None");
    ADD_FAILURE() << "a bad dpdk.cores was accepted";
  } catch (const ConfigError& error) {
    EXPECT_THAT(error.what(), ::testing::HasSubstr("dpdk.cores: \"None\" is not a core list"));
    EXPECT_THAT(error.what(), ::testing::HasSubstr("nor \"none\""));
  }
}
#endif

#ifdef DPA_HAVE_DPDK
// A ring pair made with a shift delivers what b sends on queue q to a's queue q + 1, as a NIC
// hashing packets elsewhere would (dpa-bench --ring-hand-off): a's queue 1 finds queue 0's
// packets on its RX queue and hands each to queue 0's inbox, where queue 0 receives them.
TEST(DpdkRingPair, AShiftLandsPacketsOnAnotherQueueWhichHandsThemToTheirOwner) {
  dpdk::start_eal(dpdk_base("", "10.99.0.1", 6000), 0);
  const auto ports = dpdk::create_ring_pair(dpdk_base("", "10.99.0.1", 6000), "dpa_shift_a", "dpa_shift_b", 2,
                                            1024, 1);
  const auto mac_of = [](const std::string& name) {
    std::uint16_t port_id = 0;
    rte_ether_addr mac{};
    EXPECT_EQ(rte_eth_dev_get_port_by_name(name.c_str(), &port_id), 0) << name;
    EXPECT_EQ(rte_eth_macaddr_get(port_id, &mac), 0) << name;
    char text[RTE_ETHER_ADDR_FMT_SIZE];
    rte_ether_format_addr(text, sizeof text, &mac);
    return std::string(text);
  };
  // Static neighbours: no ARP frame lands on a queue before the data.
  DpdkTransportConfig a_config = dpdk_base(ports.a, "10.98.0.1", 6100);
  a_config.neighbours = {{"10.98.0.2", mac_of(ports.b)}};
  DpdkTransportConfig b_config = dpdk_base(ports.b, "10.98.0.2", 7100);
  b_config.neighbours = {{"10.98.0.1", mac_of(ports.a)}};
  const auto a = open_device(a_config, 2);
  const auto b = open_device(b_config, 2);
  std::vector<std::unique_ptr<Queue>> a_queues;
  for (std::size_t q = 0; q < 2; ++q) a_queues.push_back(a->open_queue(q));
  const auto sender = b->open_queue(0);

  constexpr std::size_t kPackets = 8;
  std::vector<TxBuffer> buffers(kPackets);
  ASSERT_EQ(sender->allocate(buffers), kPackets);
  std::vector<TxRequest> requests;
  for (std::size_t i = 0; i < kPackets; ++i) {
    buffers[i].payload[0] = static_cast<std::byte>(i);
    buffers[i].size = 64;
    requests.push_back(TxRequest{&buffers[i], a_queues[0]->local_endpoint()});
  }
  ASSERT_EQ(sender->send(requests), kPackets);
  sender->flush();
  sender->release(buffers);
  // The rings are named by the port and queue that receive from them.
  const rte_ring* to_queue_0 = rte_ring_lookup("rx_dpa_shift_a_0");
  const rte_ring* to_queue_1 = rte_ring_lookup("rx_dpa_shift_a_1");
  ASSERT_NE(to_queue_0, nullptr);
  ASSERT_NE(to_queue_1, nullptr);
  EXPECT_EQ(rte_ring_count(to_queue_0), 0u);
  EXPECT_EQ(rte_ring_count(to_queue_1), kPackets);

  std::array<RxPacket, 32> received{};
  EXPECT_EQ(a_queues[1]->receive(received, 0ns), 0u);
  EXPECT_EQ(a_queues[1]->counters().rx_dispatched, kPackets);
  ASSERT_EQ(a_queues[0]->receive(received, 0ns), kPackets);
  for (std::size_t i = 0; i < kPackets; ++i) EXPECT_EQ(received[i].data[0], static_cast<std::byte>(i));
  EXPECT_EQ(a_queues[0]->counters().rx_dispatched, 0u);
}
#endif

INSTANTIATE_TEST_SUITE_P(EveryTransport, TransportTest,
                         ::testing::Values(Kind::udp, Kind::udp_with_faults, Kind::shm, Kind::dpdk_ring,
                                           Kind::dpdk_memif),
                         [](const ::testing::TestParamInfo<Kind>& param) { return kind_name(param.param); });

}  // namespace
}  // namespace dpa::transport

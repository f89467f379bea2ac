// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <map>
#include <numeric>
#include <vector>

#include "transport/fault_injector.hpp"
#include "transport/socket/udp_device.hpp"
#include "copy_send.hpp"

namespace dpa::transport {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::unique_ptr<Queue> loopback_queue() {
  UdpTransportConfig config;
  config.bind_host = "127.0.0.1";
  return socket::open_udp_queue(config);
}

struct Link {
  std::unique_ptr<Queue> sender;
  std::unique_ptr<Queue> receiver;
};

// A loopback pair with faults injected on the sending or the receiving side.
Link faulty_link(const FaultOptions& faults, bool faulty_sender) {
  const FaultOptions none;
  return Link{with_faults(loopback_queue(), faulty_sender ? faults : none),
              with_faults(loopback_queue(), faulty_sender ? none : faults)};
}

using TxPacket = testing::Outgoing;

void send(Queue& queue, const std::vector<TxPacket>& packets) {
  EXPECT_EQ(testing::send_copies(queue, packets), packets.size());
}

std::uint32_t index_of(const RxPacket& packet) {
  std::uint32_t index = 0;
  std::memcpy(&index, packet.data.data(), sizeof index);
  return index;
}

// Receives into `indices` until `done()` holds; bounded by two seconds.
template <class Done>
void receive_until(Queue& receiver, std::vector<std::uint32_t>& indices, Done done) {
  std::vector<RxPacket> batch(64);
  const auto deadline = Clock::now() + 2s;
  while (!done() && Clock::now() < deadline) {
    const std::size_t n = receiver.receive(batch, 20ms);
    for (std::size_t i = 0; i < n; ++i) indices.push_back(index_of(batch[i]));
  }
}

// Sends packets 0..count-1 in rounds of `per_call` (each one send() call) and returns the indices
// that arrive, in arrival order. The run ends once every packet the sender let through (or, for a
// faulty receiver, every packet that reached its socket) has been accounted for.
std::vector<std::uint32_t> transfer(Link& link, std::uint32_t count, std::uint32_t per_call, bool faulty_sender) {
  std::vector<std::uint32_t> indices(count);
  std::iota(indices.begin(), indices.end(), 0U);
  std::vector<std::uint32_t> arrived;
  const Endpoint to = link.receiver->local_endpoint();
  for (std::uint32_t first = 0; first < count; first += per_call) {
    std::vector<TxPacket> packets;
    for (std::uint32_t i = first; i < std::min(count, first + per_call); ++i) {
      packets.push_back({reinterpret_cast<const std::byte*>(&indices[i]), sizeof(std::uint32_t), to});
    }
    send(*link.sender, packets);
    if (faulty_sender) {
      // After the last call, receive() flushes whatever the injector still holds for reordering.
      if (first + per_call >= count) link.sender->receive({}, 0ns);
      const QueueCounters sent = link.sender->counters();
      receive_until(*link.receiver, arrived, [&] { return arrived.size() == sent.tx_packets; });
    } else {
      receive_until(*link.receiver, arrived, [&] {
        const QueueCounters got = link.receiver->counters();
        return got.rx_packets == first + packets.size() &&
               arrived.size() == got.rx_packets - got.injected_drops + got.injected_duplicates;
      });
    }
  }
  return arrived;
}

FaultOptions faults_with_seed(std::uint64_t seed) {
  FaultOptions faults;
  faults.seed = seed;
  return faults;
}

TEST(FaultInjector, DisabledReturnsTheSameTransport) {
  auto inner = loopback_queue();
  Queue* const raw = inner.get();
  EXPECT_EQ(with_faults(std::move(inner), FaultOptions{}).get(), raw);
}

TEST(FaultInjector, SendDropsArePlausibleAndReproducible) {
  FaultOptions faults = faults_with_seed(42);
  faults.drop = 0.3;
  Link first = faulty_link(faults, true);
  const std::vector<std::uint32_t> first_run = transfer(first, 2000, 100, true);
  const std::uint64_t drops = first.sender->counters().injected_drops;
  EXPECT_GE(drops, 450U);
  EXPECT_LE(drops, 750U);
  EXPECT_EQ(first_run.size(), 2000U - drops);
  EXPECT_TRUE(std::is_sorted(first_run.begin(), first_run.end()));

  Link second = faulty_link(faults, true);
  EXPECT_EQ(transfer(second, 2000, 100, true), first_run);

  faults.seed = 43;
  Link third = faulty_link(faults, true);
  EXPECT_NE(transfer(third, 2000, 100, true), first_run);
}

TEST(FaultInjector, ReceiveDropsArePlausibleAndReproducible) {
  FaultOptions faults = faults_with_seed(7);
  faults.drop = 0.3;
  Link first = faulty_link(faults, false);
  const std::vector<std::uint32_t> first_run = transfer(first, 2000, 100, false);
  const QueueCounters counters = first.receiver->counters();
  EXPECT_EQ(counters.rx_packets, 2000U);
  EXPECT_GE(counters.injected_drops, 450U);
  EXPECT_LE(counters.injected_drops, 750U);
  EXPECT_EQ(first_run.size(), 2000U - counters.injected_drops);

  Link second = faulty_link(faults, false);
  EXPECT_EQ(transfer(second, 2000, 100, false), first_run);
}

// Every index arrives exactly `copies` times.
void expect_each_index(const std::vector<std::uint32_t>& arrived, std::uint32_t count, int copies) {
  std::map<std::uint32_t, int> seen;
  for (const std::uint32_t index : arrived) ++seen[index];
  ASSERT_EQ(seen.size(), count);
  for (const auto& [index, times] : seen) EXPECT_EQ(times, copies) << "index " << index;
}

TEST(FaultInjector, DuplicateOnSendDoublesEveryPacket) {
  FaultOptions faults;
  faults.duplicate = 1.0;
  Link link = faulty_link(faults, true);
  const std::vector<std::uint32_t> arrived = transfer(link, 300, 50, true);
  EXPECT_EQ(arrived.size(), 600U);
  expect_each_index(arrived, 300, 2);
  EXPECT_EQ(link.sender->counters().injected_duplicates, 300U);
  EXPECT_EQ(link.sender->counters().tx_packets, 600U);
}

TEST(FaultInjector, DuplicateOnReceiveDoublesEveryPacket) {
  FaultOptions faults;
  faults.duplicate = 1.0;
  Link link = faulty_link(faults, false);
  // Batches of 20 leave room in the 64-entry receive span for every duplicate.
  const std::vector<std::uint32_t> arrived = transfer(link, 300, 20, false);
  EXPECT_EQ(arrived.size(), 600U);
  expect_each_index(arrived, 300, 2);
  EXPECT_EQ(link.receiver->counters().injected_duplicates, 300U);
}

TEST(FaultInjector, ReorderChangesOrderButDeliversEverything) {
  FaultOptions faults = faults_with_seed(3);
  faults.reorder = 0.3;
  Link link = faulty_link(faults, true);
  // One packet per send() call: a held packet goes out after the next call's packet.
  const std::vector<std::uint32_t> arrived = transfer(link, 200, 1, true);
  ASSERT_EQ(arrived.size(), 200U);
  EXPECT_FALSE(std::is_sorted(arrived.begin(), arrived.end()));
  expect_each_index(arrived, 200, 1);
  EXPECT_GT(link.sender->counters().injected_reorders, 0U);
}

TEST(FaultInjector, ReorderedPacketFollowsTheNextSendCall) {
  FaultOptions faults = faults_with_seed(11);
  faults.reorder = 1.0;
  Link link = faulty_link(faults, true);
  const std::uint32_t indices[] = {0, 1};
  const Endpoint to = link.receiver->local_endpoint();
  std::vector<RxPacket> out(4);
  send(*link.sender, std::vector<TxPacket>{{reinterpret_cast<const std::byte*>(&indices[0]), 4, to}});
  EXPECT_EQ(link.receiver->receive(out, 0ns), 0U);  // held, nothing on the wire yet
  // The second packet is held too (reorder = 1), but the first goes out once the call sends one;
  // receive() on the sender flushes whatever is still held.
  send(*link.sender, std::vector<TxPacket>{{reinterpret_cast<const std::byte*>(&indices[1]), 4, to}});
  link.sender->receive({}, 0ns);
  std::vector<std::uint32_t> arrived;
  receive_until(*link.receiver, arrived, [&] { return arrived.size() == 2; });
  EXPECT_EQ(arrived.size(), 2U);
  EXPECT_EQ(link.sender->counters().injected_reorders, 2U);
}

TEST(FaultInjector, DelayedPacketsGoOutWhenDueWhileTheSenderWaits) {
  FaultOptions faults;
  faults.delay = 1.0;
  faults.delay_time = 30ms;
  Link link = faulty_link(faults, true);
  const std::vector<std::uint32_t> indices{0, 1, 2, 3, 4};
  std::vector<TxPacket> packets;
  for (const std::uint32_t& index : indices) {
    packets.push_back({reinterpret_cast<const std::byte*>(&index), 4, link.receiver->local_endpoint()});
  }

  // The receiver waits in its own thread and notes when the packets arrive.
  std::promise<void> receiver_ready;
  auto arrival = std::async(std::launch::async, [&] {
    std::vector<std::uint32_t> arrived;
    receiver_ready.set_value();
    receive_until(*link.receiver, arrived, [&] { return arrived.size() == indices.size(); });
    return std::make_pair(arrived.size(), Clock::now());
  });
  receiver_ready.get_future().wait();

  const auto sent_at = Clock::now();
  send(*link.sender, packets);
  EXPECT_EQ(link.sender->counters().tx_packets, 0U);  // all held
  // The sender's receive() must cut its 400 ms wait short to release the packets on time.
  std::vector<RxPacket> out(4);
  EXPECT_EQ(link.sender->receive(out, 400ms), 0U);
  const auto [count, arrived_at] = arrival.get();
  EXPECT_EQ(count, indices.size());
  EXPECT_GE(arrived_at - sent_at, faults.delay_time);
  EXPECT_LT(arrived_at - sent_at, 300ms);
  EXPECT_EQ(link.sender->counters().injected_delays, indices.size());
  EXPECT_EQ(link.sender->counters().tx_packets, indices.size());
}

TEST(FaultInjector, CountersIncludeTheInnerTransport) {
  FaultOptions faults;
  faults.drop = 1.0;
  Link link = faulty_link(faults, true);
  const std::uint32_t index = 0;
  send(*link.sender, std::vector<TxPacket>(5, {reinterpret_cast<const std::byte*>(&index), 4,
                                              link.receiver->local_endpoint()}));
  const QueueCounters counters = link.sender->counters();
  EXPECT_EQ(counters.injected_drops, 5U);
  EXPECT_EQ(counters.tx_packets, 0U);
  EXPECT_EQ(counters.tx_syscalls, 0U);
  EXPECT_NE(link.sender->local_endpoint().port, 0);
}

}  // namespace
}  // namespace dpa::transport

// SPDX-License-Identifier: Apache-2.0
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ctime>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "dpa/error.hpp"
#include "transport/socket/udp_device.hpp"
#include "copy_send.hpp"

namespace dpa::transport {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using ::testing::HasSubstr;

using TxPacket = testing::Outgoing;

constexpr std::uint32_t kLoopback = 0x7f000001;

std::unique_ptr<Queue> loopback_transport(std::size_t batch = 64) {
  UdpTransportConfig options;
  options.bind_host = "127.0.0.1";
  options.batch = batch;
  return socket::open_udp_queue(options);
}

std::size_t send(Queue& queue, const std::vector<TxPacket>& packets) { return testing::send_copies(queue, packets); }

// Packet `index` of `size` bytes: the index in the first four bytes, then a pattern derived from it.
std::vector<std::byte> make_payload(std::uint32_t index, std::size_t size) {
  std::vector<std::byte> payload(size);
  for (std::size_t i = 0; i < size; ++i) payload[i] = static_cast<std::byte>((index * 31 + i) & 0xff);
  if (size >= sizeof index) std::memcpy(payload.data(), &index, sizeof index);
  return payload;
}

std::chrono::nanoseconds process_cpu_time() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return std::chrono::seconds(now.tv_sec) + std::chrono::nanoseconds(now.tv_nsec);
}

struct Received {
  std::vector<std::byte> data;
  Endpoint from;
};

// Receives until `count` packets arrived or two seconds passed, copying them out.
std::vector<Received> receive_count(Queue& receiver, std::size_t count) {
  std::vector<Received> received;
  std::vector<RxPacket> batch(32);
  const auto deadline = Clock::now() + 2s;
  while (received.size() < count && Clock::now() < deadline) {
    const std::size_t n = receiver.receive(batch, 50ms);
    for (std::size_t i = 0; i < n; ++i) {
      received.push_back({{batch[i].data.begin(), batch[i].data.end()}, batch[i].from});
    }
  }
  return received;
}

TEST(Endpoint, ResolvesNumericAndNamedHosts) {
  const Endpoint numeric = Endpoint::resolve("127.0.0.1", 4242, "switch host");
  EXPECT_EQ(numeric.address, kLoopback);
  EXPECT_EQ(numeric.port, 4242);
  EXPECT_EQ(numeric.to_string(), "127.0.0.1:4242");
  EXPECT_EQ((Endpoint{0xc0a80a01, 9}.to_string()), "192.168.10.1:9");

  const Endpoint named = Endpoint::resolve("localhost", 7, "switch host");
  EXPECT_EQ(named.address >> 24, 127U);
  EXPECT_EQ(named.port, 7);
}

TEST(Endpoint, UnresolvableHostNamesTheSetting) {
  try {
    Endpoint::resolve("no-such-host.invalid", 4242, "switch host");
    FAIL() << "resolving an invalid host succeeded";
  } catch (const ConfigError& error) {
    EXPECT_THAT(error.what(), HasSubstr("switch host \"no-such-host.invalid\": cannot resolve"));
  }
}

TEST(UdpTransport, CountsTheTimeAReceiveWaitsForNothingAsIdle) {
  auto queue = loopback_transport();
  std::vector<RxPacket> rx(8);
  const QueueCounters before = queue->counters();
  const auto start = Clock::now();
  EXPECT_EQ(queue->receive(rx, 30ms), 0u);
  const auto waited = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  const QueueCounters idle = queue->counters().since(before);
  EXPECT_GE(idle.idle_ns, 25'000'000u);
  EXPECT_LE(idle.idle_ns, static_cast<std::uint64_t>(waited));
  EXPECT_EQ(idle.rx_packets, 0u);
}

TEST(TransportCounters, AddAndSubtractFieldByField) {
  TransportCounters a;
  a.tx_packets = 10;
  a.tx_bursts = 2;
  a.idle_ns = 7;
  TransportCounters b = a;
  b += a;
  EXPECT_EQ(b.tx_packets, 20u);
  EXPECT_EQ(b.tx_bursts, 4u);
  EXPECT_EQ(b.idle_ns, 14u);
  const TransportCounters difference = b.since(a);
  EXPECT_EQ(difference.tx_packets, 10u);
  EXPECT_EQ(difference.tx_bursts, 2u);
  EXPECT_EQ(difference.rx_packets, 0u);
}

TEST(UdpTransport, BindsEphemeralPortOnRequestedAddress) {
  const auto transport = loopback_transport();
  EXPECT_EQ(transport->local_endpoint().address, kLoopback);
  EXPECT_NE(transport->local_endpoint().port, 0);
}

TEST(UdpTransport, TakenPortErrorNamesAddressAndPort) {
  const auto first = loopback_transport();
  UdpTransportConfig options;
  options.bind_host = "127.0.0.1";
  options.bind_port = first->local_endpoint().port;
  try {
    socket::open_udp_queue(options);
    FAIL() << "binding a taken port succeeded";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("cannot bind UDP 127.0.0.1:" + std::to_string(options.bind_port)));
  }
}

TEST(UdpTransport, RejectsInvalidOptions) {
  UdpTransportConfig options;
  options.batch = 0;
  EXPECT_THROW(socket::open_udp_queue(options), ConfigError);
  options.batch = 8;
  options.bind_host = "no-such-host.invalid";
  EXPECT_THAT([&] { socket::open_udp_queue(options); },
              ::testing::ThrowsMessage<ConfigError>(HasSubstr("udp.bind_host")));
}

TEST(UdpTransport, DeliversBatchesOfVariousSizesIntact) {
  // A small batch makes sendmmsg and recvmmsg split the work over several calls.
  const auto sender = loopback_transport(16);
  const auto receiver = loopback_transport(16);
  constexpr std::uint32_t kPackets = 200;
  std::vector<std::vector<std::byte>> payloads;
  for (std::uint32_t index = 0; index < kPackets; ++index) {
    const std::size_t size = index % 25 == 0 ? 60000 : 4 + (index * 7919U) % 9000;
    payloads.push_back(make_payload(index, size));
  }

  // Send in rounds of bounded volume so the default (unprivileged) socket buffer never overflows.
  std::size_t next = 0;
  while (next < kPackets) {
    std::vector<TxPacket> round;
    std::size_t round_bytes = 0;
    while (next < kPackets && (round.empty() || round_bytes + payloads[next].size() < 120000)) {
      round_bytes += payloads[next].size() + 1024;
      round.push_back({payloads[next].data(), static_cast<std::uint32_t>(payloads[next].size()),
                       receiver->local_endpoint()});
      ++next;
    }
    const std::size_t first_index = next - round.size();
    EXPECT_EQ(send(*sender, round), round.size());
    const std::vector<Received> received = receive_count(*receiver, round.size());
    ASSERT_EQ(received.size(), round.size());
    for (std::size_t i = 0; i < received.size(); ++i) {
      EXPECT_EQ(received[i].data, payloads[first_index + i]) << "packet " << first_index + i;
      EXPECT_EQ(received[i].from, sender->local_endpoint());
    }
  }

  const QueueCounters sent = sender->counters();
  EXPECT_EQ(sent.tx_packets, kPackets);
  EXPECT_EQ(sent.tx_errors, 0U);
  EXPECT_GE(sent.tx_syscalls, kPackets / 16);
  EXPECT_LT(sent.tx_syscalls, kPackets);  // batched, not one call per packet
  const QueueCounters got = receiver->counters();
  EXPECT_EQ(got.rx_packets, kPackets);
  EXPECT_GE(got.rx_syscalls, kPackets / 16);
}

TEST(UdpTransport, MulticastsOneBufferToSeveralReceivers) {
  const auto sender = loopback_transport();
  std::vector<std::unique_ptr<Queue>> receivers;
  std::vector<Endpoint> to;
  const std::vector<std::byte> payload = make_payload(7, 1500);
  for (int i = 0; i < 3; ++i) {
    receivers.push_back(loopback_transport());
    to.push_back(receivers.back()->local_endpoint());
  }
  TxBuffer buffer;
  ASSERT_EQ(sender->allocate(std::span(&buffer, 1)), 1U);
  std::memcpy(buffer.payload, payload.data(), payload.size());
  buffer.size = static_cast<std::uint32_t>(payload.size());
  EXPECT_EQ(sender->send_to_all(buffer, to), 3U);
  sender->release(std::span(&buffer, 1));  // the queued sends keep it until they go out
  EXPECT_EQ(sender->counters().tx_packets, 0U) << "queued until flush";
  sender->flush();
  EXPECT_EQ(sender->counters().tx_packets, 3U);
  EXPECT_EQ(sender->counters().tx_syscalls, 1U);
  for (const auto& receiver : receivers) {
    const std::vector<Received> received = receive_count(*receiver, 1);
    ASSERT_EQ(received.size(), 1U);
    EXPECT_EQ(received[0].data, payload);
    EXPECT_EQ(received[0].from, sender->local_endpoint());
  }
}

TEST(UdpTransport, ReceiveReturnsNoMoreThanRequested) {
  const auto sender = loopback_transport();
  const auto receiver = loopback_transport();
  const std::vector<std::byte> payload = make_payload(1, 100);
  const std::vector<TxPacket> packets(10, TxPacket{payload.data(), 100, receiver->local_endpoint()});
  EXPECT_EQ(send(*sender, packets), packets.size());
  std::vector<RxPacket> out(4);
  EXPECT_EQ(receiver->receive(out, 1s), 4U);
  EXPECT_EQ(receiver->receive(std::span(out).first(0), 1s), 0U);
  EXPECT_EQ(receive_count(*receiver, 6).size(), 6U);
}

TEST(UdpTransport, ReceiveTimeoutIsHonouredWithoutBusyPolling) {
  const auto receiver = loopback_transport();
  std::vector<RxPacket> out(8);
  EXPECT_EQ(receiver->receive(out, 0ns), 0U);

  constexpr int kWaits = 5;
  const auto cpu_before = process_cpu_time();
  for (int i = 0; i < kWaits; ++i) {
    const auto start = Clock::now();
    EXPECT_EQ(receiver->receive(out, 20ms), 0U);
    const auto waited = Clock::now() - start;
    EXPECT_GE(waited, 20ms);
    EXPECT_LT(waited, 500ms);
  }
  // Sleeping in the kernel costs microseconds of CPU; spinning would cost the whole 100 ms.
  EXPECT_LT(process_cpu_time() - cpu_before, 20ms);
}

TEST(UdpTransport, RefusedDatagramCountsOneErrorAndTheRestGoOut) {
  const auto sender = loopback_transport();
  const auto receiver = loopback_transport();
  const std::vector<std::byte> small = make_payload(1, 64);
  const Endpoint to = receiver->local_endpoint();
  // The kernel refuses UDP to port 0 (EINVAL) for this message alone.
  const std::vector<TxPacket> packets{{small.data(), 64, to}, {small.data(), 64, Endpoint{kLoopback, 0}},
                                      {small.data(), 64, to}};
  EXPECT_EQ(send(*sender, packets), packets.size());
  EXPECT_EQ(sender->counters().tx_packets, 2U);
  EXPECT_EQ(sender->counters().tx_errors, 1U);
  EXPECT_EQ(receive_count(*receiver, 2).size(), 2U);
}

TEST(UdpTransport, DropsDatagramsLargerThanTheReceiveBuffer) {
  UdpTransportConfig options;
  options.bind_host = "127.0.0.1";
  options.max_payload = 256;
  const auto receiver = socket::open_udp_queue(options);
  const auto sender = loopback_transport();
  const std::vector<std::byte> large = make_payload(1, 1000);
  const std::vector<std::byte> fits = make_payload(2, 256);
  const Endpoint to = receiver->local_endpoint();
  EXPECT_EQ(send(*sender, {{large.data(), 1000, to}, {fits.data(), 256, to}}), 2U);
  const std::vector<Received> received = receive_count(*receiver, 1);
  ASSERT_EQ(received.size(), 1U);
  EXPECT_EQ(received[0].data, fits);
}

}  // namespace
}  // namespace dpa::transport

// SPDX-License-Identifier: Apache-2.0
// What the shared-memory transport adds to the suite every transport passes (transport_test):
// buffers shared by reference (a referenced buffer is not reused), back-pressure from a full
// inbox, the switch's backlog limit per receiver, a sleeping receiver woken by a send, packets
// between processes, a segment whose owner died taken over, sends to a port nobody owns, and a
// port's successive owners (of one process or of many) told apart.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "dpa/error.hpp"
#include "transport/shm/segment.hpp"
#include "transport/shm/shm_device.hpp"
#include "transport/shm/shm_queue.hpp"

namespace dpa::transport::shm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class ShmTransport : public ::testing::Test {
 protected:
  ShmTransport() {
    config_.fabric = "shm-test-" + std::to_string(getpid());
    config_.max_payload = 4096;
    config_.buffers = 32;
    config_.ring = 64;
  }

  void TearDown() override {
    // Every segment of this test's fabric goes, whatever the test left (a crashed child's too).
    std::error_code ignored;
    for (const auto& entry : std::filesystem::directory_iterator(config_.directory, ignored)) {
      if (entry.path().filename().string().starts_with("dpa-" + config_.fabric)) {
        std::filesystem::remove(entry.path(), ignored);
      }
    }
  }

  // Sends `text` from `from` to `to`'s port; returns whether the queue took it.
  static bool send_text(Queue& from, const Queue& to, const std::string& text) {
    TxBuffer buffer;
    if (from.allocate(std::span(&buffer, 1)) != 1) return false;
    std::memcpy(buffer.payload, text.data(), text.size());
    buffer.size = static_cast<std::uint32_t>(text.size());
    const TxRequest request{&buffer, to.local_endpoint()};
    const bool taken = from.send(std::span(&request, 1)) == 1;
    from.release(std::span(&buffer, 1));
    return taken;
  }

  static std::string text_of(const RxPacket& packet) {
    return {reinterpret_cast<const char*>(packet.data.data()), packet.data.size()};
  }

  ShmTransportConfig config_;
};

TEST_F(ShmTransport, AReferencedBufferIsNotReusedUntilItsReceiverIsDone) {
  ShmQueue sender(config_, 0);
  ShmQueue receiver(config_, 0);
  ASSERT_TRUE(send_text(sender, receiver, "held"));
  std::array<RxPacket, 4> packets;
  ASSERT_EQ(receiver.receive(packets, 1s), 1u);
  ASSERT_EQ(text_of(packets[0]), "held");

  // The sender released its buffer, but the receiver still reads it: every other buffer is
  // allocatable, that one is not, and its bytes stay as sent.
  std::vector<TxBuffer> all(config_.buffers);
  EXPECT_EQ(sender.allocate(all), config_.buffers - 1);
  for (const TxBuffer& buffer : std::span(all.data(), config_.buffers - 1)) {
    EXPECT_NE(buffer.payload, packets[0].data.data());
    std::memset(buffer.payload, 'x', 8);
  }
  EXPECT_EQ(text_of(packets[0]), "held");
  sender.release(std::span(all.data(), config_.buffers - 1));

  EXPECT_EQ(receiver.receive(packets, 0ns), 0u);  // gives the packet's buffer back
  EXPECT_EQ(sender.allocate(all), config_.buffers);
  sender.release(all);
}

TEST_F(ShmTransport, AFullInboxRefusesAndTakesAgainOnceDrained) {
  ShmQueue sender(config_, 0);
  ShmQueue receiver(config_, 0);
  // The sender's 32 buffers all go out twice: 64 packets fill the ring of 64.
  std::vector<TxBuffer> buffers(config_.buffers);
  ASSERT_EQ(sender.allocate(buffers), config_.buffers);
  std::vector<TxRequest> requests;
  for (TxBuffer& buffer : buffers) {
    buffer.size = 16;
    requests.push_back({&buffer, receiver.local_endpoint()});
  }
  EXPECT_EQ(sender.send(requests), requests.size());
  EXPECT_EQ(sender.send(requests), requests.size());
  EXPECT_EQ(sender.send(requests), 0u);  // full: nothing taken, the caller may offer it again
  EXPECT_EQ(sender.counters().tx_errors, 0u);  // held back, not dropped: no backlog limit here

  std::array<RxPacket, 64> packets;
  std::size_t drained = 0;
  while (drained < 64) {
    const std::size_t n = receiver.receive(packets, 100ms);
    ASSERT_GT(n, 0u);
    drained += n;
  }
  EXPECT_EQ(sender.send(requests), requests.size());
  sender.release(buffers);
}

TEST_F(ShmTransport, ASwitchQueueDropsBeyondAReceiversBacklogAndServesTheOthers) {
  ShmTransportConfig limited = config_;
  limited.receiver_backlog_limit = 8;  // what dpa-switch sets for its queues
  ShmQueue sender(limited, 0);
  ShmQueue sleeping(config_, 0);  // never reads
  ShmQueue reading(config_, 0);
  std::vector<TxBuffer> buffers(20);
  ASSERT_EQ(sender.allocate(buffers), buffers.size());
  std::vector<TxRequest> requests;
  for (TxBuffer& buffer : buffers) {
    buffer.size = 16;
    requests.push_back({&buffer, sleeping.local_endpoint()});
  }
  // All taken, 8 queued and 12 lost as datagrams to a full socket buffer are: never held back.
  EXPECT_EQ(sender.send(requests), requests.size());
  EXPECT_EQ(sender.counters().tx_packets, 8u);
  EXPECT_EQ(sender.counters().tx_errors, 12u);
  // A multicast serves the reader though the sleeper, listed first, takes no more.
  const std::array<Endpoint, 2> both{sleeping.local_endpoint(), reading.local_endpoint()};
  EXPECT_EQ(sender.send_to_all(buffers[0], both), 1u);
  std::array<RxPacket, 4> packets;
  EXPECT_EQ(reading.receive(packets, 100ms), 1u);
  // The sleeper holds 8 of the sender's buffers at most: the other 12 come back once released.
  sender.release(buffers);
  std::vector<TxBuffer> again(32);
  EXPECT_EQ(sender.allocate(again), 32u - 8u);
  sender.release(again);
}

TEST_F(ShmTransport, ASendWakesASleepingReceiver) {
  ShmQueue sender(config_, 0);
  ShmQueue receiver(config_, 0);
  std::string got;
  std::thread waiting([&] {
    std::array<RxPacket, 4> packets;
    // Long enough that only a wake-up ends it within the test's bound.
    if (receiver.receive(packets, 60s) == 1) got = text_of(packets[0]);
  });
  // Sent whether or not the receiver sleeps already: it must see the packet either way.
  ASSERT_TRUE(send_text(sender, receiver, "wake up"));
  waiting.join();
  EXPECT_EQ(got, "wake up");
}

TEST_F(ShmTransport, PacketsCrossProcessesIntact) {
  ShmQueue parent(config_, 0);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Echoes 200 packets back, each copied into a buffer of its own segment.
    int code = 1;
    try {
      ShmQueue echo(config_, 0);
      const std::uint16_t port = echo.local_endpoint().port;
      if (write(ready[1], &port, sizeof port) != sizeof port) _exit(2);
      std::array<RxPacket, 16> packets;
      int echoed = 0;
      const auto deadline = Clock::now() + 20s;
      while (echoed < 200 && Clock::now() < deadline) {
        const std::size_t n = echo.receive(packets, 50ms);
        for (std::size_t i = 0; i < n; ++i) {
          // Every buffer may be in the parent's inbox or hands: its receives give them back.
          TxBuffer reply;
          while (echo.allocate(std::span(&reply, 1)) == 0 && Clock::now() < deadline) std::this_thread::yield();
          std::memcpy(reply.payload, packets[i].data.data(), packets[i].data.size());
          reply.size = static_cast<std::uint32_t>(packets[i].data.size());
          const TxRequest request{&reply, packets[i].from};
          // A full inbox at the parent takes nothing: offer it again until it drains.
          while (echo.send(std::span(&request, 1)) == 0 && Clock::now() < deadline) std::this_thread::yield();
          echo.release(std::span(&reply, 1));
          ++echoed;
        }
      }
      code = echoed == 200 ? 0 : 3;
    } catch (...) {
    }
    _exit(code);
  }
  close(ready[1]);
  std::uint16_t peer_port = 0;
  ASSERT_EQ(read(ready[0], &peer_port, sizeof peer_port), static_cast<ssize_t>(sizeof peer_port));
  close(ready[0]);

  std::vector<std::string> sent;
  std::vector<std::string> echoed;
  std::array<RxPacket, 16> packets;
  for (int i = 0; i < 200; ++i) {
    std::string text(1 + (i * 37) % 4000, static_cast<char>('a' + i % 26));
    std::memcpy(text.data(), &i, std::min(text.size(), sizeof i));
    TxBuffer buffer;
    const auto give_up = Clock::now() + 20s;
    while (parent.allocate(std::span(&buffer, 1)) == 0) {
      // Every buffer is in the child's inbox or hands: its echoes release them.
      ASSERT_LT(Clock::now(), give_up) << "buffers never came back";
      const std::size_t n = parent.receive(packets, 1ms);
      for (std::size_t j = 0; j < n; ++j) echoed.push_back(text_of(packets[j]));
    }
    std::memcpy(buffer.payload, text.data(), text.size());
    buffer.size = static_cast<std::uint32_t>(text.size());
    const TxRequest request{&buffer, Endpoint{ShmQueue::kAddress, peer_port}};
    while (parent.send(std::span(&request, 1)) == 0) {
      // The child's inbox is full: take its echoes meanwhile.
      const std::size_t n = parent.receive(packets, 1ms);
      for (std::size_t j = 0; j < n; ++j) echoed.push_back(text_of(packets[j]));
    }
    parent.release(std::span(&buffer, 1));
    sent.push_back(text);
    // Buffers come back as the child's echoes release them.
    const std::size_t n = parent.receive(packets, 0ns);
    for (std::size_t j = 0; j < n; ++j) echoed.push_back(text_of(packets[j]));
  }
  const auto deadline = Clock::now() + 20s;
  while (echoed.size() < sent.size() && Clock::now() < deadline) {
    const std::size_t n = parent.receive(packets, 50ms);
    for (std::size_t j = 0; j < n; ++j) {
      echoed.push_back(text_of(packets[j]));
      EXPECT_EQ(packets[j].from.port, peer_port);
    }
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  std::ranges::sort(sent);
  std::ranges::sort(echoed);
  EXPECT_EQ(echoed, sent);
}

TEST_F(ShmTransport, ASegmentWhoseOwnerDiedIsTakenOver) {
  config_.base_port = 50123;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Dies holding the port: its segment file stays, its lock goes with it.
    auto* leaked = new ShmQueue(config_, config_.base_port);
    (void)leaked;
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(std::filesystem::exists(segment_path(config_, config_.base_port)));
  ShmQueue taken(config_, config_.base_port);
  EXPECT_EQ(taken.local_endpoint().port, config_.base_port);
  // A live owner keeps its port.
  EXPECT_THAT([&] { ShmQueue again(config_, config_.base_port); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("is in use by a live process")));
}

TEST_F(ShmTransport, AnyNewSegmentRemovesThoseWhoseOwnersDied) {
  // A directory of this test's own: a segment created by any other process in the shared one
  // (a test running beside this one) would sweep the abandoned segment before it is looked at.
  config_.directory = "/dev/shm/dpa-sweep-test-" + std::to_string(getpid());
  std::filesystem::create_directories(config_.directory);
  struct RemoveDirectory {
    std::string path;
    ~RemoveDirectory() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } remove_directory{config_.directory};
  ShmTransportConfig other = config_;
  other.fabric = config_.fabric + "-other";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto* leaked = new ShmQueue(other, 50125);  // a killed rank's: never closed
    (void)leaked;
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  const std::string abandoned = segment_path(other, 50125);
  ASSERT_TRUE(std::filesystem::exists(abandoned));
  const ShmQueue live(other, 0);
  ShmQueue fresh(config_, 0);  // another fabric's queue sweeps the directory
  EXPECT_FALSE(std::filesystem::exists(abandoned));
  EXPECT_TRUE(std::filesystem::exists(segment_path(other, live.local_endpoint().port)));
}

TEST_F(ShmTransport, ASendToAPortNobodyOwnsIsLostAndCountedUntilAnOwnerComes) {
  config_.base_port = 50124;
  ShmQueue sender(config_, 0);
  auto receiver = std::make_unique<ShmQueue>(config_, config_.base_port);
  ASSERT_TRUE(send_text(sender, *receiver, "first owner"));
  const ShmQueue& stand_in = sender;  // any queue: only the port is used below
  const Endpoint port{ShmQueue::kAddress, config_.base_port};
  receiver.reset();

  TxBuffer buffer;
  ASSERT_EQ(sender.allocate(std::span(&buffer, 1)), 1u);
  buffer.size = 4;
  const TxRequest request{&buffer, port};
  EXPECT_EQ(sender.send(std::span(&request, 1)), 1u);  // taken, and lost like a datagram
  EXPECT_EQ(sender.counters().tx_errors, 1u);

  // A new owner of the port gets what is sent from now on (the sender maps it afresh).
  ShmQueue second(config_, config_.base_port);
  ASSERT_TRUE(send_text(sender, second, "second owner"));
  std::array<RxPacket, 4> packets;
  ASSERT_EQ(second.receive(packets, 1s), 1u);
  EXPECT_EQ(text_of(packets[0]), "second owner");
  EXPECT_EQ(packets[0].from, stand_in.local_endpoint());
  sender.release(std::span(&buffer, 1));
}

TEST_F(ShmTransport, PacketsOfASenderThatLeftAreStillDelivered) {
  ShmQueue receiver(config_, 0);
  auto sender = std::make_unique<ShmQueue>(config_, 0);
  // The receiver has mapped the sender before (it replied to it): the mapping is then retired.
  ASSERT_TRUE(send_text(*sender, receiver, "hello"));
  ASSERT_TRUE(send_text(receiver, *sender, "reply"));
  ASSERT_TRUE(send_text(*sender, receiver, "last words"));
  sender.reset();
  std::vector<std::string> got;
  std::array<RxPacket, 4> packets;
  for (int attempt = 0; attempt < 3 && got.size() < 2; ++attempt) {
    const std::size_t n = receiver.receive(packets, 100ms);
    for (std::size_t i = 0; i < n; ++i) got.push_back(text_of(packets[i]));
  }
  EXPECT_EQ(got, (std::vector<std::string>{"hello", "last words"}));
  EXPECT_EQ(receiver.counters().rx_dropped, 0u);
}

// A rejoin closes a process's queues and opens new ones at once: they must not take the ports
// just left, or a peer would still read them through the old mappings it keeps.
TEST_F(ShmTransport, AProcessNextQueuesTakeOtherPorts) {
  std::vector<std::uint16_t> ports;
  for (int i = 0; i < 8; ++i) ports.push_back(ShmQueue(config_, 0).local_endpoint().port);
  std::ranges::sort(ports);
  EXPECT_EQ(std::ranges::adjacent_find(ports), ports.end()) << "a port was taken twice";
}

// A fixed port (shm.base_port) has a new owner at every rejoin. The receiver keeps earlier
// owners mapped while their packets may be in its inbox and tells them apart by the tag: each
// packet must be read from its own owner's buffers, for more owners than the tag has values.
TEST_F(ShmTransport, EveryOwnerOfAFixedPortIsReadFromItsOwnBuffers) {
  config_.base_port = 50224;
  ShmQueue receiver(config_, 0);
  std::array<RxPacket, 4> packets;
  for (int owner = 0; owner < 300; ++owner) {
    ShmQueue sender(config_, config_.base_port);
    const std::string text = "owner " + std::to_string(owner);
    ASSERT_TRUE(send_text(sender, receiver, text));
    ASSERT_EQ(receiver.receive(packets, 1s), 1u) << text;
    ASSERT_EQ(text_of(packets[0]), text);
  }
}

// The same across processes: each owner of the fixed port is a new process, whose tag for the
// port is random. With the 64 earlier owners the receiver keeps mapped, an 8-bit tag repeated
// about once in four owners; the 32-bit one about once in 67 million.
TEST_F(ShmTransport, EveryOwnerOfAFixedPortFromAnotherProcessIsReadFromItsOwnBuffers) {
  config_.base_port = 50225;
  ShmQueue receiver(config_, 0);
  std::array<RxPacket, 4> packets;
  for (int owner = 0; owner < 150; ++owner) {
    const std::string text = "process " + std::to_string(owner);
    int done[2];
    ASSERT_EQ(pipe(done), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // Sends, then keeps its segment (and the packet's buffer) until the parent has read it.
      close(done[1]);
      int code = 1;
      try {
        ShmQueue sender(config_, config_.base_port);
        if (send_text(sender, receiver, text)) {
          char byte = 0;
          code = read(done[0], &byte, 1) >= 0 ? 0 : 2;  // 0 bytes: the parent gave up
        }
      } catch (...) {
      }
      _exit(code);
    }
    close(done[0]);
    const std::size_t received = receiver.receive(packets, 5s);
    const std::string got = received == 1 ? text_of(packets[0]) : "";
    close(done[1]);  // lets the child go, whatever was received
    int status = 0;
    waitpid(child, &status, 0);
    ASSERT_EQ(received, 1u) << text;
    ASSERT_EQ(got, text);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
  }
}

}  // namespace
}  // namespace dpa::transport::shm

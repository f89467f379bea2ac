// SPDX-License-Identifier: Apache-2.0
// The public helpers that programs built on libdpa share with it: host:port parsing, merging
// the statistics of an operation's parts, and the order of submissions from several threads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "dpa/error.hpp"
#include "dpa/host_port.hpp"
#include "dpa/submit_order.hpp"
#include "dpa/types.hpp"

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string config_error(std::string_view text, std::uint16_t min_port = 1) {
  try {
    dpa::parse_host_port(text, "DPA_SWITCH=", 4242, min_port);
  } catch (const dpa::ConfigError& error) {
    return error.what();
  }
  return "no error";
}

TEST(HostPort, ParsesHostAndPort) {
  EXPECT_EQ(dpa::parse_host_port("10.0.0.9:5000", "switch", 4242), (dpa::HostPort{"10.0.0.9", 5000}));
  EXPECT_EQ(dpa::parse_host_port("tor-switch", "switch", 4242), (dpa::HostPort{"tor-switch", 4242}));
  EXPECT_EQ(dpa::parse_host_port("h:65535", "switch", 4242), (dpa::HostPort{"h", 65535}));
  EXPECT_EQ(dpa::parse_host_port("10.0.0.1:0", "workers", 0, 0), (dpa::HostPort{"10.0.0.1", 0}));
}

TEST(HostPort, ToStringIsWhatParseReads) {
  const dpa::HostPort address{"127.0.0.1", 40123};
  EXPECT_EQ(address.to_string(), "127.0.0.1:40123");
  EXPECT_EQ(dpa::parse_host_port(address.to_string(), "store", 0), address);
}

TEST(HostPort, RejectsMalformedTextNamingSourceAndRange) {
  EXPECT_EQ(config_error("host:http"),
            "DPA_SWITCH=\"host:http\": expected host or host:port with a port in [1, 65535]");
  for (const char* text : {"host:", ":4242", "", "host:0", "host:65536", "host:-1", "host:+80", "host:80x",
                           "a:b:80", "::1"}) {
    EXPECT_THAT(config_error(text), HasSubstr("expected host or host:port with a port in [1, 65535]")) << text;
    EXPECT_THAT(config_error(text), HasSubstr("\"" + std::string(text) + "\"")) << text;
  }
  EXPECT_THAT(config_error("host:70000", 0), HasSubstr("with a port in [0, 65535]"));
}

TEST(OpStatsMerge, CountsAddAndMinimumIgnoresEmptyParts) {
  dpa::OpStats total;
  dpa::OpStats part;
  part.blocks = 3;
  part.blocks_full = 2;
  part.blocks_partial = 1;
  part.contributed = 3;
  part.retransmissions = 4;
  part.min_contributors = 3;
  part.seconds = 0.5;
  total += part;
  part.min_contributors = 2;
  part.seconds = 0.25;
  total += part;
  total += dpa::OpStats{};  // a part without blocks: min_contributors 0 must not win
  EXPECT_EQ(total.blocks, 6u);
  EXPECT_EQ(total.blocks_full, 4u);
  EXPECT_EQ(total.blocks_partial, 2u);
  EXPECT_EQ(total.contributed, 6u);
  EXPECT_EQ(total.retransmissions, 8u);
  EXPECT_EQ(total.min_contributors, 2u);
  EXPECT_DOUBLE_EQ(total.seconds, 0.5);
}

TEST(OpStatsMerge, ChunkRangesMoveByTheirOffsetAndJoin) {
  dpa::OpStats total;
  dpa::OpStats first;
  first.blocks_missed = 1;
  first.missed = {{90, 100}};
  dpa::OpStats second;  // the chunk from element 100 on
  second.blocks_missed = 2;
  second.missed = {{0, 10}, {50, 60}};
  total.merge(first, 0).merge(second, 100);
  EXPECT_EQ(total.blocks_missed, 3u);
  EXPECT_THAT(total.missed, ElementsAre(dpa::ElementRange{90, 110}, dpa::ElementRange{150, 160}));
}

// Threads that got their tickets in one order and reach wait_turn in the reverse one still
// submit in ticket order.
TEST(SubmitOrder, TurnsFollowTicketsWhateverOrderThreadsArrive) {
  const dpa::SubmitOrder order;
  constexpr int kThreads = 8;
  std::vector<dpa::SubmitOrder::Ticket> tickets;
  for (int i = 0; i < kThreads; ++i) tickets.push_back(order.take_ticket());
  std::vector<int> submitted;  // written only by the turn holder
  std::vector<std::thread> threads;
  for (int i = kThreads - 1; i >= 0; --i) {
    threads.emplace_back([&, i, ticket = std::move(tickets[static_cast<std::size_t>(i)])]() mutable {
      const dpa::SubmitOrder::Turn turn = order.wait_turn(std::move(ticket));
      submitted.push_back(i);
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_THAT(submitted, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
}

TEST(SubmitOrder, DroppedTicketsDoNotHoldLaterTurnsBack) {
  const dpa::SubmitOrder order;
  auto first = order.take_ticket();
  auto second = order.take_ticket();
  auto third = order.take_ticket();
  second = dpa::SubmitOrder::Ticket{};  // given up before its turn
  std::atomic<bool> third_served{false};
  std::thread waiter([&] {
    const auto turn = order.wait_turn(std::move(third));
    third_served = true;
  });
  { const auto turn = order.wait_turn(std::move(first)); }
  waiter.join();
  EXPECT_TRUE(third_served);
  // A plain turn comes after all of them.
  const auto turn = order.wait_turn();
  EXPECT_TRUE(order.holds(turn));
}

TEST(SubmitOrder, RejectsEmptyAndForeignTickets) {
  const dpa::SubmitOrder order;
  const dpa::SubmitOrder other;
  EXPECT_THROW((void)order.wait_turn(dpa::SubmitOrder::Ticket{}), dpa::Error);
  EXPECT_THROW((void)order.wait_turn(other.take_ticket()), dpa::Error);
  // The foreign ticket was dropped, so `other` is not blocked.
  const auto turn = other.wait_turn();
  EXPECT_TRUE(other.holds(turn));
  EXPECT_FALSE(order.holds(turn));
}

}  // namespace

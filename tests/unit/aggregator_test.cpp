// SPDX-License-Identifier: Apache-2.0
// Conformance of the switch's per-slot aggregation state machine (step_slot, reply_header,
// accumulate_be), driven by synthetic packets, and of the SoftwareSwitch that wraps it (over
// real UDP sockets on 127.0.0.1).
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstring>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dpa/switch.hpp"
#include "protocol/byte_order.hpp"
#include "protocol/wire.hpp"
#include "switch/slot.hpp"
#include "transport/send.hpp"
#include "transport/socket/udp_device.hpp"

namespace dpa::sw {

// Readable names in gtest failure messages.
void PrintTo(SlotAction action, std::ostream* os) {
  switch (action) {
    case SlotAction::counted: *os << "counted"; return;
    case SlotAction::duplicate: *os << "duplicate"; return;
    case SlotAction::multicast_result: *os << "multicast_result"; return;
    case SlotAction::unicast_result: *os << "unicast_result"; return;
    case SlotAction::unicast_old: *os << "unicast_old"; return;
    case SlotAction::unicast_syn: *os << "unicast_syn"; return;
    case SlotAction::error_seq_ahead: *os << "error_seq_ahead"; return;
    case SlotAction::multicast_error: *os << "multicast_error"; return;
    case SlotAction::unicast_error: *os << "unicast_error"; return;
    case SlotAction::unicast_mismatch: *os << "unicast_mismatch"; return;
  }
  *os << "SlotAction(" << static_cast<int>(action) << ")";
}

namespace {

using protocol::ErrorCode;
using protocol::Header;
namespace flag = protocol::flag;
using Bytes = std::vector<std::byte>;
using Values = std::vector<std::int32_t>;

constexpr std::uint32_t kSession = 1;
constexpr std::uint32_t kToken = 0x5eed;
constexpr std::uint32_t kOp = 77;
constexpr std::uint32_t kSlot = 12;
constexpr std::uint32_t kOffset = 4096;
constexpr std::uint32_t kT0 = 1'000'000;  // time of the first packet of most rounds (ticks)

constexpr std::uint64_t bit(int rank) { return std::uint64_t{1} << rank; }

// Big-endian bytes of int32 values, written out without the code under test.
Bytes to_be(const Values& values) {
  Bytes bytes;
  for (const std::int32_t v : values) {
    const auto u = static_cast<std::uint32_t>(v);
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<std::byte>(u >> shift));
  }
  return bytes;
}

Values from_be(std::span<const std::byte> bytes) {
  Values values;
  for (std::size_t i = 0; i + 4 <= bytes.size(); i += 4) {
    std::uint32_t u = 0;
    for (std::size_t b = 0; b < 4; ++b) u = (u << 8) | std::to_integer<std::uint32_t>(bytes[i + b]);
    values.push_back(static_cast<std::int32_t>(u));
  }
  return values;
}

struct Packet {
  Header header;
  Bytes payload;
};

// A data packet of rank `rank` for round `seq` of the test slot.
Packet data(int rank, std::uint32_t seq, const Values& values) {
  Packet p;
  p.header.session = kSession;
  p.header.op_id = kOp;
  p.header.slot = kSlot;
  p.header.seq = seq;
  p.header.offset = kOffset;
  p.header.count = static_cast<std::uint16_t>(values.size());
  p.header.rank = static_cast<std::uint8_t>(rank);
  p.payload = to_be(values);
  return p;
}

Packet with_flags(Packet p, std::uint16_t flags) {
  p.header.flags = flags;
  return p;
}

Packet syn(int rank, std::uint32_t seq) {
  Packet p = data(rank, seq, {});
  p.header.flags = flag::kSyn;
  return p;
}

// One slot with its accumulators and the session limits it runs under.
struct SlotUnderTest {
  SlotState state;
  Values values;
  SessionLimits limits;

  SlotUnderTest(int world, int k, std::uint32_t payload, std::uint32_t straggler_timeout_ticks = 1'000'000'000)
      : values(payload, 0) {
    limits.world_size = static_cast<std::uint8_t>(world);
    limits.k = static_cast<std::uint8_t>(k);
    limits.payload = payload;
    limits.straggler_timeout_ticks = straggler_timeout_ticks;
  }

  SlotAction step(const Packet& p, std::uint32_t now = kT0) {
    return step_slot(state, values, p.header, p.payload, bit(p.header.rank), limits, now);
  }

  Header reply(SlotAction action, const Packet& request) const {
    return reply_header(state, action, request.header, kToken);
  }

  // Runs round `seq` to completion with every rank contributing `value` in every position.
  void complete_round(std::uint32_t seq, std::int32_t value = 1) {
    state.seq = seq - 1;
    for (int r = 0; r < limits.world_size; ++r) {
      const SlotAction action = step(data(r, seq, Values(values.size(), value)));
      ASSERT_EQ(action, r + 1 == limits.world_size ? SlotAction::multicast_result : SlotAction::counted);
    }
    ASSERT_TRUE(state.complete);
  }
};

void expect_same_state(const SlotState& actual, const SlotState& expected) {
  EXPECT_EQ(actual.generation, expected.generation);
  EXPECT_EQ(actual.seq, expected.seq);
  EXPECT_EQ(actual.op_id, expected.op_id);
  EXPECT_EQ(actual.offset, expected.offset);
  EXPECT_EQ(actual.bitmap, expected.bitmap);
  EXPECT_EQ(actual.first_arrival, expected.first_arrival);
  EXPECT_EQ(actual.op_length, expected.op_length);
  EXPECT_EQ(actual.k, expected.k);
  EXPECT_EQ(actual.error, expected.error);
  EXPECT_EQ(actual.count, expected.count);
  EXPECT_EQ(actual.flags, expected.flags);
  EXPECT_EQ(actual.contributors, expected.contributors);
  EXPECT_EQ(actual.target, expected.target);
  EXPECT_EQ(actual.exp_used, expected.exp_used);
  EXPECT_EQ(actual.exp_max, expected.exp_max);
  EXPECT_EQ(actual.complete, expected.complete);
}

// A scripted exchange: each step sends one packet at a time and names what must happen.
struct Step {
  const char* what;
  Packet packet;
  std::uint32_t now;
  SlotAction expected;
  int contributors_after;
};

void run_steps(SlotUnderTest& slot, const std::vector<Step>& steps) {
  for (const Step& step : steps) {
    SCOPED_TRACE(step.what);
    EXPECT_EQ(slot.step(step.packet, step.now), step.expected);
    EXPECT_EQ(slot.state.contributors, step.contributors_after);
  }
}

// ---- Starting a round -----------------------------------------------------------------------

TEST(SlotStateMachine, FirstPacketOfNextRoundResetsTheSlotAndStoresItsValues) {
  SlotUnderTest slot(/*world=*/2, /*k=*/2, /*payload=*/4);
  slot.complete_round(4, /*value=*/1000);

  Packet first = data(1, 5, {7, -8, 9, 0x7fffffff});
  first.header.op_id = 91;
  first.header.offset = 8192;
  first.header.count = 3;
  first.header.exp_used = 6;
  first.header.exp_next = -4;
  EXPECT_EQ(slot.step(first, kT0 + 55), SlotAction::counted);

  EXPECT_EQ(slot.state.seq, 5u);
  EXPECT_EQ(slot.state.op_id, 91u);
  EXPECT_EQ(slot.state.offset, 8192u);
  EXPECT_EQ(slot.state.count, 3);
  EXPECT_EQ(slot.state.flags, 0);
  EXPECT_EQ(slot.state.bitmap, bit(1));
  EXPECT_EQ(slot.state.contributors, 1);
  EXPECT_EQ(slot.state.target, 2);
  EXPECT_EQ(slot.state.exp_used, protocol::exp_to_wire(6)) << "exponents are stored biased";
  EXPECT_EQ(slot.state.exp_max, protocol::exp_to_wire(-4));
  EXPECT_EQ(slot.state.first_arrival, kT0 + 55);
  EXPECT_FALSE(slot.state.complete);
  EXPECT_EQ(slot.values, (Values{7, -8, 9, 0x7fffffff})) << "the old round's sums must be overwritten";
}

TEST(SlotStateMachine, FirstUseOfAFreshSlotIsSeqOne) {
  SlotUnderTest slot(2, 2, 2);
  EXPECT_EQ(slot.step(data(0, 1, {3, 4})), SlotAction::counted);
  EXPECT_EQ(slot.state.seq, 1u);
  EXPECT_EQ(slot.values, (Values{3, 4}));
}

TEST(SlotStateMachine, FloatFlagIsStoredButCountToKIsNot) {
  SlotUnderTest slot(4, 2, 2);
  EXPECT_EQ(slot.step(with_flags(data(0, 1, {1, 2}), flag::kFloat | flag::kCountToK)), SlotAction::counted);
  EXPECT_EQ(slot.state.flags, flag::kFloat);
  EXPECT_EQ(slot.state.target, 2);
}

// ---- Summing and completing -----------------------------------------------------------------

TEST(SlotStateMachine, ContributionsAddBigEndianValuesWithInt32WrapAround) {
  SlotUnderTest slot(3, 3, 4);
  constexpr std::int32_t kMax = std::numeric_limits<std::int32_t>::max();
  constexpr std::int32_t kMin = std::numeric_limits<std::int32_t>::min();
  run_steps(slot, {
      {"rank 0 opens the round", data(0, 1, {kMax, -5, 0x01020304, kMin}), kT0, SlotAction::counted, 1},
      {"rank 2 adds", data(2, 1, {1, 7, 0x10000000, -1}), kT0, SlotAction::counted, 2},
  });
  EXPECT_EQ(slot.values, (Values{kMin, 2, 0x11020304, kMax})) << "sums wrap like the switch ALU";
  EXPECT_EQ(slot.state.bitmap, bit(0) | bit(2));
  EXPECT_FALSE(slot.state.complete);
}

TEST(SlotStateMachine, CompletesAtWorldSizeWithContributorsBitmapAndMaxExponent) {
  SlotUnderTest slot(4, 4, 2);
  auto packet = [](int rank, std::int8_t exp_next) {
    Packet p = with_flags(data(rank, 1, {rank + 1, -(rank + 1)}), flag::kFloat);
    p.header.exp_used = 3;
    p.header.exp_next = exp_next;
    return p;
  };
  run_steps(slot, {
      {"rank 2, exp_next 1", packet(2, 1), kT0, SlotAction::counted, 1},
      {"rank 0, exp_next 5", packet(0, 5), kT0 + 1, SlotAction::counted, 2},
      {"rank 3, exp_next -3", packet(3, -3), kT0 + 2, SlotAction::counted, 3},
      {"rank 1, exp_next 2 completes", packet(1, 2), kT0 + 3, SlotAction::multicast_result, 4},
  });
  EXPECT_TRUE(slot.state.complete);
  EXPECT_EQ(slot.values, (Values{10, -10}));

  const Header reply = slot.reply(SlotAction::multicast_result, packet(1, 2));
  EXPECT_EQ(reply.flags, flag::kResult | flag::kFloat);
  EXPECT_EQ(reply.error, ErrorCode::none);
  EXPECT_EQ(reply.session, kSession);
  EXPECT_EQ(reply.op_id, kOp);
  EXPECT_EQ(reply.slot, kSlot);
  EXPECT_EQ(reply.seq, 1u);
  EXPECT_EQ(reply.offset, kOffset);
  EXPECT_EQ(reply.count, 2);
  EXPECT_EQ(reply.rank, 1);
  EXPECT_EQ(reply.k, 4);
  EXPECT_EQ(reply.contributors, 4);
  EXPECT_EQ(reply.bitmap, 0xfu);
  EXPECT_EQ(reply.exp_used, 3);
  EXPECT_EQ(reply.exp_next, 5) << "the result carries the max of every exp_next";
}

TEST(SlotStateMachine, WorldOfOneCompletesOnTheFirstPacket) {
  SlotUnderTest slot(1, 1, 3);
  EXPECT_EQ(slot.step(data(0, 1, {4, 5, 6})), SlotAction::multicast_result);
  EXPECT_TRUE(slot.state.complete);
  EXPECT_EQ(slot.state.contributors, 1);
  EXPECT_EQ(slot.state.bitmap, 1u);
  EXPECT_EQ(slot.values, (Values{4, 5, 6}));
}

TEST(SlotStateMachine, SixtyFourRanksFillTheWholeBitmap) {
  SlotUnderTest slot(64, 64, 3);
  for (int r = 0; r < 64; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(slot.step(data(r, 1, {r, 1, -r})),
              r == 63 ? SlotAction::multicast_result : SlotAction::counted);
  }
  EXPECT_EQ(slot.state.bitmap, ~std::uint64_t{0});
  EXPECT_EQ(slot.state.contributors, 64);
  EXPECT_EQ(slot.values, (Values{2016, 64, -2016}));
  const Header reply = slot.reply(SlotAction::multicast_result, data(63, 1, {}));
  EXPECT_EQ(reply.bitmap, ~std::uint64_t{0});
  EXPECT_EQ(reply.contributors, 64);
}

// ---- Duplicates, retransmissions and late packets -------------------------------------------

TEST(SlotStateMachine, DuplicateOfACountedContributionIsNotAddedTwice) {
  SlotUnderTest slot(3, 3, 2);
  run_steps(slot, {
      {"rank 0", data(0, 1, {5, 6}), kT0, SlotAction::counted, 1},
      {"rank 0 again", data(0, 1, {5, 6}), kT0 + 10, SlotAction::duplicate, 1},
      {"rank 1", data(1, 1, {1, 1}), kT0 + 20, SlotAction::counted, 2},
      {"rank 1 again", data(1, 1, {1, 1}), kT0 + 30, SlotAction::duplicate, 2},
  });
  EXPECT_EQ(slot.values, (Values{6, 7}));
  EXPECT_EQ(slot.state.bitmap, bit(0) | bit(1));
}

TEST(SlotStateMachine, RetransmissionAfterCompletionGetsAUnicastCopyOfTheResult) {
  SlotUnderTest slot(2, 2, 2);
  run_steps(slot, {
      {"rank 0", data(0, 1, {1, 2}), kT0, SlotAction::counted, 1},
      {"rank 1 completes", data(1, 1, {10, 20}), kT0, SlotAction::multicast_result, 2},
      {"rank 0 retransmits", data(0, 1, {1, 2}), kT0 + 100, SlotAction::unicast_result, 2},
  });
  EXPECT_EQ(slot.values, (Values{11, 22}));
  const Header reply = slot.reply(SlotAction::unicast_result, data(0, 1, {1, 2}));
  EXPECT_EQ(reply.flags, flag::kResult | flag::kRetransmit);
  EXPECT_EQ(reply.rank, 0);
  EXPECT_EQ(reply.count, 2);
  EXPECT_EQ(reply.contributors, 2);
  EXPECT_EQ(reply.bitmap, 3u);
}

TEST(SlotStateMachine, LateContributionAfterCompletionGetsTheResultAndIsNotAdded) {
  SlotUnderTest slot(3, 2, 2);
  run_steps(slot, {
      {"rank 0 asks for the first 2", with_flags(data(0, 1, {1, 1}), flag::kCountToK), kT0, SlotAction::counted, 1},
      {"rank 1 completes at K", data(1, 1, {2, 2}), kT0, SlotAction::multicast_result, 2},
      {"rank 2 is late", data(2, 1, {100, 100}), kT0, SlotAction::unicast_result, 2},
  });
  EXPECT_EQ(slot.values, (Values{3, 3}));
  EXPECT_EQ(slot.state.bitmap, bit(0) | bit(1)) << "the late rank must not enter the bitmap";
}

// ---- Rounds that are behind or ahead --------------------------------------------------------

TEST(SlotStateMachine, PacketBehindACompleteRoundGetsOldWithComplete) {
  SlotUnderTest slot(2, 2, 2);
  slot.complete_round(5);
  const SlotState before = slot.state;
  const Values values_before = slot.values;

  for (const std::uint32_t seq : {4u, 1u, 5u - 1000u}) {
    SCOPED_TRACE(seq);
    const Packet old = data(1, seq, {9, 9});
    EXPECT_EQ(slot.step(old), SlotAction::unicast_old);
    const Header reply = slot.reply(SlotAction::unicast_old, old);
    EXPECT_EQ(reply.flags, flag::kOld | flag::kComplete);
    EXPECT_EQ(reply.seq, 5u) << "the reply tells where the slot is";
    EXPECT_EQ(reply.count, 0);
  }
  expect_same_state(slot.state, before);
  EXPECT_EQ(slot.values, values_before);
}

TEST(SlotStateMachine, PacketBehindAnOpenRoundGetsOldWithoutComplete) {
  SlotUnderTest slot(2, 2, 2);
  slot.state.seq = 4;
  ASSERT_EQ(slot.step(data(0, 5, {1, 1})), SlotAction::counted);
  const Packet old = data(1, 4, {9, 9});
  EXPECT_EQ(slot.step(old), SlotAction::unicast_old);
  const Header reply = slot.reply(SlotAction::unicast_old, old);
  EXPECT_EQ(reply.flags, flag::kOld);
  EXPECT_EQ(reply.seq, 5u);
  EXPECT_EQ(slot.state.contributors, 1);
  EXPECT_EQ(slot.values, (Values{1, 1}));
}

TEST(SlotStateMachine, RoundTwoOrMoreAheadIsAnError) {
  SlotUnderTest slot(2, 2, 2);
  slot.complete_round(5);
  const SlotState before = slot.state;
  for (const std::uint32_t seq : {7u, 8u, 5u + 0x7fffffffu}) {
    SCOPED_TRACE(seq);
    const Packet ahead = data(0, seq, {1, 1});
    EXPECT_EQ(slot.step(ahead), SlotAction::error_seq_ahead);
    const Header reply = slot.reply(SlotAction::error_seq_ahead, ahead);
    EXPECT_EQ(reply.flags, flag::kError);
    EXPECT_EQ(reply.error, ErrorCode::seq_ahead);
    EXPECT_EQ(reply.seq, seq) << "an error echoes the request";
    EXPECT_EQ(reply.offset, 5u) << "offset carries the slot's round";
  }
  expect_same_state(slot.state, before);
}

TEST(SlotStateMachine, SequenceNumbersWrapAround) {
  SlotUnderTest slot(2, 2, 1);
  slot.complete_round(0xffffffffu);
  ASSERT_EQ(slot.state.seq, 0xffffffffu);

  EXPECT_EQ(slot.step(data(0, 0xfffffffeu, {1})), SlotAction::unicast_old);
  EXPECT_EQ(slot.step(data(0, 1, {1})), SlotAction::error_seq_ahead);
  run_steps(slot, {
      {"seq 0 follows 0xffffffff", data(0, 0, {5}), kT0, SlotAction::counted, 1},
      {"rank 1 completes round 0", data(1, 0, {6}), kT0, SlotAction::multicast_result, 2},
  });
  EXPECT_EQ(slot.state.seq, 0u);
  EXPECT_EQ(slot.values, (Values{11}));
  EXPECT_EQ(slot.step(data(0, 0xffffffffu, {1})), SlotAction::unicast_old);
  EXPECT_EQ(slot.step(data(0, 1, {1})), SlotAction::counted);
}

// ---- Mismatches -----------------------------------------------------------------------------

TEST(SlotStateMachine, DifferentOperationOnTheSameRoundPoisonsTheRound) {
  SlotUnderTest slot(3, 3, 2);
  ASSERT_EQ(slot.step(data(0, 1, {1, 1})), SlotAction::counted);

  Packet other = data(1, 1, {5, 5});
  other.header.op_id = kOp + 1;
  EXPECT_EQ(slot.step(other), SlotAction::multicast_error);
  EXPECT_EQ(slot.state.error, ErrorCode::op_mismatch);
  EXPECT_EQ(slot.state.contributors, 1) << "the offender is not added";
  EXPECT_EQ(slot.values, (Values{1, 1}));

  // Every rank learns it under the round's op_id; offset has the round's value, bitmap the
  // offender's, rank the offender.
  const Header reply = slot.reply(SlotAction::multicast_error, other);
  EXPECT_EQ(reply.flags, flag::kError);
  EXPECT_EQ(reply.error, ErrorCode::op_mismatch);
  EXPECT_EQ(reply.token, kToken);
  EXPECT_EQ(reply.op_id, kOp);
  EXPECT_EQ(reply.offset, kOp);
  EXPECT_EQ(reply.bitmap, kOp + 1);
  EXPECT_EQ(reply.rank, 1);
  EXPECT_EQ(reply.count, 0);
  EXPECT_EQ(reply.contributors, 0);
  // The sender itself gets the error under its own op_id.
  EXPECT_EQ(slot.reply(SlotAction::unicast_error, other).op_id, kOp + 1);

  // Later packets of the round, matching or not, probes included, get the same error; the
  // round never completes.
  EXPECT_EQ(slot.step(data(2, 1, {1, 1})), SlotAction::unicast_error);
  EXPECT_EQ(slot.step(syn(0, 1)), SlotAction::unicast_error);
  const Header again = slot.reply(SlotAction::unicast_error, data(2, 1, {1, 1}));
  EXPECT_EQ(again.error, ErrorCode::op_mismatch);
  EXPECT_EQ(again.rank, 1) << "still names the offender";
  EXPECT_FALSE(slot.state.complete);
  // The next round opens normally.
  EXPECT_EQ(slot.step(data(0, 2, {1, 1})), SlotAction::counted);
  EXPECT_EQ(slot.state.error, ErrorCode::none);
}

TEST(SlotStateMachine, MismatchAfterCompletionErrsWithoutPoisoningTheStoredResult) {
  SlotUnderTest slot(2, 2, 2);
  ASSERT_EQ(slot.step(data(0, 1, {1, 2})), SlotAction::counted);
  ASSERT_EQ(slot.step(data(1, 1, {10, 20})), SlotAction::multicast_result);

  // A member's packet of another operation, type or length after completion: the sender gets
  // its error, under its own op_id and naming itself.
  Packet other_op = data(0, 1, {1, 1});
  other_op.header.op_id = kOp + 5;
  EXPECT_EQ(slot.step(other_op), SlotAction::unicast_mismatch);
  const Header reply = slot.reply(SlotAction::unicast_mismatch, other_op);
  EXPECT_EQ(reply.flags, flag::kError);
  EXPECT_EQ(reply.error, ErrorCode::op_mismatch);
  EXPECT_EQ(reply.op_id, kOp + 5);
  EXPECT_EQ(reply.seq, 1u);
  EXPECT_EQ(reply.offset, kOp) << "the round's value";
  EXPECT_EQ(reply.bitmap, kOp + 5) << "the sender's value";
  EXPECT_EQ(reply.rank, 0);
  EXPECT_EQ(reply.token, kToken);

  EXPECT_EQ(slot.step(with_flags(data(1, 1, {1, 1}), flag::kFloat)), SlotAction::unicast_mismatch);
  Packet other_length = data(1, 1, {1, 1});
  other_length.header.op_length = 999;
  EXPECT_EQ(slot.step(other_length), SlotAction::unicast_mismatch);
  EXPECT_EQ(slot.reply(SlotAction::unicast_mismatch, other_length).error, ErrorCode::length_mismatch);

  // The round is still complete with its result: retransmissions and probes get the copy.
  EXPECT_EQ(slot.state.error, ErrorCode::none);
  EXPECT_TRUE(slot.state.complete);
  EXPECT_EQ(slot.values, (Values{11, 22}));
  EXPECT_EQ(slot.step(data(0, 1, {1, 2})), SlotAction::unicast_result);
  EXPECT_EQ(slot.step(syn(1, 1)), SlotAction::unicast_result);
  EXPECT_EQ(slot.state.bitmap, bit(0) | bit(1));
}

TEST(SlotStateMachine, FloatAndInt32OnTheSameRoundPoisonsTheRound) {
  {
    SlotUnderTest slot(3, 3, 2);
    ASSERT_EQ(slot.step(with_flags(data(0, 1, {1, 1}), flag::kFloat)), SlotAction::counted);
    const Packet int_packet = data(1, 1, {5, 5});
    EXPECT_EQ(slot.step(int_packet), SlotAction::multicast_error);
    EXPECT_EQ(slot.state.contributors, 1);
    EXPECT_EQ(slot.values, (Values{1, 1}));
    const Header reply = slot.reply(SlotAction::multicast_error, int_packet);
    EXPECT_EQ(reply.flags, flag::kError);
    EXPECT_EQ(reply.error, ErrorCode::dtype_mismatch);
    EXPECT_EQ(reply.offset, flag::kFloat) << "offset carries the round's data-type flag";
    EXPECT_EQ(reply.bitmap, 0u) << "bitmap carries the offender's";
  }
  {
    SlotUnderTest slot(3, 3, 2);
    ASSERT_EQ(slot.step(data(0, 1, {1, 1})), SlotAction::counted);
    const Packet float_packet = with_flags(data(1, 1, {5, 5}), flag::kFloat);
    EXPECT_EQ(slot.step(float_packet), SlotAction::multicast_error);
    const Header reply = slot.reply(SlotAction::multicast_error, float_packet);
    EXPECT_EQ(reply.flags, flag::kError | flag::kFloat);
    EXPECT_EQ(reply.offset, 0u);
    EXPECT_EQ(reply.bitmap, flag::kFloat);
  }
}

TEST(SlotStateMachine, DifferentElementCountOnTheSameRoundPoisonsTheRound) {
  SlotUnderTest slot(2, 2, 4);
  Packet mine = data(0, 1, {1, 2, 3, 4});
  mine.header.op_length = 1000;
  ASSERT_EQ(slot.step(mine), SlotAction::counted);
  EXPECT_EQ(slot.state.op_length, 1000u);
  Packet theirs = data(1, 1, {1, 2, 3, 4});
  theirs.header.op_length = 1001;
  EXPECT_EQ(slot.step(theirs), SlotAction::multicast_error);
  const Header reply = slot.reply(SlotAction::multicast_error, theirs);
  EXPECT_EQ(reply.error, ErrorCode::length_mismatch);
  EXPECT_EQ(reply.offset, 1000u);
  EXPECT_EQ(reply.bitmap, 1001u);
  EXPECT_EQ(reply.rank, 1);
  EXPECT_EQ(reply.op_id, kOp) << "the same operation on both ranks: one multicast reaches both";
  EXPECT_FALSE(slot.state.complete) << "no result for a round the ranks disagree on";
}

// ---- Fastest-K ------------------------------------------------------------------------------

TEST(SlotStateMachine, CountToKOnTheFirstPacketCompletesAtK) {
  SlotUnderTest slot(4, 2, 1);
  run_steps(slot, {
      {"rank 3 asks for K", with_flags(data(3, 1, {1}), flag::kCountToK), kT0, SlotAction::counted, 1},
      {"rank 1 completes at K = 2", data(1, 1, {2}), kT0, SlotAction::multicast_result, 2},
  });
  EXPECT_EQ(slot.state.target, 2);
  EXPECT_EQ(slot.values, (Values{3}));
  const Header reply = slot.reply(SlotAction::multicast_result, data(1, 1, {}));
  EXPECT_EQ(reply.k, 2);
  EXPECT_EQ(reply.contributors, 2);
  EXPECT_EQ(reply.bitmap, bit(1) | bit(3));
}

TEST(SlotStateMachine, CountToKWithKOfOneCompletesOnTheFirstPacket) {
  SlotUnderTest slot(4, 1, 1);
  EXPECT_EQ(slot.step(with_flags(data(2, 1, {9}), flag::kCountToK)), SlotAction::multicast_result);
  EXPECT_EQ(slot.state.contributors, 1);
}

TEST(SlotStateMachine, CountToKOnALaterPacketDoesNotChangeTheTarget) {
  SlotUnderTest slot(3, 2, 1);
  run_steps(slot, {
      {"rank 0 without COUNT_TO_K", data(0, 1, {1}), kT0, SlotAction::counted, 1},
      {"rank 1 with COUNT_TO_K", with_flags(data(1, 1, {1}), flag::kCountToK), kT0, SlotAction::counted, 2},
      {"rank 2 completes at N", data(2, 1, {1}), kT0, SlotAction::multicast_result, 3},
  });
}

constexpr std::uint32_t kStragglerTimeout = 1000;  // ticks

TEST(SlotStateMachine, ReactiveFastestKCompletesOnARetransmissionAfterTheTimeout) {
  SlotUnderTest slot(4, 2, 1, kStragglerTimeout);
  run_steps(slot, {
      {"rank 0 opens", data(0, 1, {1}), kT0, SlotAction::counted, 1},
      {"rank 1 adds (K reached, no timeout yet)", data(1, 1, {2}), kT0 + 100, SlotAction::counted, 2},
      {"rank 0 retransmits before the timeout", data(0, 1, {1}), kT0 + 500, SlotAction::duplicate, 2},
      {"rank 0 retransmits exactly at the timeout", data(0, 1, {1}), kT0 + kStragglerTimeout, SlotAction::duplicate, 2},
      {"rank 1 retransmits after the timeout: complete with 2 of 4", data(1, 1, {2}), kT0 + kStragglerTimeout + 1,
       SlotAction::multicast_result, 2},
      {"rank 2 arrives late", data(2, 1, {100}), kT0 + 5000, SlotAction::unicast_result, 2},
  });
  EXPECT_TRUE(slot.state.complete);
  EXPECT_EQ(slot.values, (Values{3}));
  EXPECT_EQ(slot.state.bitmap, bit(0) | bit(1));
  const Header reply = slot.reply(SlotAction::multicast_result, data(1, 1, {}));
  EXPECT_EQ(reply.contributors, 2);
  EXPECT_EQ(reply.bitmap, 3u);
}

TEST(SlotStateMachine, ReactiveFastestKNeverCompletesWithFewerThanK) {
  SlotUnderTest slot(4, 2, 1, kStragglerTimeout);
  run_steps(slot, {
      {"rank 0 opens", data(0, 1, {1}), kT0, SlotAction::counted, 1},
      {"rank 0 retransmits long after the timeout", data(0, 1, {1}), kT0 + 100 * kStragglerTimeout,
       SlotAction::duplicate, 1},
  });
  EXPECT_FALSE(slot.state.complete);
}

TEST(SlotStateMachine, ReactiveFastestKCompletesOnANewContributionAfterTheTimeout) {
  SlotUnderTest slot(4, 2, 1, kStragglerTimeout);
  run_steps(slot, {
      {"rank 0 opens", data(0, 1, {1}), kT0, SlotAction::counted, 1},
      {"rank 3 after the timeout makes K = 2", data(3, 1, {4}), kT0 + 2 * kStragglerTimeout,
       SlotAction::multicast_result, 2},
  });
  EXPECT_EQ(slot.values, (Values{5}));
}

TEST(SlotStateMachine, ReactiveFastestKNewContributionAfterTheTimeoutBelowKStaysOpen) {
  SlotUnderTest slot(4, 3, 1, kStragglerTimeout);
  run_steps(slot, {
      {"rank 0 opens", data(0, 1, {1}), kT0, SlotAction::counted, 1},
      {"rank 1 after the timeout (2 < K = 3)", data(1, 1, {1}), kT0 + 2 * kStragglerTimeout, SlotAction::counted, 2},
      {"rank 2 after the timeout reaches K", data(2, 1, {1}), kT0 + 3 * kStragglerTimeout,
       SlotAction::multicast_result, 3},
  });
}

TEST(SlotStateMachine, ReactiveFastestKCompletesOnAProbeFromACountedRank) {
  // The live path: counted ranks retransmit header-only probes, which drive the completion
  // and get the values in the multicast.
  SlotUnderTest slot(4, 2, 1, kStragglerTimeout);
  run_steps(slot, {
      {"rank 0 opens", data(0, 1, {5}), kT0, SlotAction::counted, 1},
      {"rank 2 adds", data(2, 1, {7}), kT0 + 10, SlotAction::counted, 2},
      {"rank 0 probes before the timeout", syn(0, 1), kT0 + kStragglerTimeout, SlotAction::unicast_syn, 2},
      {"rank 3 (not counted) probes after it", syn(3, 1), kT0 + kStragglerTimeout + 1, SlotAction::unicast_syn, 2},
      {"rank 2 probes after it: complete", syn(2, 1), kT0 + kStragglerTimeout + 1,
       SlotAction::multicast_result, 2},
  });
  const Header result = slot.reply(SlotAction::multicast_result, syn(2, 1));
  EXPECT_EQ(result.flags, flag::kResult) << "a multicast result, not a probe reply";
  EXPECT_EQ(result.contributors, 2);
  EXPECT_EQ(result.bitmap, bit(0) | bit(2));
  EXPECT_EQ(result.k, 4) << "reactive completion keeps the target N";
  EXPECT_EQ(slot.values, (Values{12}));
}

TEST(SlotStateMachine, ReactiveCompletionUsesTheKOfThePacketThatOpenedTheRound) {
  // Rank 0 opens with k = 3; rank 1 asks for k = 1 and rank 2 for 2: the round's K stays 3.
  SlotUnderTest slot(4, /*session k=*/4, 1, kStragglerTimeout);
  Packet open = data(0, 1, {1});
  open.header.k = 3;
  Packet low = data(1, 1, {1});
  low.header.k = 1;
  Packet mid = data(2, 1, {1});
  mid.header.k = 2;
  run_steps(slot, {
      {"rank 0 opens with k 3", open, kT0, SlotAction::counted, 1},
      {"rank 1 with k 1, after the timeout: 2 < 3", low, kT0 + 2 * kStragglerTimeout, SlotAction::counted, 2},
      {"rank 1's retransmission with k 1 does not complete", low, kT0 + 3 * kStragglerTimeout,
       SlotAction::duplicate, 2},
      {"rank 2 with k 2 reaches the opener's 3", mid, kT0 + 3 * kStragglerTimeout,
       SlotAction::multicast_result, 3},
  });
  EXPECT_EQ(slot.state.k, 3);
}

TEST(SlotStateMachine, KZeroInTheOpenerMeansTheSessionDefault) {
  SlotUnderTest slot(4, /*session k=*/2, 1, kStragglerTimeout);
  ASSERT_EQ(slot.step(with_flags(data(0, 1, {1}), flag::kCountToK)), SlotAction::counted);
  EXPECT_EQ(slot.state.k, 2);
  EXPECT_EQ(slot.state.target, 2);
}

TEST(SlotStateMachine, StragglerTimerComparesTicksAcrossTheirWrapAround) {
  SlotUnderTest slot(3, 2, 1, kStragglerTimeout);
  const std::uint32_t open = 0xffffff00u;  // 256 ticks before the 32-bit counter wraps
  run_steps(slot, {
      {"rank 0 opens just before the wrap", data(0, 1, {1}), open, SlotAction::counted, 1},
      {"rank 1 after the wrap, within the timeout", data(1, 1, {1}), open + kStragglerTimeout,
       SlotAction::counted, 2},
      {"rank 1 retransmits one tick past the timeout: complete", data(1, 1, {1}),
       open + kStragglerTimeout + 1, SlotAction::multicast_result, 2},
  });
  EXPECT_LT(open + kStragglerTimeout + 1, open) << "the test must cross the wrap-around";
}

TEST(SlotStateMachine, LateContributionNeverChangesTheFrozenBitmap) {
  SlotUnderTest slot(4, 2, 1, kStragglerTimeout);
  run_steps(slot, {
      {"rank 0", data(0, 1, {1}), kT0, SlotAction::counted, 1},
      {"rank 1", data(1, 1, {2}), kT0, SlotAction::counted, 2},
      {"rank 1 probes after the timeout: complete", syn(1, 1), kT0 + kStragglerTimeout + 1,
       SlotAction::multicast_result, 2},
      {"rank 3 late", data(3, 1, {100}), kT0 + kStragglerTimeout + 2, SlotAction::unicast_result, 2},
      {"rank 3 probes", syn(3, 1), kT0 + kStragglerTimeout + 3, SlotAction::unicast_result, 2},
      {"rank 2 late", data(2, 1, {100}), kT0 + kStragglerTimeout + 4, SlotAction::unicast_result, 2},
  });
  EXPECT_EQ(slot.state.bitmap, bit(0) | bit(1));
  EXPECT_EQ(slot.values, (Values{3}));
  for (const Packet& late : {data(3, 1, {100}), syn(3, 1), data(2, 2, {})}) {
    const SlotAction action = late.header.seq == 1 ? SlotAction::unicast_result : SlotAction::unicast_old;
    EXPECT_EQ(slot.reply(action, late).bitmap, bit(0) | bit(1));
    EXPECT_EQ(slot.reply(action, late).contributors, 2);
  }
}

TEST(SlotStateMachine, AFreshSlotIsAllZeroAndRepliesWithZeroFields) {
  const SlotState fresh{};
  const auto* bytes = reinterpret_cast<const unsigned char*>(&fresh);
  SlotState zeroed;
  std::memset(static_cast<void*>(&zeroed), 0, sizeof zeroed);
  EXPECT_EQ(std::memcmp(bytes, &zeroed, sizeof zeroed), 0)
      << "a control plane that clears every register must leave a fresh slot";
  EXPECT_EQ(protocol::exp_from_wire(fresh.exp_used), protocol::kExpZero);

  SlotUnderTest slot(2, 2, 1);
  for (const Packet& probe : {syn(0, 1), syn(0, 0), syn(1, 7)}) {
    EXPECT_EQ(slot.step(probe), SlotAction::unicast_syn);
    const Header reply = slot.reply(SlotAction::unicast_syn, probe);
    EXPECT_EQ(reply.flags, flag::kSyn);
    EXPECT_EQ(reply.token, kToken);
    EXPECT_EQ(reply.op_id, 0u);
    EXPECT_EQ(reply.seq, 0u);
    EXPECT_EQ(reply.offset, 0u);
    EXPECT_EQ(reply.op_length, 0u);
    EXPECT_EQ(reply.count, 0);
    EXPECT_EQ(reply.k, 0);
    EXPECT_EQ(reply.contributors, 0);
    EXPECT_EQ(reply.exp_used, protocol::kExpZero);
    EXPECT_EQ(reply.exp_next, protocol::kExpZero);
    EXPECT_EQ(reply.bitmap, 0u);
  }
}

// ---- SYN probes -----------------------------------------------------------------------------

TEST(SlotStateMachine, SynProbeOnACompleteRoundGetsTheResultWithoutChangingState) {
  SlotUnderTest slot(2, 2, 2);
  slot.complete_round(3, /*value=*/4);
  const SlotState before = slot.state;

  const Packet probe = syn(1, 3);
  EXPECT_EQ(slot.step(probe, kT0 + 99), SlotAction::unicast_result);
  expect_same_state(slot.state, before);
  EXPECT_EQ(slot.values, (Values{8, 8}));
  const Header reply = slot.reply(SlotAction::unicast_result, probe);
  EXPECT_EQ(reply.flags, flag::kResult | flag::kRetransmit | flag::kSyn);
  EXPECT_EQ(reply.count, 2);
  EXPECT_EQ(reply.seq, 3u);
}

TEST(SlotStateMachine, SynProbeOnAnotherRoundOfACompleteSlotGetsSynWithComplete) {
  SlotUnderTest slot(2, 2, 2);
  slot.complete_round(3);
  const Packet probe = syn(1, 2);
  EXPECT_EQ(slot.step(probe), SlotAction::unicast_syn);
  const Header reply = slot.reply(SlotAction::unicast_syn, probe);
  EXPECT_EQ(reply.flags, flag::kSyn | flag::kComplete);
  EXPECT_EQ(reply.seq, 3u);
  EXPECT_EQ(reply.count, 0);
}

TEST(SlotStateMachine, SynProbeOnAnOpenRoundGetsSynWithoutChangingState) {
  SlotUnderTest slot(3, 3, 2);
  ASSERT_EQ(slot.step(data(0, 1, {1, 2})), SlotAction::counted);
  const SlotState before = slot.state;

  for (const std::uint32_t seq : {1u, 2u, 0u}) {
    SCOPED_TRACE(seq);
    const Packet probe = syn(2, seq);
    EXPECT_EQ(slot.step(probe, kT0 + 2'000'000'000), SlotAction::unicast_syn);
    const Header reply = slot.reply(SlotAction::unicast_syn, probe);
    EXPECT_EQ(reply.flags, flag::kSyn);
    EXPECT_EQ(reply.seq, 1u);
    EXPECT_EQ(reply.contributors, 1);
    EXPECT_EQ(reply.bitmap, bit(0));
  }
  expect_same_state(slot.state, before);
  EXPECT_EQ(slot.values, (Values{1, 2}));
}

// ---- accumulate_be --------------------------------------------------------------------------

TEST(AccumulateBe, OverwriteAndAddMatchAReferenceForEveryTailLength) {
  std::mt19937 rng(12345);
  for (std::size_t n = 0; n <= 17; ++n) {
    for (const std::size_t misalign : {std::size_t{0}, std::size_t{1}, std::size_t{40}}) {
      SCOPED_TRACE("n " + std::to_string(n) + ", input offset " + std::to_string(misalign));
      Values input(n);
      for (std::int32_t& v : input) v = static_cast<std::int32_t>(rng());
      if (n > 0) input[0] = std::numeric_limits<std::int32_t>::max();
      Bytes storage(misalign, std::byte{0xee});
      const Bytes be = to_be(input);
      storage.insert(storage.end(), be.begin(), be.end());

      constexpr std::int32_t kSentinel = 0x5a5a5a5a;
      Values acc(n + 1, kSentinel);
      for (std::size_t i = 0; i < n; ++i) acc[i] = static_cast<std::int32_t>(rng());
      if (n > 0) acc[0] = 1;  // INT32_MAX + 1 wraps
      const Values start = acc;

      accumulate_be(std::span(acc.data(), n), storage.data() + misalign, /*overwrite=*/false);
      for (std::size_t i = 0; i < n; ++i) {
        const auto expected = static_cast<std::int32_t>(static_cast<std::uint32_t>(start[i]) +
                                                        static_cast<std::uint32_t>(input[i]));
        EXPECT_EQ(acc[i], expected) << "add, index " << i;
      }
      EXPECT_EQ(acc[n], kSentinel) << "add wrote past the end";

      accumulate_be(std::span(acc.data(), n), storage.data() + misalign, /*overwrite=*/true);
      for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(acc[i], input[i]) << "overwrite, index " << i;
      EXPECT_EQ(acc[n], kSentinel) << "overwrite wrote past the end";
    }
  }
}

// ---- The software switch over UDP -----------------------------------------------------------

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using transport::Endpoint;
constexpr std::uint32_t kLoopback = 0x7f000001;
constexpr auto kReplyTimeout = 2s;

struct Reply {
  Header header;
  Bytes payload;
  Endpoint from;
};

// A worker socket on 127.0.0.1 that sends raw datagrams and collects decoded replies.
class RawClient {
 public:
  RawClient() {
    UdpTransportConfig options;
    options.bind_host = "127.0.0.1";
    options.batch = 16;
    options.socket_buffer_bytes = 1 << 20;
    io_ = transport::socket::open_udp_queue(options);
  }

  [[nodiscard]] std::uint16_t port() const { return io_->local_endpoint().port; }

  void send(const Bytes& datagram, const Endpoint& to) {
    ASSERT_TRUE(transport::send_datagram(*io_, datagram, to));
  }

  // The next reply, waiting at most kReplyTimeout. Replies that do not decode are test failures.
  std::optional<Reply> receive() { return receive_within(kReplyTimeout); }

  std::optional<Reply> receive_within(std::chrono::milliseconds wait) {
    const auto deadline = Clock::now() + wait;
    std::vector<transport::RxPacket> batch(16);
    while (pending_.empty() && Clock::now() < deadline) {
      const std::size_t n = io_->receive(batch, 50ms);
      for (std::size_t i = 0; i < n; ++i) {
        Reply reply;
        std::span<const std::byte> payload;
        const auto status = protocol::decode(batch[i].data, reply.header, payload);
        EXPECT_EQ(status, protocol::DecodeStatus::ok) << "switch sent an undecodable datagram";
        if (status != protocol::DecodeStatus::ok) continue;
        reply.payload.assign(payload.begin(), payload.end());
        reply.from = batch[i].from;
        pending_.push_back(std::move(reply));
      }
    }
    if (pending_.empty()) return std::nullopt;
    Reply reply = std::move(pending_.front());
    pending_.pop_front();
    return reply;
  }

 private:
  std::unique_ptr<transport::Queue> io_;
  std::deque<Reply> pending_;
};

Bytes encode_packet(const Header& header, const Bytes& payload = {}) {
  Bytes datagram(protocol::kHeaderSize);
  protocol::encode(header, datagram.data());
  datagram.insert(datagram.end(), payload.begin(), payload.end());
  return datagram;
}

// Polls until `ready` holds, for at most two seconds (counters are published once per batch).
template <class Predicate>
bool eventually(Predicate ready) {
  const auto deadline = Clock::now() + kReplyTimeout;
  while (!ready()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

class SoftwareSwitchTest : public ::testing::Test {
 protected:
  static constexpr std::uint32_t kOpen = 1;        // world 2, any sender
  static constexpr std::uint32_t kRestricted = 2;  // world 2, only 127.0.0.2
  static constexpr std::uint32_t kUnknown = 99;
  static constexpr std::uint32_t kPayload = 4;
  static constexpr std::uint32_t kPoolSize = 64;

  static SwitchConfig make_config() {
    SwitchConfig config;
    std::get<UdpTransportConfig>(config.transport).bind_port = 0;
    config.threads = 1;
    std::get<UdpTransportConfig>(config.transport).socket_buffer_bytes = 1 << 20;
    SessionConfig open;
    open.id = kOpen;
    open.world_size = 2;
    open.payload = kPayload;
    open.pool_size = kPoolSize;
    SessionConfig restricted = open;
    restricted.id = kRestricted;
    restricted.workers = {{"127.0.0.2", 0}};
    config.sessions = {open, restricted};
    return config;
  }

  SoftwareSwitchTest() : switch_(make_config()), switch_endpoint_{kLoopback, switch_.port()} {}

  // Session `id`'s counters as the switch reports them (session_status).
  [[nodiscard]] SessionCounters session_counters(std::uint32_t id) const {
    for (const SessionStatus& session : switch_.session_status()) {
      if (session.config.id == id) return session.counters;
    }
    ADD_FAILURE() << "no session " << id;
    return {};
  }

  // A JOIN of a 1-thread rank whose thread 0 is `client`.
  static Bytes join(std::uint32_t session, int rank, const RawClient& client, std::uint32_t window = 4) {
    protocol::JoinRequest request;
    request.nonce = 0x1000u + static_cast<std::uint32_t>(rank);
    request.world_size = 2;
    request.threads = 1;
    request.window = window;
    request.payload = kPayload;
    request.ports[0] = client.port();
    Header h;
    h.flags = flag::kJoin;
    h.session = session;
    h.rank = static_cast<std::uint8_t>(rank);
    h.count = static_cast<std::uint16_t>(request.words());
    Bytes payload(request.words() * 4);
    protocol::encode(request, payload.data());
    return encode_packet(h, payload);
  }

  static Bytes data_packet(std::uint32_t session, int rank, std::uint32_t slot, std::uint32_t seq,
                           const Values& values, std::uint32_t token = 0) {
    Header h;
    h.session = session;
    h.token = token;
    h.op_id = 1;
    h.slot = slot;
    h.seq = seq;
    h.count = static_cast<std::uint16_t>(values.size());
    h.rank = static_cast<std::uint8_t>(rank);
    return encode_packet(h, to_be(values));
  }

  static void expect_error(const std::optional<Reply>& reply, ErrorCode code, std::uint16_t kind_flags) {
    ASSERT_TRUE(reply.has_value()) << "no reply within " << kReplyTimeout.count() << " s";
    EXPECT_EQ(reply->header.flags, flag::kError | kind_flags);
    EXPECT_EQ(reply->header.error, code) << protocol::to_string(reply->header.error);
  }

  SoftwareSwitch switch_;
  Endpoint switch_endpoint_;
};

TEST_F(SoftwareSwitchTest, MalformedAndUnknownSessionPacketsAreDroppedAndCounted) {
  RawClient client;
  client.send(Bytes(7, std::byte{0x42}), switch_endpoint_);                  // garbage
  client.send(Bytes(protocol::kHeaderSize - 1, std::byte{0}), switch_endpoint_);  // short
  Bytes bad_version = data_packet(kOpen, 0, 0, 1, {1, 2, 3, 4});
  bad_version[0] = std::byte{1};  // protocol 1
  client.send(bad_version, switch_endpoint_);
  Bytes switch_only_flag = data_packet(kOpen, 0, 0, 1, {1, 2, 3, 4});
  switch_only_flag[3] = std::byte{flag::kResult};  // workers never send RESULT
  client.send(switch_only_flag, switch_endpoint_);
  client.send(data_packet(kUnknown, 0, 0, 1, {1, 2, 3, 4}), switch_endpoint_);

  // None of those gets a reply; a JOIN for an unknown session does, and arrives first.
  client.send(join(kUnknown, 0, client), switch_endpoint_);
  const std::optional<Reply> reply = client.receive();
  ASSERT_NO_FATAL_FAILURE(expect_error(reply, ErrorCode::unknown_session, flag::kJoin));
  EXPECT_EQ(reply->header.session, kUnknown);

  EXPECT_TRUE(eventually([&] { return switch_.counters().rx_packets >= 6; }));
  const SwitchCounters counters = switch_.counters();
  EXPECT_EQ(counters.rx_packets, 6u);
  EXPECT_EQ(counters.dropped_malformed, 4u);
  EXPECT_EQ(counters.dropped_unknown_session, 2u);
  EXPECT_EQ(counters.errors_sent, 1u);
  EXPECT_EQ(counters.tx_packets, 1u);
}

TEST_F(SoftwareSwitchTest, JoinForUnknownSessionGetsUnknownSession) {
  RawClient client;
  client.send(join(kUnknown, 1, client), switch_endpoint_);
  const std::optional<Reply> reply = client.receive();
  ASSERT_NO_FATAL_FAILURE(expect_error(reply, ErrorCode::unknown_session, flag::kJoin));
  EXPECT_EQ(reply->header.rank, 1);
  EXPECT_EQ(reply->from, switch_endpoint_);
}

TEST_F(SoftwareSwitchTest, JoinFromAnUnregisteredAddressGetsNotRegistered) {
  RawClient client;  // 127.0.0.1; the session accepts only 127.0.0.2
  client.send(join(kRestricted, 0, client), switch_endpoint_);
  expect_error(client.receive(), ErrorCode::not_registered, flag::kJoin);
  EXPECT_TRUE(eventually([&] { return switch_.counters().dropped_unregistered == 1; }));
}

TEST_F(SoftwareSwitchTest, DataBeforeJoiningGetsNotJoined) {
  RawClient client;
  client.send(data_packet(kOpen, 0, 0, 1, {1, 2, 3, 4}), switch_endpoint_);
  expect_error(client.receive(), ErrorCode::not_joined, 0);
  EXPECT_TRUE(eventually([&] { return switch_.counters().dropped_not_joined == 1; }));
}

TEST_F(SoftwareSwitchTest, WindowMismatchBetweenJoinersRejectsBoth) {
  RawClient rank0;
  RawClient rank1;
  // Each rank sends its JOIN twice, as a live rank's retries do: a JOIN sent once (a stray)
  // can neither form a generation nor veto one.
  for (int attempt = 0; attempt < 2; ++attempt) {
    rank0.send(join(kOpen, 0, rank0, /*window=*/4), switch_endpoint_);
    rank1.send(join(kOpen, 1, rank1, /*window=*/8), switch_endpoint_);
  }

  for (RawClient* client : {&rank0, &rank1}) {
    const std::optional<Reply> reply = client->receive();
    ASSERT_NO_FATAL_FAILURE(expect_error(reply, ErrorCode::window_mismatch, flag::kJoin));
    EXPECT_EQ(reply->header.offset, 4u) << "offset carries the others' window (a tie: the lowest rank's)";
    EXPECT_EQ(reply->header.rank, 1) << "the rank that differs";
    EXPECT_EQ(reply->header.bitmap, std::uint64_t{8} << 32 | kLoopback) << "its window and host";
  }
}

TEST_F(SoftwareSwitchTest, TwoRanksJoinThenAFullRoundIsMulticastToBoth) {
  RawClient rank0;
  RawClient rank1;
  rank0.send(join(kOpen, 0, rank0), switch_endpoint_);
  rank1.send(join(kOpen, 1, rank1), switch_endpoint_);
  ASSERT_TRUE(eventually([&] { return switch_.counters().joins == 2; }));
  EXPECT_FALSE(rank0.receive_within(std::chrono::milliseconds(50)).has_value())
      << "a JOIN sent once does not complete a generation";
  rank0.send(join(kOpen, 0, rank0), switch_endpoint_);
  rank1.send(join(kOpen, 1, rank1), switch_endpoint_);

  std::uint32_t token = 0;
  for (RawClient* client : {&rank0, &rank1}) {
    const std::optional<Reply> ack = client->receive();
    ASSERT_TRUE(ack.has_value()) << "no JOIN acknowledgement";
    EXPECT_EQ(ack->header.flags, flag::kJoin | flag::kResult);
    EXPECT_EQ(ack->header.error, ErrorCode::none);
    EXPECT_EQ(ack->header.session, kOpen);
    EXPECT_EQ(ack->header.bitmap, 3u) << "both ranks joined";
    EXPECT_EQ(ack->header.seq, 1u) << "seq carries the generation";
    protocol::JoinReply reply;
    ASSERT_TRUE(protocol::decode(ack->payload, reply));
    EXPECT_EQ(ack->header.count, reply.words());
    EXPECT_EQ(reply.payload, kPayload);
    EXPECT_EQ(reply.world_size, 2u);
    EXPECT_EQ(reply.k_default, 2u);
    EXPECT_EQ(reply.straggler_timeout_ticks, protocol::timeout_ticks(10000));
    EXPECT_NE(reply.token, 0u);
    EXPECT_EQ(ack->header.token, reply.token);
    token = reply.token;
    EXPECT_EQ(reply.pool_base, 0u);
    EXPECT_EQ(reply.pool_size, kPoolSize);
    EXPECT_EQ(reply.generation, 1u);
    EXPECT_EQ(reply.switch_ports, 1u);
    EXPECT_EQ(reply.ports[0], switch_.port());
  }

  constexpr std::int32_t kMax = std::numeric_limits<std::int32_t>::max();
  rank0.send(data_packet(kOpen, 0, /*slot=*/0, /*seq=*/1, {1, -2, 3, kMax}, token), switch_endpoint_);
  rank1.send(data_packet(kOpen, 1, /*slot=*/0, /*seq=*/1, {10, 20, -30, 1}, token), switch_endpoint_);
  for (RawClient* client : {&rank0, &rank1}) {
    const std::optional<Reply> result = client->receive();
    ASSERT_TRUE(result.has_value()) << "no multicast result";
    EXPECT_EQ(result->header.flags, flag::kResult);
    EXPECT_EQ(result->header.slot, 0u);
    EXPECT_EQ(result->header.seq, 1u);
    EXPECT_EQ(result->header.op_id, 1u);
    EXPECT_EQ(result->header.count, kPayload);
    EXPECT_EQ(result->header.contributors, 2);
    EXPECT_EQ(result->header.bitmap, 3u);
    EXPECT_EQ(from_be(result->payload), (Values{11, 18, -27, std::numeric_limits<std::int32_t>::min()}));
  }

  // A retransmission after completion gets a unicast copy, to the sender only.
  rank0.send(data_packet(kOpen, 0, 0, 1, {1, -2, 3, kMax}, token), switch_endpoint_);
  const std::optional<Reply> copy = rank0.receive();
  ASSERT_TRUE(copy.has_value());
  EXPECT_EQ(copy->header.flags, flag::kResult | flag::kRetransmit);
  EXPECT_EQ(from_be(copy->payload), (Values{11, 18, -27, std::numeric_limits<std::int32_t>::min()}));

  EXPECT_TRUE(eventually([&] { return switch_.counters().retransmitted_results == 1; }));
  const SwitchCounters counters = switch_.counters();
  EXPECT_EQ(counters.joins, 4u);
  EXPECT_EQ(counters.aggregated, 2u);
  EXPECT_EQ(counters.completed_full, 1u);
  EXPECT_EQ(counters.completed_partial, 0u);
  EXPECT_EQ(counters.errors_sent, 0u);
  // The same per session; the other session saw nothing.
  const SessionCounters open = session_counters(kOpen);
  EXPECT_EQ(open.rx_packets, 7u);  // 4 JOINs, 2 contributions, 1 retransmission
  EXPECT_EQ(open.joins, 4u);
  EXPECT_EQ(open.aggregated, 2u);
  EXPECT_EQ(open.completed_full, 1u);
  EXPECT_EQ(open.retransmitted_results, 1u);
  EXPECT_EQ(open.dropped + open.errors_sent + open.duplicates + open.completed_partial, 0u);
  EXPECT_EQ(session_counters(kRestricted).rx_packets, 0u);
}

class SoftwareSwitchJoined : public SoftwareSwitchTest {
 protected:
  void SetUp() override {
    for (int attempt = 0; attempt < 2; ++attempt) {
      rank0_.send(join(kOpen, 0, rank0_), switch_endpoint_);
      rank1_.send(join(kOpen, 1, rank1_), switch_endpoint_);
    }
    for (RawClient* client : {&rank0_, &rank1_}) {
      const std::optional<Reply> ack = client->receive();
      ASSERT_TRUE(ack.has_value());
      token_ = ack->header.token;
    }
  }

  RawClient rank0_;
  RawClient rank1_;
  std::uint32_t token_ = 0;
};

TEST_F(SoftwareSwitchJoined, AForgedPacketFromAnotherPortOfAMembersHostIsNeverAdded) {
  RawClient forger;  // 127.0.0.1 like the ranks, another port
  forger.send(data_packet(kOpen, 0, 0, 1, {1000, 1000, 1000, 1000}, token_), switch_endpoint_);
  expect_error(forger.receive(), ErrorCode::not_joined, 0);  // a member's host learns why
  EXPECT_EQ(session_counters(kOpen).dropped, 1u);
  EXPECT_EQ(session_counters(kOpen).errors_sent, 1u);

  rank0_.send(data_packet(kOpen, 0, 0, 1, {1, 2, 3, 4}, token_), switch_endpoint_);
  rank1_.send(data_packet(kOpen, 1, 0, 1, {10, 20, 30, 40}, token_), switch_endpoint_);
  for (RawClient* client : {&rank0_, &rank1_}) {
    const std::optional<Reply> result = client->receive();
    ASSERT_TRUE(result.has_value());
    EXPECT_EQ(result->header.token, token_);
    EXPECT_EQ(from_be(result->payload), (Values{11, 22, 33, 44})) << "the forged values are not in";
  }
  EXPECT_FALSE(forger.receive_within(std::chrono::milliseconds(50)).has_value())
      << "the multicast goes to members only";
}

TEST_F(SoftwareSwitchJoined, APacketWithTheWrongTokenOrRankIsDroppedAndCounted) {
  // From rank 0's own socket: a wrong token, and the right token with rank 1 in the header.
  rank0_.send(data_packet(kOpen, 0, 0, 1, {1000, 1000, 1000, 1000}, token_ + 1), switch_endpoint_);
  rank0_.send(data_packet(kOpen, 1, 0, 1, {1000, 1000, 1000, 1000}, token_), switch_endpoint_);
  ASSERT_TRUE(eventually([&] {
    const SwitchCounters c = switch_.counters();
    return c.dropped_bad_token == 1 && c.dropped_unregistered == 1;
  }));
  EXPECT_EQ(session_counters(kOpen).dropped, 2u);
  rank0_.send(data_packet(kOpen, 0, 0, 1, {1, 1, 1, 1}, token_), switch_endpoint_);
  rank1_.send(data_packet(kOpen, 1, 0, 1, {2, 2, 2, 2}, token_), switch_endpoint_);
  const std::optional<Reply> result = rank0_.receive();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(from_be(result->payload), (Values{3, 3, 3, 3}));
}

TEST_F(SoftwareSwitchJoined, AMismatchIsSentToEveryRank) {
  Bytes first = data_packet(kOpen, 0, 0, 1, {1, 1, 1, 1}, token_);
  rank0_.send(first, switch_endpoint_);
  ASSERT_TRUE(eventually([&] { return switch_.counters().aggregated == 1; }));
  Header longer;
  std::span<const std::byte> unused;
  Bytes second = data_packet(kOpen, 1, 0, 1, {2, 2, 2, 2}, token_);
  ASSERT_EQ(protocol::decode(second, longer, unused), protocol::DecodeStatus::ok);
  longer.op_length = 5;
  protocol::encode(longer, second.data());
  rank1_.send(second, switch_endpoint_);
  for (RawClient* client : {&rank0_, &rank1_}) {
    const std::optional<Reply> error = client->receive();
    ASSERT_NO_FATAL_FAILURE(expect_error(error, ErrorCode::length_mismatch, 0));
    EXPECT_EQ(error->header.op_id, 1u);
    EXPECT_EQ(error->header.rank, 1);
    EXPECT_EQ(error->header.offset, 0u) << "rank 0's packet carried op_length 0";
    EXPECT_EQ(error->header.bitmap, 5u);
  }
}

TEST_F(SoftwareSwitchJoined, AJoinStormFromAMembersHostCannotDisturbTheJob) {
  RawClient storm;  // 127.0.0.1, like the ranks
  std::mt19937 rng(7);
  constexpr int kJoins = 400;
  for (int i = 0; i < kJoins; ++i) {
    Bytes packet = join(kOpen, i % 2, storm);
    protocol::Header h;
    std::span<const std::byte> payload;
    ASSERT_EQ(protocol::decode(packet, h, payload), protocol::DecodeStatus::ok);
    protocol::store_be32(packet.data() + protocol::kHeaderSize, static_cast<std::uint32_t>(rng()) | 1);
    storm.send(packet, switch_endpoint_);
  }
  // A trickle within the source's JOIN rate is refused (the session is held); the rest dropped.
  ASSERT_TRUE(eventually([&] {
    const SwitchCounters c = switch_.counters();
    return c.joins_refused + c.joins_rate_limited == kJoins;
  }));
  EXPECT_GT(switch_.counters().joins_rate_limited, 0u);
  rank0_.send(data_packet(kOpen, 0, 0, 1, {1, 1, 1, 1}, token_), switch_endpoint_);
  rank1_.send(data_packet(kOpen, 1, 0, 1, {2, 2, 2, 2}, token_), switch_endpoint_);
  for (RawClient* client : {&rank0_, &rank1_}) {
    const std::optional<Reply> result = client->receive();
    ASSERT_TRUE(result.has_value()) << "the joined job still completes its rounds";
    EXPECT_EQ(from_be(result->payload), (Values{3, 3, 3, 3}));
  }
}

TEST_F(SoftwareSwitchJoined, AnotherJobIsRefusedWhileThisOneIsActive) {
  RawClient intruder;
  intruder.send(join(kOpen, 0, intruder), switch_endpoint_);
  const std::optional<Reply> refused = intruder.receive();
  ASSERT_NO_FATAL_FAILURE(expect_error(refused, ErrorCode::session_busy, flag::kJoin));
  EXPECT_EQ(refused->header.offset, 1u) << "the generation in use";
  EXPECT_TRUE(eventually([&] { return switch_.counters().joins_refused == 1; }));
  // The job still runs.
  rank0_.send(data_packet(kOpen, 0, 0, 1, {1, 1, 1, 1}, token_), switch_endpoint_);
  rank1_.send(data_packet(kOpen, 1, 0, 1, {2, 2, 2, 2}, token_), switch_endpoint_);
  ASSERT_TRUE(rank1_.receive().has_value());
}


// ---- Owned rounds (docs/protocol.md §13) ------------------------------------------------------

Packet owned(Packet p, std::uint16_t mode, int owner) {
  p.header.flags = static_cast<std::uint16_t>(p.header.flags | mode);
  p.header.set_owner(static_cast<std::uint8_t>(owner));
  return p;
}

TEST(OwnedRounds, ReduceScatterSumsLikeAnAllreduceAndRepliesCarryTheMode) {
  SlotUnderTest slot(3, 3, 2);
  run_steps(slot, {
      {"rank 1 opens", owned(data(1, 1, {1, 2}), flag::kToOwner, 2), kT0, SlotAction::counted, 1},
      {"rank 0 adds", owned(data(0, 1, {10, 20}), flag::kToOwner, 2), kT0, SlotAction::counted, 2},
      {"rank 2 completes", owned(data(2, 1, {100, 200}), flag::kToOwner, 2), kT0, SlotAction::multicast_result, 3},
  });
  EXPECT_EQ(slot.values, (Values{111, 222}));
  EXPECT_EQ(slot.state.mode, flag::kToOwner);
  EXPECT_EQ(slot.state.owner, 2);
  const Header result = slot.reply(SlotAction::multicast_result, owned(data(2, 1, {}), flag::kToOwner, 2));
  EXPECT_EQ(result.flags, flag::kResult | flag::kToOwner);
  EXPECT_EQ(result.count, 2) << "the header-only copies keep the block's count";
  EXPECT_TRUE(Header::takes_values(flag::kToOwner, 2, 2));
  EXPECT_FALSE(Header::takes_values(flag::kToOwner, 2, 0));
  EXPECT_EQ(slot.reply(SlotAction::unicast_old, syn(0, 0)).flags & flag::kOwned, flag::kToOwner);
}

TEST(OwnedRounds, RelayedValuesReplaceTheAccumulatorsWhoeverOpensTheRound) {
  SlotUnderTest slot(3, 1, 2);  // a session default K of 1 must not complete a relayed round
  slot.values = {555, 666};     // a previous round's sums
  Packet ready = owned(data(0, 1, {}), flag::kFromOwner, 1);
  ready.header.count = 2;  // header only, with the block's count
  run_steps(slot, {
      {"rank 0 is ready (header only)", ready, kT0, SlotAction::counted, 1},
      {"the owner's values", owned(data(1, 1, {7, -8}), flag::kFromOwner, 1), kT0, SlotAction::counted, 2},
  });
  EXPECT_EQ(slot.values, (Values{7, -8})) << "the owner's values replace, never add to, the old sums";
  EXPECT_EQ(slot.state.k, 3) << "a relayed round's K is N";
  EXPECT_EQ(slot.state.target, 3);
  Packet last = ready;
  last.header.rank = 2;
  EXPECT_EQ(slot.step(last), SlotAction::multicast_result);
  EXPECT_EQ(slot.values, (Values{7, -8})) << "a header-only request leaves the values alone";
  EXPECT_TRUE(Header::takes_values(flag::kFromOwner, 1, 0));
  EXPECT_FALSE(Header::takes_values(flag::kFromOwner, 1, 1));
}

TEST(OwnedRounds, ARelayedRoundIgnoresCountToKAndTheStragglerTimer) {
  SlotUnderTest slot(3, 2, 1, /*straggler_timeout_ticks=*/10);
  Packet opener = with_flags(owned(data(1, 1, {9}), flag::kFromOwner, 1), flag::kCountToK | flag::kFromOwner);
  opener.header.k = 2;
  EXPECT_EQ(slot.step(opener, kT0), SlotAction::counted);
  Packet ready = owned(data(0, 1, {}), flag::kFromOwner, 1);
  ready.header.count = 1;
  EXPECT_EQ(slot.step(ready, kT0 + 100), SlotAction::counted) << "two of three: K = 2 does not apply";
  EXPECT_EQ(slot.step(ready, kT0 + 200), SlotAction::duplicate) << "no reactive completion either";
  EXPECT_FALSE(slot.state.complete);
}

TEST(OwnedRounds, AnotherModeOrOwnerPoisonsTheRoundWithModeMismatch) {
  for (const auto& [mode, owner] : {std::pair<std::uint16_t, int>{flag::kToOwner, 0},
                                    {flag::kFromOwner, 1}, {0, 0}}) {
    SlotUnderTest slot(3, 3, 1);
    EXPECT_EQ(slot.step(owned(data(0, 1, {1}), flag::kToOwner, 1)), SlotAction::counted);
    Packet other = owned(data(2, 1, {mode == flag::kFromOwner ? 0 : 1}), mode, owner);
    if (mode == flag::kFromOwner) other.payload.clear();
    SCOPED_TRACE("mode " + std::to_string(mode) + ", owner " + std::to_string(owner));
    EXPECT_EQ(slot.step(other), SlotAction::multicast_error);
    EXPECT_EQ(slot.state.error, ErrorCode::mode_mismatch);
    EXPECT_EQ(slot.state.error_expected, flag::kToOwner | 1u);
    EXPECT_EQ(slot.state.error_offered, mode_value(mode, static_cast<std::uint8_t>(owner)));
    EXPECT_EQ(slot.values, (Values{1})) << "the offender's values are not added";
  }
}

TEST(OwnedRounds, TheHeaderOnlyFormsDecodeAndBothModesTogetherDoNot) {
  Header h;
  h.flags = flag::kResult | flag::kToOwner;
  h.count = 64;
  std::array<std::byte, protocol::kHeaderSize> bytes{};
  protocol::encode(h, bytes.data());
  Header decoded;
  std::span<const std::byte> payload;
  EXPECT_EQ(protocol::decode(bytes, decoded, payload), protocol::DecodeStatus::ok);
  EXPECT_EQ(decoded.count, 64);
  EXPECT_TRUE(payload.empty());
  h.flags = flag::kResult;
  protocol::encode(h, bytes.data());
  EXPECT_EQ(protocol::decode(bytes, decoded, payload), protocol::DecodeStatus::count_exceeds_payload)
      << "only owned rounds have header-only forms with a count";
  h.flags = flag::kToOwner | flag::kFromOwner;
  protocol::encode(h, bytes.data());
  EXPECT_EQ(protocol::decode(bytes, decoded, payload), protocol::DecodeStatus::conflicting_modes);
}

}  // namespace
}  // namespace dpa::sw

// SPDX-License-Identifier: Apache-2.0
// The worker's reply classification (docs/protocol.md §9.2) as a table: each row is a reply and
// the state of the entry it is about, and the step of the table that must decide it.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "engine/reply_classifier.hpp"
#include "protocol/wire.hpp"

namespace dpa::detail {

void PrintTo(ReplyKind kind, std::ostream* os) {
  static constexpr const char* kNames[] = {
      "ignore",          "fail",         "resend_now",     "counted_wait",   "expedite",
      "later_operation", "keep_waiting", "deliver_result", "fetch_complete", "skip_complete",
      "join_open"};
  *os << kNames[static_cast<std::size_t>(kind)];
}

namespace {

using protocol::Header;
namespace flag = protocol::flag;

constexpr std::uint32_t kSession = 7;
constexpr std::uint32_t kSlotBase = 100;
constexpr std::uint32_t kOpId = 5;
constexpr std::uint32_t kToken = 0x70ce;

ReplyScope scope(bool syn_disable = false) {
  return {kSession, kToken, kSlotBase, /*window=*/2, kOpId, /*rank=*/0, syn_disable};
}

// ---- Step 1: which entry ------------------------------------------------------------------------

TEST(ReplyEntry, MapsEachOfTheThreadsSlotsToItsEntry) {
  Header h;
  h.session = kSession;
  h.token = kToken;
  for (const auto& [slot, entry] : std::vector<std::pair<std::uint32_t, std::uint32_t>>{
           {100, 0}, {101, 0}, {102, 1}, {103, 1}}) {
    h.slot = slot;
    EXPECT_EQ(reply_entry(h, scope()), std::optional<std::uint32_t>(entry)) << "slot " << slot;
  }
}

TEST(ReplyEntry, RejectsOtherSessionsJoinsAndForeignSlots) {
  Header h;
  h.session = kSession;
  h.token = kToken;
  h.slot = 100;
  Header other_token = h;
  other_token.token = kToken + 1;  // another generation's, or a forged reply
  EXPECT_EQ(reply_entry(other_token, scope()), std::nullopt);
  Header other_session = h;
  other_session.session = kSession + 1;
  Header join = h;
  join.flags = flag::kJoin | flag::kResult;
  Header below = h;
  below.slot = kSlotBase - 1;
  Header beyond = h;
  beyond.slot = kSlotBase + 4;  // the next thread's first slot
  for (const Header& rejected : {other_session, join, below, beyond}) {
    EXPECT_EQ(reply_entry(rejected, scope()), std::nullopt)
        << "session " << rejected.session << ", flags " << rejected.flags << ", slot " << rejected.slot;
  }
}

// ---- Steps 2 to 13 ------------------------------------------------------------------------------

// Entry 0 at round 2 of rounds [0, 6): current slot 100, seq 2. Round R lives in slot
// 100 + (R & 1) with seq R / 2 + 1.
constexpr EntryView kAtRound2{true, 2, 6, false};
constexpr EntryView kProbingRound2{true, 2, 6, true};
constexpr EntryView kIdle{false, 6, 6, false};

struct Row {
  std::string name;
  EntryView entry;
  std::uint16_t flags;
  std::uint32_t slot;
  std::uint32_t seq;
  std::uint32_t op_id = kOpId;
  std::uint64_t bitmap = 0b11;
  bool syn_disable = false;
  ReplyKind kind;
  std::uint64_t round = 0;  // checked for the kinds that carry R
};

std::vector<Row> rows() {
  using enum ReplyKind;
  constexpr std::uint16_t kSyn = flag::kSyn;
  constexpr std::uint16_t kOld = flag::kOld;
  constexpr std::uint16_t kResult = flag::kResult;
  constexpr std::uint16_t kComplete = flag::kComplete;
  constexpr std::uint16_t kCopy = flag::kResult | flag::kRetransmit | flag::kSyn;
  return {
      // step 2
      {"error for the running operation fails it", kAtRound2, flag::kError, 100, 2, kOpId, 0, false, fail},
      {"error fails even an idle entry's operation", kIdle, flag::kError, 101, 1, kOpId, 0, false, fail},
      {"error for another operation is ignored", kAtRound2, flag::kError, 100, 2, kOpId - 1, 0, false, ignore},
      // step 4 before step 3: an idle entry takes nothing
      {"probe reply for an idle entry", kIdle, kSyn, 100, 2, kOpId, 0, false, ignore},
      {"result for an idle entry", kIdle, kResult, 100, 4, kOpId, 0b11, false, ignore},
      // step 3
      {"probe reply, counted, open", kAtRound2, kSyn, 100, 2, kOpId, 0b01, false, counted_wait},
      {"probe reply, counted, complete flag", kAtRound2, kSyn | kComplete, 100, 2, kOpId, 0b11, false, counted_wait},
      {"probe reply, not counted", kAtRound2, kSyn, 100, 2, kOpId, 0b10, false, resend_now},
      {"probe reply, fresh slot", kAtRound2, kSyn, 100, 0, 0, 0, false, resend_now},
      {"probe reply, earlier operation", kAtRound2, kSyn, 100, 2, kOpId - 1, 0b01, false, resend_now},
      {"probe reply, earlier round", kAtRound2, kSyn, 100, 1, kOpId, 0b01, false, resend_now},
      {"probe reply, earlier round, even under syn_disable", kAtRound2, kSyn, 100, 1, kOpId, 0b01, true, resend_now},
      // not step 3: a later operation or round, another parity, or a skip-forward probe outstanding
      {"probe reply, later operation", kAtRound2, kSyn, 100, 2, kOpId + 1, 0b11, false, later_operation},
      {"probe reply, slot at a later open round", kAtRound2, kSyn, 100, 3, kOpId, 0b10, false, join_open, 4},
      {"probe reply about the other slot", kAtRound2, kSyn, 101, 2, kOpId, 0b10, false, ignore},
      {"SYN reply to the skip-forward probe, same round", kProbingRound2, kSyn, 100, 2, kOpId, 0b10, false, keep_waiting, 2},
      // step 4
      {"late result of an earlier operation", kAtRound2, kResult, 100, 2, kOpId - 1, 0b11, false, ignore},
      {"late OLD of an earlier operation", kAtRound2, kOld | kComplete, 100, 3, kOpId - 1, 0b11, false, ignore},
      // step 5
      {"result about the other slot", kAtRound2, kResult, 101, 2, kOpId, 0b11, false, expedite},
      {"copy of a later round about the other slot", kAtRound2, kCopy, 101, 2, kOpId, 0b11, false, expedite},
      {"late result of the previous round", kAtRound2, kResult, 101, 1, kOpId, 0b11, false, ignore},
      {"late copy of the previous round", kAtRound2, kCopy, 101, 1, kOpId, 0b11, false, ignore},
      {"later operation on the other slot", kAtRound2, kOld, 101, 1, kOpId + 1, 0b10, false, expedite},
      {"OLD about the other slot", kAtRound2, kOld | kComplete, 101, 2, kOpId, 0b11, false, ignore},
      // step 6
      {"later operation's result on the current slot", kAtRound2, kResult, 100, 3, kOpId + 1, 0b11, false, later_operation},
      {"later operation's OLD on the current slot", kAtRound2, kOld, 100, 1, kOpId + 1, 0b10, false, later_operation},
      // step 7
      {"result from a fresh slot", kAtRound2, kResult, 100, 0, kOpId, 0b11, false, ignore},
      {"result of an earlier round", kAtRound2, kResult, 100, 1, kOpId, 0b11, false, ignore},
      {"result beyond the entry's last round", kAtRound2, kResult, 100, 4, kOpId, 0b11, false, ignore},
      {"OLD beyond the entry's last round", kAtRound2, kOld | kComplete, 100, 5, kOpId, 0b11, false, ignore},
      // step 9
      {"result of the current round", kAtRound2, kResult, 100, 2, kOpId, 0b11, false, deliver_result, 2},
      {"result of a later round", kAtRound2, kResult, 100, 3, kOpId, 0b11, false, deliver_result, 4},
      {"copy answering the skip-forward probe", kProbingRound2, kCopy, 100, 2, kOpId, 0b11, false, deliver_result, 2},
      // step 10
      {"no OLD, SYN or RESULT", kAtRound2, 0, 100, 2, kOpId, 0b11, false, keep_waiting, 2},
      // step 11
      {"OLD at the probed round", kProbingRound2, kOld | kComplete, 100, 2, kOpId, 0b11, false, keep_waiting, 2},
      // step 12
      {"OLD complete: fetch", kAtRound2, kOld | kComplete, 100, 3, kOpId, 0b11, false, fetch_complete, 4},
      {"skip-forward probe finds the slot moved on", kProbingRound2, kSyn | kComplete, 100, 3, kOpId, 0b11, false, fetch_complete, 4},
      // step 12'
      {"OLD complete under syn_disable: skip", kAtRound2, kOld | kComplete, 100, 3, kOpId, 0b11, true, skip_complete, 4},
      // step 13
      {"OLD open at a later round", kAtRound2, kOld, 100, 3, kOpId, 0b10, false, join_open, 4},
      {"OLD open at the current round", kAtRound2, kOld, 100, 2, kOpId, 0b10, false, join_open, 2},
      {"OLD open, probing an earlier round", kProbingRound2, kOld, 100, 3, kOpId, 0b10, false, join_open, 4},
  };
}

TEST(ClassifyReply, EveryStepOfTheTable) {
  for (const Row& row : rows()) {
    SCOPED_TRACE(row.name);
    Header h;
    h.flags = row.flags;
    h.session = kSession;
    h.token = kToken;
    h.slot = row.slot;
    h.seq = row.seq;
    h.op_id = row.op_id;
    h.bitmap = row.bitmap;
    h.contributors = static_cast<std::uint8_t>(__builtin_popcountll(row.bitmap));
    ASSERT_EQ(reply_entry(h, scope(row.syn_disable)), std::optional<std::uint32_t>(0));
    const ReplyAction action = classify_reply(row.entry, h, scope(row.syn_disable));
    EXPECT_EQ(action.kind, row.kind);
    if (action.kind == row.kind && action.accepted()) {
      EXPECT_EQ(action.round, row.round);
    }
  }
}

TEST(ClassifyReply, OnlyRepliesPastStep8AreAccepted) {
  using enum ReplyKind;
  for (const ReplyKind kind : {ignore, fail, resend_now, counted_wait, expedite, later_operation}) {
    EXPECT_FALSE(ReplyAction{kind}.accepted()) << ::testing::PrintToString(kind);
  }
  for (const ReplyKind kind : {keep_waiting, deliver_result, fetch_complete, skip_complete, join_open}) {
    EXPECT_TRUE(ReplyAction{kind}.accepted()) << ::testing::PrintToString(kind);
  }
}

}  // namespace
}  // namespace dpa::detail

// SPDX-License-Identifier: Apache-2.0
// Admission of data packets and probes (admit_data, docs/protocol.md §8.1), packet by packet:
// a table of packets against one joined session, each with the verdict §8.1 gives it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dpa/switch.hpp"
#include "protocol/wire.hpp"
#include "switch/admit_data.hpp"
#include "switch/session.hpp"

namespace dpa::sw {
namespace {

using protocol::ErrorCode;
using transport::Endpoint;

constexpr std::uint32_t kHostA = 0x0a000001;  // 10.0.0.1, the session's worker host
constexpr std::uint32_t kHostB = 0x0a000002;  // 10.0.0.2, registered nowhere
constexpr std::uint64_t kSecond = 1'000'000'000;
constexpr std::uint32_t kPayload = 8;
constexpr std::uint32_t kThreads = 2;  // worker threads per rank
constexpr std::uint32_t kWindow = 4;   // entries per worker thread: thread t owns slots [8t, 8t + 8)
constexpr std::uint32_t kPoolSize = 64;

// Rank r's worker thread t sends from port 1000 + 100 r + t of host A (nonce: which job).
std::vector<std::pair<protocol::Header, protocol::JoinRequest>> join_requests(int world, std::uint32_t nonce) {
  std::vector<std::pair<protocol::Header, protocol::JoinRequest>> requests;
  for (int r = 0; r < world; ++r) {
    protocol::Header h;
    h.flags = protocol::flag::kJoin;
    h.session = 3;
    h.rank = static_cast<std::uint8_t>(r);
    protocol::JoinRequest request;
    request.nonce = nonce + static_cast<std::uint32_t>(r);
    request.world_size = static_cast<std::uint32_t>(world);
    request.threads = kThreads;
    request.window = kWindow;
    for (std::uint32_t t = 0; t < kThreads; ++t) request.ports[t] = static_cast<std::uint16_t>(1000 + 100 * r + t);
    requests.emplace_back(h, request);
  }
  return requests;
}

Endpoint port_of(int rank, std::uint32_t thread) {
  return {kHostA, static_cast<std::uint16_t>(1000 + 100 * rank + static_cast<int>(thread))};
}

// A session of two ranks on host A whose second job (generation 2) replaced the first, so that
// both the current token and the previous one exist.
class AdmitData : public ::testing::Test {
 protected:
  AdmitData() : session_(config()) {
    join_job(10, 0);
    join_job(50, 6 * kSecond);  // after the first job's idle timeout (5 s)
    members_ = session_.membership();
  }

  static SessionConfig config() {
    SessionConfig c;
    c.id = 3;
    c.world_size = 2;
    c.payload = kPayload;
    c.pool_size = kPoolSize;
    c.idle_timeout = std::chrono::milliseconds(5000);
    c.workers = {{"10.0.0.1", 0}};
    return c;
  }

  // Every rank sends its JOIN twice, as a live rank's retries do.
  void join_job(std::uint32_t nonce, std::uint64_t now) {
    const auto requests = join_requests(2, nonce);
    for (int round = 0; round < 2; ++round) {
      for (std::size_t r = 0; r < requests.size(); ++r) {
        session_.join(requests[r].first, requests[r].second, port_of(static_cast<int>(r), 0), now,
                      protocol::ticks_of_ns(now));
      }
    }
  }

  Session session_;
  const Membership* members_ = nullptr;
};

enum class Token : std::uint8_t { current, previous, other };

// One packet and the verdict it must get. Unless a row says otherwise: rank 1's worker thread 1
// sends a full data request (P values) for a slot of its window, from its own port, to the
// switch thread (of two) that owns the slot.
struct Row {
  std::string name;
  std::uint8_t rank = 1;
  std::uint32_t slot = 10;   // worker thread 1's window, entry 1
  std::uint16_t count = kPayload;
  std::size_t payload_bytes = 4 * kPayload;
  bool probe = false;
  std::uint8_t k = 0;
  std::uint16_t mode = 0;    // owned rounds (§13): TO_OWNER or FROM_OWNER
  std::uint8_t owner = 0;
  Token token = Token::current;
  Endpoint from = port_of(1, 1);
  std::uint32_t switch_thread = 1;  // of two: worker thread t's slots go to switch thread t
  // The verdict: admitted for `thread`, or refused with a drop counter and/or an ERROR.
  std::uint64_t SwitchCounters::*dropped = nullptr;
  ErrorCode error = ErrorCode::none;
  std::uint32_t expected = 0;
  std::uint32_t thread = 1;
};

std::vector<Row> rows() {
  const auto row = [](std::string name) {
    Row r;
    r.name = std::move(name);
    return r;
  };
  std::vector<Row> table;
  table.push_back(row("a member's full request is admitted"));
  {
    Row r = row("the exponent-priming request (count 0, no values) is admitted");
    r.count = 0;
    r.payload_bytes = 0;
    table.push_back(r);
  }
  {
    Row r = row("a probe without values is admitted");
    r.probe = true;
    r.payload_bytes = 0;
    table.push_back(r);
  }
  {
    Row r = row("thread 0 of rank 0 at switch thread 0 is admitted");
    r.rank = 0;
    r.slot = 3;
    r.from = port_of(0, 0);
    r.switch_thread = 0;
    r.thread = 0;
    table.push_back(r);
  }
  {
    Row r = row("a rank of the replaced job learns its session was taken over");
    r.token = Token::previous;
    r.from = {kHostA, 4000};
    r.error = ErrorCode::session_taken_over;
    r.expected = 2;  // the generation now in force
    table.push_back(r);
  }
  {
    Row r = row("the replaced job's token from an unregistered host is only a stranger");
    r.token = Token::previous;
    r.from = {kHostB, 1101};
    r.dropped = &SwitchCounters::dropped_unregistered;
    table.push_back(r);
  }
  {
    Row r = row("a registered host's socket outside the generation has not joined");
    r.from = {kHostA, 4000};
    r.dropped = &SwitchCounters::dropped_not_joined;
    r.error = ErrorCode::not_joined;
    table.push_back(r);
  }
  {
    Row r = row("an unregistered host is dropped without a word");
    r.from = {kHostB, 1101};
    r.dropped = &SwitchCounters::dropped_unregistered;
    table.push_back(r);
  }
  {
    Row r = row("a member's packet without the generation's token is dropped");
    r.token = Token::other;
    r.dropped = &SwitchCounters::dropped_bad_token;
    table.push_back(r);
  }
  {
    Row r = row("a slot beyond the pool is out of range");
    r.slot = kPoolSize;
    r.error = ErrorCode::slot_out_of_range;
    r.expected = 0;  // the pool base
    table.push_back(r);
  }
  {
    Row r = row("a slot of the pool that no worker thread's window holds is out of range");
    r.slot = kThreads * 2 * kWindow;
    r.error = ErrorCode::slot_out_of_range;
    table.push_back(r);
  }
  {
    Row r = row("a header naming another rank than the socket's is dropped");
    r.rank = 0;
    r.dropped = &SwitchCounters::dropped_unregistered;
    table.push_back(r);
  }
  {
    Row r = row("a slot of another worker thread's window is dropped");
    r.slot = 2;
    r.switch_thread = 0;
    r.dropped = &SwitchCounters::dropped_unregistered;
    table.push_back(r);
  }
  {
    Row r = row("a packet at a switch thread that does not own its slot is dropped");
    r.switch_thread = 0;
    r.dropped = &SwitchCounters::dropped_malformed;
    table.push_back(r);
  }
  {
    Row r = row("a probe with values is dropped");
    r.probe = true;
    r.dropped = &SwitchCounters::dropped_malformed;
    table.push_back(r);
  }
  {
    Row r = row("a request with fewer values than P is a bad length");
    r.payload_bytes = 4 * kPayload - 4;
    r.error = ErrorCode::bad_length;
    r.expected = kPayload;
    table.push_back(r);
  }
  {
    Row r = row("a count above P is a bad length");
    r.count = kPayload + 1;
    r.error = ErrorCode::bad_length;
    r.expected = kPayload;
    table.push_back(r);
  }
  {
    Row r = row("values after a count of 0 are a bad length");
    r.count = 0;
    r.error = ErrorCode::bad_length;
    r.expected = kPayload;
    table.push_back(r);
  }
  {
    Row r = row("K = N is valid");
    r.k = 2;
    table.push_back(r);
  }
  {
    Row r = row("K above N is invalid");
    r.k = 3;
    r.error = ErrorCode::k_invalid;
    r.expected = 2;
    table.push_back(r);
  }
  {
    Row r = row("a relayed round's request from its owner carries P values");
    r.mode = protocol::flag::kFromOwner;
    r.owner = 1;
    table.push_back(r);
  }
  {
    Row r = row("a relayed round's request from another rank is header only, with its count");
    r.mode = protocol::flag::kFromOwner;
    r.owner = 0;
    r.payload_bytes = 0;
    table.push_back(r);
  }
  {
    Row r = row("a relayed round's request from another rank with values is a bad length");
    r.mode = protocol::flag::kFromOwner;
    r.owner = 0;
    r.error = ErrorCode::bad_length;
    r.expected = kPayload;
    table.push_back(r);
  }
  {
    Row r = row("a reduce-scatter's request always carries P values");
    r.mode = protocol::flag::kToOwner;
    r.owner = 0;
    r.payload_bytes = 0;
    r.error = ErrorCode::bad_length;
    r.expected = kPayload;
    table.push_back(r);
  }
  {
    Row r = row("an owner at or above N is a mode mismatch naming N");
    r.mode = protocol::flag::kToOwner;
    r.owner = 2;
    r.error = ErrorCode::mode_mismatch;
    r.expected = 2;
    table.push_back(r);
  }
  return table;
}

TEST_F(AdmitData, EveryRowGetsItsVerdict) {
  ASSERT_NE(members_, nullptr);
  ASSERT_EQ(members_->generation, 2u);
  ASSERT_NE(members_->previous_token, 0u);
  for (const Row& row : rows()) {
    SCOPED_TRACE(row.name);
    protocol::Header h;
    h.session = 3;
    h.rank = row.rank;
    h.slot = row.slot;
    h.count = row.count;
    h.k = row.k;
    h.seq = 1;
    h.op_id = 1;
    if (row.probe) h.flags = protocol::flag::kSyn;
    h.flags = static_cast<std::uint16_t>(h.flags | row.mode);
    h.set_owner(row.owner);
    h.token = row.token == Token::current    ? members_->token
              : row.token == Token::previous ? members_->previous_token
                                             : members_->token + 1;
    const DataVerdict verdict = admit_data(session_, h, row.payload_bytes, row.from, row.switch_thread, 2);
    const bool admitted = row.dropped == nullptr && row.error == ErrorCode::none;
    EXPECT_EQ(verdict.admitted(), admitted);
    EXPECT_TRUE(verdict.dropped == row.dropped);
    EXPECT_EQ(verdict.error, row.error);
    if (row.error != ErrorCode::none) {
      EXPECT_EQ(verdict.expected, row.expected);
    }
    if (admitted) {
      EXPECT_EQ(verdict.members, members_);
      EXPECT_EQ(verdict.thread, row.thread);
    }
  }
}

// One switch thread owns every slot: the port check never refuses.
TEST_F(AdmitData, WithOneSwitchThreadEveryWorkerThreadIsServedThere) {
  protocol::Header h;
  h.session = 3;
  h.rank = 1;
  h.slot = 10;
  h.count = kPayload;
  h.token = members_->token;
  const DataVerdict verdict = admit_data(session_, h, 4 * kPayload, port_of(1, 1), 0, 1);
  EXPECT_TRUE(verdict.admitted());
  EXPECT_EQ(verdict.thread, 1u);
}

// The verdict writes nothing: the same packet twice gets the same verdict, and the generation's
// activity stamp (the switch's to set) is untouched.
TEST_F(AdmitData, AdmissionWritesNothing) {
  protocol::Header h;
  h.session = 3;
  h.rank = 1;
  h.slot = 10;
  h.count = kPayload;
  h.token = members_->token;
  const std::uint64_t active = members_->last_active_ns.load();
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(admit_data(session_, h, 4 * kPayload, port_of(1, 1), 1, 2).admitted());
  EXPECT_EQ(members_->last_active_ns.load(), active);
}

}  // namespace
}  // namespace dpa::sw

// SPDX-License-Identifier: Apache-2.0
// The switch's join procedure (docs/protocol.md §6) driven directly with a fake clock: who may
// start a generation, what a stray JOIN can and cannot do, and the identity table it builds.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "dpa/switch.hpp"
#include "protocol/wire.hpp"
#include "switch/session.hpp"

namespace dpa::sw {
namespace {

using protocol::ErrorCode;
using Kind = JoinOutcome::Kind;
using transport::Endpoint;

constexpr std::uint32_t kHostA = 0x0a000001;  // 10.0.0.1
constexpr std::uint32_t kHostB = 0x0a000002;
constexpr std::uint64_t kSecond = 1'000'000'000;

struct Joiner {
  int rank = 0;
  std::uint32_t nonce = 1;
  Endpoint from{kHostA, 0};
  std::uint32_t threads = 1;
  std::uint32_t window = 4;
  std::uint32_t token = 0;
  std::uint32_t secret = 0;  // a rejoin's proof (header offset)
  // A live rank repeats its JOIN with the cookie at once when the switch asks for one (§6.3); a
  // naive storm does not.
  bool echoes_cookies = true;
};

class SessionJoin : public ::testing::Test {
 protected:
  static SessionConfig config(int world) {
    SessionConfig c;
    c.id = 3;
    c.world_size = world;
    c.payload = 8;
    c.pool_size = 64;
    c.idle_timeout = std::chrono::milliseconds(5000);
    return c;
  }

  static JoinOutcome join(Session& session, const Joiner& j, std::uint64_t now) {
    protocol::Header h;
    h.flags = protocol::flag::kJoin;
    h.session = 3;
    h.rank = static_cast<std::uint8_t>(j.rank);
    h.token = j.token;
    h.offset = j.secret;
    protocol::JoinRequest request;
    request.nonce = j.nonce;
    request.world_size = static_cast<std::uint32_t>(session.config().world_size);
    request.threads = j.threads;
    request.window = j.window;
    for (std::uint32_t t = 0; t < j.threads; ++t) {
      request.ports[t] = static_cast<std::uint16_t>(j.from.port + t);
    }
    const JoinOutcome outcome = session.join(h, request, j.from, now, protocol::ticks_of_ns(now));
    if (outcome.error != ErrorCode::join_cookie || !j.echoes_cookies) return outcome;
    h.op_id = outcome.expected;
    return session.join(h, request, j.from, now, protocol::ticks_of_ns(now));
  }

  // Ranks 0..world-1 on host A, rank r's thread t at port 1000 + 100 r + t.
  static std::vector<Joiner> job(int world, std::uint32_t nonce_base) {
    std::vector<Joiner> joiners;
    for (int r = 0; r < world; ++r) {
      joiners.push_back({r, nonce_base + static_cast<std::uint32_t>(r),
                         {kHostA, static_cast<std::uint16_t>(1000 + 100 * r)}});
    }
    return joiners;
  }

  // Every rank sends its JOIN twice, as a live rank's retries do.
  static const Membership* join_all(Session& session, const std::vector<Joiner>& joiners,
                                    std::uint64_t now) {
    for (const Joiner& j : joiners) join(session, j, now);
    JoinOutcome last;
    for (const Joiner& j : joiners) last = join(session, j, now);
    EXPECT_EQ(last.kind, Kind::ack_all);
    return last.members;
  }
};

TEST_F(SessionJoin, TheGenerationFormsWhenEveryRankIsPendingAndCarriesAFreshToken) {
  Session session(config(2));
  const auto joiners = job(2, 10);
  EXPECT_EQ(join(session, joiners[0], 0).kind, Kind::waiting);
  EXPECT_EQ(join(session, joiners[0], 1).kind, Kind::waiting) << "a retransmission keeps waiting";
  EXPECT_EQ(join(session, joiners[1], 2).kind, Kind::waiting) << "rank 1 has not confirmed yet";
  const JoinOutcome done = join(session, joiners[1], 3);
  ASSERT_EQ(done.kind, Kind::ack_all);
  EXPECT_EQ(done.members->generation, 1u);
  EXPECT_NE(done.members->token, 0u);
  EXPECT_EQ(done.members->joined, 3u);
  // A lost ack: the same JOIN again is acknowledged to the sender alone.
  EXPECT_EQ(join(session, joiners[1], 4).kind, Kind::ack_sender);
}

// What a job whose join failed asks the switch: whose JOINs ever arrived.
TEST_F(SessionJoin, TheSessionRemembersWhichRanksItHeard) {
  Session session(config(4));
  const auto joiners = job(4, 10);
  EXPECT_EQ(session.joins_heard(), 0u);
  join(session, joiners[0], 0);
  join(session, joiners[2], 0);
  EXPECT_EQ(session.joins_heard(), 0b0101u) << "ranks 1 and 3 never reached the switch";
  join_all(session, joiners, 1);
  EXPECT_EQ(session.joins_heard(), 0b1111u);
}

TEST_F(SessionJoin, TheIdentityTableMapsEachThreadPortToItsRankAndThread) {
  Session session(config(2));
  auto joiners = job(2, 10);
  for (Joiner& j : joiners) j.threads = 3;
  const Membership* members = join_all(session, joiners, 0);
  ASSERT_NE(members, nullptr);
  EXPECT_EQ(members->identities.size(), 6u);
  for (int r = 0; r < 2; ++r) {
    for (int t = 0; t < 3; ++t) {
      const Identity* id = members->identify({kHostA, static_cast<std::uint16_t>(1000 + 100 * r + t)});
      ASSERT_NE(id, nullptr) << "rank " << r << " thread " << t;
      EXPECT_EQ(id->rank, r);
      EXPECT_EQ(id->thread, t);
    }
  }
  EXPECT_EQ(members->identify({kHostA, 1003}), nullptr) << "another port of a member's host";
  EXPECT_EQ(members->identify({kHostB, 1000}), nullptr) << "the right port on another host";
}

TEST_F(SessionJoin, AStrayJoinIsReplacedByTheRealRanksJoinAndCannotVetoTheJob) {
  Session session(config(3));
  Joiner stray{2, 0xbad, {kHostA, 7777}, /*threads=*/2};
  EXPECT_EQ(join(session, stray, 0).kind, Kind::waiting);
  const auto joiners = job(3, 10);
  for (int attempt = 0; attempt < 2; ++attempt) {
    EXPECT_EQ(join(session, joiners[0], 10).kind, Kind::waiting);
    EXPECT_EQ(join(session, joiners[1], 10).kind, Kind::waiting) << "the stray never confirmed";
  }
  // The stray's young claim holds rank 2 for a while; the refusal names it.
  const JoinOutcome refused = join(session, joiners[2], 10);
  EXPECT_EQ(refused.kind, Kind::reject_sender);
  EXPECT_EQ(refused.error, ErrorCode::rank_contended);
  EXPECT_EQ(refused.holder, (Endpoint{kHostA, 7777}));
  // An unconfirmed claim gives way after half a second; rank 2 keeps retrying.
  EXPECT_EQ(join(session, joiners[2], kSecond / 2).kind, Kind::waiting);
  const JoinOutcome done = join(session, joiners[2], kSecond / 2 + 1);
  ASSERT_EQ(done.kind, Kind::ack_all) << "rank 2's own JOIN replaces the stray one";
  EXPECT_EQ(done.members->threads, 1u);
  EXPECT_EQ(done.members->endpoints[2][0], (Endpoint{kHostA, 1200}));
}

TEST_F(SessionJoin, AJoinStormWithFreshNoncesCannotStarveAJoiningJob) {
  // One foreign socket sends a JOIN with a new nonce every millisecond, for ranks 0..3 in turn
  // (three each); the four ranks retry theirs every 100 ms. The job forms.
  Session session(config(4));
  const auto joiners = job(4, 10);
  const Endpoint storm{kHostA, 4444};
  std::uint32_t nonce = 1000;
  const Membership* formed = nullptr;
  std::uint64_t contended = 0;
  for (std::uint64_t ms = 0; ms < 3000 && formed == nullptr; ++ms) {
    const std::uint64_t now = ms * 1'000'000;
    const JoinOutcome storm_outcome =
        join(session, {static_cast<int>(ms / 3 % 4), ++nonce, storm, /*threads=*/2}, now);
    EXPECT_NE(storm_outcome.kind, Kind::ack_all) << "the storm never forms a generation";
    if (storm_outcome.error == ErrorCode::rank_contended) ++contended;
    if (ms % 100 != 0) continue;
    for (const Joiner& j : joiners) {
      const JoinOutcome outcome = join(session, j, now);
      if (outcome.kind == Kind::ack_all) formed = outcome.members;
    }
  }
  ASSERT_NE(formed, nullptr) << "the job formed during the storm";
  EXPECT_EQ(formed->threads, 1u);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(formed->endpoints[r][0], joiners[r].from) << "rank " << r;
  EXPECT_GT(contended, 0u) << "the storm met the ranks' claims";
}

// Issue 51: fresh nonces from 1000 sockets at 2000 JOINs per second held every rank's pending
// entry, each new source a fresh claim. Beyond the session's JOIN budget only a JOIN with its
// cookie goes on; the storm, which does not echo cookies, holds nothing.
TEST_F(SessionJoin, AStormFromManySocketsCannotStopAJobThatEchoesCookies) {
  Session session(config(4));
  const auto joiners = job(4, 10);
  std::uint32_t nonce = 1000;
  const Membership* formed = nullptr;
  std::uint64_t storm_joins = 0;
  std::uint64_t formed_ms = 0;
  for (std::uint64_t ms = 0; ms < 5000 && formed == nullptr; ++ms) {
    const std::uint64_t now = ms * 1'000'000;
    for (int i = 0; i < 2; ++i, ++storm_joins) {
      const Endpoint source{kHostA, static_cast<std::uint16_t>(20000 + storm_joins % 1000)};
      Joiner storm{static_cast<int>(storm_joins % 4), ++nonce, source};
      storm.echoes_cookies = false;
      EXPECT_NE(join(session, storm, now).kind, Kind::ack_all);
    }
    if (ms < 500 || ms % 100 != 0) continue;  // the job starts once the storm runs at full rate
    for (const Joiner& j : joiners) {
      const JoinOutcome outcome = join(session, j, now);
      if (outcome.kind == Kind::ack_all) {
        formed = outcome.members;
        formed_ms = ms;
      }
    }
  }
  ASSERT_NE(formed, nullptr) << "the job formed during the storm";
  EXPECT_LE(formed_ms, 700u) << "within its first retries";
  for (int r = 0; r < 4; ++r) EXPECT_EQ(formed->endpoints[r][0], joiners[r].from) << "rank " << r;
}

TEST_F(SessionJoin, UnderAStormAJoinGoesOnOnlyWithTheCookieSentToItsSourceForItsNonce) {
  Session session(config(2));
  Joiner storm{0, 1, {kHostB, 7000}};
  storm.echoes_cookies = false;
  JoinOutcome last;
  for (std::uint32_t i = 0; i < 300; ++i) {  // 300 JOINs in a millisecond: beyond the budget
    storm.nonce = 100 + i;
    last = join(session, storm, i * 1000);
  }
  ASSERT_EQ(last.error, ErrorCode::join_cookie);
  Joiner rank{1, 42, {kHostA, 1100}};
  rank.echoes_cookies = false;
  const JoinOutcome asked = join(session, rank, kSecond / 1000);
  ASSERT_EQ(asked.error, ErrorCode::join_cookie) << "no cookie yet: the JOIN changes nothing";
  ASSERT_NE(asked.expected, 0u);
  const auto with_cookie = [&](const Joiner& j, std::uint32_t cookie, std::uint64_t now) {
    protocol::Header h;
    h.flags = protocol::flag::kJoin;
    h.session = 3;
    h.rank = static_cast<std::uint8_t>(j.rank);
    h.op_id = cookie;
    protocol::JoinRequest request;
    request.nonce = j.nonce;
    request.world_size = 2;
    request.threads = 1;
    request.window = 4;
    request.ports[0] = j.from.port;
    return session.join(h, request, j.from, now, protocol::ticks_of_ns(now));
  };
  Joiner thief = rank;
  thief.from.port = 1111;
  EXPECT_EQ(with_cookie(thief, asked.expected, kSecond / 100).error, ErrorCode::join_cookie)
      << "another source's cookie is no cookie";
  Joiner renonced = rank;
  renonced.nonce = 43;
  EXPECT_EQ(with_cookie(renonced, asked.expected, kSecond / 100).error, ErrorCode::join_cookie)
      << "nor is another nonce's";
  EXPECT_EQ(with_cookie(rank, asked.expected, kSecond / 100).kind, Kind::waiting) << "its own goes on, confirmed";
  EXPECT_EQ(join(session, rank, 8 * kSecond).kind, Kind::waiting)
      << "once the storm has passed, a JOIN goes on without a cookie";
}

TEST_F(SessionJoin, ATakenOverSessionRemembersWhichRanksOfTheOldJobLeft) {
  Session session(config(2));
  const Membership* first = join_all(session, job(2, 10), 0);
  ASSERT_NE(first, nullptr);
  protocol::Header leave;
  leave.flags = protocol::flag::kLeave;
  leave.rank = 1;
  leave.token = first->token;
  leave.offset = first->secrets[1];
  ASSERT_TRUE(session.leave(leave, {kHostA, 1100}));
  const Membership* second = join_all(session, job(2, 50), 1);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->previous_left, 2u) << "rank 1's LEAVE freed it";
  const Membership* third = join_all(session, job(2, 90), 6 * kSecond);
  ASSERT_NE(third, nullptr);
  EXPECT_EQ(third->previous_left, 0u) << "the second job went idle";
}

TEST_F(SessionJoin, AConfirmedClaimIsNotDisplacedAndASourceHoldsOneRank) {
  Session session(config(3));
  const auto joiners = job(3, 10);
  join(session, joiners[0], 0);
  join(session, joiners[0], 1);  // confirmed
  const Joiner other{0, 99, {kHostA, 5555}};
  for (const std::uint64_t now : {std::uint64_t{2}, 3 * kSecond / 4}) {  // young or not: confirmed holds
    const JoinOutcome refused = join(session, other, now);
    EXPECT_EQ(refused.error, ErrorCode::rank_contended);
    EXPECT_EQ(refused.expected, 0u) << "names the rank";
    EXPECT_EQ(refused.holder, joiners[0].from);
    join(session, joiners[0], now);  // rank 0 keeps retrying
  }
  // The source that held rank 0 moves to rank 1 (as a stale process would): its rank 0 entry
  // goes, so `other` may take rank 0 at once.
  Joiner moved = joiners[0];
  moved.rank = 1;
  EXPECT_EQ(join(session, moved, kSecond).kind, Kind::waiting);
  EXPECT_EQ(join(session, other, kSecond).kind, Kind::waiting);
}

TEST_F(SessionJoin, PendingJoinsThatAreNotRepeatedExpire) {
  Session session(config(2));
  Joiner stray{1, 0xbad, {kHostA, 7777}, /*threads=*/2};
  EXPECT_EQ(join(session, stray, 0).kind, Kind::waiting);
  // Rank 1's real JOIN never comes; rank 0 keeps retrying well after the stray expired, and
  // the stray no longer counts towards a generation (nor vetoes one).
  const auto joiners = job(2, 10);
  EXPECT_NE(join_all(session, joiners, 2 * kSecond), nullptr);
}

TEST_F(SessionJoin, RanksThatDisagreeLearnWhichRankDiffersFromWhere) {
  Session session(config(3));
  auto joiners = job(3, 10);
  joiners[1].window = 8;
  joiners[1].from.address = kHostB;
  for (const Joiner& j : joiners) {
    EXPECT_EQ(join(session, j, 0).kind, Kind::waiting) << "no verdict before every rank confirmed";
  }
  EXPECT_EQ(join(session, joiners[0], 0).kind, Kind::waiting);
  EXPECT_EQ(join(session, joiners[1], 0).kind, Kind::waiting);
  const JoinOutcome rejected = join(session, joiners[2], 0);
  ASSERT_EQ(rejected.kind, Kind::reject_all);
  EXPECT_EQ(rejected.error, ErrorCode::window_mismatch);
  EXPECT_EQ(rejected.expected, 4u) << "the value most ranks use";
  EXPECT_EQ(rejected.culprit_rank, 1);
  EXPECT_EQ(rejected.culprit_address, kHostB);
  EXPECT_EQ(rejected.culprit_value, 8u);
  EXPECT_EQ(rejected.notify.size(), 3u) << "every rank of the attempt";
}

TEST_F(SessionJoin, AnotherJobIsRefusedWhileTheGenerationIsInUse) {
  Session session(config(2));
  const Membership* first = join_all(session, job(2, 10), 0);
  ASSERT_NE(first, nullptr);
  first->last_active_ns.store(3 * kSecond);
  const auto second = job(2, 50);
  const JoinOutcome refused = join(session, second[0], 4 * kSecond);
  EXPECT_EQ(refused.kind, Kind::reject_sender);
  EXPECT_EQ(refused.error, ErrorCode::session_busy);
  EXPECT_EQ(refused.expected, 1u) << "names the generation in use";
  EXPECT_EQ(join(session, second[1], 4 * kSecond).error, ErrorCode::session_busy);
  EXPECT_EQ(session.membership(), first) << "the first job keeps the session";
}

TEST_F(SessionJoin, AnIdleGenerationCanBeTakenOverAndTheNewOneRemembersTheOldToken) {
  Session session(config(2));
  const Membership* first = join_all(session, job(2, 10), 0);
  ASSERT_NE(first, nullptr);
  const Membership* second = join_all(session, job(2, 50), 6 * kSecond);  // idle timeout 5 s
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->generation, 2u);
  EXPECT_EQ(second->previous_token, first->token);
  EXPECT_NE(second->token, first->token);
}

TEST_F(SessionJoin, AfterARankLeavesAnotherJobMayJoinAtOnce) {
  Session session(config(2));
  const Membership* first = join_all(session, job(2, 10), 0);
  ASSERT_NE(first, nullptr);
  protocol::Header leave;
  leave.flags = protocol::flag::kLeave;
  leave.rank = 1;
  leave.token = first->token + 1;
  EXPECT_FALSE(session.leave(leave, {kHostA, 1100})) << "a wrong token does not count";
  leave.token = first->token;
  EXPECT_FALSE(session.leave(leave, {kHostA, 1100})) << "the token without the rank's secret does not count";
  leave.offset = first->secrets[0];
  EXPECT_FALSE(session.leave(leave, {kHostA, 1100})) << "nor another rank's secret";
  leave.offset = first->secrets[1];
  EXPECT_FALSE(session.leave(leave, {kHostA, 1101})) << "nor another port";
  EXPECT_TRUE(session.leave(leave, {kHostA, 1100}));
  EXPECT_NE(join_all(session, job(2, 50), 1), nullptr);
}

// docs/protocol.md §6.7: a rank is gone when it left, or when no keepalive came from it for
// longer than the liveness timeout (ticks, 32-bit); the join counts as hearing every rank.
TEST_F(SessionJoin, RanksAreGoneWhenTheyLeaveOrFallSilentBeyondTheLivenessTimeout) {
  SessionConfig c = config(3);
  c.liveness_timeout = std::chrono::milliseconds(1000);
  Session session(c);
  const std::uint32_t liveness = session.limits().liveness_ticks;
  EXPECT_EQ(liveness, protocol::timeout_ticks(1'000'000));
  const std::uint64_t joined_ns = 0xffff0000ull << 16;  // the tick counter wraps in between
  const std::uint32_t t0 = protocol::ticks_of_ns(joined_ns);
  const Membership* members = join_all(session, job(3, 10), joined_ns);
  ASSERT_NE(members, nullptr);
  EXPECT_EQ(members->gone(t0 + liveness, liveness), 0u) << "not more than the timeout yet";
  EXPECT_EQ(members->gone(t0 + liveness + 1, liveness), 0b111u);

  protocol::Header keepalive;
  keepalive.flags = protocol::flag::kKeepalive;
  keepalive.session = 3;
  keepalive.rank = 1;
  keepalive.token = members->token;
  EXPECT_TRUE(session.keepalive(keepalive, {kHostA, 1100}, t0 + 100));
  keepalive.token = members->token + 1;
  EXPECT_FALSE(session.keepalive(keepalive, {kHostA, 1100}, t0 + 200)) << "a wrong token";
  keepalive.token = members->token;
  EXPECT_FALSE(session.keepalive(keepalive, {kHostA, 1000}, t0 + 200)) << "rank 0's socket claiming rank 1";
  EXPECT_FALSE(session.keepalive(keepalive, {kHostB, 1100}, t0 + 200)) << "a socket outside the table";
  EXPECT_EQ(members->gone(t0 + liveness + 1, liveness), 0b101u);
  EXPECT_EQ(members->gone(t0 + liveness + 100, liveness), 0b101u);
  EXPECT_EQ(members->gone(t0 + liveness + 101, liveness), 0b111u);

  EXPECT_TRUE(session.keepalive(keepalive, {kHostA, 1100}, t0 + 300));
  protocol::Header leave;
  leave.flags = protocol::flag::kLeave;
  leave.rank = 2;
  leave.token = members->token;
  leave.offset = members->secrets[2];
  ASSERT_TRUE(session.leave(leave, {kHostA, 1200}));
  EXPECT_EQ(members->gone(t0 + 301, liveness), 0b100u) << "a rank that left is gone at once";
}

TEST_F(SessionJoin, MembersRejoinWithTheCurrentTokenWhileTheSessionIsInUse) {
  Session session(config(2));
  const Membership* first = join_all(session, job(2, 10), 0);
  ASSERT_NE(first, nullptr);
  EXPECT_NE(first->secrets[0], 0u);
  EXPECT_NE(first->secrets[0], first->secrets[1]) << "one secret per rank";

  // A process on the members' host that read the token from the wire, from its own sockets:
  // without the ranks' secrets it is just another job.
  for (int r = 0; r < 2; ++r) {
    Joiner thief{r, 66, {kHostA, static_cast<std::uint16_t>(3000 + r)}};
    thief.token = first->token;
    thief.secret = first->secrets[1 - r];  // even with another rank's secret
    const JoinOutcome refused = join(session, thief, 1);
    EXPECT_EQ(refused.error, ErrorCode::session_busy) << "rank " << r;
    EXPECT_EQ(join(session, thief, 1).error, ErrorCode::session_busy) << "rank " << r;
  }
  EXPECT_EQ(session.membership(), first);

  auto rejoin = job(2, 90);  // new sockets, new nonces, the same host
  for (Joiner& j : rejoin) {
    j.token = first->token;
    j.secret = first->secrets[static_cast<std::size_t>(j.rank)];
    j.from.port = static_cast<std::uint16_t>(j.from.port + 5);
  }
  const Membership* second = join_all(session, rejoin, 1);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->generation, 2u);

  // The replaced generation's ranks, from any socket, learn that the session was taken over.
  Joiner evicted{0, 91, {kHostA, 4000}};
  evicted.token = first->token;
  const JoinOutcome taken = join(session, evicted, 2);
  EXPECT_EQ(taken.error, ErrorCode::session_taken_over);
  EXPECT_EQ(taken.expected, 2u) << "names the new generation";

  // A rejoin with the token from another host is just another job.
  Session other(config(2));
  const Membership* mine = join_all(other, job(2, 10), 0);
  Joiner intruder{0, 77, {kHostB, 1000}};
  intruder.token = mine->token;
  intruder.secret = mine->secrets[0];
  EXPECT_EQ(join(other, intruder, 1).error, ErrorCode::session_busy);
}

TEST_F(SessionJoin, ReplacedGenerationsAreFreedAfterTheirGracePeriod) {
  Session session(config(2));
  const Membership* current = join_all(session, job(2, 10), 0);
  // A job that rejoins in a loop: every generation replaces the last within the grace period.
  for (std::uint32_t n = 1; n <= 50; ++n) {
    auto rejoin = job(2, 100 * n);
    for (Joiner& j : rejoin) {
      j.token = current->token;
      j.secret = current->secrets[static_cast<std::size_t>(j.rank)];
    }
    current = join_all(session, rejoin, n * 1000);
    ASSERT_NE(current, nullptr);
  }
  EXPECT_EQ(session.retired_generations(), 50u) << "within the grace period nothing is freed";
  EXPECT_EQ(session.membership(), current);

  // The next join after the grace period frees every generation replaced before it.
  auto rejoin = job(2, 9000);
  for (Joiner& j : rejoin) j.token = current->token;
  const std::uint32_t previous_token = current->token;
  current = join_all(session, rejoin, 11 * kSecond);
  ASSERT_NE(current, nullptr);
  EXPECT_EQ(session.retired_generations(), 1u) << "only the generation it just replaced";
  EXPECT_EQ(current->previous_token, previous_token);
  EXPECT_EQ(current->generation, 52u);
}

}  // namespace
}  // namespace dpa::sw

// SPDX-License-Identifier: Apache-2.0
// The WorkerEngine step machine driven packet by packet on a fake clock: the test plays the
// switch and the transport, calls start/on_packet/poll with the time it chooses and takes the
// packets the engine queues. No threads, no sockets, no sleeps, so the timers are exact.
// docs/protocol.md §9 is the specification these cases follow.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "dpa/config.hpp"
#include "dpa/error.hpp"
#include "engine/join.hpp"
#include "engine/operation.hpp"
#include "engine/worker_engine.hpp"
#include "protocol/auth.hpp"
#include "protocol/byte_order.hpp"
#include "protocol/packet_mac.hpp"
#include "protocol/wire.hpp"
#include "quant/quant.hpp"
#include "../captured_log.hpp"
#include "engine_test_packets.hpp"
#include "memory_queue.hpp"

namespace dpa::detail {
namespace {

using namespace engine_test;

using namespace std::chrono_literals;
using protocol::Header;
using transport::Endpoint;
namespace flag = protocol::flag;

constexpr std::uint64_t kMs = 1'000'000;  // nanoseconds
constexpr std::uint64_t kStart = 1000 * kMs;

const Endpoint kStranger{0x7f000001, 4243};

// Slot and sequence number of round r of window entry e of thread t (window 2 unless a test
// changes it: `window`).
std::uint32_t slot_of(std::uint32_t e, std::uint64_t round, std::uint32_t thread = 0,
                      std::uint32_t window = 2) {
  return kPoolBase + thread * 2 * window + 2 * e + static_cast<std::uint32_t>(round & 1);
}

// ---- Packets ------------------------------------------------------------------------------------

struct Sent {
  std::uint64_t at = 0;  // fake time it was flushed
  Header h;
  std::vector<std::byte> bytes;
  Endpoint to;
  const void* buffer = nullptr;  // the transmit buffer it went in (the queue's handle)

  [[nodiscard]] bool is_probe() const {
    return bytes.size() == protocol::kHeaderSize && h.has(flag::kSyn);
  }
  // P values, or header only for the exponent-priming request (count 0).
  [[nodiscard]] bool is_data() const {
    return !h.has(flag::kSyn) && (bytes.size() == protocol::kHeaderSize + 4 * kPayload ||
                                  (bytes.size() == protocol::kHeaderSize && h.count == 0));
  }
  [[nodiscard]] std::vector<std::int32_t> values() const {
    std::vector<std::int32_t> v((bytes.size() - protocol::kHeaderSize) / 4);
    for (std::size_t i = 0; i < v.size(); ++i) {
      v[i] = static_cast<std::int32_t>(
          protocol::load_be32(bytes.data() + protocol::kHeaderSize + 4 * i));
    }
    return v;
  }
  [[nodiscard]] std::string describe() const {
    std::ostringstream s;
    s << "t=" << (at - kStart) / kMs << "ms " << bytes.size() << " bytes, flags 0x" << std::hex
      << h.flags << std::dec << ", op " << h.op_id << ", slot " << h.slot << ", seq " << h.seq
      << ", offset " << h.offset << ", count " << h.count;
    return s.str();
  }
};

// The header of the result a switch sends for the round of packet p.
Header result_for(const Sent& p, std::uint16_t flags = flag::kResult) {
  return engine_test::result_for(p.h, flags);
}

// ---- Operations ---------------------------------------------------------------------------------

constexpr std::int32_t kIntSentinel = -777777;

template <typename T>
struct Job {
  std::vector<T> in;
  std::vector<T> out;
  std::vector<std::uint64_t> contributors;
  std::shared_ptr<Operation> op = std::make_shared<Operation>();
};

template <typename T>
void bind(Job<T>& job, DataType type, std::uint32_t op_id, int parts) {
  job.contributors.assign((job.in.size() + kPayload - 1) / kPayload, 0xdeadbeef);
  job.op->in = reinterpret_cast<const std::byte*>(job.in.data());
  job.op->out = reinterpret_cast<std::byte*>(job.out.data());
  job.op->count = job.in.size();
  job.op->type = type;
  job.op->op_id = op_id;
  job.op->block_contributors = job.contributors.data();
  job.op->parts_remaining = parts;
}

Job<std::int32_t> int_job(std::size_t count, std::uint32_t op_id = kOpId, int parts = 1) {
  Job<std::int32_t> job;
  for (std::size_t i = 0; i < count; ++i) job.in.push_back(static_cast<std::int32_t>(7 * (i + 1)));
  job.out.assign(count, kIntSentinel);
  bind(job, DataType::int32, op_id, parts);
  return job;
}

// Blocks of different magnitudes, so that their exponents differ.
Job<float> float_job(std::size_t count) {
  Job<float> job;
  for (std::size_t i = 0; i < count; ++i) {
    job.in.push_back(std::ldexp(static_cast<float>(i % 3 + 1), static_cast<int>(i / kPayload) - 1));
  }
  job.out.assign(count, -1.0f);
  bind(job, DataType::float32, kOpId, 1);
  return job;
}

std::int8_t exponent(const Job<float>& job, std::size_t block) {
  const std::size_t begin = block * kPayload;
  return quant::block_exponent(job.in.data() + begin,
                               std::min<std::size_t>(kPayload, job.in.size() - begin));
}

// What the switch adds for rank 1 in int32 operations.
std::int32_t other_rank(std::size_t element) { return 1000 + static_cast<std::int32_t>(element); }

template <typename E>
std::string error_of(const Operation& op) {
  EXPECT_TRUE(op.complete());
  try {
    (void)op.result();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unexpected exception type: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "the operation succeeded; an error was expected";
  return {};
}

OpStats result_of(const Operation& op) {
  EXPECT_TRUE(op.complete()) << "operation not complete";
  try {
    return op.result();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "the operation failed: " << e.what();
    return {};
  }
}

// ---- One engine, its fake transport and clock ---------------------------------------------------

class Harness {
 public:
  Harness(std::uint32_t thread, const Config& config, const SessionInfo& session,
          std::uint64_t& now)
      : engine(thread, config, session, queue), now_(now) {}
  // On a queue that reports a lossless medium (shared memory's).
  Harness(transport::testing::MemoryQueue::Lossless lossless, const Config& config,
          const SessionInfo& session, std::uint64_t& now)
      : queue(lossless), engine(0, config, session, queue), now_(now) {}

  void start(Operation& op) {
    engine.start(op, now_);
    flush();
  }
  // A datagram arrives now (then the engine polls, as a runner does after each batch).
  void arrive(const Header& h, std::span<const std::int32_t> values = {}, Endpoint from = kSwitch) {
    arrive_bytes(encode_packet(h, values), from);
  }
  void arrive_bytes(std::vector<std::byte> bytes, Endpoint from = kSwitch) {
    engine.on_packet({std::span<std::byte>(bytes), from}, now_);
    engine.poll(now_);
    flush();
  }
  void poll() {
    engine.poll(now_);
    flush();
  }

  // The first packet not yet taken that matches; fails the test (throws) when there is none.
  Sent take(const std::function<bool(const Sent&)>& match, const std::string& what) {
    const auto found = std::find_if(pending_.begin(), pending_.end(), match);
    if (found == pending_.end()) {
      std::string message = "no " + what + " from the engine; sent so far:";
      for (const Sent& s : log) message += "\n  " + s.describe();
      throw std::runtime_error(message);
    }
    Sent s = *found;
    pending_.erase(found);
    return s;
  }
  Sent take_data(std::uint32_t slot, std::uint32_t seq) {
    return take([=](const Sent& s) { return s.is_data() && s.h.slot == slot && s.h.seq == seq; },
                "data packet for slot " + std::to_string(slot) + " seq " + std::to_string(seq));
  }
  Sent take_probe(std::uint32_t slot, std::uint32_t seq) {
    return take([=](const Sent& s) { return s.is_probe() && s.h.slot == slot && s.h.seq == seq; },
                "SYN probe for slot " + std::to_string(slot) + " seq " + std::to_string(seq));
  }
  [[nodiscard]] bool nothing_pending() const { return pending_.empty(); }
  [[nodiscard]] std::string pending() const {
    std::string text;
    for (const Sent& s : pending_) text += "\n  " + s.describe();
    return text;
  }

  // Answers an int32 data packet with the RESULT of a complete round: own values plus rank 1's.
  std::vector<std::int32_t> answer_int(const Sent& p, std::uint16_t flags = flag::kResult) {
    std::vector<std::int32_t> sums = p.values();
    for (std::size_t i = 0; i < p.h.count; ++i) sums[i] += other_rank(p.h.offset + i);
    arrive(result_for(p, flags), sums);
    return sums;
  }

  transport::testing::MemoryQueue queue;  // declared first: it outlives the engine's buffers
  WorkerEngine engine;
  std::vector<Sent> log;  // everything flushed

 private:
  void flush() {
    for (const transport::TxRequest& packet : engine.outgoing()) {
      Sent s;
      s.at = now_;
      const std::span<const std::byte> bytes = packet.buffer->bytes();
      s.bytes.assign(bytes.begin(), bytes.end());
      s.to = packet.to;
      s.buffer = packet.buffer->native;
      std::span<const std::byte> payload;
      EXPECT_EQ(protocol::decode(s.bytes, s.h, payload), protocol::DecodeStatus::ok);
      EXPECT_EQ(s.to, kSwitch);
      log.push_back(s);
      pending_.push_back(std::move(s));
    }
    engine.clear_outgoing();
  }

  std::uint64_t& now_;
  std::deque<Sent> pending_;
};

class EngineStep : public ::testing::Test {
 protected:
  EngineStep() {
    config.rank = 0;
    config.world_size = kWorld;
    config.session = kSession;
    config.threads = 1;
    config.window = 2;
    config.payload = kPayload;
    config.retransmit_timeout = 2ms;
    config.max_retransmit_timeout = 8ms;
    config.timeout = 300ms;
    session.payload = kPayload;
    session.world_size = kWorld;
    session.k_default = static_cast<std::uint8_t>(kWorld);
    session.straggler_timeout = 0us;
    session.pool_base = kPoolBase;
    session.generation = 1;
    session.switch_ports = {kSwitch};
  }

  Harness& engine(std::uint32_t thread = 0) {
    while (harnesses_.size() <= thread) {
      harnesses_.push_back(std::make_unique<Harness>(static_cast<std::uint32_t>(harnesses_.size()),
                                                     config, session, now));
    }
    return *harnesses_[thread];
  }
  // Moves the clock to the engine's next deadline and polls.
  void expire(Harness& h) {
    ASSERT_TRUE(h.engine.busy());
    now = h.engine.next_deadline();
    h.poll();
  }
  // Interval from now to the engine's next deadline (its current RTO after a send).
  std::uint64_t rto(Harness& h) const { return h.engine.next_deadline() - now; }

  template <typename T>
  static void expect_own_input(const Job<T>& job, std::size_t block) {
    for (std::size_t i = block * kPayload;
         i < std::min<std::size_t>((block + 1) * kPayload, job.in.size()); ++i) {
      EXPECT_EQ(job.out[i], job.in[i]) << "missed block " << block << ", element " << i;
    }
  }
  static void expect_int_block(const Job<std::int32_t>& job, std::size_t block,
                               std::span<const std::int32_t> values) {
    for (std::size_t i = block * kPayload;
         i < std::min<std::size_t>((block + 1) * kPayload, job.in.size()); ++i) {
      EXPECT_EQ(job.out[i], values[i - block * kPayload]) << "block " << block << ", element " << i;
    }
  }

  Config config;
  SessionInfo session;
  std::uint64_t now = kStart;

 private:
  std::vector<std::unique_ptr<Harness>> harnesses_;
};

// ---- Normal completion --------------------------------------------------------------------------

TEST_F(EngineStep, EveryBlockDeliveredWhateverTheCountAndWindow) {
  struct Case {
    std::size_t count;
    int window;
  };
  for (const Case c : {Case{1, 1}, Case{4, 2}, Case{14, 2}, Case{33, 3}, Case{40, 8}, Case{5, 4}}) {
    SCOPED_TRACE("count " + std::to_string(c.count) + ", window " + std::to_string(c.window));
    config.window = c.window;
    Harness h(0, config, session, now);
    auto job = int_job(c.count);
    h.start(*job.op);
    const std::size_t blocks = (c.count + kPayload - 1) / kPayload;
    // Every entry with blocks has one packet in flight; answer them in turn until done.
    for (std::size_t answered = 0; answered < blocks; ++answered) {
      ASSERT_TRUE(h.engine.busy());
      const Sent p = h.take([](const Sent& s) { return s.is_data(); }, "data packet");
      EXPECT_EQ(p.h.offset % kPayload, 0u);
      EXPECT_EQ(p.h.slot, kPoolBase + 2 * ((p.h.offset / kPayload) % c.window) +
                              (p.h.offset / kPayload / c.window) % 2);
      h.answer_int(p);
    }
    EXPECT_FALSE(h.engine.busy());
    EXPECT_EQ(h.engine.next_deadline(), std::numeric_limits<std::uint64_t>::max());
    EXPECT_TRUE(h.nothing_pending()) << h.pending();
    const OpStats stats = result_of(*job.op);
    EXPECT_EQ(stats.blocks, blocks);
    EXPECT_EQ(stats.blocks_full, blocks);
    EXPECT_EQ(stats.contributed, blocks);
    EXPECT_EQ(stats.retransmissions + stats.timeouts + stats.blocks_missed, 0u);
    for (std::size_t i = 0; i < c.count; ++i) {
      EXPECT_EQ(job.out[i], job.in[i] + other_rank(i)) << "element " << i;
    }
    EXPECT_EQ(job.contributors, std::vector<std::uint64_t>(blocks, 0b11));
  }
}

TEST_F(EngineStep, RepliesFromAStrangerOrUndecodableAreIgnored) {
  Harness& h = engine();
  auto job = int_job(4);
  h.start(*job.op);
  const Sent p = h.take_data(slot_of(0, 0), 1);
  const std::vector<std::int32_t> bogus(kPayload, 999);
  h.arrive(result_for(p), bogus, kStranger);
  std::vector<std::byte> truncated(protocol::kHeaderSize - 1);
  h.engine.on_packet({std::span<std::byte>(truncated), kSwitch}, now);
  EXPECT_TRUE(h.engine.busy());
  const std::vector<std::int32_t> sums = h.answer_int(p);
  (void)result_of(*job.op);
  expect_int_block(job, 0, sums);
}

// §6.6: in an authenticated session the engine seals its requests, and a RESULT with the right
// token from the switch's address but without this rank's reply tag (none, a wrong one, the
// request key's, or a tag over other values) is a forgery: dropped before it is looked at,
// counted in replies_rejected, and the genuine result still completes the operation.
// Both data MACs a generation may choose (protocol.md §6.6).
class AuthenticatedEngineStep : public EngineStep, public ::testing::WithParamInterface<protocol::DataMac> {
 protected:
  // Rank `rank`'s data MACs of one generation under `session_key`, of the MAC under test.
  static protocol::PacketMacs macs_of(const protocol::AuthKey& session_key, std::uint32_t rank) {
    const protocol::AuthKey rank_key = protocol::derive_rank_key(session_key, rank);
    if (GetParam() == protocol::DataMac::siphash24) return protocol::siphash24_macs(protocol::tag_keys(rank_key));
    return protocol::aes256gcm_macs(rank_key, {1, 1, 0x5eed, 0x5ec2e7, 0x1000, 42});
  }
};

TEST_P(AuthenticatedEngineStep, ForgedResultsAreDroppedAndCountedInAnAuthenticatedSession) {
  if (!protocol::auth_available()) GTEST_SKIP() << "this build of dpa has no libsodium";
  if (GetParam() == protocol::DataMac::aes256gcm && !protocol::aes256gcm_available()) {
    GTEST_SKIP() << "this CPU lacks AES-NI and PCLMUL";
  }
  const protocol::AuthKey session_key = protocol::random_auth_key();
  const protocol::PacketMacs keys = macs_of(session_key, 0);
  const protocol::PacketMacs other_rank_keys = macs_of(session_key, 1);
  session.token = 0x5eed;
  session.tag_keys = protocol::tag_keys(protocol::derive_rank_key(session_key, 0));
  session.data_macs = keys;  // the session authenticates data (its JOIN ack said so, and how)
  Harness& h = engine();
  auto job = int_job(kPayload);
  h.start(*job.op);

  const Sent request = h.take([](const Sent& s) { return !s.h.has(flag::kSyn); }, "data packet");
  ASSERT_TRUE(request.h.has(flag::kAuth));
  EXPECT_EQ(request.h.has(flag::kGcm), GetParam() == protocol::DataMac::aes256gcm);
  const std::size_t trailer = keys.request.trailer_size();
  ASSERT_EQ(request.bytes.size(), protocol::kHeaderSize + 4 * kPayload + trailer);
  EXPECT_TRUE(keys.request.verify(request.bytes));
  EXPECT_EQ(request.h.token, session.token);
  // The switch's side: its thread's nonces for the replies.
  protocol::NonceCounter switch_nonces(0);

  std::vector<std::int32_t> sums(kPayload);
  for (std::size_t i = 0; i < kPayload; ++i) sums[i] = job.in[i] + other_rank(i);
  Header reply = result_for(request);
  reply.token = session.token;
  reply.flags = static_cast<std::uint16_t>(reply.flags | flag::kAuth);
  // A reply sealed with `key`, after `tamper` changed its bytes.
  const auto sealed = [&](const protocol::PacketMac& key, std::span<const std::int32_t> values,
                          const std::function<void(std::vector<std::byte>&)>& tamper = {}) {
    std::vector<std::byte> bytes = encode_packet(reply, values);
    const std::size_t size = bytes.size();
    bytes.resize(size + protocol::kMaxTrailerSize);
    bytes.resize(key.seal(bytes.data(), size, switch_nonces));
    if (tamper) tamper(bytes);
    return bytes;
  };
  const std::vector<std::int32_t> forged(kPayload, 999);
  Header untagged = result_for(request);
  untagged.token = session.token;

  struct Forgery {
    const char* what;
    std::vector<std::byte> bytes;
  };
  std::vector<Forgery> forgeries = {
      {"no tag, no AUTH flag", encode_packet(untagged, forged)},
      {"AUTH flag, tag of zeros", sealed(keys.reply, forged, [](auto& b) {
         std::fill(b.end() - protocol::kTagSize, b.end(), std::byte{0});
       })},
      {"the rank's request key (a reflected request)", sealed(keys.request, forged)},
      {"another rank's reply key", sealed(other_rank_keys.reply, forged)},
      {"the right tag over the real sums, then one value changed",
       sealed(keys.reply, sums, [](auto& b) { b[protocol::kHeaderSize + 3] ^= std::byte{1}; })},
  };
  if (protocol::aes256gcm_available()) {  // the other MAC's trailer: a downgrade, or an upgrade
    forgeries.push_back({"the other MAC", sealed(GetParam() == protocol::DataMac::siphash24
                                                     ? protocol::PacketMac::aes256gcm(session_key)
                                                     : protocol::siphash24_macs(*session.tag_keys).reply,
                                                 forged)});
  }
  for (const Forgery& forgery : forgeries) {
    SCOPED_TRACE(forgery.what);
    h.arrive_bytes(forgery.bytes);
    EXPECT_TRUE(h.engine.busy());
    EXPECT_FALSE(job.op->complete());
  }
  EXPECT_TRUE(std::all_of(job.out.begin(), job.out.end(), [](std::int32_t v) { return v == kIntSentinel; }));

  h.arrive_bytes(sealed(keys.reply, sums));
  const OpStats stats = result_of(*job.op);
  EXPECT_EQ(stats.replies_rejected, forgeries.size());
  expect_int_block(job, 0, sums);
}

INSTANTIATE_TEST_SUITE_P(Macs, AuthenticatedEngineStep,
                         ::testing::Values(protocol::DataMac::siphash24, protocol::DataMac::aes256gcm),
                         [](const auto& mac) { return std::string(protocol::to_string(mac.param)); });

// ---- Loss ---------------------------------------------------------------------------------------

// §9.1 / §9.2 step 3: the timer sends a header-only probe; a probe reply without this rank's
// contribution resends the data packet at once, byte for byte: the same transmit buffer again.
TEST_F(EngineStep, LostRequestIsResentWhenTheProbeReplyLacksThisRank) {
  struct Case {
    std::string name;
    Header reply;
  };
  const std::vector<Case> cases = {
      {"fresh slot", make_header(flag::kSyn, slot_of(0, 0), 0, 0, 0, 0, 0, 0)},
      {"slot holds an earlier operation",
       make_header(flag::kSyn, slot_of(0, 0), 1, 0, 0, 2, 0b11, kOpId - 1)},
      {"round open without this rank", make_header(flag::kSyn, slot_of(0, 0), 1, 0, 0, 1, 0b10)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Harness h(0, config, session, now);
    auto job = int_job(4);
    h.start(*job.op);
    const Sent lost = h.take_data(slot_of(0, 0), 1);
    EXPECT_EQ(rto(h), 2 * kMs);
    now += 2 * kMs;
    h.poll();
    const Sent probe = h.take_probe(slot_of(0, 0), 1);
    EXPECT_EQ(probe.h.op_id, kOpId);
    EXPECT_TRUE(h.nothing_pending()) << "only a probe on a timeout" << h.pending();
    now += kMs / 2;
    h.arrive(c.reply);
    const Sent again = h.take_data(slot_of(0, 0), 1);
    EXPECT_EQ(again.bytes, lost.bytes);
    EXPECT_EQ(again.buffer, lost.buffer) << "a retransmission sends the same buffer, not a copy";
    const std::vector<std::int32_t> sums = h.answer_int(again);
    const OpStats stats = result_of(*job.op);
    expect_int_block(job, 0, sums);
    EXPECT_EQ(stats.timeouts, 1u);
    EXPECT_EQ(stats.retransmissions, 2u);  // the probe and the data
    EXPECT_EQ(stats.blocks_full, 1u);
    EXPECT_LE(h.queue.held(), 2u * static_cast<std::size_t>(config.window))
        << "an entry holds at most its data packet and its probe";
  }
}

TEST_F(EngineStep, CountedProbeReplyKeepsWaitingWithoutResending) {
  Harness& h = engine();
  auto job = int_job(4);
  h.start(*job.op);
  const Sent data = h.take_data(slot_of(0, 0), 1);
  expire(h);
  const Sent first_probe = h.take_probe(slot_of(0, 0), 1);
  h.arrive(make_header(flag::kSyn, slot_of(0, 0), 1, 0, 0, 1, 0b01));
  EXPECT_TRUE(h.nothing_pending()) << h.pending();
  expire(h);
  const Sent second_probe = h.take_probe(slot_of(0, 0), 1);
  EXPECT_EQ(second_probe.at - kStart, 6 * kMs);
  EXPECT_EQ(second_probe.buffer, first_probe.buffer) << "every probe of a round is one buffer";
  const std::vector<std::int32_t> sums =
      h.answer_int(data, flag::kResult | flag::kRetransmit | flag::kSyn);
  const OpStats stats = result_of(*job.op);
  expect_int_block(job, 0, sums);
  EXPECT_EQ(stats.timeouts, 2u);
  EXPECT_EQ(stats.retransmissions, 2u);
}

// §9.6: the multicast to this rank is lost; the retransmission probe fetches a unicast copy.
TEST_F(EngineStep, LostMulticastIsFetchedByTheProbe) {
  Harness& h = engine();
  auto job = int_job(4);
  h.start(*job.op);
  const Sent data = h.take_data(slot_of(0, 0), 1);
  expire(h);
  const Sent probe = h.take_probe(slot_of(0, 0), 1);
  const std::vector<std::int32_t> sums =
      h.answer_int(data, flag::kResult | flag::kRetransmit | flag::kSyn);
  const OpStats stats = result_of(*job.op);
  expect_int_block(job, 0, sums);
  EXPECT_EQ(stats.blocks_full, 1u);
  EXPECT_EQ(stats.blocks_missed, 0u);
  EXPECT_EQ(stats.timeouts, 1u);
  EXPECT_EQ(stats.retransmissions, 1u);
  EXPECT_EQ(stats.syn_probes, 0u);  // a retransmission probe, not a skip-forward fetch
  EXPECT_EQ(h.log.size(), 2u) << "the data went once";
}

// §9.2 step 5: a result about the entry's other slot means the current round completed: the
// probe goes now, without counting a timeout or backing off.
TEST_F(EngineStep, ResultAboutTheOtherSlotExpeditesTheProbe) {
  Harness& h = engine();
  auto job = int_job(4);
  h.start(*job.op);
  const Sent data = h.take_data(slot_of(0, 0), 1);
  now += kMs / 2;
  h.arrive(make_header(flag::kResult, slot_of(0, 1), 1, 0, 4),
           std::vector<std::int32_t>(kPayload, 9));
  const Sent probe = h.take_probe(slot_of(0, 0), 1);
  EXPECT_EQ(probe.at, now);
  EXPECT_EQ(rto(h), 2 * kMs) << "an expedited probe does not back off";
  EXPECT_FALSE(job.op->complete());
  const std::vector<std::int32_t> sums =
      h.answer_int(data, flag::kResult | flag::kRetransmit | flag::kSyn);
  const OpStats stats = result_of(*job.op);
  expect_int_block(job, 0, sums);
  EXPECT_EQ(stats.timeouts, 0u);
  EXPECT_EQ(stats.retransmissions, 1u);
}

// ---- Skip forward (§9.5) ------------------------------------------------------------------------

TEST_F(EngineStep, OldOpenRoundIsJoinedAndTheRoundsBeforeItAreMissed) {
  Harness& h = engine();
  auto job = int_job(24);  // entry 0: blocks 0, 2, 4 in rounds 0..2; entry 1: blocks 1, 3, 5
  h.start(*job.op);
  (void)h.take_data(slot_of(0, 0), 1);
  now += kMs;
  h.arrive(make_header(flag::kOld, slot_of(0, 0), 2, 16, 0, 1, 0b10));
  const Sent d4 = h.take_data(slot_of(0, 2), 2);
  EXPECT_EQ(d4.h.offset, 16u);
  const std::vector<std::int32_t> r4 = h.answer_int(d4);
  std::vector<std::vector<std::int32_t>> results(6);
  for (std::uint64_t round = 0; round < 3; ++round) {
    results[1 + 2 * round] = h.answer_int(h.take_data(slot_of(1, round), seq_of(round)));
  }
  const OpStats stats = result_of(*job.op);
  expect_own_input(job, 0);
  expect_own_input(job, 2);
  expect_int_block(job, 4, r4);
  for (const std::size_t b : {1u, 3u, 5u}) expect_int_block(job, b, results[b]);
  EXPECT_EQ(stats.blocks_missed, 2u);
  EXPECT_EQ(stats.missed, (std::vector<ElementRange>{{0, 4}, {8, 12}}));
  EXPECT_EQ(job.contributors, (std::vector<std::uint64_t>{0, 0b11, 0, 0b11, 0b11, 0b11}));
}

TEST_F(EngineStep, OldCompleteRoundIsFetchedWithASynProbeThenTheEntryGoesOn) {
  config.window = 1;
  Harness& h = engine();
  auto job = int_job(20);  // one entry: blocks 0..4 in rounds 0..4
  h.start(*job.op);
  (void)h.take_data(slot_of(0, 0, 0, 1), 1);
  // The slot of round 0 is at round 2 (block 2), complete.
  h.arrive(make_header(flag::kOld | flag::kComplete, slot_of(0, 0, 0, 1), 2, 8, 0, 2, 0b11));
  const Sent fetch = h.take_probe(slot_of(0, 2, 0, 1), 2);
  EXPECT_EQ(fetch.h.op_id, kOpId);
  EXPECT_TRUE(h.nothing_pending()) << h.pending();
  // An OLD about the probed round: keep waiting for the probe's answer.
  h.arrive(make_header(flag::kOld | flag::kComplete, slot_of(0, 2, 0, 1), 2, 8, 0, 2, 0b11));
  EXPECT_TRUE(h.nothing_pending()) << h.pending();
  // The probe's timer resends the probe itself, the same buffer.
  expire(h);
  EXPECT_EQ(h.take_probe(slot_of(0, 2, 0, 1), 2).buffer, fetch.buffer);
  // The answer: round 2's stored result. Block 3 goes next.
  std::vector<std::int32_t> r2(kPayload);
  for (std::size_t i = 0; i < kPayload; ++i) r2[i] = 5 + other_rank(8 + i);
  h.arrive(make_header(flag::kResult | flag::kRetransmit | flag::kSyn, slot_of(0, 2, 0, 1), 2, 8, 4,
                       2, 0b11),
           r2);
  const std::vector<std::int32_t> r3 = h.answer_int(h.take_data(slot_of(0, 3, 0, 1), 2));
  const std::vector<std::int32_t> r4 = h.answer_int(h.take_data(slot_of(0, 4, 0, 1), 3));
  const OpStats stats = result_of(*job.op);
  expect_own_input(job, 0);
  expect_own_input(job, 1);
  expect_int_block(job, 2, r2);
  expect_int_block(job, 3, r3);
  expect_int_block(job, 4, r4);
  EXPECT_EQ(stats.blocks_missed, 2u);
  EXPECT_EQ(stats.syn_probes, 1u);
  EXPECT_EQ(stats.timeouts, 1u);
  EXPECT_EQ(stats.blocks_full, 3u);
}

TEST_F(EngineStep, SynDisabledSkipsTheCompleteRoundToo) {
  config.syn_disable = true;
  config.window = 1;
  Harness& h = engine();
  auto job = int_job(20);  // one entry: blocks 0..4 in rounds 0..4
  h.start(*job.op);
  (void)h.take_data(slot_of(0, 0, 0, 1), 1);
  h.arrive(make_header(flag::kOld | flag::kComplete, slot_of(0, 0, 0, 1), 2, 8, 0, 2, 0b11));
  // Rounds 0..2 missed, round 2 included; block 3 goes at once, no probe.
  const Sent d3 = h.take_data(slot_of(0, 3, 0, 1), 2);
  EXPECT_EQ(d3.h.offset, 12u);
  EXPECT_TRUE(h.nothing_pending()) << h.pending();
  (void)h.answer_int(d3);
  (void)h.answer_int(h.take_data(slot_of(0, 4, 0, 1), 3));
  const OpStats stats = result_of(*job.op);
  for (const std::size_t b : {0u, 1u, 2u}) expect_own_input(job, b);
  EXPECT_EQ(stats.blocks_missed, 3u);
  EXPECT_EQ(stats.missed, (std::vector<ElementRange>{{0, 12}}));  // ranges merge
  EXPECT_EQ(stats.syn_probes, 0u);
}

TEST_F(EngineStep, LaterOperationOnTheCurrentSlotMissesTheRestOfTheEntry) {
  Harness& h = engine();
  auto job = int_job(24);  // entry 0: blocks 0, 2, 4; entry 1: blocks 1, 3, 5
  auto in_place = int_job(24);
  in_place.op->out = reinterpret_cast<std::byte*>(in_place.in.data());
  for (Job<std::int32_t>* j : {&job, &in_place}) {
    SCOPED_TRACE(j == &job ? "separate output" : "in place");
    j->op->op_id = kOpId + static_cast<std::uint32_t>(j == &job ? 0 : 1);
    const std::uint32_t op_id = j->op->op_id;
    const std::uint64_t base = j == &job ? 0 : 3;  // the second operation starts at round 3
    h.start(*j->op);
    (void)h.answer_int(h.take_data(slot_of(0, base), seq_of(base)));
    (void)h.take_data(slot_of(0, base + 1), seq_of(base + 1));
    h.arrive(make_header(flag::kResult, slot_of(0, base + 1), seq_of(base + 1) + 1, 0, 4, 2, 0b11,
                         op_id + 1),
             std::vector<std::int32_t>(kPayload, 999));
    for (std::uint64_t round = base; round < base + 3; ++round) {
      (void)h.answer_int(h.take_data(slot_of(1, round), seq_of(round)));
    }
    const OpStats stats = result_of(*j->op);
    EXPECT_EQ(stats.blocks_missed, 2u);
    EXPECT_EQ(stats.missed, (std::vector<ElementRange>{{8, 12}, {16, 20}}));
    EXPECT_EQ(j->contributors, (std::vector<std::uint64_t>{0b11, 0b11, 0, 0b11, 0, 0b11}));
    EXPECT_TRUE(h.nothing_pending()) << "entry 0 went on" << h.pending();
  }
  expect_own_input(job, 2);
  expect_own_input(job, 4);
  for (std::size_t i = 8; i < 12; ++i) {
    EXPECT_EQ(in_place.in[i], static_cast<std::int32_t>(7 * (i + 1))) << "in place: input kept";
  }
}

// ---- Give-up (§9.1) -----------------------------------------------------------------------------

// The give-up check runs when a deadline expires: with RTOs 2, 4, 8, 8, ... ms it fires at the
// first probe time at or after 300 ms, 302 ms. Its message depends on whether the switch said
// within the last two RTOs that it counted this rank.
TEST_F(EngineStep, GiveUpTimeoutNamesTheSwitchOrTheOtherRanks) {
  struct Case {
    std::string name;
    std::uint64_t answer_probes_until_ms;  // answer "counted, still open" until then
    std::string expected;
    bool stale_answers = false;  // answer with an earlier operation's result instead (ignored)
  };
  const std::vector<Case> cases = {
      {"never answered", 0,
       "no reply from the switch at 127.0.0.1:4242 for 300 ms (operation 5, "
       "thread 0, slot 100, round 1; DPA_TIMEOUT_MS or the process group's timeout): is dpa-switch running"},
      {"answered to the end", 1000,
       "the switch at 127.0.0.1:4242 holds this rank's contribution "
       "but the round waited 300 ms for rank 1 (operation 5, thread 0, "
       "slot 100, round 1; DPA_TIMEOUT_MS or the process group's timeout): other ranks did not send theirs"},
      {"answered about an earlier operation", 1000,
       "no reply from the switch at 127.0.0.1:4242 for 300 ms (operation 5, thread 0, slot 100, "
       "round 1; DPA_TIMEOUT_MS or the process group's timeout): is dpa-switch running, and are all ranks "
       "alive and running the same "
       "operations? (38 replies about this slot did not fit the round; the last: operation 4, "
       "slot 100, round 1, flags 0x0001, error none, contributors 2)",
       true},
  };
  // A round pending 200 ms is probed every 200 ms (a fifth of the liveness timeout), never past
  // the give-up.
  config.liveness_timeout = 1000ms;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    now = kStart;
    Harness h(0, config, session, now);
    auto job = int_job(4);
    h.start(*job.op);
    (void)h.take_data(slot_of(0, 0), 1);
    std::vector<std::uint64_t> probe_times;
    while (h.engine.busy()) {
      ASSERT_LT(now - kStart, 1000 * kMs) << "no give-up";
      expire(h);
      if (!h.engine.busy()) break;
      probe_times.push_back((h.take_probe(slot_of(0, 0), 1).at - kStart) / kMs);
      if (now - kStart < c.answer_probes_until_ms * kMs) {
        h.arrive(c.stale_answers ? make_header(flag::kResult, slot_of(0, 0), 1, 0, 0, 2, 0b11, kOpId - 1)
                                 : make_header(flag::kSyn, slot_of(0, 0), 1, 0, 0, 1, 0b01));
      }
    }
    EXPECT_EQ(now - kStart, 300 * kMs) << "the give-up is due at its own time, not a probe later";
    ASSERT_GE(probe_times.size(), 4u);
    EXPECT_EQ(std::vector<std::uint64_t>(probe_times.begin(), probe_times.begin() + 4),
              (std::vector<std::uint64_t>{2, 6, 14, 22}));
    if (c.answer_probes_until_ms > 0 && !c.stale_answers) {
      // Pending for 200 ms by the answer to the probe at 206 ms: the next one would go 200 ms
      // later, after the give-up at 300.
      EXPECT_EQ(probe_times.back(), 206u);
    }
    const std::string message = error_of<TimeoutError>(*job.op);
    EXPECT_EQ(message.rfind("rank 0: ", 0), 0u) << message;
    EXPECT_NE(message.find(c.expected), std::string::npos) << message;
    EXPECT_NE(message.find("all ranks alive and running the same operations?"), std::string::npos)
        << message;
    EXPECT_EQ(h.log.size(), 1 + probe_times.size()) << "the data went once";
    EXPECT_FALSE(h.engine.busy());
  }
}

TEST_F(EngineStep, AcceptedRepliesRestartTheGiveUpClock) {
  config.window = 1;
  Harness& h = engine();
  auto job = int_job(8);  // blocks 0, 1 in rounds 0, 1
  h.start(*job.op);
  (void)h.take_data(slot_of(0, 0, 0, 1), 1);
  now += 250 * kMs;
  // An accepted reply that asks for nothing (§9.2 step 10) still shows the slot alive.
  h.arrive(make_header(0, slot_of(0, 0, 0, 1), 1, 0, 0, 1, 0b01));
  while (now - kStart < 500 * kMs) {
    expire(h);
    ASSERT_TRUE(h.engine.busy()) << "gave up " << (now - kStart) / kMs << " ms after the start";
    (void)h.take_probe(slot_of(0, 0, 0, 1), 1);
  }
  while (h.engine.busy()) expire(h);
  EXPECT_GE(now - kStart, 550 * kMs);
  (void)error_of<TimeoutError>(*job.op);
}

// ---- Late ranks, dead ranks, a dead switch (docs/protocol.md §6.7) ------------------------------

// A rank minutes late (a checkpoint) fails nothing before the timeout: the pending replies show
// the switch alive, after its first second the entry probes once a second, and pending() names
// the operation and rank.
TEST_F(EngineStep, APendingRoundIsProbedOnceASecondUntilTheLateRankComes) {
  config.timeout = 120'000ms;
  config.pending_warn = 30'000ms;
  const dpa::test::CapturedLog log(spdlog::level::warn);
  Harness& h = engine();
  auto job = int_job(4);
  h.start(*job.op);
  const Sent data = h.take_data(slot_of(0, 0), 1);
  EXPECT_FALSE(h.engine.pending(now)) << "in flight is not pending";
  std::vector<std::uint64_t> probe_times;
  while (now - kStart < 90'000 * kMs) {
    expire(h);
    probe_times.push_back(h.take_probe(slot_of(0, 0), 1).at - kStart);
    h.arrive(make_header(flag::kSyn, slot_of(0, 0), 1, 0, 0, 1, 0b01));  // counted, waits for rank 1
  }
  EXPECT_EQ(probe_times[0], 2 * kMs);
  const auto slow = std::find_if(probe_times.begin(), probe_times.end(),
                                 [](std::uint64_t at) { return at >= 1000 * kMs; });
  ASSERT_NE(slow, probe_times.end());
  EXPECT_LE(slow - probe_times.begin(), 126) << "the back-off cap's pace (8 ms here) for the first second";
  for (auto it = slow + 1; it != probe_times.end(); ++it) {
    EXPECT_EQ(*it - *(it - 1), 1000 * kMs) << "probe at " << (*it - kStart) / kMs << " ms";
  }
  EXPECT_LE(probe_times.end() - slow, 91) << "no busy probing while the rank is late";
  const std::optional<PendingWait> wait = h.engine.pending(now);
  ASSERT_TRUE(wait);
  EXPECT_EQ(wait->op_id, kOpId);
  EXPECT_EQ(wait->waited_ms, (now - kStart) / kMs);
  EXPECT_EQ(wait->waiting_for, 0b10u);
  const std::string warnings = log.text();
  EXPECT_NE(warnings.find("rank 0: operation 5 has waited 30 s for rank 1 (the switch at 127.0.0.1:4242 holds "
                          "this rank's contribution; it fails after 120000 ms"),
            std::string::npos)
      << warnings;
  EXPECT_EQ(warnings.find("has waited", warnings.find("has waited") + 1), std::string::npos) << "warned once";
  const std::vector<std::int32_t> sums = h.answer_int(data);  // rank 1 arrives: the multicast
  expect_int_block(job, 0, sums);
  (void)result_of(*job.op);
  EXPECT_FALSE(h.engine.pending(now)) << "nothing pends once the operation completed";
}

// The timeout still fires, exactly at its time, naming the rank the round waited for.
TEST_F(EngineStep, APendingRoundFailsAtTheTimeoutNamingTheRanksItWaitedFor) {
  config.world_size = 4;
  session.world_size = 4;
  session.k_default = 4;
  config.timeout = 3500ms;
  Harness& h = engine();
  auto job = int_job(4);
  h.start(*job.op);
  (void)h.take_data(slot_of(0, 0), 1);
  while (h.engine.busy()) {
    ASSERT_LT(now - kStart, 10'000 * kMs) << "no give-up";
    expire(h);
    if (!h.engine.busy()) break;
    (void)h.take_probe(slot_of(0, 0), 1);
    h.arrive(make_header(flag::kSyn, slot_of(0, 0), 1, 0, 0, 2, 0b0101));  // ranks 1 and 3 missing
  }
  EXPECT_EQ(now - kStart, 3500 * kMs);
  const std::string message = error_of<TimeoutError>(*job.op);
  EXPECT_NE(message.find("holds this rank's contribution but the round waited 3500 ms for ranks 1, 3"),
            std::string::npos)
      << message;
}

// A switch that stops answering is dead after the liveness timeout, whatever the timeout.
TEST_F(EngineStep, ASilentSwitchFailsTheOperationAfterTheLivenessTimeout) {
  config.timeout = 120'000ms;
  config.liveness_timeout = 5000ms;
  Harness& h = engine();
  auto job = int_job(4);
  h.start(*job.op);
  (void)h.take_data(slot_of(0, 0), 1);
  std::uint64_t last_answer = 0;
  while (h.engine.busy()) {
    ASSERT_LT(now - kStart, 20'000 * kMs) << "no verdict";
    expire(h);
    if (!h.engine.busy()) break;
    (void)h.take_probe(slot_of(0, 0), 1);
    if (now - kStart < 3000 * kMs) {
      h.arrive(make_header(flag::kSyn, slot_of(0, 0), 1, 0, 0, 1, 0b01));
      last_answer = now;
    }
  }
  EXPECT_EQ(now - last_answer, 5000 * kMs);
  const std::string message = error_of<TimeoutError>(*job.op);
  EXPECT_NE(message.find("rank 0: no reply from the switch at 127.0.0.1:4242 for 5000 ms (operation 5"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("DPA_LIVENESS_TIMEOUT_MS 5000"), std::string::npos) << message;
}

// The switch's rank_gone answer to a probe fails the operation at once, naming the rank.
TEST_F(EngineStep, RankGoneFailsTheOperationNamingTheRankAndWhy) {
  struct Case {
    std::string name;
    std::uint32_t silent_ms;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"left", 0xffffffff, "(rank 1: rank 1 left the job: its context or process group closed)"},
      {"silent", 5200, "(rank 1: the switch has not heard rank 1 for 5200 ms: its process or host is gone)"},
  };
  config.timeout = 120'000ms;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    now = kStart;
    Harness h(0, config, session, now);
    auto job = int_job(4);
    h.start(*job.op);
    (void)h.take_data(slot_of(0, 0), 1);
    expire(h);
    (void)h.take_probe(slot_of(0, 0), 1);
    Header gone = make_header(flag::kError | flag::kSyn, slot_of(0, 0), 1, 0, 0, 0, 0b10);
    gone.error = protocol::ErrorCode::rank_gone;
    gone.rank = 1;
    gone.offset = c.silent_ms;
    h.arrive(gone);
    ASSERT_FALSE(h.engine.busy());
    const std::string message = error_of<ProtocolError>(*job.op);
    EXPECT_NE(message.find("rank 0, operation 5: the switch rejected a packet for slot 100: a rank the round "
                           "waits for left the job or went silent " + c.expected),
              std::string::npos)
        << message;
  }
}

// Thread 0 sends one KEEPALIVE buffer again and again, a fifth of the liveness timeout apart
// (at most a second), from its first call on (the join heard the rank then); other threads of a
// one-server job send none.
TEST_F(EngineStep, KeepalivesGoFromTheFirstThreadAtAFifthOfTheLivenessTimeout) {
  config.threads = 2;
  config.liveness_timeout = 2000ms;
  Harness& first = engine(0);
  Harness& second = engine(1);
  for (std::uint64_t step = 0; step <= 10; ++step) {
    now = kStart + step * 200 * kMs;
    first.engine.keepalive(now);
    second.engine.keepalive(now);
    first.poll();
    second.poll();
  }
  EXPECT_TRUE(second.log.empty()) << second.pending();
  ASSERT_EQ(first.log.size(), 5u) << "at 400, ..., 2000 ms: the first call starts the interval" << first.pending();
  const std::vector<Sent>& sent = first.log;
  for (std::size_t i = 1; i < sent.size(); ++i) {
    EXPECT_EQ(sent[i].at - sent[i - 1].at, 400 * kMs);
    EXPECT_EQ(sent[i].buffer, sent[0].buffer) << "one buffer, sent again";
  }
  EXPECT_EQ(sent[0].bytes.size(), protocol::kHeaderSize);
  EXPECT_EQ(sent[0].h.flags, flag::kKeepalive);
  EXPECT_EQ(sent[0].h.session, kSession);
  EXPECT_EQ(sent[0].h.token, session.token);
  EXPECT_EQ(sent[0].h.rank, 0u);
}

// ---- Errors -------------------------------------------------------------------------------------

TEST_F(EngineStep, ErrorReplyFailsTheOperationAndConsumesItsRounds) {
  Harness& h = engine();
  auto job = int_job(24);  // entries 0 and 1, three rounds each
  auto next = int_job(4, kOpId + 1);
  h.start(*job.op);
  const Sent d0 = h.take_data(slot_of(0, 0), 1);
  (void)h.take_data(slot_of(1, 0), 1);
  Header error = make_header(flag::kError, d0.h.slot, d0.h.seq, 77, 0, 0, 0, kOpId - 1);
  error.error = protocol::ErrorCode::op_mismatch;
  h.arrive(error);  // about an earlier operation: ignored
  Header outside = error;
  outside.op_id = kOpId;
  outside.slot = kPoolBase + 4;
  h.arrive(outside);  // not this thread's slot: ignored
  ASSERT_TRUE(h.engine.busy());
  // A resend is queued in the same batch as the error: it never goes out.
  std::vector<std::byte> probe_reply =
      encode_packet(make_header(flag::kSyn, slot_of(1, 0), 0, 0, 0, 0, 0, 0), {});
  error.op_id = kOpId;
  error.offset = 4;  // the round holds operation 4
  error.bitmap = kOpId;  // the offender (this rank) runs operation 5
  std::vector<std::byte> fatal = encode_packet(error, {});
  h.engine.on_packet({std::span<std::byte>(probe_reply), kSwitch}, now);
  ASSERT_EQ(h.engine.outgoing().size(), 1u) << "the probe reply queued a resend";
  h.engine.on_packet({std::span<std::byte>(fatal), kSwitch}, now);
  EXPECT_FALSE(h.engine.busy());
  EXPECT_TRUE(h.engine.outgoing().empty());
  const std::string message = error_of<ProtocolError>(*job.op);
  EXPECT_NE(message.find("rank 0, operation 5: the switch rejected a packet for slot 100"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("rank 0 runs operation 5, the round holds operation 4"),
            std::string::npos)
      << message;
  EXPECT_EQ(h.engine.next_deadline(), std::numeric_limits<std::uint64_t>::max());

  // Both entries' rounds were consumed: the next operation starts at round 3.
  h.start(*next.op);
  const Sent p = h.take_data(slot_of(0, 3), 2);
  EXPECT_EQ(p.h.op_id, kOpId + 1);
  (void)h.answer_int(p);
  (void)result_of(*next.op);
}

TEST_F(EngineStep, ResultOfADifferentSizeFailsTheOperation) {
  Harness& h = engine();
  auto job = int_job(4);
  h.start(*job.op);
  const Sent p = h.take_data(slot_of(0, 0), 1);
  Header r = result_for(p);
  r.count = 3;
  h.arrive(r, std::vector<std::int32_t>(kPayload, 1));
  const std::string message = error_of<ProtocolError>(*job.op);
  EXPECT_NE(message.find("[0, +3) but this rank expects [0, +4)"), std::string::npos) << message;
}

// One thread's failure stops the operation's other parts at their next poll, not at their own
// give-up timeout, and a part that starts after the failure sends nothing.
TEST_F(EngineStep, FailureOfOnePartStopsTheOperationsOtherParts) {
  config.threads = 3;
  auto job = int_job(36, kOpId, /*parts=*/3);  // 9 blocks: 3 per thread
  Harness& t0 = engine(0);
  Harness& t1 = engine(1);
  Harness& t2 = engine(2);
  t0.start(*job.op);
  t1.start(*job.op);
  const Sent d0 = t0.take_data(slot_of(0, 0, 0), 1);
  (void)t1.take_data(slot_of(0, 0, 1), 1);
  (void)t1.take_data(slot_of(1, 0, 1), 1);
  now += kMs;
  Header error = make_header(flag::kError, d0.h.slot, d0.h.seq, 4, 0, 0, 0, kOpId);
  error.error = protocol::ErrorCode::op_mismatch;
  t0.arrive(error);
  EXPECT_FALSE(t0.engine.busy());
  EXPECT_TRUE(job.op->failed());
  EXPECT_FALSE(job.op->complete()) << "two parts still running";

  // Thread 1 stops at its next poll, long before its RTO, let alone its give-up timeout.
  ASSERT_TRUE(t1.engine.busy());
  t1.poll();
  EXPECT_FALSE(t1.engine.busy());
  EXPECT_TRUE(t1.nothing_pending()) << t1.pending();
  // Thread 2 was behind: it starts the failed operation and finishes at once, sending nothing.
  t2.start(*job.op);
  EXPECT_FALSE(t2.engine.busy());
  EXPECT_TRUE(t2.log.empty());
  const std::string message = error_of<ProtocolError>(*job.op);
  EXPECT_NE(message.find("the round holds operation 4"), std::string::npos) << message;

  // Every thread's rounds were consumed (3 blocks a thread: entry 0 had rounds 0 and 1, entry 1
  // round 0), so the next operation lines up on every thread.
  auto next = int_job(36, kOpId + 1, 3);
  for (std::uint32_t t = 0; t < 3; ++t) {
    SCOPED_TRACE("thread " + std::to_string(t));
    Harness& h = engine(t);
    h.start(*next.op);
    (void)h.answer_int(h.take_data(slot_of(0, 2, t), 2));
    (void)h.answer_int(h.take_data(slot_of(1, 1, t), 1));
    (void)h.answer_int(h.take_data(slot_of(0, 3, t), 2));
    EXPECT_FALSE(h.engine.busy());
  }
  (void)result_of(*next.op);
}

// ---- RTT and RTO (§9.1) -------------------------------------------------------------------------

TEST_F(EngineStep, RoundTripSamplesSetTheNextRoundsTimeout) {
  config.window = 1;
  config.retransmit_timeout = 1ms;
  config.max_retransmit_timeout = 100ms;
  Harness& h = engine();
  auto job = int_job(28);  // one entry, seven rounds
  h.start(*job.op);
  EXPECT_EQ(rto(h), 1 * kMs) << "the floor until the first sample";

  // Round 0, the operation's first, completes after 4 ms. It also waited for the ranks to reach
  // the operation, so it feeds the first rounds' estimate only; round 1 keeps the floor.
  now += 4 * kMs;
  (void)h.answer_int(h.take_data(slot_of(0, 0, 0, 1), 1));
  EXPECT_EQ(rto(h), 1 * kMs) << "a first round's wait set a later round's timeout";
  // Round 1 after 2 ms: srtt 2, rttvar 1, RTO 2 + 4 * 1 = 6 ms.
  now += 2 * kMs;
  (void)h.answer_int(h.take_data(slot_of(0, 1, 0, 1), 1));
  EXPECT_EQ(rto(h), 6 * kMs);

  // Karn: round 2 times out and then its multicast result arrives: no sample (the wait may hold
  // another rank's loss recovery, which would feed the timeout back into itself); the back-off
  // (shift 1) doubles round 3's timeout.
  const Sent round2 = h.take_data(slot_of(0, 2, 0, 1), 2);
  expire(h);
  (void)h.take_probe(slot_of(0, 2, 0, 1), 2);
  EXPECT_EQ(rto(h), 12 * kMs);
  now += kMs;
  (void)h.answer_int(round2);
  EXPECT_EQ(rto(h), 12 * kMs) << "a probed round gave a sample, or the back-off was lost";

  // Round 3 times out and a copy (the probe's answer) brings the result: no sample, shift 2.
  const Sent round3 = h.take_data(slot_of(0, 3, 0, 1), 2);
  expire(h);
  (void)h.take_probe(slot_of(0, 3, 0, 1), 2);
  now += kMs;
  (void)h.answer_int(round3, flag::kResult | flag::kRetransmit | flag::kSyn);
  EXPECT_EQ(rto(h), 24 * kMs);

  // Round 4's data is lost: the probe's reply says so, the data goes again, and its result is
  // no sample either (it may answer the resend). Shift 3.
  (void)h.take_data(slot_of(0, 4, 0, 1), 3);
  expire(h);
  (void)h.take_probe(slot_of(0, 4, 0, 1), 3);
  h.arrive(make_header(flag::kSyn, slot_of(0, 4, 0, 1), 3, 16, 0, 1, 0b10));
  const Sent resent = h.take_data(slot_of(0, 4, 0, 1), 3);
  now += kMs;
  (void)h.answer_int(resent);
  EXPECT_EQ(rto(h), 48 * kMs) << "a resent round gave a sample";

  // Round 5 completes cleanly after 2.625 ms: rttvar (3 * 1 + 0.625) / 4 = 0.90625, srtt
  // (7 * 2 + 2.625) / 8 = 2.078125, back-off cleared: RTO 5.703125 ms.
  now += 2'625'000;
  (void)h.answer_int(h.take_data(slot_of(0, 5, 0, 1), 3));
  EXPECT_EQ(rto(h), 5'703'125u);
  (void)h.answer_int(h.take_data(slot_of(0, 6, 0, 1), 4));
  (void)result_of(*job.op);
}

// A round trip far above the mean keeps the timeout up for about a hundred samples (the peak),
// where srtt + 4 * rttvar alone would fall back within a few.
TEST_F(EngineStep, ARareSlowRoundKeepsTheTimeoutUp) {
  config.window = 1;
  config.retransmit_timeout = 1ms;
  config.max_retransmit_timeout = 100ms;
  Harness& h = engine();
  auto job = int_job(4 * 42);
  h.start(*job.op);
  std::uint64_t round = 0;
  const auto complete_after = [&](std::uint64_t ns) {
    now += ns;
    (void)h.answer_int(h.take_data(slot_of(0, round, 0, 1), seq_of(round)));
    ++round;
  };
  complete_after(kMs);  // the first round
  for (int i = 0; i < 10; ++i) complete_after(kMs);
  complete_after(40 * kMs);  // one descheduled round
  for (int i = 0; i < 20; ++i) complete_after(kMs);
  EXPECT_GT(rto(h), 30 * kMs) << "the slow round was forgotten after 20 fast ones";
  while (round < 42) complete_after(kMs);
  (void)result_of(*job.op);
}

// A round that rounds sent after it overtook is lost: its probe goes at once, long before its
// timeout, and without backing the timeout off.
TEST_F(EngineStep, ARoundOvertakenByLaterRoundsIsProbedAtOnce) {
  config.window = 8;
  config.retransmit_timeout = 50ms;
  config.max_retransmit_timeout = 100ms;
  Harness& h = engine();
  auto job = int_job(8 * kPayload);  // one block per entry
  h.start(*job.op);
  std::vector<Sent> sent;
  for (std::uint32_t e = 0; e < 8; ++e) sent.push_back(h.take_data(slot_of(e, 0, 0, 8), 1));
  now += kMs;
  // Entry 0's packet was lost: entries 1 and 2 complete (within the reorder allowance) ...
  (void)h.answer_int(sent[1]);
  (void)h.answer_int(sent[2]);
  EXPECT_TRUE(h.nothing_pending()) << "probed within the reorder allowance:" << h.pending();
  // ... and entry 3, sent three rounds after entry 0, completes too: entry 0 is probed now.
  (void)h.answer_int(sent[3]);
  (void)h.take_probe(slot_of(0, 0, 0, 8), 1);
  EXPECT_TRUE(h.nothing_pending()) << h.pending();
  (void)h.answer_int(sent[4]);
  EXPECT_TRUE(h.nothing_pending()) << "probed twice for the same overtaking:" << h.pending();
  // The switch never had it: the data goes again, and completes.
  h.arrive(make_header(flag::kSyn, slot_of(0, 0, 0, 8), 1, 0, 0, 1, 0b10));
  const Sent resent = h.take_data(slot_of(0, 0, 0, 8), 1);
  for (std::uint32_t e : {5u, 6u, 7u}) (void)h.answer_int(sent[e]);
  (void)h.answer_int(resent);
  const OpStats stats = result_of(*job.op);
  EXPECT_EQ(stats.timeouts, 0u);
  EXPECT_EQ(stats.retransmissions, 2u) << "the probe and the resend";
}

// The back-off doubles the RTO up to a cap: max_retransmit_timeout when K = N, and at most half
// the straggler timeout when a round may complete early (K < N), so that a counted rank's
// probes drive reactive fastest-K.
TEST_F(EngineStep, BackOffStopsAtTheCapForTheOperationsK) {
  struct Case {
    std::string name;
    std::uint8_t op_k;
    std::uint8_t k_default;
    std::chrono::microseconds straggler;
    std::vector<std::uint64_t> intervals_ms;
  };
  const std::vector<Case> cases = {
      {"K = N by default", 0, 2, 20ms, {2, 4, 8, 16, 32, 64, 64}},
      {"K = N explicitly", 2, 1, 20ms, {2, 4, 8, 16, 32, 64, 64}},
      {"K < N", 1, 2, 20ms, {2, 4, 8, 10, 10, 10, 10}},
      {"K < N by the session's default", 0, 1, 20ms, {2, 4, 8, 10, 10, 10, 10}},
      {"K < N, straggler timeout below twice the floor", 1, 2, 3ms, {2, 2, 2, 2, 2, 2, 2}},
      {"K < N without a straggler timeout", 1, 2, 0us, {2, 4, 8, 16, 32, 64, 64}},
  };
  config.max_retransmit_timeout = 64ms;
  config.timeout = 10'000ms;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    session.k_default = c.k_default;
    session.straggler_timeout = c.straggler;
    Harness h(0, config, session, now);
    auto job = int_job(4);
    job.op->k = c.op_k;
    h.start(*job.op);
    std::uint64_t last = h.take_data(slot_of(0, 0), 1).at;
    std::vector<std::uint64_t> intervals;
    for (std::size_t i = 0; i < c.intervals_ms.size(); ++i) {
      expire(h);
      const std::uint64_t at =
          h.take([](const Sent& s) { return s.is_probe(); }, "retransmission probe").at;
      intervals.push_back((at - last) / kMs);
      last = at;
    }
    EXPECT_EQ(intervals, c.intervals_ms);
    h.engine.fail(nullptr);
  }
}

// On a lossless queue (shared memory) an expiry cannot repair a loss, only find a stalled peer
// or drive reactive fastest-K: the timeout starts at the operation's back-off cap, fast round
// trips do not lower it, and a round overtaken by later ones is not probed.
TEST_F(EngineStep, OnALosslessQueueTheTimeoutStartsAtTheBackOffCap) {
  struct Case {
    std::string name;
    std::uint8_t op_k;
    std::chrono::microseconds rto_floor;
    std::uint64_t timeout_ms;
  };
  const std::vector<Case> cases = {
      {"K = N: the back-off cap", 2, 2ms, 64},
      {"K < N: half the straggler timeout", 1, 2ms, 10},
      {"a floor above the cap stays the floor", 2, 80ms, 80},
  };
  config.window = 4;
  config.max_retransmit_timeout = 64ms;
  config.timeout = 10'000ms;
  session.straggler_timeout = 20ms;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    config.retransmit_timeout = c.rto_floor;
    Harness h(transport::testing::MemoryQueue::Lossless{}, config, session, now);
    auto job = int_job(4 * 3 * kPayload);  // three rounds on each of four entries
    job.op->k = c.op_k;
    h.start(*job.op);
    EXPECT_EQ(rto(h), c.timeout_ms * kMs) << "the first rounds";
    std::vector<Sent> sent;
    for (std::uint32_t e = 0; e < 4; ++e) sent.push_back(h.take_data(slot_of(e, 0, 0, 4), 1));
    // Entries 1 to 3 complete first: entry 0's round is overtaken three times over, and waited for.
    now += kMs;
    for (std::uint32_t e = 1; e < 4; ++e) (void)h.answer_int(sent[e]);
    for (std::uint32_t e = 1; e < 4; ++e) sent[e] = h.take_data(slot_of(e, 1, 0, 4), seq_of(1));
    EXPECT_TRUE(h.nothing_pending()) << "a round overtaken on a lossless queue was probed:" << h.pending();
    (void)h.answer_int(sent[0]);
    sent[0] = h.take_data(slot_of(0, 1, 0, 4), seq_of(1));
    // Every entry's second round completes after 1 ms: fast samples, which leave the timeout alone.
    now += kMs;
    for (std::uint32_t e = 0; e < 4; ++e) (void)h.answer_int(sent[e]);
    const std::uint64_t sent_at = h.take_data(slot_of(0, 2, 0, 4), seq_of(2)).at;
    EXPECT_EQ(rto(h), c.timeout_ms * kMs) << "fast round trips lowered the timeout";
    expire(h);
    EXPECT_EQ(h.take_probe(slot_of(0, 2, 0, 4), seq_of(2)).at - sent_at, c.timeout_ms * kMs);
    h.engine.fail(nullptr);
  }
}

// ---- Fastest-K escalation (§9.3) ----------------------------------------------------------------

TEST_F(EngineStep, PartialResultContainingThisRankSetsCountToKOnTheEntrysLaterPackets) {
  struct Case {
    std::string name;
    DataType type;
    std::uint64_t first_bitmap;  // of the entry's first result, 1 of 2 contributors
    bool escalated;
  };
  const std::vector<Case> cases = {
      {"int32, partial with this rank", DataType::int32, 0b01, true},
      {"int32, partial without this rank", DataType::int32, 0b10, false},
      {"float priming round, partial with this rank", DataType::float32, 0b01, true},
      {"float priming round, partial without this rank", DataType::float32, 0b10, false},
  };
  config.window = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Harness h(0, config, session, now);
    auto ints = int_job(8);
    auto floats = float_job(8);
    Operation& op = c.type == DataType::int32 ? *ints.op : *floats.op;
    h.start(op);
    Sent p = h.take_data(slot_of(0, 0, 0, 1), 1);
    EXPECT_FALSE(p.h.has(flag::kCountToK));
    Header r = result_for(p);
    r.contributors = 1;
    r.bitmap = c.first_bitmap;
    h.arrive(r, p.values());
    p = h.take_data(slot_of(0, 1, 0, 1), 1);
    EXPECT_EQ(p.h.has(flag::kCountToK), c.escalated);
    Header full = result_for(p);
    h.arrive(full, p.values());
    if (c.type == DataType::float32) {
      p = h.take_data(slot_of(0, 2, 0, 1), 2);
      EXPECT_EQ(p.h.has(flag::kCountToK), c.escalated) << "for the rest of the operation";
      h.arrive(result_for(p), p.values());
    }
    const OpStats stats = result_of(op);
    EXPECT_EQ(stats.blocks_partial, c.type == DataType::int32 ? 1u : 0u);
    // The next operation starts without the flag.
    auto next = int_job(4, kOpId + 1);
    h.start(*next.op);
    const Sent first = h.take([](const Sent& s) { return s.is_data(); }, "next operation's data");
    EXPECT_FALSE(first.h.has(flag::kCountToK));
    h.engine.fail(nullptr);
  }
}

TEST_F(EngineStep, PreemptiveOperationsSetCountToKFromTheStart) {
  Harness& h = engine();
  auto job = int_job(8);
  job.op->preemptive = true;
  job.op->k = 1;
  h.start(*job.op);
  for (std::uint32_t e = 0; e < 2; ++e) {
    const Sent p = h.take_data(slot_of(e, 0), 1);
    EXPECT_EQ(p.h.flags, flag::kCountToK);
    EXPECT_EQ(p.h.k, 1u);
  }
  h.engine.fail(nullptr);
}

// ---- Float exponents (§10) ----------------------------------------------------------------------

// Each entry primes its first block's exponent; each result's exp_next is the exponent the next
// block is quantised with; each data packet announces its next block's local exponent. A joined
// open round takes its exp_used; a fetched complete round's result its exp_next.
TEST_F(EngineStep, FloatExponentsFlowFromPrimingThroughResultsAndSkips) {
  config.window = 1;
  Harness& h = engine();
  // One entry: priming in round 0, then block b in round b + 1 (slot 100 + (b + 1) % 2).
  auto job = float_job(32);
  h.start(*job.op);
  const auto wire_of = [](std::int32_t value) {
    std::vector<std::byte> bytes(4 * kPayload);
    for (std::size_t i = 0; i < kPayload; ++i) {
      protocol::store_be32(bytes.data() + 4 * i, static_cast<std::uint32_t>(value));
    }
    return bytes;
  };
  const auto expect_block = [&](std::size_t block, std::int32_t value, std::int8_t exp) {
    std::vector<float> expected(kPayload);
    quant::dequantize(wire_of(value).data(), kPayload, exp, kWorld, 1, expected.data());
    for (std::size_t i = 0; i < kPayload; ++i) {
      EXPECT_EQ(job.out[block * kPayload + i], expected[i]) << "block " << block << ", value " << i;
    }
  };
  const auto answer = [&](const Sent& p, std::int8_t exp_next, std::int32_t value) {
    Header r = result_for(p);
    r.exp_next = exp_next;
    h.arrive(r, std::vector<std::int32_t>(kPayload, value));
  };

  const Sent prime = h.take_data(slot_of(0, 0, 0, 1), 1);
  EXPECT_EQ(prime.h.count, 0u);
  EXPECT_EQ(prime.bytes.size(), protocol::kHeaderSize) << "the priming request is header only";
  EXPECT_EQ(prime.h.offset, 0u);
  EXPECT_EQ(prime.h.exp_used, protocol::kExpZero);
  EXPECT_EQ(prime.h.exp_next, exponent(job, 0));
  const auto e0 = static_cast<std::int8_t>(exponent(job, 0) + 2);  // rank 1's block is larger
  answer(prime, e0, 0);

  const Sent d0 = h.take_data(slot_of(0, 1, 0, 1), 1);
  EXPECT_EQ(d0.h.flags, flag::kFloat);
  EXPECT_EQ(d0.h.exp_used, e0);
  EXPECT_EQ(d0.h.exp_next, exponent(job, 1));
  std::vector<std::byte> quantised(4 * kPayload);
  quant::quantize(job.in.data(), kPayload, e0, kWorld, quantised.data());
  EXPECT_TRUE(
      std::equal(quantised.begin(), quantised.end(), d0.bytes.begin() + protocol::kHeaderSize));
  const auto e1 = static_cast<std::int8_t>(exponent(job, 1) + 1);
  answer(d0, e1, 3 << 20);
  expect_block(0, 3 << 20, e0);

  const Sent d1 = h.take_data(slot_of(0, 2, 0, 1), 2);
  EXPECT_EQ(d1.h.exp_used, e1);
  EXPECT_EQ(d1.h.exp_next, exponent(job, 2));
  // The slot is at round 4 (block 3), open, with a larger exponent than this rank's: join it.
  const auto e3 = static_cast<std::int8_t>(exponent(job, 3) + 3);
  Header old = make_header(flag::kOld | flag::kFloat, slot_of(0, 4, 0, 1), 3, 12, 0, 1, 0b10);
  old.exp_used = e3;
  old.exp_next = 99;  // the open round's running maximum: not for this rank to use
  h.arrive(old);
  const Sent d3 = h.take_data(slot_of(0, 4, 0, 1), 3);
  EXPECT_EQ(d3.h.offset, 12u);
  EXPECT_EQ(d3.h.exp_used, e3);
  EXPECT_EQ(d3.h.exp_next, exponent(job, 4));

  // Then it is at round 6 (block 5), complete: fetch it; its result negotiates block 6.
  h.arrive(make_header(flag::kOld | flag::kComplete | flag::kFloat, slot_of(0, 6, 0, 1), 4, 20, 0,
                       2, 0b11));
  const Sent fetch = h.take_probe(slot_of(0, 6, 0, 1), 4);
  EXPECT_EQ(fetch.h.flags, flag::kSyn | flag::kFloat);
  const auto e5 = static_cast<std::int8_t>(exponent(job, 5) + 1);
  const auto e6 = static_cast<std::int8_t>(exponent(job, 6) + 1);
  Header fetched = make_header(flag::kResult | flag::kRetransmit | flag::kSyn | flag::kFloat,
                               slot_of(0, 6, 0, 1), 4, 20, 4, 2, 0b11);
  fetched.exp_used = e5;
  fetched.exp_next = e6;
  h.arrive(fetched, std::vector<std::int32_t>(kPayload, 1 << 20));
  expect_block(5, 1 << 20, e5);
  for (const std::size_t b : {1u, 2u, 3u, 4u}) {
    for (std::size_t i = b * kPayload; i < (b + 1) * kPayload; ++i) {
      EXPECT_EQ(job.out[i], job.in[i]) << "missed block " << b << ": raw own input";
    }
  }

  const Sent d6 = h.take_data(slot_of(0, 7, 0, 1), 4);
  EXPECT_EQ(d6.h.exp_used, e6);
  EXPECT_EQ(d6.h.exp_next, exponent(job, 7));
  const auto e7 = static_cast<std::int8_t>(exponent(job, 7) + 1);
  answer(d6, e7, -(1 << 19));
  expect_block(6, -(1 << 19), e6);
  const Sent d7 = h.take_data(slot_of(0, 8, 0, 1), 5);
  EXPECT_EQ(d7.h.exp_used, e7);
  EXPECT_EQ(d7.h.exp_next, protocol::kExpZero) << "the entry's last block announces nothing";
  answer(d7, protocol::kExpZero, 5);
  expect_block(7, 5, e7);
  const OpStats stats = result_of(*job.op);
  EXPECT_EQ(stats.blocks_missed, 4u);
  EXPECT_EQ(stats.blocks_full, 4u);
  EXPECT_EQ(stats.missed, (std::vector<ElementRange>{{4, 20}}));  // ranges merge
}

TEST_F(EngineStep, FloatSkipOfACompleteRoundTakesTheExponentFromExpNext) {
  config.window = 1;
  config.syn_disable = true;
  Harness& h = engine();
  auto job = float_job(12);  // priming, then blocks 0..2 in rounds 1..3
  h.start(*job.op);
  (void)h.take_data(slot_of(0, 0, 0, 1), 1);
  const auto e2 = static_cast<std::int8_t>(exponent(job, 2) + 4);
  Header old = make_header(flag::kOld | flag::kComplete | flag::kFloat, slot_of(0, 2, 0, 1), 2, 4,
                           0, 2, 0b11);
  old.exp_used = static_cast<std::int8_t>(exponent(job, 1) + 1);
  old.exp_next = e2;
  h.arrive(old);
  const Sent d2 = h.take_data(slot_of(0, 3, 0, 1), 2);
  EXPECT_EQ(d2.h.offset, 8u);
  EXPECT_EQ(d2.h.exp_used, e2);
  h.arrive(result_for(d2), d2.values());
  const OpStats stats = result_of(*job.op);
  EXPECT_EQ(stats.missed, (std::vector<ElementRange>{{0, 8}}));
}

}  // namespace
}  // namespace dpa::detail

// SPDX-License-Identifier: Apache-2.0
// The worker engine on its thread (EngineRunner over a WorkerEngine) driven packet by packet. A
// fake transport hands every packet the engine sends to the test thread, which plays the switch:
// it waits (bounded) for the next packet it expects, decodes it, checks it and answers with
// crafted replies. docs/protocol.md §9 is the specification these cases follow.
// engine_step_test drives the WorkerEngine alone, with a fake clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "dpa/config.hpp"
#include "dpa/error.hpp"
#include "engine/join.hpp"
#include "engine/operation.hpp"
#include "engine/engine_runner.hpp"
#include "protocol/byte_order.hpp"
#include "protocol/wire.hpp"
#include "quant/quant.hpp"
#include "transport/device.hpp"
#include "engine_test_packets.hpp"
#include "memory_queue.hpp"

namespace dpa::detail {
namespace {

using namespace engine_test;

using namespace std::chrono_literals;
using protocol::Header;
using transport::Endpoint;
namespace flag = protocol::flag;

constexpr std::size_t kDataSize = protocol::kHeaderSize + 4 * kPayload;
constexpr std::chrono::milliseconds kPacketWait{2000};  // bound on waiting for one packet
constexpr std::chrono::milliseconds kOpWait{3000};      // bound on waiting for an operation

const Endpoint kStranger{0x7f000001, 4243};

// Slot and sequence number of round r of window entry e (thread 0): entries alternate between
// slots 2e and 2e + 1 of the pool; round r is the slot's (r / 2 + 1)-th use.
std::uint32_t slot_of(std::uint32_t e, std::uint64_t round) {
  return kPoolBase + 2 * e + static_cast<std::uint32_t>(round & 1);
}

// ---- The wire between the engine and the test's switch ------------------------------------------

struct Sent {
  std::size_t index = 0;  // position among everything the engine sent
  Header h;
  protocol::DecodeStatus status = protocol::DecodeStatus::ok;
  std::vector<std::byte> bytes;
  Endpoint to;

  [[nodiscard]] bool is_probe() const {
    return bytes.size() == protocol::kHeaderSize && h.has(flag::kSyn);
  }
  // P values, or header only for the exponent-priming request (count 0).
  [[nodiscard]] bool is_data() const {
    return !h.has(flag::kSyn) &&
           (bytes.size() == kDataSize || (bytes.size() == protocol::kHeaderSize && h.count == 0));
  }
  [[nodiscard]] std::span<const std::byte> payload() const {
    return std::span<const std::byte>(bytes).subspan(protocol::kHeaderSize);
  }
  // The payload as host-order int32 values.
  [[nodiscard]] std::vector<std::int32_t> values() const {
    std::vector<std::int32_t> v(payload().size() / 4);
    for (std::size_t i = 0; i < v.size(); ++i) {
      v[i] = static_cast<std::int32_t>(protocol::load_be32(payload().data() + 4 * i));
    }
    return v;
  }
  [[nodiscard]] std::string describe() const {
    std::ostringstream s;
    s << "#" << index << " " << bytes.size() << " bytes, flags 0x" << std::hex << h.flags << std::dec
      << ", op " << h.op_id << ", slot " << h.slot << ", seq " << h.seq << ", offset " << h.offset
      << ", count " << h.count;
    return s.str();
  }
};

struct Incoming {
  std::vector<std::byte> bytes;
  Endpoint from;
};

// Shared by the fake transport (engine thread) and the test (switch).
class Wire {
 public:
  // ---- engine side
  void on_send(std::span<const transport::TxRequest> packets) {
    {
      std::lock_guard lock(mutex_);
      for (const transport::TxRequest& packet : packets) {
        Sent s;
        s.index = log_.size();
        const std::span<const std::byte> bytes = packet.buffer->bytes();
        s.bytes.assign(bytes.begin(), bytes.end());
        s.to = packet.to;
        std::span<const std::byte> payload;
        s.status = protocol::decode(s.bytes, s.h, payload);
        // Liveness is engine_step_test's subject: this switch does not see the keepalives.
        if (s.status == protocol::DecodeStatus::ok && s.h.has(flag::kKeepalive)) continue;
        pending_.push_back(s);
        log_.push_back(std::move(s));
      }
    }
    sent_.notify_all();
  }

  // A flush of the engine's queue: it records how many packets had been sent by then.
  void on_flush() {
    std::lock_guard lock(mutex_);
    flushed_at_.push_back(log_.size());
  }

  // Waits up to `timeout` for the first reply, then takes up to `max` queued replies.
  std::vector<Incoming> take_replies(std::size_t max, std::chrono::nanoseconds timeout) {
    std::unique_lock lock(mutex_);
    replies_.wait_for(lock, timeout, [this] { return !inbox_.empty(); });
    std::vector<Incoming> taken;
    while (!inbox_.empty() && taken.size() < max) {
      taken.push_back(std::move(inbox_.front()));
      inbox_.pop_front();
    }
    return taken;
  }

  // ---- switch side
  // Waits (bounded) for the first packet not yet taken that matches; packets that do not match
  // stay queued for later takes. Throws (failing the test) on timeout.
  Sent take(const std::function<bool(const Sent&)>& match, const std::string& what,
            std::chrono::milliseconds timeout = kPacketWait) {
    std::unique_lock lock(mutex_);
    std::deque<Sent>::iterator found;
    const bool ok = sent_.wait_for(lock, timeout, [&] {
      for (found = pending_.begin(); found != pending_.end(); ++found) {
        if (match(*found)) return true;
      }
      return false;
    });
    if (!ok) {
      std::string message = "no " + what + " from the engine within " +
                            std::to_string(timeout.count()) + " ms; sent so far:";
      for (const Sent& s : log_) message += "\n  " + s.describe();
      throw std::runtime_error(message);
    }
    Sent s = std::move(*found);
    pending_.erase(found);
    return s;
  }

  void reply(std::vector<std::byte> bytes, Endpoint from = kSwitch) {
    {
      std::lock_guard lock(mutex_);
      inbox_.push_back({std::move(bytes), from});
    }
    replies_.notify_all();
  }

  [[nodiscard]] std::vector<Sent> log() const {
    std::lock_guard lock(mutex_);
    return log_;
  }
  [[nodiscard]] std::size_t sent_count() const {
    std::lock_guard lock(mutex_);
    return log_.size();
  }
  // Packets sent before each flush, in order.
  [[nodiscard]] std::vector<std::size_t> flushed_at() const {
    std::lock_guard lock(mutex_);
    return flushed_at_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable sent_;
  std::condition_variable replies_;
  std::deque<Sent> pending_;
  std::vector<Sent> log_;
  std::vector<std::size_t> flushed_at_;
  std::deque<Incoming> inbox_;
};

// The engine's device: its queue sends onto the wire and receives from it; its thread is a
// std::thread, as on sockets.
class FakeDevice final : public transport::Device {
 public:
  explicit FakeDevice(std::shared_ptr<Wire> wire) : wire_(std::move(wire)) {}

  [[nodiscard]] transport::DeviceProperties properties() const override {
    return {.name = "fake", .max_payload = transport::testing::MemoryQueue::kCapacity, .queues = 1};
  }

  std::unique_ptr<transport::Queue> open_queue(std::size_t /*index*/) override {
    auto held = std::make_shared<std::vector<Incoming>>();  // the last batch's packets
    return std::make_unique<transport::testing::MemoryQueue>(
        [wire = wire_](std::span<const transport::TxRequest> packets) { wire->on_send(packets); },
        [wire = wire_, held](std::span<transport::RxPacket> out, std::chrono::nanoseconds timeout) {
          *held = wire->take_replies(out.size(), timeout);
          for (std::size_t i = 0; i < held->size(); ++i) {
            out[i] = {std::span<std::byte>((*held)[i].bytes), (*held)[i].from};
          }
          return held->size();
        },
        [wire = wire_] { wire->on_flush(); });
  }

  std::unique_ptr<transport::QueueThread> launch(std::size_t /*index*/, std::function<void()> body) override {
    return transport::launch_std_thread(std::move(body));
  }

 private:
  std::shared_ptr<Wire> wire_;
};

// ---- Operations ---------------------------------------------------------------------------------

constexpr std::uint64_t kUnset = 0xdeadbeef;
constexpr std::int32_t kIntSentinel = -777777;
constexpr float kFloatSentinel = -12345.0f;

template <typename T>
struct Job {
  std::vector<T> in;
  std::vector<T> out;
  std::vector<std::uint64_t> contributors;  // Operation::block_contributors
  std::shared_ptr<Operation> op = std::make_shared<Operation>();
};

template <typename T>
void bind(Job<T>& job, DataType type, std::uint32_t op_id) {
  job.contributors.assign((job.in.size() + kPayload - 1) / kPayload, kUnset);
  job.op->in = reinterpret_cast<const std::byte*>(job.in.data());
  job.op->out = reinterpret_cast<std::byte*>(job.out.data());
  job.op->count = job.in.size();
  job.op->type = type;
  job.op->op_id = op_id;
  job.op->block_contributors = job.contributors.data();
  job.op->submitted = std::chrono::steady_clock::now();
  job.op->parts_remaining = 1;  // one engine thread
}

Job<std::int32_t> int_job(std::size_t count, std::uint32_t op_id = kOpId) {
  Job<std::int32_t> job;
  for (std::size_t i = 0; i < count; ++i) {
    const auto v = static_cast<std::int32_t>(7 * (i + 1));
    job.in.push_back(i % 2 == 0 ? v : -v);
  }
  job.out.assign(count, kIntSentinel);
  bind(job, DataType::int32, op_id);
  return job;
}

// Blocks of different magnitudes, so that their exponents differ.
Job<float> float_job(std::size_t count, std::uint32_t op_id = kOpId) {
  Job<float> job;
  for (std::size_t i = 0; i < count; ++i) {
    const float base = static_cast<float>(i % 5 + 1) * (i % 2 == 0 ? 0.375f : -0.5f);
    job.in.push_back(std::ldexp(base, static_cast<int>((i / kPayload) % 4) - 1));
  }
  job.out.assign(count, kFloatSentinel);
  bind(job, DataType::float32, op_id);
  return job;
}

// What the switch adds for rank 1 in int32 operations.
std::int32_t other_rank(std::size_t element) { return 1000 + static_cast<std::int32_t>(element); }

// The header of the result a switch sends for the round of packet p.
Header result_for(const Sent& p, std::uint16_t flags = flag::kResult) {
  return engine_test::result_for(p.h, flags);
}

std::vector<std::byte> to_wire(std::span<const std::int32_t> values) {
  std::vector<std::byte> bytes(4 * values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    protocol::store_be32(bytes.data() + 4 * i, static_cast<std::uint32_t>(values[i]));
  }
  return bytes;
}

struct Tally {
  std::size_t data = 0;
  std::size_t data_resends = 0;  // data packets for an (op, slot, seq) already sent
  std::size_t probes = 0;        // header-only SYN packets
};

Tally tally(const std::vector<Sent>& log) {
  Tally t;
  std::set<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t>> seen;
  for (const Sent& s : log) {
    if (s.is_data()) {
      ++t.data;
      if (!seen.insert({s.h.op_id, s.h.slot, s.h.seq}).second) ++t.data_resends;
    } else if (s.is_probe()) {
      ++t.probes;
    }
  }
  return t;
}

template <typename E>
std::string error_of(const Operation& op) {
  try {
    (void)op.result();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "the operation failed with an unexpected exception type: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "the operation succeeded; an error was expected";
  return {};
}

// ---- Fixture ------------------------------------------------------------------------------------

class EnginePackets : public ::testing::Test {
 protected:
  EnginePackets() {
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

  // Declare the engine after the jobs it works on: it is then destroyed (stopped) first.
  std::unique_ptr<EngineRunner> start_engine() {
    return std::make_unique<EngineRunner>(0, config, session, device.open_queue(0), device);
  }

  Sent take_data(std::uint32_t slot, std::uint32_t seq, std::size_t after = 0) {
    return wire->take(
        [=](const Sent& s) {
          return s.index >= after && s.is_data() && s.h.slot == slot && s.h.seq == seq;
        },
        "data packet for slot " + std::to_string(slot) + " seq " + std::to_string(seq));
  }
  Sent take_probe(std::uint32_t slot, std::uint32_t seq, std::size_t after = 0) {
    return wire->take(
        [=](const Sent& s) {
          return s.index >= after && s.is_probe() && s.h.slot == slot && s.h.seq == seq;
        },
        "SYN probe for slot " + std::to_string(slot) + " seq " + std::to_string(seq));
  }

  void send(const Header& h, std::span<const std::int32_t> values = {}, Endpoint from = kSwitch) {
    wire->reply(encode_packet(h, values), from);
  }

  // Answers an int32 data packet with the RESULT multicast of a complete round: own values plus
  // rank 1's. Returns the reduced values (kPayload, zero padded).
  std::vector<std::int32_t> answer_int(const Sent& p) {
    std::vector<std::int32_t> sums = p.values();
    for (std::size_t i = 0; i < p.h.count; ++i) sums[i] += other_rank(p.h.offset + i);
    send(result_for(p), sums);
    return sums;
  }

  // Answers a float packet as if rank 1 sent the same quantised values and no larger exponents:
  // the result carries twice the values and the packet's own exponents.
  std::vector<std::int32_t> answer_float(const Sent& p) {
    std::vector<std::int32_t> sums = p.values();
    for (std::int32_t& v : sums) v *= 2;
    send(result_for(p), sums);
    return sums;
  }

  // Checks the data packet of block `block`, int32.
  void check_int_data(const Sent& p, const Job<std::int32_t>& job, std::size_t block) {
    SCOPED_TRACE(p.describe());
    const std::size_t begin = block * kPayload;
    const std::size_t valid = std::min<std::size_t>(kPayload, job.in.size() - begin);
    EXPECT_EQ(p.h.flags, 0u);
    EXPECT_EQ(p.h.op_id, job.op->op_id);
    EXPECT_EQ(p.h.offset, begin);
    EXPECT_EQ(p.h.count, valid);
    const std::vector<std::int32_t> values = p.values();
    for (std::size_t i = 0; i < kPayload; ++i) {
      EXPECT_EQ(values[i], i < valid ? job.in[begin + i] : 0) << "value " << i;
    }
  }

  // Checks the data packet of float block `block`: quantised with `exp`, announcing `exp_next`.
  void check_float_data(const Sent& p, const Job<float>& job, std::size_t block, std::int8_t exp,
                        std::int8_t exp_next) {
    SCOPED_TRACE(p.describe());
    const std::size_t begin = block * kPayload;
    const std::size_t valid = std::min<std::size_t>(kPayload, job.in.size() - begin);
    EXPECT_EQ(p.h.flags, flag::kFloat);
    EXPECT_EQ(p.h.op_id, job.op->op_id);
    EXPECT_EQ(p.h.offset, begin);
    EXPECT_EQ(p.h.count, valid);
    EXPECT_EQ(p.h.exp_used, exp);
    EXPECT_EQ(p.h.exp_next, exp_next);
    std::vector<std::byte> expected(4 * kPayload, std::byte{0});
    quant::quantize(job.in.data() + begin, valid, exp, kWorld, expected.data());
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), p.payload().begin()))
        << "payload differs from quant::quantize of the input with exponent " << int{exp};
  }

  // Checks a float exponent-priming packet for the entry whose first block is `block`.
  void check_priming(const Sent& p, const Job<float>& job, std::size_t block) {
    SCOPED_TRACE(p.describe());
    const std::size_t begin = block * kPayload;
    EXPECT_EQ(p.h.flags, flag::kFloat);
    EXPECT_EQ(p.h.offset, begin);
    EXPECT_EQ(p.h.count, 0u);
    EXPECT_EQ(p.h.exp_used, protocol::kExpZero);
    EXPECT_EQ(p.h.exp_next, exponent(job, block));
    for (const std::int32_t v : p.values()) EXPECT_EQ(v, 0);
  }

  static std::int8_t exponent(const Job<float>& job, std::size_t block) {
    const std::size_t begin = block * kPayload;
    return quant::block_exponent(job.in.data() + begin,
                                 std::min<std::size_t>(kPayload, job.in.size() - begin));
  }

  static void expect_int_block(const Job<std::int32_t>& job, std::size_t block,
                               std::span<const std::int32_t> values) {
    const std::size_t begin = block * kPayload;
    for (std::size_t i = begin; i < std::min<std::size_t>(begin + kPayload, job.in.size()); ++i) {
      EXPECT_EQ(job.out[i], values[i - begin]) << "block " << block << ", element " << i;
    }
  }

  // The output of a delivered float block: the result's values dequantised with its exponent.
  static void expect_float_block(const Job<float>& job, std::size_t block,
                                 std::span<const std::int32_t> values, std::int8_t exp) {
    const std::size_t begin = block * kPayload;
    const std::size_t valid = std::min<std::size_t>(kPayload, job.in.size() - begin);
    std::vector<float> expected(valid);
    quant::dequantize(to_wire(values).data(), valid, exp, kWorld, 1, expected.data());
    for (std::size_t i = 0; i < valid; ++i) {
      EXPECT_EQ(job.out[begin + i], expected[i]) << "block " << block << ", element " << begin + i;
    }
  }

  template <typename T>
  static void expect_own_input(const Job<T>& job, std::size_t block) {
    const std::size_t begin = block * kPayload;
    for (std::size_t i = begin; i < std::min<std::size_t>(begin + kPayload, job.in.size()); ++i) {
      EXPECT_EQ(job.out[i], job.in[i]) << "missed block " << block << ", element " << i;
    }
  }

  template <typename T>
  static OpStats finish(const Job<T>& job) {
    EXPECT_TRUE(job.op->wait_for(kOpWait)) << "operation not complete";
    try {
      return job.op->result();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "the operation failed: " << e.what();
      return {};
    }
  }

  // Every packet went to the switch's port, decodes, and belongs to this rank and session; the
  // retransmission counters agree with the packets on the wire. `expedited`: retransmissions
  // that a reply triggered, not a timer.
  void expect_consistent(const OpStats& stats, std::size_t expedited = 0) {
    const std::vector<Sent> log = wire->log();
    for (const Sent& s : log) {
      SCOPED_TRACE(s.describe());
      EXPECT_EQ(s.status, protocol::DecodeStatus::ok);
      EXPECT_EQ(s.to, kSwitch);
      EXPECT_EQ(s.h.session, kSession);
      EXPECT_EQ(s.h.rank, 0u);
      EXPECT_TRUE(s.is_data() || s.is_probe()) << "neither a data packet nor a SYN probe";
    }
    const Tally t = tally(log);
    // Timer expiries and expedited resends each send one header-only probe (a retransmission
    // probe, or the skip-forward probe again); a SYN state reply lacking this rank resends data.
    EXPECT_EQ(stats.timeouts + stats.syn_probes + expedited, t.probes);
    EXPECT_EQ(stats.retransmissions, stats.timeouts + expedited + t.data_resends);
  }

  Config config;
  SessionInfo session;
  std::shared_ptr<Wire> wire = std::make_shared<Wire>();
  FakeDevice device{wire};
};

// ---- 1. Normal rounds ---------------------------------------------------------------------------

TEST_F(EnginePackets, ResultMulticastsFillTheOutputAndStats) {
  // 14 values, 4 blocks (the last holds 2): entry 0 carries blocks 0 and 2, entry 1 blocks 1, 3.
  auto job = int_job(14);
  auto engine = start_engine();
  engine->submit(job.op);

  std::vector<std::vector<std::int32_t>> results(4);
  struct Step {
    std::uint32_t entry;
    std::uint64_t round;
    std::size_t block;
  };
  for (const Step step : {Step{0, 0, 0}, Step{1, 0, 1}, Step{0, 1, 2}, Step{1, 1, 3}}) {
    const Sent p = take_data(slot_of(step.entry, step.round), seq_of(step.round));
    check_int_data(p, job, step.block);
    results[step.block] = answer_int(p);
  }

  const OpStats stats = finish(job);
  for (std::size_t b = 0; b < 4; ++b) expect_int_block(job, b, results[b]);
  EXPECT_EQ(job.out[0], 7 + 1000);
  EXPECT_EQ(job.out[13], -98 + 1013);
  EXPECT_EQ(stats.blocks, 4u);
  EXPECT_EQ(stats.blocks_full, 4u);
  EXPECT_EQ(stats.blocks_partial, 0u);
  EXPECT_EQ(stats.blocks_missed, 0u);
  EXPECT_EQ(stats.blocks_non_finite, 0u);
  EXPECT_EQ(stats.contributed, 4u);
  EXPECT_EQ(stats.min_contributors, 2u);
  EXPECT_EQ(stats.syn_probes, 0u);
  EXPECT_TRUE(stats.missed.empty());
  EXPECT_EQ(job.contributors, std::vector<std::uint64_t>(4, 0b11));
  expect_consistent(stats);
}

TEST_F(EnginePackets, PacketsOfSeveralLoopStepsLeaveAsOneBurst) {
  // Four blocks, window 2: the first two go out when the operation starts, the other two in two
  // later loop steps, each after the reply that frees its entry. The runner leaves batching to
  // the transport (which sends a burst when full or after its flush interval, DPDK's tx_flush_us),
  // so it flushes once, when the operation is over and nothing polls the queue any more; a flush
  // per loop step would cut the four packets into three bursts.
  auto job = int_job(4 * kPayload);
  auto engine = start_engine();
  engine->submit(job.op);
  for (const auto& [entry, round] : {std::pair{0u, 0u}, {1u, 0u}, {0u, 1u}, {1u, 1u}}) {
    answer_int(take_data(slot_of(entry, round), seq_of(round)));
  }
  (void)finish(job);
  engine.reset();  // the operation's loop is over (its flush included)
  // Retransmissions under a slow scheduler would add packets, never flushes.
  EXPECT_EQ(wire->flushed_at(), std::vector<std::size_t>{wire->sent_count()});
  EXPECT_GE(wire->sent_count(), 4u);
}

TEST_F(EnginePackets, NextOperationContinuesEachEntrysRounds) {
  auto first = int_job(8, kOpId);
  auto second = int_job(8, kOpId + 1);
  auto engine = start_engine();
  engine->submit(first.op);
  for (std::uint32_t e = 0; e < 2; ++e) answer_int(take_data(slot_of(e, 0), 1));
  (void)finish(first);

  // Round 1 of each entry: the other slot of the pair, first use.
  engine->submit(second.op);
  for (std::uint32_t e = 0; e < 2; ++e) {
    const Sent p = take_data(slot_of(e, 1), 1);
    EXPECT_EQ(p.h.op_id, kOpId + 1);
    check_int_data(p, second, e);
    answer_int(p);
  }
  const OpStats stats = finish(second);
  EXPECT_EQ(stats.blocks_full, 2u);
  EXPECT_EQ(second.out[4], 35 + 1004);
}

TEST_F(EnginePackets, AverageDividesByTheContributors) {
  auto job = int_job(4);
  job.op->op = ReduceOp::avg;
  auto engine = start_engine();
  engine->submit(job.op);
  const Sent p = take_data(slot_of(0, 0), 1);
  const std::vector<std::int32_t> sums = answer_int(p);
  (void)finish(job);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(job.out[i], sums[i] / 2) << "element " << i;
}

// ---- 2. Float: exponent priming and block floating point ----------------------------------------

TEST_F(EnginePackets, FloatPrimesTheExponentThenQuantisesWithTheNegotiatedOne) {
  // 14 values, 4 blocks (the last holds 2). Each entry: priming round, then its two blocks.
  auto job = float_job(14);
  EXPECT_EQ(exponent(job, 0), 1);  // block 0: 0.1875, -0.5, 0.5625, -1: below 2^1 (strict)
  auto engine = start_engine();
  engine->submit(job.op);

  std::vector<std::vector<std::int32_t>> results(4);
  std::vector<std::int8_t> used(4);
  for (std::uint32_t e = 0; e < 2; ++e) {
    SCOPED_TRACE("entry " + std::to_string(e));
    const std::size_t b0 = e;
    const std::size_t b1 = e + 2;
    const Sent prime = take_data(slot_of(e, 0), 1);
    check_priming(prime, job, b0);
    // Rank 1's block is larger: the negotiated exponent is one above this rank's.
    used[b0] = static_cast<std::int8_t>(prime.h.exp_next + 1);
    Header r = result_for(prime);
    r.exp_next = used[b0];
    send(r, std::vector<std::int32_t>(kPayload, 0));

    const Sent d0 = take_data(slot_of(e, 1), 1);
    check_float_data(d0, job, b0, used[b0], exponent(job, b1));
    used[b1] = static_cast<std::int8_t>(d0.h.exp_next + 1);
    results[b0] = d0.values();
    for (std::int32_t& v : results[b0]) v *= 2;
    r = result_for(d0);
    r.exp_next = used[b1];
    send(r, results[b0]);

    const Sent d1 = take_data(slot_of(e, 2), 2);
    check_float_data(d1, job, b1, used[b1], protocol::kExpZero);  // the entry's last block
    results[b1] = answer_float(d1);
  }

  const OpStats stats = finish(job);
  for (std::size_t b = 0; b < 4; ++b) {
    expect_float_block(job, b, results[b], used[b]);
    // Rank 1 sent the same values: the output is about twice the input.
    for (std::size_t i = b * kPayload; i < std::min<std::size_t>(b * kPayload + kPayload, 14); ++i) {
      EXPECT_NEAR(job.out[i], 2 * job.in[i], std::ldexp(1.0, used[b] - 29)) << "element " << i;
    }
  }
  EXPECT_EQ(stats.blocks, 4u);
  EXPECT_EQ(stats.blocks_full, 4u);
  EXPECT_EQ(stats.blocks_missed, 0u);
  EXPECT_EQ(stats.blocks_non_finite, 0u);
  EXPECT_EQ(stats.contributed, 4u);
  EXPECT_EQ(stats.min_contributors, 2u);
  EXPECT_EQ(job.contributors, std::vector<std::uint64_t>(4, 0b11));
  expect_consistent(stats);
}

TEST_F(EnginePackets, FloatBlocksOfZerosAndNonFiniteValuesTravelWithReservedExponents) {
  auto job = float_job(8);  // entry 0: block 0, entry 1: block 1
  job.in[2] = std::nanf("");
  std::fill(job.in.begin() + 4, job.in.end(), 0.0f);
  auto engine = start_engine();
  engine->submit(job.op);

  for (std::uint32_t e = 0; e < 2; ++e) {
    const Sent prime = take_data(slot_of(e, 0), 1);
    EXPECT_EQ(prime.h.exp_next, e == 0 ? protocol::kExpNonFinite : protocol::kExpZero);
    (void)answer_float(prime);
    const Sent data = take_data(slot_of(e, 1), 1);
    EXPECT_EQ(data.h.exp_used, prime.h.exp_next);
    for (const std::int32_t v : data.values()) EXPECT_EQ(v, 0) << "reserved exponents send zeros";
    (void)answer_float(data);
  }

  const OpStats stats = finish(job);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_TRUE(std::isnan(job.out[i])) << "element " << i;
  for (std::size_t i = 4; i < 8; ++i) EXPECT_EQ(job.out[i], 0.0f) << "element " << i;
  EXPECT_EQ(stats.blocks_non_finite, 1u);
  EXPECT_EQ(stats.blocks_out_of_range, 0u) << "a NaN is not a range problem";
  EXPECT_EQ(stats.blocks_full, 2u);
  expect_consistent(stats);
}

TEST_F(EnginePackets, FiniteBlocksBeyondTwoToThe126AreCountedAsOutOfRange) {
  auto job = float_job(8);  // entry 0: block 0, entry 1: block 1
  job.in[1] = 3.0e38f;      // finite, but >= 2^126
  auto engine = start_engine();
  engine->submit(job.op);
  for (std::uint32_t e = 0; e < 2; ++e) {
    const Sent prime = take_data(slot_of(e, 0), 1);
    EXPECT_EQ(prime.h.exp_next, e == 0 ? protocol::kExpNonFinite : prime.h.exp_next);
    (void)answer_float(prime);
    (void)answer_float(take_data(slot_of(e, 1), 1));
  }
  const OpStats stats = finish(job);
  EXPECT_EQ(stats.blocks_out_of_range, 1u);
  EXPECT_EQ(stats.blocks_non_finite, 1u) << "it still comes back as NaN";
  EXPECT_TRUE(std::isnan(job.out[0]));
  expect_consistent(stats);
}

// AllreduceOptions::block_exponents and wire_result (a GPU does the block floating point): the
// packets announce the caller's exponents, not a scan's, and the output receives the raw wire
// sums with each block's exponent and divisor; a missed block keeps the input, marked divisor 0.
TEST_F(EnginePackets, CallerExponentsAreAnnouncedAndTheWireResultIsDeliveredRaw) {
  auto job = float_job(12);  // entry 0: blocks 0, 2; entry 1: block 1
  job.op->op = ReduceOp::avg;
  // Valid but one above the input's own: only the caller's exponents can produce these.
  std::vector<std::int8_t> exponents;
  for (std::size_t b = 0; b < 3; ++b) exponents.push_back(static_cast<std::int8_t>(exponent(job, b) + 1));
  std::vector<block_float::WireBlock> blocks(3, {.divisor = 99, .exponent = 5});
  job.op->block_exponents = exponents.data();
  job.op->wire_result = blocks.data();
  auto engine = start_engine();
  engine->submit(job.op);

  std::vector<std::vector<std::int32_t>> sums(2);
  for (std::uint32_t e = 0; e < 2; ++e) {
    const Sent prime = take_data(slot_of(e, 0), 1);
    EXPECT_EQ(prime.h.exp_next, exponents[e]);
    (void)answer_float(prime);
    const Sent data = take_data(slot_of(e, 1), 1);
    check_float_data(data, job, e, exponents[e], e == 0 ? exponents[2] : protocol::kExpZero);
    sums[e] = answer_float(data);
  }
  (void)take_data(slot_of(0, 2), 2);
  // Slot of block 2 already carries the next operation's multicast: block 2 is missed.
  send(make_header(flag::kResult | flag::kFloat, slot_of(0, 2), 3, 0, 4, 2, 0b11, kOpId + 1),
       std::vector<std::int32_t>(kPayload, 999));

  const OpStats stats = finish(job);
  for (std::size_t b = 0; b < 2; ++b) {
    const std::vector<std::byte> on_wire = to_wire(sums[b]);
    EXPECT_EQ(std::memcmp(job.out.data() + b * kPayload, on_wire.data(), 4 * kPayload), 0)
        << "block " << b << " holds the wire sums";
    EXPECT_EQ(blocks[b].divisor, 2u) << "AVG over both contributors, block " << b;
    EXPECT_EQ(blocks[b].exponent, exponents[b]) << "block " << b;
  }
  expect_own_input(job, 2);
  EXPECT_EQ(blocks[2].divisor, 0u) << "missed";
  EXPECT_EQ(stats.blocks_missed, 1u);
  expect_consistent(stats);
}

// §9.3: a result with fewer than N contributors that includes this rank sets COUNT_TO_K on the
// entry's later packets, for the rest of the operation.
TEST_F(EnginePackets, PartialResultIncludingThisRankEscalatesToCountToK) {
  config.window = 1;  // one entry: blocks 0, 1, 2 in rounds 0, 1, 2
  auto job = int_job(12);
  auto next = int_job(4, kOpId + 1);
  auto engine = start_engine();
  engine->submit(job.op);

  Sent p = take_data(slot_of(0, 0), 1);
  EXPECT_EQ(p.h.flags, 0u);
  Header r = result_for(p);
  r.contributors = 1;
  r.bitmap = 0b10;  // partial, without this rank: no reason to escalate
  std::vector<std::int32_t> only_rank1(kPayload);
  for (std::size_t i = 0; i < kPayload; ++i) only_rank1[i] = other_rank(i);
  send(r, only_rank1);

  p = take_data(slot_of(0, 1), 1);
  EXPECT_EQ(p.h.flags, 0u);
  r = result_for(p);
  r.contributors = 1;
  r.bitmap = 0b01;  // partial, with this rank: the straggler timeout was paid once
  const std::vector<std::int32_t> only_rank0 = p.values();
  send(r, only_rank0);

  p = take_data(slot_of(0, 2), 2);
  EXPECT_EQ(p.h.flags, flag::kCountToK);
  const std::vector<std::int32_t> sums = answer_int(p);

  const OpStats stats = finish(job);
  expect_int_block(job, 0, only_rank1);
  expect_int_block(job, 1, only_rank0);
  expect_int_block(job, 2, sums);
  EXPECT_EQ(stats.blocks_partial, 2u);
  EXPECT_EQ(stats.blocks_full, 1u);
  EXPECT_EQ(stats.contributed, 2u);
  EXPECT_EQ(stats.min_contributors, 1u);
  EXPECT_EQ(job.contributors, (std::vector<std::uint64_t>{0b10, 0b01, 0b11}));
  expect_consistent(stats);

  // The escalation ends with the operation.
  engine->submit(next.op);
  p = take_data(slot_of(0, 3), 2);
  EXPECT_EQ(p.h.flags, 0u);
  (void)answer_int(p);
  (void)finish(next);
}

TEST_F(EnginePackets, PreemptiveOperationSetsCountToKFromTheFirstPacket) {
  auto job = int_job(4);
  job.op->preemptive = true;
  job.op->k = 1;
  auto engine = start_engine();
  engine->submit(job.op);
  const Sent p = take_data(slot_of(0, 0), 1);
  EXPECT_EQ(p.h.flags, flag::kCountToK);
  EXPECT_EQ(p.h.k, 1u);
  const std::vector<std::int32_t> sums = answer_int(p);
  (void)finish(job);
  expect_int_block(job, 0, sums);
}

// ---- 3. Loss: header-only retransmission probes -------------------------------------------------

TEST_F(EnginePackets, LostDataIsResentWhenTheProbeReplyLacksThisRank) {
  auto job = int_job(4);  // one block: entry 0 only
  auto engine = start_engine();
  engine->submit(job.op);

  const Sent data = take_data(slot_of(0, 0), 1);  // "lost": not answered
  const Sent probe = take_probe(slot_of(0, 0), 1);
  EXPECT_EQ(probe.h.flags, flag::kSyn);
  EXPECT_EQ(probe.h.op_id, kOpId);
  EXPECT_EQ(probe.h.count, 0u);
  EXPECT_EQ(probe.bytes.size(), protocol::kHeaderSize);

  // The slot's round is open and holds rank 1 only.
  const std::size_t mark = wire->sent_count();
  send(make_header(flag::kSyn, slot_of(0, 0), 1, 0, 0, 1, 0b10));
  const Sent resent = take_data(slot_of(0, 0), 1, mark);
  EXPECT_EQ(resent.bytes, data.bytes) << "the resent data packet differs from the first";
  const std::vector<std::int32_t> sums = answer_int(resent);

  const OpStats stats = finish(job);
  expect_int_block(job, 0, sums);
  EXPECT_EQ(stats.blocks_full, 1u);
  EXPECT_GE(stats.timeouts, 1u);
  EXPECT_GE(stats.retransmissions, 2u);  // at least the probe and the data
  EXPECT_EQ(tally(wire->log()).data_resends, 1u);
  EXPECT_EQ(job.contributors[0], 0b11u);
  expect_consistent(stats);
}

TEST_F(EnginePackets, ProbeAnsweredWithTheStoredResultCompletes) {
  auto job = int_job(4);
  auto engine = start_engine();
  engine->submit(job.op);

  const Sent data = take_data(slot_of(0, 0), 1);  // the multicast result is "lost"
  const Sent probe = take_probe(slot_of(0, 0), 1);
  std::vector<std::int32_t> sums = data.values();
  for (std::size_t i = 0; i < 4; ++i) sums[i] += other_rank(i);
  send(result_for(data, flag::kResult | flag::kRetransmit | flag::kSyn), sums);

  const OpStats stats = finish(job);
  expect_int_block(job, 0, sums);
  EXPECT_EQ(stats.blocks_full, 1u);
  EXPECT_GE(stats.retransmissions, 1u);
  const Tally t = tally(wire->log());
  EXPECT_EQ(t.data, 1u) << "the data went again although only the result was lost";
  EXPECT_EQ(stats.retransmissions, t.probes);
  expect_consistent(stats);
}

TEST_F(EnginePackets, ProbeReplyThatCountedThisRankSendsNoDataAndProbingGoesOn) {
  config.liveness_timeout = 200ms;  // the pending round's probes go every 40 ms
  auto job = int_job(4);
  auto engine = start_engine();
  engine->submit(job.op);

  const Sent data = take_data(slot_of(0, 0), 1);
  (void)take_probe(slot_of(0, 0), 1);
  // Open round that already counts rank 0 (rank 1 is slow).
  const std::size_t mark = wire->sent_count();
  send(make_header(flag::kSyn, slot_of(0, 0), 1, 0, 0, 1, 0b01));
  (void)take_probe(slot_of(0, 0), 1, mark);  // the engine keeps probing
  std::vector<std::int32_t> sums = data.values();
  for (std::size_t i = 0; i < 4; ++i) sums[i] += other_rank(i);
  send(result_for(data, flag::kResult | flag::kRetransmit | flag::kSyn), sums);

  const OpStats stats = finish(job);
  expect_int_block(job, 0, sums);
  EXPECT_EQ(tally(wire->log()).data, 1u);
  EXPECT_GE(stats.retransmissions, 2u);
  expect_consistent(stats);
}

// The switch's answer to a probe of a round nobody opened yet: the slot is still at an earlier
// round of this operation (SYN|COMPLETE with that round's seq). The data must go again.
TEST_F(EnginePackets, ProbeReplyShowingAnEarlierRoundOfThisOperationResendsTheData) {
  config.window = 1;  // blocks 0, 1, 2 in rounds 0, 1, 2 (slots 100, 101, 100)
  auto job = int_job(12);
  auto engine = start_engine();
  engine->submit(job.op);
  std::vector<std::vector<std::int32_t>> results(3);
  results[0] = answer_int(take_data(slot_of(0, 0), 1));
  results[1] = answer_int(take_data(slot_of(0, 1), 1));
  const Sent lost = take_data(slot_of(0, 2), 2);
  (void)take_probe(slot_of(0, 2), 2);
  const std::size_t mark = wire->sent_count();
  send(make_header(flag::kSyn | flag::kComplete, slot_of(0, 2), 1, 0, 0, 2, 0b11));
  const Sent resent = take_data(slot_of(0, 2), 2, mark);
  EXPECT_EQ(resent.bytes, lost.bytes);
  results[2] = answer_int(resent);
  const OpStats stats = finish(job);
  for (std::size_t b = 0; b < 3; ++b) expect_int_block(job, b, results[b]);
  EXPECT_EQ(stats.blocks_full, 3u);
  EXPECT_EQ(tally(wire->log()).data_resends, 1u);
  expect_consistent(stats);
}

// The same situation when the slot is fresh (seq 0, op_id 0, as after every join) or its last
// round belongs to an earlier operation: the probe reply carries the slot's op_id and seq, and the
// engine must still read it as "not counted" instead of dropping it as a late reply, or the lost
// data packet would never go again (timers only resend the header-only probe).
TEST_F(EnginePackets, LostFirstDataOnAFreshSlotIsResentOnTheProbeReply) {
  auto job = int_job(4);
  auto engine = start_engine();
  engine->submit(job.op);
  const Sent lost = take_data(slot_of(0, 0), 1);
  (void)take_probe(slot_of(0, 0), 1);
  // What sw::step_slot/reply_header send for a probe of a fresh slot: SYN, seq 0, op_id 0.
  const std::size_t mark = wire->sent_count();
  send(make_header(flag::kSyn, slot_of(0, 0), 0, 0, 0, 0, 0, /*op_id=*/0));
  const Sent resent = take_data(slot_of(0, 0), 1, mark);
  EXPECT_EQ(resent.bytes, lost.bytes);
  const std::vector<std::int32_t> sums = answer_int(resent);
  (void)finish(job);
  expect_int_block(job, 0, sums);
}

TEST_F(EnginePackets, LostFirstDataOnASlotOfAnEarlierOperationIsResentOnTheProbeReply) {
  config.window = 1;
  auto first = int_job(8, kOpId);       // rounds 0, 1: slots 100 and 101, seq 1
  auto second = int_job(4, kOpId + 1);  // round 2: slot 100, seq 2
  auto engine = start_engine();
  engine->submit(first.op);
  (void)answer_int(take_data(slot_of(0, 0), 1));
  (void)answer_int(take_data(slot_of(0, 1), 1));
  (void)finish(first);

  engine->submit(second.op);
  const Sent lost = take_data(slot_of(0, 2), 2);
  (void)take_probe(slot_of(0, 2), 2);
  // Slot 100 still holds round seq 1 of the first operation, complete: the switch's SYN reply.
  const std::size_t mark = wire->sent_count();
  send(make_header(flag::kSyn | flag::kComplete, slot_of(0, 2), 1, 0, 0, 2, 0b11, kOpId));
  const Sent resent = take_data(slot_of(0, 2), 2, mark);
  EXPECT_EQ(resent.bytes, lost.bytes);
  const std::vector<std::int32_t> sums = answer_int(resent);
  (void)finish(second);
  expect_int_block(second, 0, sums);
}

// ---- 4. Straggler skip-forward ------------------------------------------------------------------

// 30 values, 8 blocks (the last holds 2): entry 0 carries blocks 0, 2, 4, 6 in rounds 0..3,
// entry 1 blocks 1, 3, 5, 7. Entry 1 is answered normally.
TEST_F(EnginePackets, OldCompleteSendsASynProbeAndDeliversTheFetchedRound) {
  auto job = int_job(30);
  auto engine = start_engine();
  engine->submit(job.op);
  std::vector<std::vector<std::int32_t>> results(8);

  // The slot is two rounds ahead (seq 2 of slot 100) and its round is complete.
  (void)take_data(slot_of(0, 0), 1);
  send(make_header(flag::kOld | flag::kComplete, slot_of(0, 0), 2, 16, 0, 1, 0b10));
  const Sent probe = take_probe(slot_of(0, 2), 2);
  EXPECT_EQ(probe.h.flags, flag::kSyn);
  EXPECT_EQ(probe.h.op_id, kOpId);
  // The stored result of round 2 (block 4), completed by rank 1 alone (fastest-K).
  results[4] = {other_rank(16), other_rank(17), other_rank(18), other_rank(19)};
  send(make_header(flag::kResult | flag::kRetransmit | flag::kSyn, slot_of(0, 2), 2, 16, 4, 1,
                   0b10),
       results[4]);
  const Sent d3 = take_data(slot_of(0, 3), 2);
  check_int_data(d3, job, 6);
  results[6] = answer_int(d3);
  for (std::uint64_t round = 0; round < 4; ++round) {
    const Sent p = take_data(slot_of(1, round), seq_of(round));
    check_int_data(p, job, 1 + 2 * round);
    results[1 + 2 * round] = answer_int(p);
  }

  const OpStats stats = finish(job);
  expect_own_input(job, 0);
  expect_own_input(job, 2);
  for (const std::size_t b : {1u, 3u, 4u, 5u, 6u, 7u}) expect_int_block(job, b, results[b]);
  EXPECT_EQ(stats.blocks, 8u);
  EXPECT_EQ(stats.blocks_missed, 2u);
  EXPECT_EQ(stats.missed, (std::vector<ElementRange>{{0, 4}, {8, 12}}));
  EXPECT_EQ(stats.blocks_full, 5u);
  EXPECT_EQ(stats.blocks_partial, 1u);
  EXPECT_EQ(stats.contributed, 5u);
  EXPECT_EQ(stats.min_contributors, 1u);
  EXPECT_EQ(stats.syn_probes, 1u);
  EXPECT_EQ(job.contributors,
            (std::vector<std::uint64_t>{0, 0b11, 0, 0b11, 0b10, 0b11, 0b11, 0b11}));
  expect_consistent(stats);
}

TEST_F(EnginePackets, OldCompleteWithSynDisabledMissesTheRoundAndGoesOn) {
  config.syn_disable = true;
  auto job = int_job(30);
  auto engine = start_engine();
  engine->submit(job.op);
  std::vector<std::vector<std::int32_t>> results(8);

  (void)take_data(slot_of(0, 0), 1);
  send(make_header(flag::kOld | flag::kComplete, slot_of(0, 0), 2, 16, 0, 1, 0b10));
  // No probe: rounds 0..2 (blocks 0, 2, 4) are missed and the entry goes on with round 3.
  const Sent d3 = take_data(slot_of(0, 3), 2);
  check_int_data(d3, job, 6);
  results[6] = answer_int(d3);
  for (std::uint64_t round = 0; round < 4; ++round) {
    results[1 + 2 * round] = answer_int(take_data(slot_of(1, round), seq_of(round)));
  }

  const OpStats stats = finish(job);
  for (const std::size_t b : {0u, 2u, 4u}) expect_own_input(job, b);
  for (const std::size_t b : {1u, 3u, 5u, 6u, 7u}) expect_int_block(job, b, results[b]);
  EXPECT_EQ(stats.blocks_missed, 3u);
  EXPECT_EQ(stats.missed, (std::vector<ElementRange>{{0, 4}, {8, 12}, {16, 20}}));
  EXPECT_EQ(stats.blocks_full, 5u);
  EXPECT_EQ(stats.blocks_partial, 0u);
  EXPECT_EQ(stats.syn_probes, 0u);
  EXPECT_EQ(job.contributors, (std::vector<std::uint64_t>{0, 0b11, 0, 0b11, 0, 0b11, 0b11, 0b11}));
  for (const Sent& s : wire->log()) {
    // (Retransmission probes of round 3, slot 101 seq 2, may legitimately appear.)
    EXPECT_FALSE(s.is_probe() && s.h.slot == slot_of(0, 2) && s.h.seq == 2)
        << "skip-forward probe with SYN disabled: " << s.describe();
  }
  expect_consistent(stats);
}

// Float: 24 values, 6 blocks; entry 0 runs priming (round 0), blocks 0, 2, 4 (rounds 1..3).
TEST_F(EnginePackets, FloatSkipForwardMissesOneBlockAndFetchesTheNext) {
  auto job = float_job(24);
  auto engine = start_engine();
  engine->submit(job.op);
  std::vector<std::vector<std::int32_t>> results(6);
  std::vector<std::int8_t> used(6, protocol::kExpZero);

  // The priming packet is answered: slot 100 is at seq 2 (round 2, block 2), complete.
  (void)take_data(slot_of(0, 0), 1);
  const auto e2 = static_cast<std::int8_t>(exponent(job, 2) + 1);
  const auto e4 = static_cast<std::int8_t>(exponent(job, 4) + 2);
  Header old =
      make_header(flag::kOld | flag::kComplete | flag::kFloat, slot_of(0, 0), 2, 8, 0, 2, 0b11);
  old.exp_used = e2;
  old.exp_next = e4;
  send(old);
  const Sent probe = take_probe(slot_of(0, 2), 2);
  EXPECT_EQ(probe.h.flags, flag::kSyn | flag::kFloat);
  // Block 2's stored result: rank 0 contributed it (it had sent it before falling behind).
  std::vector<std::byte> q(4 * kPayload);
  quant::quantize(job.in.data() + 8, 4, e2, kWorld, q.data());
  results[2].resize(4);
  for (std::size_t i = 0; i < 4; ++i) {
    results[2][i] = 2 * static_cast<std::int32_t>(protocol::load_be32(q.data() + 4 * i));
  }
  Header fetched = make_header(flag::kResult | flag::kRetransmit | flag::kSyn | flag::kFloat,
                               slot_of(0, 2), 2, 8, 4, 2, 0b11);
  fetched.exp_used = e2;
  fetched.exp_next = e4;
  send(fetched, results[2]);
  used[2] = e2;
  // Block 4 goes with the exponent the fetched result negotiated.
  const Sent d4 = take_data(slot_of(0, 3), 2);
  check_float_data(d4, job, 4, e4, protocol::kExpZero);
  results[4] = answer_float(d4);
  used[4] = e4;
  for (std::uint64_t round = 0; round < 4; ++round) {
    const Sent p = take_data(slot_of(1, round), seq_of(round));
    if (round > 0) {
      results[1 + 2 * (round - 1)] = answer_float(p);
      used[1 + 2 * (round - 1)] = p.h.exp_used;
    } else {
      answer_float(p);
    }
  }

  const OpStats stats = finish(job);
  expect_own_input(job, 0);
  for (const std::size_t b : {1u, 2u, 3u, 4u, 5u}) expect_float_block(job, b, results[b], used[b]);
  EXPECT_EQ(stats.blocks_missed, 1u);
  EXPECT_EQ(stats.missed, (std::vector<ElementRange>{{0, 4}}));
  EXPECT_EQ(stats.blocks_full, 5u);
  EXPECT_EQ(stats.syn_probes, 1u);
  EXPECT_EQ(job.contributors, (std::vector<std::uint64_t>{0, 0b11, 0b11, 0b11, 0b11, 0b11}));
  expect_consistent(stats);
}

TEST_F(EnginePackets, FloatSkipForwardWithSynDisabledTakesTheExponentFromExpNext) {
  config.syn_disable = true;
  auto job = float_job(24);
  auto engine = start_engine();
  engine->submit(job.op);
  std::vector<std::vector<std::int32_t>> results(6);
  std::vector<std::int8_t> used(6, protocol::kExpZero);

  (void)take_data(slot_of(0, 0), 1);
  const auto e4 = static_cast<std::int8_t>(exponent(job, 4) + 3);
  Header old =
      make_header(flag::kOld | flag::kComplete | flag::kFloat, slot_of(0, 0), 2, 8, 0, 2, 0b11);
  old.exp_used = static_cast<std::int8_t>(exponent(job, 2) + 1);
  old.exp_next = e4;
  send(old);
  // Blocks 0 and 2 are missed; block 4 goes at once with the complete round's exp_next.
  const Sent d4 = take_data(slot_of(0, 3), 2);
  check_float_data(d4, job, 4, e4, protocol::kExpZero);
  results[4] = answer_float(d4);
  used[4] = e4;
  for (std::uint64_t round = 0; round < 4; ++round) {
    const Sent p = take_data(slot_of(1, round), seq_of(round));
    const std::vector<std::int32_t> r = answer_float(p);
    if (round > 0) {
      results[1 + 2 * (round - 1)] = r;
      used[1 + 2 * (round - 1)] = p.h.exp_used;
    }
  }

  const OpStats stats = finish(job);
  expect_own_input(job, 0);
  expect_own_input(job, 2);
  for (const std::size_t b : {1u, 3u, 4u, 5u}) expect_float_block(job, b, results[b], used[b]);
  EXPECT_EQ(stats.blocks_missed, 2u);
  EXPECT_EQ(stats.missed, (std::vector<ElementRange>{{0, 4}, {8, 12}}));
  EXPECT_EQ(stats.blocks_full, 4u);
  EXPECT_EQ(stats.syn_probes, 0u);
  EXPECT_EQ(job.contributors, (std::vector<std::uint64_t>{0, 0b11, 0, 0b11, 0b11, 0b11}));
  expect_consistent(stats);
}

// ---- 5. OLD, round still open: rejoin it --------------------------------------------------------

TEST_F(EnginePackets, OldOpenRoundIsRejoinedWithItsExponent) {
  auto job = float_job(24);
  auto engine = start_engine();
  engine->submit(job.op);
  std::vector<std::vector<std::int32_t>> results(6);
  std::vector<std::int8_t> used(6, protocol::kExpZero);

  (void)take_data(slot_of(0, 0), 1);
  // Slot 100 is at seq 2 (round 2, block 2), open, using an exponent above this rank's own.
  const auto e2 = static_cast<std::int8_t>(exponent(job, 2) + 2);
  Header old = make_header(flag::kOld | flag::kFloat, slot_of(0, 0), 2, 8, 0, 1, 0b10);
  old.exp_used = e2;
  old.exp_next = static_cast<std::int8_t>(exponent(job, 4) + 5);  // not for this rank to use
  send(old);
  const Sent d2 = take_data(slot_of(0, 2), 2);
  check_float_data(d2, job, 2, e2, exponent(job, 4));
  results[2] = answer_float(d2);
  used[2] = e2;
  const Sent d4 = take_data(slot_of(0, 3), 2);
  check_float_data(d4, job, 4, exponent(job, 4), protocol::kExpZero);
  results[4] = answer_float(d4);
  used[4] = d4.h.exp_used;
  for (std::uint64_t round = 0; round < 4; ++round) {
    const Sent p = take_data(slot_of(1, round), seq_of(round));
    const std::vector<std::int32_t> r = answer_float(p);
    if (round > 0) {
      results[1 + 2 * (round - 1)] = r;
      used[1 + 2 * (round - 1)] = p.h.exp_used;
    }
  }

  const OpStats stats = finish(job);
  expect_own_input(job, 0);
  for (const std::size_t b : {1u, 2u, 3u, 4u, 5u}) expect_float_block(job, b, results[b], used[b]);
  EXPECT_EQ(stats.blocks_missed, 1u);
  EXPECT_EQ(stats.missed, (std::vector<ElementRange>{{0, 4}}));
  EXPECT_EQ(stats.blocks_full, 5u);
  EXPECT_EQ(stats.syn_probes, 0u);
  EXPECT_EQ(job.contributors[0], 0u);
  expect_consistent(stats);
}

TEST_F(EnginePackets, Int32OldOpenRoundIsRejoined) {
  auto job = int_job(24);  // entry 0: blocks 0, 2, 4 in rounds 0..2
  auto engine = start_engine();
  engine->submit(job.op);
  (void)take_data(slot_of(0, 0), 1);
  send(make_header(flag::kOld, slot_of(0, 0), 2, 16, 0, 1, 0b10));
  const Sent d = take_data(slot_of(0, 2), 2);
  check_int_data(d, job, 4);
  const std::vector<std::int32_t> r4 = answer_int(d);
  std::vector<std::vector<std::int32_t>> results(6);
  for (std::uint64_t round = 0; round < 3; ++round) {
    results[1 + 2 * round] = answer_int(take_data(slot_of(1, round), seq_of(round)));
  }
  const OpStats stats = finish(job);
  expect_own_input(job, 0);
  expect_own_input(job, 2);
  expect_int_block(job, 4, r4);
  EXPECT_EQ(stats.missed, (std::vector<ElementRange>{{0, 4}, {8, 12}}));
  EXPECT_EQ(stats.blocks_full, 4u);
  expect_consistent(stats);
}

// ---- 6. Replies about the other slot; replies not for this entry --------------------------------

TEST_F(EnginePackets, ResultAboutTheOtherSlotIsIgnoredButExpeditesTheProbe) {
  // Timers far away: any probe seen here was triggered by a reply.
  config.retransmit_timeout = 1000ms;
  config.max_retransmit_timeout = 1000ms;
  config.timeout = 10000ms;
  auto job = int_job(4);
  auto engine = start_engine();
  engine->submit(job.op);

  const Sent data = take_data(slot_of(0, 0), 1);
  const std::vector<std::int32_t> bogus(kPayload, 999);
  auto t0 = std::chrono::steady_clock::now();
  send(make_header(flag::kResult, slot_of(0, 1), 1, 0, 4), bogus);  // slot 101: other parity
  (void)take_probe(slot_of(0, 0), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms) << "the probe was not expedited";
  EXPECT_FALSE(job.op->complete()) << "a result about the other slot was delivered";

  // A later operation on the other slot: not a reason to give up this one, but to ask again.
  std::size_t mark = wire->sent_count();
  t0 = std::chrono::steady_clock::now();
  send(make_header(flag::kOld, slot_of(0, 1), 1, 0, 0, 1, 0b10, kOpId + 1));
  (void)take_probe(slot_of(0, 0), 1, mark);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms) << "the probe was not expedited";
  EXPECT_FALSE(job.op->complete());

  std::vector<std::int32_t> sums = data.values();
  for (std::size_t i = 0; i < 4; ++i) sums[i] += other_rank(i);
  send(result_for(data, flag::kResult | flag::kRetransmit | flag::kSyn), sums);
  const OpStats stats = finish(job);
  expect_int_block(job, 0, sums);
  EXPECT_EQ(stats.blocks_full, 1u);
  EXPECT_EQ(stats.blocks_missed, 0u);
  EXPECT_EQ(stats.timeouts, 0u);
  EXPECT_EQ(stats.retransmissions, 2u);
  expect_consistent(stats, /*expedited=*/2);
}

TEST_F(EnginePackets, RepliesFromElsewhereOrAboutOtherRoundsAreIgnored) {
  config.retransmit_timeout = 1000ms;
  config.max_retransmit_timeout = 1000ms;
  config.timeout = 10000ms;
  auto job = int_job(4);
  auto engine = start_engine();
  engine->submit(job.op);

  const Sent data = take_data(slot_of(0, 0), 1);
  const auto bogus = [](std::int32_t v) { return std::vector<std::int32_t>(kPayload, v); };
  Header h = result_for(data);
  send(h, bogus(111), kStranger);  // not the switch's port
  Header earlier = h;
  earlier.op_id = kOpId - 1;  // a late reply from an earlier operation
  send(earlier, bogus(222));
  Header other_session = h;
  other_session.session = kSession + 1;
  send(other_session, bogus(333));
  Header seq_zero = h;
  seq_zero.seq = 0;
  send(seq_zero, bogus(444));
  Header beyond = h;
  beyond.seq = 2;  // round 2: beyond this operation's single round
  send(beyond, bogus(555));
  Header outside = h;
  outside.slot = kPoolBase + 4;  // beyond this thread's 2W slots
  send(outside, bogus(666));
  const std::vector<std::int32_t> sums = answer_int(data);

  const OpStats stats = finish(job);
  expect_int_block(job, 0, sums);
  EXPECT_EQ(stats.blocks_full, 1u);
  EXPECT_EQ(stats.retransmissions, 0u);
  expect_consistent(stats);
}

// ---- 7. ERROR replies ---------------------------------------------------------------------------

TEST_F(EnginePackets, ErrorReplyFailsTheOperationNamingBothOperations) {
  auto job = int_job(4);
  auto next = int_job(4, kOpId + 1);
  auto engine = start_engine();
  engine->submit(job.op);

  const Sent data = take_data(slot_of(0, 0), 1);
  Header error = make_header(flag::kError, data.h.slot, data.h.seq, 77, 0, 0, 0, kOpId - 1);
  error.error = protocol::ErrorCode::op_mismatch;
  send(error);  // about an earlier operation: ignored
  error.op_id = kOpId;
  error.offset = 4;  // the round holds operation 4
  error.bitmap = kOpId;  // the offender (rank 0 itself) runs operation 5
  send(error);

  ASSERT_TRUE(job.op->wait_for(kOpWait));
  const std::string message = error_of<ProtocolError>(*job.op);
  EXPECT_NE(message.find("operation 5"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 0 runs operation 5"), std::string::npos) << message;
  EXPECT_NE(message.find("the round holds operation 4"), std::string::npos) << message;
  EXPECT_EQ(message.find("77"), std::string::npos) << message;

  // The failed operation's rounds were consumed: the next one starts at round 1.
  engine->submit(next.op);
  const Sent p = take_data(slot_of(0, 1), 1);
  EXPECT_EQ(p.h.op_id, kOpId + 1);
  const std::vector<std::int32_t> sums = answer_int(p);
  (void)finish(next);
  expect_int_block(next, 0, sums);
}

// ---- 8. No reply --------------------------------------------------------------------------------

TEST_F(EnginePackets, RoundThatCountedThisRankButStaysOpenTimesOutNamingTheOtherRanks) {
  config.liveness_timeout = 200ms;  // the pending round's probes go every 40 ms
  auto job = int_job(4);
  auto engine = start_engine();
  engine->submit(job.op);
  (void)take_data(slot_of(0, 0), 1);
  (void)take_probe(slot_of(0, 0), 1);
  // The switch answers every probe: it counted rank 0, and rank 1 never sends.
  send(make_header(flag::kSyn, slot_of(0, 0), 1, 0, 0, 1, 0b01));
  const auto deadline = std::chrono::steady_clock::now() + kOpWait;
  while (!job.op->wait_for(0ms) && std::chrono::steady_clock::now() < deadline) {
    try {
      (void)wire->take([](const Sent& s) { return s.is_probe(); }, "SYN probe", 20ms);
    } catch (const std::runtime_error&) {
      continue;  // the operation may have failed meanwhile: no more probes
    }
    send(make_header(flag::kSyn, slot_of(0, 0), 1, 0, 0, 1, 0b01));
  }
  ASSERT_TRUE(job.op->wait_for(kOpWait));
  const std::string message = error_of<TimeoutError>(*job.op);
  EXPECT_NE(message.find("holds this rank's contribution"), std::string::npos) << message;
  EXPECT_NE(message.find("other ranks did not send theirs"), std::string::npos) << message;
  EXPECT_EQ(tally(wire->log()).data, 1u) << "data resent although the switch counted it";
}

TEST_F(EnginePackets, NoReplyFailsWithTimeoutErrorAfterTheTimeout) {
  auto job = int_job(8);  // both entries
  auto engine = start_engine();
  const auto t0 = std::chrono::steady_clock::now();
  engine->submit(job.op);
  ASSERT_TRUE(job.op->wait_for(kOpWait));
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(elapsed, config.timeout);
  EXPECT_LT(elapsed, 3s);
  const std::string message = error_of<TimeoutError>(*job.op);
  EXPECT_NE(message.find("no reply from the switch"), std::string::npos) << message;
  EXPECT_NE(message.find("operation 5"), std::string::npos) << message;
  const std::vector<Sent> log = wire->log();
  const Tally t = tally(log);
  EXPECT_EQ(t.data, 2u) << "data resent although no probe reply asked for it";
  EXPECT_GE(t.probes, 2u);
  for (const Sent& s : log) {
    EXPECT_TRUE(s.h.seq == 1 && (s.h.slot == slot_of(0, 0) || s.h.slot == slot_of(1, 0)))
        << s.describe();
  }
}

// ---- 9. A later operation on the current slot ---------------------------------------------------

TEST_F(EnginePackets, LaterOperationOnTheCurrentSlotMissesTheEntrysRemainingBlocks) {
  auto job = int_job(24);  // entry 0: blocks 0, 2, 4; entry 1: blocks 1, 3, 5
  auto engine = start_engine();
  engine->submit(job.op);
  std::vector<std::vector<std::int32_t>> results(6);

  results[0] = answer_int(take_data(slot_of(0, 0), 1));
  (void)take_data(slot_of(0, 1), 1);
  // Slot 101 already carries the next operation's multicast: the others finished this one.
  send(make_header(flag::kResult, slot_of(0, 1), 2, 0, 4, 2, 0b11, kOpId + 1),
       std::vector<std::int32_t>(kPayload, 999));
  for (std::uint64_t round = 0; round < 3; ++round) {
    results[1 + 2 * round] = answer_int(take_data(slot_of(1, round), seq_of(round)));
  }

  const OpStats stats = finish(job);
  for (const std::size_t b : {0u, 1u, 3u, 5u}) expect_int_block(job, b, results[b]);
  expect_own_input(job, 2);
  expect_own_input(job, 4);
  EXPECT_EQ(stats.blocks_missed, 2u);
  EXPECT_EQ(stats.missed, (std::vector<ElementRange>{{8, 12}, {16, 20}}));
  EXPECT_EQ(stats.blocks_full, 4u);
  EXPECT_EQ(job.contributors, (std::vector<std::uint64_t>{0b11, 0b11, 0, 0b11, 0, 0b11}));
  for (const Sent& s : wire->log()) {
    EXPECT_FALSE(s.h.slot == slot_of(0, 0) && s.h.seq == 2) << "entry 0 went on: " << s.describe();
  }
  expect_consistent(stats);
}

// ---- 10. Size mismatch --------------------------------------------------------------------------

TEST_F(EnginePackets, ResultWithADifferentCountIsASizeMismatch) {
  auto job = int_job(4);
  auto engine = start_engine();
  engine->submit(job.op);
  const Sent data = take_data(slot_of(0, 0), 1);
  Header r = result_for(data);
  r.count = 3;
  send(r, std::vector<std::int32_t>(kPayload, 1));
  ASSERT_TRUE(job.op->wait_for(kOpWait));
  const std::string message = error_of<ProtocolError>(*job.op);
  EXPECT_NE(message.find("size mismatch"), std::string::npos) << message;
  EXPECT_NE(message.find("[0, +3)"), std::string::npos) << message;
  EXPECT_NE(message.find("[0, +4)"), std::string::npos) << message;
}

TEST_F(EnginePackets, ResultWithADifferentOffsetIsASizeMismatch) {
  auto job = int_job(4);
  auto engine = start_engine();
  engine->submit(job.op);
  const Sent data = take_data(slot_of(0, 0), 1);
  Header r = result_for(data);
  r.offset = 4;
  send(r, std::vector<std::int32_t>(kPayload, 1));
  ASSERT_TRUE(job.op->wait_for(kOpWait));
  const std::string message = error_of<ProtocolError>(*job.op);
  EXPECT_NE(message.find("size mismatch"), std::string::npos) << message;
  EXPECT_NE(message.find("[4, +4)"), std::string::npos) << message;
}

// ---- 11. One thread's part fails: the others stop ------------------------------------------------

TEST_F(EnginePackets, ErrorOnOneThreadStopsTheOperationsOtherThreadsBeforeTheirTimeout) {
  config.threads = 2;
  config.timeout = 60'000ms;  // far beyond kOpWait: only the abort can end thread 1's part
  auto job = int_job(8);      // 2 blocks: one per thread
  job.op->parts_remaining = 2;
  auto other_wire = std::make_shared<Wire>();
  FakeDevice other_device(other_wire);
  auto engine0 = start_engine();
  auto engine1 = std::make_unique<EngineRunner>(1, config, session, other_device.open_queue(1), other_device);
  engine0->submit(job.op);
  engine1->submit(job.op);
  const Sent d0 = take_data(slot_of(0, 0), 1);
  (void)other_wire->take(
      [](const Sent& s) { return s.is_data() && s.h.slot == kPoolBase + 4 && s.h.seq == 1; },
      "thread 1's data packet");
  Header error = make_header(flag::kError, d0.h.slot, d0.h.seq, 4, 0, 0, 0, kOpId);
  error.error = protocol::ErrorCode::op_mismatch;
  send(error);
  ASSERT_TRUE(job.op->wait_for(kOpWait)) << "thread 1 kept waiting for its own timeout";
  const std::string message = error_of<ProtocolError>(*job.op);
  EXPECT_NE(message.find("the round holds operation 4"), std::string::npos) << message;
}

// ---- 12. The runner's loop ----------------------------------------------------------------------

TEST_F(EnginePackets, DestroyingTheRunnerFailsItsRunningAndQueuedOperations) {
  config.timeout = 60'000ms;  // far beyond kOpWait: only the stop can end the operations
  auto running = int_job(4);
  auto queued = int_job(4, kOpId + 1);
  auto engine = start_engine();
  engine->submit(running.op);
  engine->submit(queued.op);
  (void)take_data(slot_of(0, 0), 1);
  engine.reset();
  for (const auto* op : {running.op.get(), queued.op.get()}) {
    ASSERT_TRUE(op->complete());
    const std::string message = error_of<Error>(*op);
    EXPECT_NE(message.find("dpa context destroyed while an allreduce was running"), std::string::npos)
        << message;
  }
}

TEST_F(EnginePackets, BusyPollingRunnerCompletesOperations) {
  config.busy_poll = 500us;
  auto job = int_job(8);
  auto engine = start_engine();
  engine->submit(job.op);
  std::vector<std::vector<std::int32_t>> results(2);
  for (std::uint32_t e = 0; e < 2; ++e) results[e] = answer_int(take_data(slot_of(e, 0), 1));
  const OpStats stats = finish(job);
  for (std::size_t b = 0; b < 2; ++b) expect_int_block(job, b, results[b]);
  EXPECT_EQ(stats.blocks_full, 2u);
}

}  // namespace
}  // namespace dpa::detail

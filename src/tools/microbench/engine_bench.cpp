// SPDX-License-Identifier: Apache-2.0
// The worker's own per-packet work on one core: a WorkerEngine reduces a tensor through a queue in
// memory that answers every request at once as the switch of a one-rank job would (the result is
// the request's own values, the header the switch's). No other core, no transport, no switch
// code runs, so this is what the engine, the quantiser and the wire format cost per packet, with
// every line in this core's caches; a DPDK or shared-memory worker adds its transport and the
// transfers of each packet's lines between cores to it. items/s is packets/s (each sent and its
// result applied), bytes/s tensor bytes. Names: BM_WorkerEngine/<type>/<values per packet>.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <type_traits>
#include <vector>

#include "dpa/config.hpp"
#include "engine/join.hpp"
#include "engine/operation.hpp"
#include "engine/worker_engine.hpp"
#include "protocol/wire.hpp"
#include "transport/queue.hpp"

namespace {

namespace protocol = dpa::protocol;
namespace transport = dpa::transport;

constexpr std::uint32_t kToken = 0x5eed;
constexpr std::size_t kElements = std::size_t{1} << 20;  // 4 MiB of float32 or int32 per operation
const transport::Endpoint kSwitch{0x7f000001, 4242};

// Transmit buffers from a pool of its own; each request sent becomes, in a buffer of the same
// pool, the result a one-rank switch would send back, handed out by the next receive().
class LoopbackSwitchQueue final : public transport::Queue {
 public:
  explicit LoopbackSwitchQueue(std::uint32_t payload) : capacity_(protocol::kHeaderSize + 4 * payload) {}

  std::size_t receive(std::span<transport::RxPacket> out, std::chrono::nanoseconds /*timeout*/) override {
    free_.insert(free_.end(), delivered_.begin(), delivered_.end());
    delivered_.clear();
    std::size_t taken = 0;
    for (; taken < out.size() && next_reply_ < replies_.size(); ++taken, ++next_reply_) {
      const Reply& reply = replies_[next_reply_];
      out[taken] = transport::RxPacket{std::span(buffers_[reply.buffer].get(), reply.bytes), kSwitch, nullptr};
      delivered_.push_back(reply.buffer);
    }
    if (next_reply_ == replies_.size()) {
      replies_.clear();
      next_reply_ = 0;
    }
    counters_.rx_packets += taken;
    return taken;
  }

  std::size_t allocate(std::span<transport::TxBuffer> out) override {
    for (transport::TxBuffer& buffer : out) buffer = make_buffer(take_buffer());
    return out.size();
  }

  std::size_t send(std::span<const transport::TxRequest> packets) override {
    for (const transport::TxRequest& request : packets) answer(*request.buffer);
    counters_.tx_packets += packets.size();
    return packets.size();
  }

  std::size_t send_to_all(const transport::TxBuffer& buffer, std::span<const transport::Endpoint> to) override {
    for (std::size_t i = 0; i < to.size(); ++i) answer(buffer);
    return to.size();
  }

  void release(std::span<transport::TxBuffer> buffers) override {
    for (transport::TxBuffer& buffer : buffers) {
      if (buffer.native != nullptr) free_.push_back(reinterpret_cast<std::size_t>(buffer.native) - 1);
      buffer = transport::TxBuffer{};
    }
  }

  void flush() override {}
  [[nodiscard]] bool lossless() const override { return true; }
  [[nodiscard]] std::uint32_t max_payload() const override { return capacity_; }
  [[nodiscard]] transport::Endpoint local_endpoint() const override { return {0x7f000001, 40000}; }
  [[nodiscard]] transport::QueueCounters counters() const override { return counters_; }

 private:
  struct Reply {
    std::size_t buffer;
    std::uint32_t bytes;
  };

  std::size_t take_buffer() {
    if (free_.empty()) {
      free_.push_back(buffers_.size());
      buffers_.push_back(std::make_unique<std::byte[]>(capacity_));
    }
    const std::size_t index = free_.back();
    free_.pop_back();
    return index;
  }

  transport::TxBuffer make_buffer(std::size_t index) const {
    return transport::TxBuffer{buffers_[index].get(), 0, capacity_, reinterpret_cast<void*>(index + 1)};
  }

  // The result of the request's round from a switch whose only rank sent it: the same values
  // (a sum of one), the round's exponents, every rank counted.
  void answer(const transport::TxBuffer& request) {
    protocol::Header h;
    std::span<const std::byte> values;
    if (protocol::decode(std::span<const std::byte>(request.payload, request.size), h, values) !=
        protocol::DecodeStatus::ok) {
      return;
    }
    h.flags = static_cast<std::uint16_t>(protocol::flag::kResult | (h.flags & protocol::flag::kFloat));
    h.contributors = 1;
    h.bitmap = 1;
    const std::size_t reply = take_buffer();
    std::byte* bytes = buffers_[reply].get();
    protocol::encode(h, bytes);
    std::memcpy(bytes + protocol::kHeaderSize, values.data(), values.size());
    replies_.push_back(Reply{reply, request.size});
  }

  std::uint32_t capacity_;
  std::vector<std::unique_ptr<std::byte[]>> buffers_;
  std::vector<std::size_t> free_;
  std::vector<std::size_t> delivered_;  // handed out by the last receive()
  std::vector<Reply> replies_;
  std::size_t next_reply_ = 0;
  transport::QueueCounters counters_;
};

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

template <typename T>
void BM_WorkerEngine(benchmark::State& state) {
  const auto payload = static_cast<std::uint32_t>(state.range(0));
  dpa::Config config;
  config.window = 128;
  dpa::detail::SessionInfo session;
  session.payload = payload;
  session.world_size = 1;
  session.k_default = 1;
  session.token = kToken;
  session.switch_ports = {kSwitch};
  LoopbackSwitchQueue queue(payload);
  dpa::detail::WorkerEngine engine(0, config, session, queue);

  std::vector<T> input(kElements);
  std::vector<T> output(kElements);
  std::mt19937 rng(1);
  if constexpr (std::is_same_v<T, float>) {
    std::normal_distribution<float> normal;
    for (T& value : input) value = normal(rng);
  } else {
    for (T& value : input) value = static_cast<T>(rng() >> 12);
  }
  std::vector<transport::RxPacket> received(64);
  std::uint32_t op_id = 0;
  std::uint64_t packets = 0;
  for (auto _ : state) {
    dpa::detail::Operation op;
    op.in = reinterpret_cast<const std::byte*>(input.data());
    op.out = reinterpret_cast<std::byte*>(output.data());
    op.count = kElements;
    op.type = std::is_same_v<T, float> ? dpa::DataType::float32 : dpa::DataType::int32;
    op.op_id = ++op_id;
    op.parts_remaining = 1;
    std::uint64_t now = now_ns();
    engine.start(op, now);
    while (engine.busy()) {
      const std::size_t sent = queue.send(engine.outgoing());
      packets += sent;
      engine.clear_outgoing();
      const std::size_t taken = queue.receive(received, std::chrono::nanoseconds(0));
      now = now_ns();
      for (std::size_t i = 0; i < taken; ++i) engine.on_packet(received[i], now);
      engine.poll(now);
    }
    if (!op.complete()) {
      state.SkipWithError("the operation did not complete");
      return;
    }
    try {
      op.result();
    } catch (const std::exception& error) {
      state.SkipWithError(error.what());
      return;
    }
  }
  // A sum of one rank is its own tensor, within the block quantisation of float32.
  for (std::size_t i = 0; i < kElements; ++i) {
    const auto in = static_cast<double>(input[i]);
    const double tolerance = std::is_same_v<T, float> ? 1e-5 * (1.0 + std::abs(in)) : 0.0;
    if (std::abs(static_cast<double>(output[i]) - in) > tolerance) {
      state.SkipWithError("a result differs from the one rank's input");
      return;
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(packets));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(kElements * sizeof(T)));
  state.counters["packets_per_op"] = static_cast<double>(packets) / static_cast<double>(state.iterations());
}
BENCHMARK_TEMPLATE(BM_WorkerEngine, float)->Name("BM_WorkerEngine/float32")->Arg(64)->Arg(256)->Arg(1024)->UseRealTime();
BENCHMARK_TEMPLATE(BM_WorkerEngine, std::int32_t)->Name("BM_WorkerEngine/int32")->Arg(256)->UseRealTime();

}  // namespace

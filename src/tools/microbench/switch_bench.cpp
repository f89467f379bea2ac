// SPDX-License-Identifier: Apache-2.0
// The switch's per-packet work without I/O: the aggregation state machine fed from memory.
// N = 4 ranks over 1024 slots; each pass runs one round on every slot (rank 0's packet opens it
// with seq + 1, ranks 1..3 add, the last completes it) and builds the multicast reply of every
// completed round (reply_header + encode + int32_to_wire). Items are packets, so items_per_second
// is packets/s on one core. Names: BM_SwitchStateMachine/<values per packet>.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "protocol/byte_order.hpp"
#include "protocol/wire.hpp"
#include "quant/quant.hpp"
#include "switch/slot.hpp"

namespace {

namespace protocol = dpa::protocol;
namespace sw = dpa::sw;

constexpr int kRanks = 4;
constexpr std::uint32_t kSlots = 1024;

void BM_SwitchStateMachine(benchmark::State& state) {
  const auto payload = static_cast<std::uint32_t>(state.range(0));

  // Packets of every rank for every slot: decoded headers plus big-endian payload bytes, each
  // packet's values in its own memory as a NIC would deliver them.
  std::vector<protocol::Header> headers(static_cast<std::size_t>(kRanks) * kSlots);
  std::vector<std::byte> payloads(headers.size() * payload * 4);
  std::mt19937 rng(1);
  for (std::uint32_t slot = 0; slot < kSlots; ++slot) {
    for (int rank = 0; rank < kRanks; ++rank) {
      const std::size_t index = static_cast<std::size_t>(slot) * kRanks + static_cast<std::size_t>(rank);
      protocol::Header& h = headers[index];
      h.session = 1;
      h.op_id = 1;
      h.slot = slot;
      h.offset = slot * payload;
      h.count = static_cast<std::uint16_t>(payload);
      h.rank = static_cast<std::uint8_t>(rank);
      h.flags = protocol::flag::kFloat;
      h.exp_used = 0;
      h.exp_next = static_cast<std::int8_t>(rank);
      std::byte* values = payloads.data() + index * payload * 4;
      for (std::uint32_t i = 0; i < payload; ++i) protocol::store_be32(values + 4 * i, static_cast<std::uint32_t>(rng() >> 8));
    }
  }

  std::vector<sw::SlotState> slots(kSlots);
  std::vector<std::int32_t> accumulators(static_cast<std::size_t>(kSlots) * payload);
  sw::SessionLimits limits;
  limits.world_size = kRanks;
  limits.k = kRanks;
  limits.payload = payload;
  limits.straggler_timeout_ticks = protocol::timeout_ticks(10'000);
  std::vector<std::byte> reply(protocol::kHeaderSize + 4 * std::size_t{payload});

  std::uint32_t seq = 0;
  std::uint32_t now = 0;
  std::uint64_t completed = 0;
  for (auto _ : state) {
    ++seq;
    for (std::uint32_t slot = 0; slot < kSlots; ++slot) {
      const std::span<std::int32_t> values(accumulators.data() + std::size_t{slot} * payload, payload);
      for (int rank = 0; rank < kRanks; ++rank) {
        const std::size_t index = std::size_t{slot} * kRanks + static_cast<std::size_t>(rank);
        protocol::Header& h = headers[index];
        h.seq = seq;
        const std::span<const std::byte> packet(payloads.data() + index * payload * 4, payload * 4);
        const sw::SlotAction action =
            sw::step_slot(slots[slot], values, h, packet, std::uint64_t{1} << rank, limits, ++now);
        if (action == sw::SlotAction::multicast_result) {
          protocol::encode(sw::reply_header(slots[slot], action, h, h.token), reply.data());
          dpa::quant::int32_to_wire(values.data(), values.size(), reply.data() + protocol::kHeaderSize);
          benchmark::DoNotOptimize(reply.data());
          benchmark::ClobberMemory();
          ++completed;
        }
      }
    }
  }
  if (completed != static_cast<std::uint64_t>(state.iterations()) * kSlots) {
    state.SkipWithError("not every round completed: the benchmark drives the state machine wrongly");
    return;
  }
  const auto packets = static_cast<std::int64_t>(state.iterations()) * kSlots * kRanks;
  state.SetItemsProcessed(packets);
  state.SetBytesProcessed(packets * static_cast<std::int64_t>(protocol::kHeaderSize + 4 * std::size_t{payload}));
  state.counters["slots"] = kSlots;
  state.counters["ranks"] = kRanks;
}
BENCHMARK(BM_SwitchStateMachine)->Arg(64)->Arg(256)->Arg(1024);

}  // namespace

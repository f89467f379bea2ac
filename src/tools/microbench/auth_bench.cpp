// SPDX-License-Identifier: Apache-2.0
// Authenticated mode's per-packet cost (docs/protocol.md §6.6): sealing a data packet (what a worker
// does per request and the switch per reply and rank) and verifying one (the switch per request,
// a worker per reply), for payloads of P int32 values. Names: BM_Seal/<P>, BM_Verify/<P>.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "protocol/auth.hpp"
#include "protocol/wire.hpp"

namespace {

namespace protocol = dpa::protocol;

std::vector<std::byte> data_packet(std::int64_t values) {
  std::vector<std::byte> packet(protocol::kHeaderSize + 4 * static_cast<std::size_t>(values) + protocol::kTagSize);
  protocol::Header h;
  h.session = 1;
  h.token = 0x5eed;
  h.op_id = 1;
  h.seq = 1;
  h.count = static_cast<std::uint16_t>(values);
  protocol::encode(h, packet.data());
  for (std::size_t i = protocol::kHeaderSize; i + protocol::kTagSize < packet.size(); ++i) {
    packet[i] = static_cast<std::byte>(i * 31);
  }
  return packet;
}

void set_counters(benchmark::State& state, std::size_t bytes) {
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes));
}

void BM_Seal(benchmark::State& state) {
  std::vector<std::byte> packet = data_packet(state.range(0));
  const protocol::TagKey key = protocol::tag_keys(protocol::random_auth_key()).request;
  const std::size_t bytes = packet.size() - protocol::kTagSize;
  for (auto _ : state) {
    benchmark::DoNotOptimize(protocol::seal(key, packet.data(), bytes));
    benchmark::ClobberMemory();
  }
  set_counters(state, bytes);
}

void BM_Verify(benchmark::State& state) {
  std::vector<std::byte> packet = data_packet(state.range(0));
  const protocol::TagKey key = protocol::tag_keys(protocol::random_auth_key()).request;
  (void)protocol::seal(key, packet.data(), packet.size() - protocol::kTagSize);
  for (auto _ : state) {
    const bool ok = protocol::verify_tag(key, packet);
    benchmark::DoNotOptimize(ok);
    if (!ok) state.SkipWithError("a sealed packet failed verification");
  }
  set_counters(state, packet.size() - protocol::kTagSize);
}

BENCHMARK(BM_Seal)->Arg(256)->Arg(2048);
BENCHMARK(BM_Verify)->Arg(256)->Arg(2048);

}  // namespace

// SPDX-License-Identifier: Apache-2.0
// Quantisation kernels against a memcpy of the same bytes, per kernel set and payload size.
// Names: BM_<Op>/<kernels>/<values>, e.g. BM_Quantize/avx2/1024. Wire-side buffers sit at byte
// 40 of a 64-byte aligned allocation, where a packet's payload starts.
#include <benchmark/benchmark.h>

#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "protocol/wire.hpp"
#include "quant/quant.hpp"

namespace {

using dpa::quant::select_kernels;

constexpr std::size_t kSizes[] = {256, 1024, 2048, 16384};  // the last is 64 KiB of fp32
constexpr int kWorld = 8;

struct alignas(64) CacheLine {
  std::byte bytes[64];
};

// n values in every representation a kernel reads or writes.
struct Data {
  explicit Data(std::size_t n)
      : values(n),
        ints(n),
        floats_out(n),
        ints_out(n),
        packet(std::make_unique<CacheLine[]>((dpa::protocol::kHeaderSize + 4 * n) / 64 + 1)) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    for (std::size_t i = 0; i < n; ++i) {
      values[i] = unit(rng);
      ints[i] = static_cast<std::int32_t>(rng());
    }
    exp = dpa::quant::block_exponent(values.data(), n);
    dpa::quant::int32_to_wire(ints.data(), n, wire());  // valid sums for dequantisation
  }
  std::byte* wire() {
    return reinterpret_cast<std::byte*>(packet.get()) + dpa::protocol::kHeaderSize;
  }

  std::vector<float> values;
  std::vector<std::int32_t> ints;
  std::vector<float> floats_out;
  std::vector<std::int32_t> ints_out;
  std::unique_ptr<CacheLine[]> packet;
  std::int8_t exp = 0;
};

using Body = std::function<void(Data&, std::size_t n)>;

void run(benchmark::State& state, const std::string& kernels, std::size_t n, const Body& body) {
  if (!kernels.empty() && !select_kernels(kernels)) {
    state.SkipWithError("kernel set unavailable");
    return;
  }
  Data data(n);
  for (auto _ : state) {
    body(data, n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 4 * n));
  select_kernels("auto");
}

void add(const std::string& op, const std::string& kernels, const Body& body) {
  for (std::size_t n : kSizes) {
    const std::string name =
        "BM_" + op + "/" + (kernels.empty() ? "" : kernels + "/") + std::to_string(n);
    benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& state) {
      run(state, kernels, n, body);
    });
  }
}

[[maybe_unused]] const bool registered = [] {
  add("Memcpy", "", [](Data& d, std::size_t n) {
    std::memcpy(d.wire(), d.values.data(), 4 * n);
    benchmark::DoNotOptimize(d.wire());
  });
  for (const std::string kernels : {"scalar", "avx2", "avx512"}) {
    add("Quantize", kernels, [](Data& d, std::size_t n) {
      dpa::quant::quantize(d.values.data(), n, d.exp, kWorld, d.wire());
    });
    add("Dequantize", kernels, [](Data& d, std::size_t n) {
      dpa::quant::dequantize(d.wire(), n, d.exp, kWorld, 1, d.floats_out.data());
    });
    // AVG by a contributor count that is no power of two (fastest-K with 7 of 8 ranks).
    add("DequantizeAvg7", kernels, [](Data& d, std::size_t n) {
      dpa::quant::dequantize(d.wire(), n, d.exp, kWorld, kWorld - 1, d.floats_out.data());
    });
    add("Int32ToWire", kernels, [](Data& d, std::size_t n) {
      dpa::quant::int32_to_wire(d.ints.data(), n, d.wire());
    });
    add("Int32FromWire", kernels, [](Data& d, std::size_t n) {
      dpa::quant::int32_from_wire(d.wire(), n, 1, d.ints_out.data());
    });
    add("Int32FromWireAvg", kernels, [](Data& d, std::size_t n) {
      dpa::quant::int32_from_wire(d.wire(), n, kWorld, d.ints_out.data());
    });
    add("BlockExponent", kernels, [](Data& d, std::size_t n) {
      benchmark::DoNotOptimize(dpa::quant::block_exponent(d.values.data(), n));
    });
  }
  return true;
}();

}  // namespace

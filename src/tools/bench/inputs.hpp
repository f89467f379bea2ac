// SPDX-License-Identifier: Apache-2.0
// dpa-bench's inputs and their check (docs/benchmark-tools.md "Verification"). Every rank derives
// every rank's input of every operation from the run's seed, so it checks its own result against
// the exact sum of the contributors' inputs without exchanging data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dpa::tools::bench {

// The benchmark's phases; each numbers its operations from 0.
enum class View : int { warmup = 0, back_to_back = 1, latency = 2 };

// The key of one rank's input of one operation: a mix of the run's seed, the size's index, the
// view, the operation's index and the rank.
std::uint64_t input_key(std::uint64_t seed, std::size_t size_index, View view, std::size_t operation, int rank);

// Fills `buffer` with `count` inputs of the key: float32 uniform in [-1, 1) on a 2^-23 grid
// (exact), or int32 uniform in [-2^19, 2^19) (sums of up to 4096 ranks neither overflow nor wrap).
void fill_input(void* buffer, std::size_t count, bool is_float, std::uint64_t key);

// Elements of `result` (this rank's SUM of `count` values in blocks of `payload`) that differ
// from the sum of their block's contributors' inputs (`keys`: one per rank; contributors: one
// bitmap per block, 0 for a block this rank missed, whose output must be its own input): exactly
// for int32, by more than docs/protocol.md's block floating point bound for float32 (NaN counts
// as wrong). `required` holds the ranks every block must contain (K = N: all of them, see
// all_ranks; fastest-K: 0): every element of a block whose bitmap lacks one of them is wrong,
// whatever its value, since the library's bitmap is what is being checked.
std::size_t count_wrong(const void* result, std::size_t count, bool is_float, int rank,
                        const std::vector<std::uint64_t>& keys, std::uint32_t payload,
                        const std::uint64_t* contributors, std::uint64_t required);

// The bitmap of ranks 0 .. world - 1 (world ≤ 64).
std::uint64_t all_ranks(int world);

// Makes one element of `result` wrong by 1 (--inject-wrong): far beyond the float bound, and
// int32 is checked exactly.
void corrupt(void* result, std::size_t count, bool is_float);

}  // namespace dpa::tools::bench

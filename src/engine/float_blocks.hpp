// SPDX-License-Identifier: Apache-2.0
// The two ends of a float32 block that depend on who does the block floating point: this rank's
// exponent of the block, and how the block's result reaches the output. libdpa does both with
// the quant kernels, unless the operation's caller took them over (AllreduceOptions
// block_exponents and wire_result: a GPU does them). Sending, which needs the negotiated
// exponent, stays with the engine either way.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dpa/types.hpp"
#include "engine/operation.hpp"

namespace dpa::detail {

// This rank's exponent of block `block` of the plan, n values at input element `begin`.
// Counts a block that is finite but out of range in stats.blocks_out_of_range.
std::int8_t own_block_exponent(const Operation& op, std::size_t block, std::size_t begin, std::size_t n,
                               OpStats& stats);
// Writes the result of block `block` at output element `out_begin`: `wire` holds n big-endian
// int32 sums scaled with `exponent` for `world` ranks, to be divided by `divisor`.
void store_block_result(const Operation& op, std::size_t block, std::size_t out_begin, std::size_t n,
                        std::int8_t exponent, int world, std::uint32_t divisor, const std::byte* wire);

}  // namespace dpa::detail

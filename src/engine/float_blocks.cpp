// SPDX-License-Identifier: Apache-2.0
#include "engine/float_blocks.hpp"

#include <cstring>

#include "protocol/wire.hpp"
#include "quant/quant.hpp"

namespace dpa::detail {

static_assert(block_float::kExpZero == protocol::kExpZero &&
                  block_float::kExpNonFinite == protocol::kExpNonFinite &&
                  block_float::kExpMin == protocol::kExpMin &&
                  block_float::kExpMax == protocol::kExpMax,
              "the public exponent rule (dpa/block_float.hpp) is the protocol's");

std::int8_t own_block_exponent(const Operation& op, std::size_t block, std::size_t begin, std::size_t n,
                               OpStats& stats) {
  const float* values = reinterpret_cast<const float*>(op.in) + begin;
  const std::int8_t exponent = op.block_exponents != nullptr ? op.block_exponents[block]
                                                             : quant::block_exponent(values, n);
  if (exponent == protocol::kExpNonFinite && quant::all_finite(values, n)) {
    ++stats.blocks_out_of_range;
  }
  return exponent;
}

void store_block_result(const Operation& op, std::size_t block, std::size_t out_begin, std::size_t n,
                        std::int8_t exponent, int world, std::uint32_t divisor, const std::byte* wire) {
  if (op.wire_result == nullptr) {
    quant::dequantize(wire, n, exponent, world, divisor, reinterpret_cast<float*>(op.out) + out_begin);
    return;
  }
  std::memcpy(op.out + 4 * out_begin, wire, 4 * n);
  op.wire_result[block] = {.divisor = divisor, .exponent = exponent};
}

}  // namespace dpa::detail

// SPDX-License-Identifier: Apache-2.0
#include "dpa/types.hpp"

#include <algorithm>
#include <utility>
#include <vector>

namespace dpa {

std::string_view to_string(DataType type) {
  switch (type) {
    case DataType::int32: return "int32";
    case DataType::float32: return "float32";
  }
  return "unknown";
}

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
  }
  return "unknown";
}

OpStats& OpStats::operator+=(const OpStats& other) { return merge(other, 0); }

OpStats& OpStats::merge(const OpStats& other, std::size_t element_offset) {
  blocks += other.blocks;
  blocks_full += other.blocks_full;
  blocks_partial += other.blocks_partial;
  blocks_missed += other.blocks_missed;
  blocks_non_finite += other.blocks_non_finite;
  blocks_out_of_range += other.blocks_out_of_range;
  contributed += other.contributed;
  retransmissions += other.retransmissions;
  timeouts += other.timeouts;
  syn_probes += other.syn_probes;
  replies_rejected += other.replies_rejected;
  // 0 means "no block received", so it must not win the minimum.
  if (min_contributors == 0 || (other.min_contributors != 0 && other.min_contributors < min_contributors)) {
    min_contributors = other.min_contributors;
  }
  seconds = std::max(seconds, other.seconds);  // the parts ran concurrently

  // Union of both range lists: sort, then merge ranges that overlap or touch.
  std::vector<ElementRange> ranges = std::move(missed);
  for (const ElementRange& range : other.missed) {
    ranges.push_back({range.begin + element_offset, range.end + element_offset});
  }
  std::ranges::sort(ranges, {}, &ElementRange::begin);
  missed.clear();
  for (const ElementRange& range : ranges) {
    if (range.begin >= range.end) continue;
    if (!missed.empty() && range.begin <= missed.back().end) {
      missed.back().end = std::max(missed.back().end, range.end);
    } else {
      missed.push_back(range);
    }
  }
  return *this;
}

}  // namespace dpa

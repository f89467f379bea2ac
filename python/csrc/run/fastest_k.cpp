// SPDX-License-Identifier: Apache-2.0
#include "run/fastest_k.hpp"

#include <mutex>

namespace dpa::torch_backend {
namespace {

thread_local FastestK thread_choice;

std::mutex process_mutex;
FastestK process_choice;
std::optional<OpStats> last_completed;
OpTotals totals;

}  // namespace

void set_thread_fastest_k(const FastestK& choice) { thread_choice = choice; }
FastestK thread_fastest_k() { return thread_choice; }

void set_default_fastest_k(const FastestK& choice) {
  std::lock_guard lock(process_mutex);
  process_choice = choice;
}

FastestK default_fastest_k() {
  std::lock_guard lock(process_mutex);
  return process_choice;
}

FastestK resolve_fastest_k() {
  const FastestK fallback = default_fastest_k();
  return {thread_choice.k ? thread_choice.k : fallback.k,
          thread_choice.preemptive ? thread_choice.preemptive : fallback.preemptive};
}

void record_last_stats(const OpStats& stats) {
  std::lock_guard lock(process_mutex);
  last_completed = stats;
  ++totals.operations;
  OpStats& sum = totals.stats;
  sum.blocks += stats.blocks;
  sum.blocks_full += stats.blocks_full;
  sum.blocks_partial += stats.blocks_partial;
  sum.blocks_missed += stats.blocks_missed;
  sum.blocks_non_finite += stats.blocks_non_finite;
  sum.blocks_out_of_range += stats.blocks_out_of_range;
  sum.contributed += stats.contributed;
  sum.retransmissions += stats.retransmissions;
  sum.timeouts += stats.timeouts;
  sum.syn_probes += stats.syn_probes;
  sum.replies_rejected += stats.replies_rejected;
  sum.seconds += stats.seconds;
}

OpTotals total_stats() {
  std::lock_guard lock(process_mutex);
  return totals;
}

std::uint64_t total_retransmissions() {
  std::lock_guard lock(process_mutex);
  return totals.stats.retransmissions;
}

std::optional<OpStats> last_stats() {
  std::lock_guard lock(process_mutex);
  return last_completed;
}

}  // namespace dpa::torch_backend

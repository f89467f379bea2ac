// SPDX-License-Identifier: Apache-2.0
// How an all_reduce learns its fastest-K: a thread-local scope set by the Python context manager
// dpa.fastest_k(), else the process-wide default of dpa.set_default_fastest_k(), else the
// Config (DPA_K / DPA_PREEMPTIVE), else the session's default. Read on the calling thread when the
// operation is issued, so work that runs later on a pool thread keeps the caller's choice.
// Also keeps the statistics of the last completed operation for dpa.last_stats().
#pragma once

#include <cstdint>
#include <optional>

#include "dpa/types.hpp"

namespace dpa::torch_backend {

struct FastestK {
  std::optional<int> k;
  std::optional<bool> preemptive;
};

// The calling thread's scope; empty members fall through to the process default.
void set_thread_fastest_k(const FastestK& choice);
FastestK thread_fastest_k();

void set_default_fastest_k(const FastestK& choice);
FastestK default_fastest_k();

// The choice for an operation issued now on this thread: the scope, then the process default.
FastestK resolve_fastest_k();

// Sums over every operation this process completed (dpa.metrics exports them).
struct OpTotals {
  std::uint64_t operations = 0;
  OpStats stats;  // counts added up; seconds: the sum of the operations' wall times
};

void record_last_stats(const OpStats& stats);
std::optional<OpStats> last_stats();
OpTotals total_stats();
// Retransmissions of every operation this process completed.
std::uint64_t total_retransmissions();

}  // namespace dpa::torch_backend

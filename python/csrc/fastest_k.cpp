#include "fastest_k.hpp"

#include <mutex>

namespace dpa::torch_backend {
namespace {

thread_local FastestK thread_choice;

std::mutex process_mutex;
FastestK process_choice;
std::optional<OpStats> last_completed;
std::uint64_t retransmissions_so_far = 0;

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
  retransmissions_so_far += stats.retransmissions;
}

std::uint64_t total_retransmissions() {
  std::lock_guard lock(process_mutex);
  return retransmissions_so_far;
}

std::optional<OpStats> last_stats() {
  std::lock_guard lock(process_mutex);
  return last_completed;
}

}  // namespace dpa::torch_backend

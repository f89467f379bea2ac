// SPDX-License-Identifier: Apache-2.0
// Counters that one thread writes and others read without a lock.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <type_traits>

namespace dpa::sw {

// Adds to a counter that only the calling thread writes and other threads read: a plain load and
// a relaxed atomic store (no locked read-modify-write on the data path).
inline void add_to_counter(std::uint64_t& counter, std::uint64_t amount = 1) {
  std::atomic_ref<std::uint64_t>(counter).store(counter + amount, std::memory_order_relaxed);
}

inline std::uint64_t read_counter(std::uint64_t& counter) {
  return std::atomic_ref<std::uint64_t>(counter).load(std::memory_order_relaxed);
}

// A struct of 64-bit counters that one thread publishes from time to time (a switch thread: once
// per received batch) and any thread reads as one consistent snapshot: a sequence lock. The
// writer never waits; a reader retries while a publication is under way (a few hundred
// nanoseconds). On its own cache lines, so that threads publishing side by side do not share one.
template <class Counters>
class alignas(64) PublishedCounters {
  static_assert(std::is_trivially_copyable_v<Counters> && sizeof(Counters) % sizeof(std::uint64_t) == 0);
  static constexpr std::size_t kWords = sizeof(Counters) / sizeof(std::uint64_t);
  using Words = std::array<std::uint64_t, kWords>;

 public:
  // The owning thread only.
  void publish(const Counters& counters) {
    const Words words = std::bit_cast<Words>(counters);
    const std::uint64_t sequence = sequence_.load(std::memory_order_relaxed);
    sequence_.store(sequence + 1, std::memory_order_relaxed);  // odd: under way
    std::atomic_thread_fence(std::memory_order_release);
    for (std::size_t i = 0; i < kWords; ++i) words_[i].store(words[i], std::memory_order_relaxed);
    sequence_.store(sequence + 2, std::memory_order_release);
  }

  [[nodiscard]] Counters read() const {
    Words words{};
    for (;;) {
      const std::uint64_t before = sequence_.load(std::memory_order_acquire);
      if (before % 2 == 0) {
        for (std::size_t i = 0; i < kWords; ++i) words[i] = words_[i].load(std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_acquire);
        if (sequence_.load(std::memory_order_relaxed) == before) return std::bit_cast<Counters>(words);
      }
      std::this_thread::yield();  // the writer may have been preempted mid-publication
    }
  }

 private:
  std::atomic<std::uint64_t> sequence_{0};
  std::array<std::atomic<std::uint64_t>, kWords> words_{};
};

}  // namespace dpa::sw

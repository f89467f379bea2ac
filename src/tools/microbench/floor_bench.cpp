// SPDX-License-Identifier: Apache-2.0
// The host's floor for a switch core: the least any aggregator must do per packet when its packets
// come from other cores, with none of dpa's code. Producer threads (the workers) each write
// requests (a 128-byte descriptor, as an mbuf's two lines, then the 58 header bytes and P 32-bit
// values) into buffers of their own pool and hand them over through a single-producer ring; the
// measured thread (the switch core) takes bursts of up to 32 from every producer in turn, adds
// each packet's values into an accumulator slot, writes the reply into the packet in place and
// hands it back; the producer reads the reply (as a worker applies a result) and reuses the
// buffer. No protocol, no checksums, no mbuf library: what is left is the transfer of each
// packet's lines between cores and one pass over its values, which is what a DPDK switch core
// pays on top of its state machine (BM_SwitchStateMachine) with packets from a peer core over
// net_ring. items/s is packets/s of the measured core, busy_Mpps its packets per second of polls
// that found some (as dpa-bench reports a switch lcore's rate per busy core). Every reply is checked.
// Names: BM_CrossCoreFloor/<values per packet>/<producers>.
#include <benchmark/benchmark.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t kBurst = 32;
constexpr std::size_t kRingSize = 1024;      // per direction and producer, as a net_ring's
constexpr std::size_t kBuffersPerProducer = 512;
constexpr std::size_t kDescriptorBytes = 128;
constexpr std::size_t kHeaderBytes = 42 + 16;  // Ethernet/IPv4/UDP and dpa's header
constexpr std::size_t kAccumulatorSlots = 128;  // a window's worth, as the switch's slots
constexpr std::size_t kPrefetchAhead = 2;       // packets

void prefetch(const std::byte* bytes, std::size_t size) {
  for (std::size_t offset = 0; offset < size; offset += 64) __builtin_prefetch(bytes + offset, 1, 3);
}

// One direction between two threads; each side keeps its own copy of the other's index so that
// it reads the shared one only when the copy says the ring looks full or empty.
class SpscRing {
 public:
  std::size_t push(const std::uint32_t* items, std::size_t count) {
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    if (seen_head_ + kRingSize - tail < count) seen_head_ = head_.load(std::memory_order_acquire);
    count = std::min<std::size_t>(count, seen_head_ + kRingSize - tail);
    for (std::size_t i = 0; i < count; ++i) slots_[(tail + i) % kRingSize] = items[i];
    tail_.store(tail + count, std::memory_order_release);
    return count;
  }
  std::size_t pop(std::uint32_t* items, std::size_t count) {
    const std::uint64_t head = head_.load(std::memory_order_relaxed);
    if (seen_tail_ - head < count) seen_tail_ = tail_.load(std::memory_order_acquire);
    count = std::min<std::size_t>(count, seen_tail_ - head);
    for (std::size_t i = 0; i < count; ++i) items[i] = slots_[(head + i) % kRingSize];
    head_.store(head + count, std::memory_order_release);
    return count;
  }

 private:
  alignas(64) std::atomic<std::uint64_t> tail_{0};
  std::uint64_t seen_head_ = 0;  // the producer's
  alignas(64) std::atomic<std::uint64_t> head_{0};
  std::uint64_t seen_tail_ = 0;  // the consumer's
  alignas(64) std::array<std::uint32_t, kRingSize> slots_{};
};

struct Descriptor {
  std::uint32_t length;
  std::uint32_t sequence;
  std::uint16_t references;
};

// One worker: its buffers, its two rings, its thread.
class Producer {
 public:
  Producer(std::size_t values, std::atomic<bool>& stop)
      : values_(values), buffer_bytes_((kDescriptorBytes + kHeaderBytes + 4 * values + 63) / 64 * 64),
        memory_(static_cast<std::byte*>(::operator new(buffer_bytes_ * kBuffersPerProducer, std::align_val_t{64}))),
        source_(values * 64), stop_(stop) {
    for (std::size_t i = 0; i < source_.size(); ++i) source_[i] = static_cast<std::uint32_t>(i * 2654435761u);
    thread_ = std::thread([this] { run(); });
  }
  Producer(const Producer&) = delete;
  Producer& operator=(const Producer&) = delete;
  ~Producer() {
    if (thread_.joinable()) thread_.join();
    ::operator delete(memory_, std::align_val_t{64});
  }

  // Waits for the thread, which ends once `stop` is set; the replies it found wrong.
  std::uint64_t join() {
    thread_.join();
    return wrong_;
  }

  std::byte* buffer(std::uint32_t index) const { return memory_ + std::size_t{index} * buffer_bytes_; }
  SpscRing requests;
  SpscRing replies;

 private:
  void run() {
    std::vector<std::uint32_t> free(kBuffersPerProducer);
    for (std::uint32_t i = 0; i < kBuffersPerProducer; ++i) free[i] = i;
    std::size_t free_count = kBuffersPerProducer;
    std::array<std::uint32_t, kBurst> burst{};
    std::vector<std::uint32_t> sent_first(kBuffersPerProducer);  // each buffer's first value as sent
    std::uint32_t sequence = 0;
    while (!stop_.load(std::memory_order_relaxed)) {
      const std::size_t back = replies.pop(burst.data(), kBurst);
      for (std::size_t i = 0; i < back; ++i) {
        const std::byte* packet = buffer(burst[i]);
        const auto* values = reinterpret_cast<const std::uint32_t*>(packet + kDescriptorBytes + kHeaderBytes);
        std::uint32_t sum = 0;
        for (std::size_t v = 0; v < values_; ++v) sum += values[v];  // the worker reads its result
        benchmark::DoNotOptimize(sum);
        if (values[0] != sent_first[burst[i]] + 1) ++wrong_;
        free[free_count++] = burst[i];
      }
      const std::size_t fill = std::min(free_count, kBurst);
      for (std::size_t i = 0; i < fill; ++i) {
        const std::uint32_t index = free[--free_count];
        std::byte* packet = buffer(index);
        auto* descriptor = reinterpret_cast<Descriptor*>(packet);
        descriptor->length = static_cast<std::uint32_t>(kHeaderBytes + 4 * values_);
        descriptor->sequence = sequence++;
        descriptor->references = 1;
        std::memset(packet + kDescriptorBytes, 0x5a, kHeaderBytes);
        const std::size_t from = (sequence % 64) * values_;
        std::memcpy(packet + kDescriptorBytes + kHeaderBytes, source_.data() + from, 4 * values_);
        sent_first[index] = source_[from];
        burst[i] = index;
      }
      const std::size_t pushed = requests.push(burst.data(), fill);
      for (std::size_t i = pushed; i < fill; ++i) free[free_count++] = burst[i];
    }
  }

  std::size_t values_;
  std::size_t buffer_bytes_;
  std::byte* memory_;
  std::vector<std::uint32_t> source_;
  std::atomic<bool>& stop_;
  std::uint64_t wrong_ = 0;
  std::thread thread_;
};

void BM_CrossCoreFloor(benchmark::State& state) {
  const auto values = static_cast<std::size_t>(state.range(0));
  const auto producer_count = static_cast<std::size_t>(state.range(1));
  std::atomic<bool> stop{false};
  std::vector<std::unique_ptr<Producer>> producers;
  for (std::size_t p = 0; p < producer_count; ++p) producers.push_back(std::make_unique<Producer>(values, stop));
  std::vector<std::uint32_t> accumulators(kAccumulatorSlots * values);
  const std::size_t packet_bytes = kDescriptorBytes + kHeaderBytes + 4 * values;
  std::array<std::uint32_t, kBurst> burst{};
  std::uint64_t packets = 0;
  // Time in polls that found packets, as the switch's busy time: the rate per busy second says
  // what this core can do even when the producers cannot keep it fed.
  std::chrono::steady_clock::duration busy{};
  auto poll_start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const std::uint64_t before = packets;
    for (const auto& producer : producers) {
      const std::size_t taken = producer->requests.pop(burst.data(), kBurst);
      // Every line of a packet is asked for two packets ahead, as the switch and a tuned PMD
      // do, so that the transfers from the producer's core overlap.
      for (std::size_t i = 0; i < std::min<std::size_t>(taken, kPrefetchAhead); ++i) prefetch(producer->buffer(burst[i]), packet_bytes);
      for (std::size_t i = 0; i < taken; ++i) {
        if (i + kPrefetchAhead < taken) prefetch(producer->buffer(burst[i + kPrefetchAhead]), packet_bytes);
        std::byte* packet = producer->buffer(burst[i]);
        auto* descriptor = reinterpret_cast<Descriptor*>(packet);
        auto* packet_values = reinterpret_cast<std::uint32_t*>(packet + kDescriptorBytes + kHeaderBytes);
        std::uint32_t* slot = accumulators.data() + (descriptor->sequence % kAccumulatorSlots) * values;
        for (std::size_t v = 0; v < values; ++v) {
          const std::uint32_t value = packet_values[v];
          slot[v] += value;
          packet_values[v] = value + 1;
        }
        descriptor->references = 2;
      }
      // The producer's reply ring has room for every buffer it owns, so nothing is left over.
      producer->replies.push(burst.data(), taken);
      packets += taken;
    }
    const auto poll_end = std::chrono::steady_clock::now();
    if (packets != before) busy += poll_end - poll_start;
    poll_start = poll_end;
  }
  stop.store(true, std::memory_order_relaxed);
  std::uint64_t wrong = 0;
  for (auto& producer : producers) wrong += producer->join();
  benchmark::DoNotOptimize(accumulators.data());
  if (wrong > 0) {
    state.SkipWithError("a reply did not carry the values its request sent, plus one");
    return;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(packets));
  state.SetBytesProcessed(static_cast<std::int64_t>(packets * 4 * values));
  const double busy_seconds = std::chrono::duration<double>(busy).count();
  state.counters["busy_Mpps"] = busy_seconds > 0 ? static_cast<double>(packets) / busy_seconds / 1e6 : 0.0;
}

}  // namespace

BENCHMARK(BM_CrossCoreFloor)->ArgsProduct({{64, 256, 1024}, {1, 2, 3}})->UseRealTime();

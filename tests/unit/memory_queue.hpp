// SPDX-License-Identifier: Apache-2.0
// A transport queue in memory, for the engine tests: transmit buffers from a pool that counts
// how many the caller holds, sends handed to a callback, receives taken from a callback, flushes
// reported to a callback. No sockets, no threads of its own.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "transport/queue.hpp"

namespace dpa::transport::testing {

class MemoryQueue final : public Queue {
 public:
  static constexpr std::uint32_t kCapacity = 65507;
  using OnSend = std::function<void(std::span<const TxRequest>)>;
  using OnReceive = std::function<std::size_t(std::span<RxPacket>, std::chrono::nanoseconds)>;
  using OnFlush = std::function<void()>;

  explicit MemoryQueue(OnSend on_send = {}, OnReceive on_receive = {}, OnFlush on_flush = {})
      : on_send_(std::move(on_send)), on_receive_(std::move(on_receive)), on_flush_(std::move(on_flush)) {}
  // A queue that reports a lossless medium (as shared memory does), for the engine's timer rules.
  struct Lossless {};
  explicit MemoryQueue(Lossless) : lossless_(true) {}

  std::size_t receive(std::span<RxPacket> out, std::chrono::nanoseconds timeout) override {
    const std::size_t received = on_receive_ ? on_receive_(out, timeout) : 0;
    counters_.rx_packets += received;
    return received;
  }
  std::size_t allocate(std::span<TxBuffer> out) override {
    for (TxBuffer& buffer : out) {
      if (free_.empty()) {
        free_.push_back(storage_.size());
        storage_.push_back(std::make_unique<std::byte[]>(kCapacity));
      }
      const std::size_t slot = free_.back();
      free_.pop_back();
      buffer = TxBuffer{storage_[slot].get(), 0, kCapacity, reinterpret_cast<void*>(slot + 1)};
      ++held_;
    }
    return out.size();
  }
  std::size_t send(std::span<const TxRequest> packets) override {
    counters_.tx_packets += packets.size();
    if (on_send_) on_send_(packets);
    return packets.size();
  }
  std::size_t send_to_all(const TxBuffer& buffer, std::span<const Endpoint> to) override {
    for (const Endpoint& endpoint : to) {
      const TxRequest request{&buffer, endpoint};
      send(std::span(&request, 1));
    }
    return to.size();
  }
  void release(std::span<TxBuffer> buffers) override {
    for (TxBuffer& buffer : buffers) {
      if (buffer.native == nullptr) continue;
      free_.push_back(reinterpret_cast<std::size_t>(buffer.native) - 1);
      buffer = TxBuffer{};
      --held_;
    }
  }
  void flush() override {
    if (on_flush_) on_flush_();
  }

  [[nodiscard]] bool lossless() const override { return lossless_; }
  [[nodiscard]] std::uint32_t max_payload() const override { return kCapacity; }
  [[nodiscard]] Endpoint local_endpoint() const override { return Endpoint{0x7f000001, 40000}; }
  [[nodiscard]] QueueCounters counters() const override { return counters_; }
  // Buffers allocated and not released.
  [[nodiscard]] std::size_t held() const { return held_; }

 private:
  OnSend on_send_;
  OnReceive on_receive_;
  OnFlush on_flush_;
  bool lossless_ = false;
  std::vector<std::unique_ptr<std::byte[]>> storage_;
  std::vector<std::size_t> free_;
  std::size_t held_ = 0;
  QueueCounters counters_;
};

}  // namespace dpa::transport::testing

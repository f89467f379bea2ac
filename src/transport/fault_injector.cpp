// SPDX-License-Identifier: Apache-2.0
#include "transport/fault_injector.hpp"

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

namespace dpa::transport {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Held and duplicated packets live in fixed pools; when one is full the fault is skipped.
constexpr std::size_t kHeldSlots = 256;
constexpr std::size_t kCopySlots = 256;

class FaultInjector final : public Queue {
 public:
  FaultInjector(std::unique_ptr<Queue> inner, const FaultOptions& options)
      : inner_(std::move(inner)),
        options_(options),
        random_(options.seed),
        copy_bytes_(inner_->max_payload()),
        copies_(std::make_unique_for_overwrite<std::byte[]>(kCopySlots * copy_bytes_)) {
    held_.reserve(kHeldSlots);
    outgoing_.reserve(kHeldSlots * 2);
    releasing_.reserve(kHeldSlots);
    free_copies_.reserve(kCopySlots);
    for (std::size_t slot = kCopySlots; slot-- > 0;) free_copies_.push_back(slot);
    received_copies_.reserve(kCopySlots);
  }

  std::size_t receive(std::span<RxPacket> out, std::chrono::nanoseconds timeout) override {
    // Duplicates handed out by the previous call are no longer referenced by the caller.
    for (const std::size_t slot : received_copies_) free_copies_.push_back(slot);
    received_copies_.clear();

    const Clock::time_point start = Clock::now();
    // Saturate so that an "infinite" timeout does not overflow the clock.
    const Clock::time_point deadline =
        timeout < Clock::time_point::max() - start ? start + timeout : Clock::time_point::max();
    for (;;) {
      const Clock::time_point now = Clock::now();
      take_held(now, /*take_reordered=*/true);
      flush_outgoing();
      if (out.empty()) return 0;
      // Wake up in time to send the next delayed packet; the caller's wait resumes after it.
      const Clock::time_point wake = std::min(deadline, next_delayed_due());
      const std::size_t received = inner_->receive(out, std::max<Clock::duration>(wake - now, 0ns));
      if (const std::size_t kept = apply_receive_faults(out, received); kept > 0) return kept;
      if (Clock::now() >= deadline) return 0;
    }
  }

  std::size_t allocate(std::span<TxBuffer> out) override { return inner_->allocate(out); }
  void release(std::span<TxBuffer> buffers) override { inner_->release(buffers); }
  // A duplicate is a copy without a native handle: the inner queue refuses it.
  TxBuffer take_for_reply(const RxPacket& packet, std::uint32_t bytes) override {
    return inner_->take_for_reply(packet, bytes);
  }

  // Every packet counts as taken: dropped, held or passed on. What the inner queue refuses
  // counts as a transmit error (a fault injector need not model back-pressure on top).
  std::size_t send(std::span<const TxRequest> packets) override {
    const Clock::time_point now = Clock::now();
    // Packets reordered by an earlier call go out right after this call's first packet.
    const std::uint64_t call = ++send_calls_;
    bool first_sent = false;
    for (const TxRequest& packet : packets) {
      if (chance(options_.drop)) {
        ++injected_.injected_drops;
        continue;
      }
      const bool duplicate = chance(options_.duplicate);
      if (chance(options_.delay) && hold(packet, HoldKind::delay, now + options_.delay_time, call)) {
        ++injected_.injected_delays;
      } else if (chance(options_.reorder) && hold(packet, HoldKind::reorder, now, call)) {
        ++injected_.injected_reorders;
      } else {
        outgoing_.push_back(packet);
      }
      if (duplicate) {
        outgoing_.push_back(packet);
        ++injected_.injected_duplicates;
      }
      if (!first_sent && !outgoing_.empty()) {
        first_sent = true;
        take_reordered_before(call);
      }
    }
    take_held(now, /*take_reordered=*/false);
    flush_outgoing();
    return packets.size();
  }

  std::size_t send_to_all(const TxBuffer& buffer, std::span<const Endpoint> to) override {
    for (const Endpoint& endpoint : to) {
      const TxRequest request{&buffer, endpoint};
      send(std::span(&request, 1));
    }
    return to.size();
  }

  void flush() override {
    take_held(Clock::now(), /*take_reordered=*/false);
    flush_outgoing();
    inner_->flush();
  }

  [[nodiscard]] std::uint32_t max_payload() const override { return inner_->max_payload(); }
  [[nodiscard]] Endpoint local_endpoint() const override { return inner_->local_endpoint(); }
  [[nodiscard]] std::string link_problems() const override { return inner_->link_problems(); }

  [[nodiscard]] QueueCounters counters() const override {
    QueueCounters total = inner_->counters();
    total.injected_drops += injected_.injected_drops;
    total.injected_duplicates += injected_.injected_duplicates;
    total.injected_reorders += injected_.injected_reorders;
    total.injected_delays += injected_.injected_delays;
    total.tx_errors += injected_.tx_errors;
    return total;
  }

 private:
  enum class HoldKind { reorder, delay };

  struct Held {
    HoldKind kind = HoldKind::reorder;
    Clock::time_point due;   // delay: when it may go out
    std::uint64_t call = 0;  // reorder: the send() call that held it
    TxBuffer copy;           // the packet, copied: the caller may reuse its buffer meanwhile
    Endpoint to;
  };

  // Bernoulli draw from the 53 high bits, identical on every standard library for a given seed.
  bool chance(double probability) {
    if (probability <= 0) return false;
    return static_cast<double>(random_() >> 11) * 0x1.0p-53 < probability;
  }

  // Copies the packet into a buffer of the inner queue; false when none is left or room is full.
  bool hold(const TxRequest& packet, HoldKind kind, Clock::time_point due, std::uint64_t call) {
    if (held_.size() == kHeldSlots) return false;
    TxBuffer copy;
    if (inner_->allocate(std::span(&copy, 1)) == 0) return false;
    std::memcpy(copy.payload, packet.buffer->payload, packet.buffer->size);
    copy.size = packet.buffer->size;
    held_.push_back(Held{kind, due, call, copy, packet.to});
    return true;
  }

  // Moves held packets that are ready to outgoing_ (in the order they were held).
  template <class Ready>
  void take_held_if(Ready ready) {
    const auto taken =
        std::stable_partition(held_.begin(), held_.end(), [&](const Held& held) { return !ready(held); });
    const std::size_t first = releasing_.size();
    for (auto it = taken; it != held_.end(); ++it) releasing_.push_back(it->copy);
    for (auto it = taken; it != held_.end(); ++it) {
      outgoing_.push_back(TxRequest{&releasing_[first + static_cast<std::size_t>(it - taken)], it->to});
    }
    held_.erase(taken, held_.end());
  }

  void take_held(Clock::time_point now, bool take_reordered) {
    take_held_if([&](const Held& held) { return held.kind == HoldKind::delay ? held.due <= now : take_reordered; });
  }

  void take_reordered_before(std::uint64_t call) {
    take_held_if([&](const Held& held) { return held.kind == HoldKind::reorder && held.call < call; });
  }

  Clock::time_point next_delayed_due() const {
    Clock::time_point earliest = Clock::time_point::max();
    for (const Held& held : held_) {
      if (held.kind == HoldKind::delay) earliest = std::min(earliest, held.due);
    }
    return earliest;
  }

  // Sends outgoing_ (at once: held packets leave from receive() too), then gives the copies it
  // referenced back to the inner queue.
  void flush_outgoing() {
    if (!outgoing_.empty()) {
      const std::size_t taken = inner_->send(outgoing_);
      injected_.tx_errors += outgoing_.size() - taken;
      inner_->flush();
    }
    outgoing_.clear();
    inner_->release(releasing_);
    releasing_.clear();
  }

  // Drops received packets in place, then appends duplicates while `out` has room; a duplicate is
  // a copy so that a caller editing one packet in place does not change the other.
  std::size_t apply_receive_faults(std::span<RxPacket> out, std::size_t received) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < received; ++i) {
      if (chance(options_.drop)) {
        ++injected_.injected_drops;
        continue;
      }
      out[kept++] = out[i];
    }
    std::size_t total = kept;
    for (std::size_t i = 0; i < kept; ++i) {
      if (!chance(options_.duplicate) || total == out.size() || free_copies_.empty() ||
          out[i].data.size() > copy_bytes_) {
        continue;
      }
      const std::size_t slot = free_copies_.back();
      free_copies_.pop_back();
      received_copies_.push_back(slot);
      std::byte* copy = copies_.get() + slot * copy_bytes_;
      std::memcpy(copy, out[i].data.data(), out[i].data.size());
      out[total++] = RxPacket{std::span(copy, out[i].data.size()), out[i].from};
      ++injected_.injected_duplicates;
    }
    return total;
  }

  std::unique_ptr<Queue> inner_;
  FaultOptions options_;
  std::mt19937_64 random_;
  std::vector<Held> held_;            // waiting to be sent, oldest first
  std::vector<TxRequest> outgoing_;
  std::vector<TxBuffer> releasing_;   // copies referenced by outgoing_ (reserved: never moves)
  std::size_t copy_bytes_;
  std::unique_ptr<std::byte[]> copies_;  // kCopySlots received duplicates
  std::vector<std::size_t> free_copies_;
  std::vector<std::size_t> received_copies_;
  std::uint64_t send_calls_ = 0;
  QueueCounters injected_;  // only the injected_* and tx_errors fields are used
};

}  // namespace

std::unique_ptr<Queue> with_faults(std::unique_ptr<Queue> inner, const FaultOptions& options) {
  if (!options.enabled()) return inner;
  return std::make_unique<FaultInjector>(std::move(inner), options);
}

}  // namespace dpa::transport

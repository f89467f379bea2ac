// Fault injection decorator: drops, duplicates, reorders and delays packets around any transport,
// reproducibly from a seed, so tests can exercise the protocol's recovery paths on loopback.
#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "transport/transport.hpp"

namespace dpa::transport {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Held packets live in a fixed pool allocated once; when it is full the fault is skipped.
constexpr std::size_t kPoolSlots = 256;
constexpr std::size_t kSlotBytes = 64 * 1024;

class FaultInjector final : public Transport {
 public:
  FaultInjector(std::unique_ptr<Transport> inner, const FaultOptions& options)
      : inner_(std::move(inner)),
        options_(options),
        random_(options.seed),
        pool_(std::make_unique_for_overwrite<std::byte[]>(kPoolSlots * kSlotBytes)),
        slots_(kPoolSlots) {
    free_slots_.reserve(kPoolSlots);
    for (std::size_t slot = kPoolSlots; slot-- > 0;) free_slots_.push_back(slot);
    held_.reserve(kPoolSlots);
    releasing_.reserve(kPoolSlots);
    received_copies_.reserve(kPoolSlots);
    outgoing_.reserve(kPoolSlots);
  }

  std::size_t receive(std::span<RxPacket> out, std::chrono::nanoseconds timeout) override {
    // Duplicates handed out by the previous call are no longer referenced by the caller.
    for (const std::size_t slot : received_copies_) free_slots_.push_back(slot);
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

  void send(std::span<const TxPacket> packets) override {
    const Clock::time_point now = Clock::now();
    // Packets reordered by an earlier call go out right after this call's first packet.
    const std::uint64_t call = ++send_calls_;
    bool first_sent = false;
    for (const TxPacket& packet : packets) {
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
  }

  [[nodiscard]] Endpoint local_endpoint() const override { return inner_->local_endpoint(); }

  [[nodiscard]] TransportCounters counters() const override {
    TransportCounters total = inner_->counters();
    total.injected_drops += injected_.injected_drops;
    total.injected_duplicates += injected_.injected_duplicates;
    total.injected_reorders += injected_.injected_reorders;
    total.injected_delays += injected_.injected_delays;
    return total;
  }

 private:
  enum class HoldKind { reorder, delay };

  struct Slot {
    HoldKind kind = HoldKind::reorder;
    Clock::time_point due;     // delay: when it may go out
    std::uint64_t call = 0;    // reorder: the send() call that held it
    std::uint32_t size = 0;
    Endpoint to;
  };

  // Bernoulli draw from the 53 high bits, identical on every standard library for a given seed.
  bool chance(double probability) {
    if (probability <= 0) return false;
    return static_cast<double>(random_() >> 11) * 0x1.0p-53 < probability;
  }

  std::byte* slot_data(std::size_t slot) const { return pool_.get() + slot * kSlotBytes; }

  // Copies the packet into a free slot; false when none is free or the packet does not fit.
  bool hold(const TxPacket& packet, HoldKind kind, Clock::time_point due, std::uint64_t call) {
    if (free_slots_.empty() || packet.size > kSlotBytes) return false;
    const std::size_t slot = free_slots_.back();
    free_slots_.pop_back();
    std::memcpy(slot_data(slot), packet.data, packet.size);
    slots_[slot] = Slot{kind, due, call, packet.size, packet.to};
    held_.push_back(slot);
    return true;
  }

  // Moves held packets that are ready into outgoing_ (in the order they were held).
  template <class Ready>
  void take_held_if(Ready ready) {
    const auto taken = std::stable_partition(held_.begin(), held_.end(),
                                             [&](std::size_t slot) { return !ready(slots_[slot]); });
    for (auto it = taken; it != held_.end(); ++it) {
      const Slot& slot = slots_[*it];
      outgoing_.push_back(TxPacket{slot_data(*it), slot.size, slot.to});
      releasing_.push_back(*it);
    }
    held_.erase(taken, held_.end());
  }

  void take_held(Clock::time_point now, bool take_reordered) {
    take_held_if([&](const Slot& slot) {
      return slot.kind == HoldKind::delay ? slot.due <= now : take_reordered;
    });
  }

  void take_reordered_before(std::uint64_t call) {
    take_held_if([&](const Slot& slot) { return slot.kind == HoldKind::reorder && slot.call < call; });
  }

  Clock::time_point next_delayed_due() const {
    Clock::time_point earliest = Clock::time_point::max();
    for (const std::size_t slot : held_) {
      if (slots_[slot].kind == HoldKind::delay) earliest = std::min(earliest, slots_[slot].due);
    }
    return earliest;
  }

  // Sends outgoing_ and returns the slots it referenced to the pool.
  void flush_outgoing() {
    if (!outgoing_.empty()) inner_->send(outgoing_);
    outgoing_.clear();
    for (const std::size_t slot : releasing_) free_slots_.push_back(slot);
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
      if (!chance(options_.duplicate) || total == out.size() || free_slots_.empty() ||
          out[i].data.size() > kSlotBytes) {
        continue;
      }
      const std::size_t slot = free_slots_.back();
      free_slots_.pop_back();
      received_copies_.push_back(slot);
      std::memcpy(slot_data(slot), out[i].data.data(), out[i].data.size());
      out[total++] = RxPacket{std::span(slot_data(slot), out[i].data.size()), out[i].from};
      ++injected_.injected_duplicates;
    }
    return total;
  }

  std::unique_ptr<Transport> inner_;
  FaultOptions options_;
  std::mt19937_64 random_;
  std::unique_ptr<std::byte[]> pool_;      // kPoolSlots slots of kSlotBytes
  std::vector<Slot> slots_;
  std::vector<std::size_t> free_slots_;
  std::vector<std::size_t> held_;          // slots waiting to be sent, oldest first
  std::vector<std::size_t> releasing_;     // slots referenced by outgoing_
  std::vector<std::size_t> received_copies_;  // slots handed out as receive() duplicates
  std::vector<TxPacket> outgoing_;
  std::uint64_t send_calls_ = 0;
  TransportCounters injected_;             // only the injected_* fields are used
};

}  // namespace

std::unique_ptr<Transport> with_faults(std::unique_ptr<Transport> inner, const FaultOptions& options) {
  if (!options.enabled()) return inner;
  return std::make_unique<FaultInjector>(std::move(inner), options);
}

}  // namespace dpa::transport

// SPDX-License-Identifier: Apache-2.0
// IPv4 -> Ethernet address table shared by a device's queues: static entries from the config,
// learned ones from ARP and from received packets. Lock-free (open addressing, one atomic claim
// per new address), fixed size, so a lookup on the packet path costs a few loads.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>

namespace dpa::transport::dpdk {

class NeighbourTable {
 public:
  static constexpr std::size_t kSlots = 4096;  // power of two; far above any world size

  // Where a neighbour is: its Ethernet address (the low 48 bits of a uint64, byte 0 of the MAC
  // highest) and the index of the device port that reaches it.
  struct Entry {
    std::uint64_t mac = 0;
    std::uint8_t link = 0;
    friend bool operator==(const Entry&, const Entry&) = default;
  };

  [[nodiscard]] std::optional<Entry> find(std::uint32_t ip) const {
    for (std::size_t i = 0, slot = hash(ip); i < kSlots; ++i, slot = (slot + 1) & (kSlots - 1)) {
      const std::uint32_t key = slots_[slot].ip.load(std::memory_order_acquire);
      if (key == 0) return std::nullopt;
      if (key == ip) {
        const std::uint64_t entry = slots_[slot].mac.load(std::memory_order_acquire);
        if ((entry & kValid) == 0) return std::nullopt;
        return Entry{entry & kMacMask, static_cast<std::uint8_t>(entry >> 48)};
      }
    }
    return std::nullopt;
  }

  // False only when the table is full.
  bool learn(std::uint32_t ip, Entry where) {
    if (ip == 0) return false;
    for (std::size_t i = 0, slot = hash(ip); i < kSlots; ++i, slot = (slot + 1) & (kSlots - 1)) {
      std::uint32_t key = slots_[slot].ip.load(std::memory_order_acquire);
      if (key == 0 && slots_[slot].ip.compare_exchange_strong(key, ip, std::memory_order_acq_rel)) key = ip;
      if (key == ip) {
        slots_[slot].mac.store((where.mac & kMacMask) | std::uint64_t{where.link} << 48 | kValid,
                               std::memory_order_release);
        return true;
      }
    }
    return false;
  }

 private:
  // Set in a stored entry: an all-zero MAC (some virtual devices have one) is still an answer.
  static constexpr std::uint64_t kValid = 1ULL << 63;
  static constexpr std::uint64_t kMacMask = (1ULL << 48) - 1;

  struct Slot {
    std::atomic<std::uint32_t> ip{0};
    std::atomic<std::uint64_t> mac{0};
  };

  static std::size_t hash(std::uint32_t ip) { return (ip * 2654435761u) & (kSlots - 1); }

  std::array<Slot, kSlots> slots_{};
};

}  // namespace dpa::transport::dpdk

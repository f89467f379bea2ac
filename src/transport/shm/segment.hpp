// SPDX-License-Identifier: Apache-2.0
// One queue's shared-memory segment: a file `<directory>/dpa-<fabric>-<port>` mapped by its owner
// and by every queue that sends to it or receives from it. It holds
// - the inbox: a bounded ring of packet descriptors, many producers (any process), one consumer
//   (the owner), with a futex word so that an idle owner sleeps and a sender wakes it;
// - the owner's transmit buffers, each with a reference count in its first cache line: the
//   owner's own reference while it fills and resends the buffer, plus one per descriptor that
//   names it and that its receiver has not yet released. A buffer is reused only at zero.
// The file appears under its name fully initialised (created under a temporary name, then
// linked), and its owner holds an exclusive flock on it for its lifetime, so a segment whose
// owner died is recognised (the lock is free) and taken over.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/unique_fd.hpp"
#include "dpa/transport_config.hpp"

namespace dpa::transport::shm {

// A packet in an inbox: the sender's port and its segment's tag (the tag tells a port's owners
// apart, so a packet of an earlier one is never read from a later one's buffers: see
// Segment::create), and the buffer index there. The byte count is in the buffer (Segment::size).
struct Descriptor {
  std::uint16_t port = 0;
  std::uint16_t buffer = 0;
  std::uint32_t tag = 0;

  [[nodiscard]] std::uint64_t pack() const {
    return std::uint64_t{port} << 48 | std::uint64_t{buffer} << 32 | tag;
  }
  static Descriptor unpack(std::uint64_t word) {
    return {static_cast<std::uint16_t>(word >> 48), static_cast<std::uint16_t>(word >> 32),
            static_cast<std::uint32_t>(word)};
  }
};

struct SegmentLayout;  // the mapped header (segment.cpp)

class Segment {
 public:
  // Creates the owner's segment for `port` (0: the first free port from a start in 49152..65535
  // that moves on with each segment of the process, so its next queues take other ports). A
  // port this process owned before gets the tag after its previous one there; a port new to it a
  // random 32-bit tag. dpa::Error when the port is in use by a live owner, or when `directory`
  // has no room for the buffers (naming the key and the bytes needed).
  static std::unique_ptr<Segment> create(const ShmTransportConfig& config, std::uint16_t port);
  // Maps another queue's segment; nullptr when no live, initialised segment has that port.
  static std::unique_ptr<Segment> attach(const ShmTransportConfig& config, std::uint16_t port);

  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();  // the owner marks it closed and removes its name; mappings of others stay valid

  [[nodiscard]] std::uint16_t port() const { return port_; }
  [[nodiscard]] std::uint32_t tag() const { return tag_; }
  [[nodiscard]] std::uint32_t buffers() const { return buffers_; }
  [[nodiscard]] std::uint32_t max_payload() const { return max_payload_; }
  // The owner has closed it: a sender drops its mapping and looks the port up again.
  [[nodiscard]] bool closed() const;

  [[nodiscard]] std::byte* payload(std::uint32_t buffer) const {
    return base_ + buffers_offset_ + std::size_t{buffer} * stride_ + kPayloadOffset;
  }
  [[nodiscard]] std::atomic<std::uint32_t>& references(std::uint32_t buffer) const { return header_word(buffer, 0); }
  // The packet's byte count, written by the owner before it pushes a descriptor naming the buffer
  // (the push publishes it). A buffer is refilled only once no descriptor names it.
  [[nodiscard]] std::atomic<std::uint32_t>& size(std::uint32_t buffer) const { return header_word(buffer, 1); }

  // Inbox, sender side: false when the ring is full. Then wake() once per burst of pushes.
  bool push(std::uint64_t descriptor);
  // Sender side: whether at least `count` (≤ the ring) pushed packets are still unread.
  [[nodiscard]] bool holds_unread(std::uint64_t count) const;
  // Wakes the owner if it sleeps in wait(); true when that took a system call.
  bool wake();

  // Inbox, owner side: takes up to out.size() descriptors in order.
  std::size_t pop(std::span<std::uint64_t> out);
  // Sleeps until a push or `timeout`, unless the inbox is not empty; true when it slept.
  bool wait(std::chrono::nanoseconds timeout);

 private:
  static constexpr std::size_t kPayloadOffset = 64;  // the cache line of the reference count and size

  // Word `word` of the cache line before a buffer's payload.
  [[nodiscard]] std::atomic<std::uint32_t>& header_word(std::uint32_t buffer, std::size_t word) const {
    return reinterpret_cast<std::atomic<std::uint32_t>*>(base_ + buffers_offset_ + std::size_t{buffer} * stride_)[word];
  }

  Segment(int fd, std::byte* base, std::size_t bytes, bool owner, std::string path);
  SegmentLayout& layout() const { return *reinterpret_cast<SegmentLayout*>(base_); }

  detail::UniqueFd fd_;  // holds the owner's lock while open
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
  bool owner_ = false;
  std::string path_;
  std::uint16_t port_ = 0;
  std::uint32_t tag_ = 0;
  std::uint32_t buffers_ = 0;
  std::uint32_t max_payload_ = 0;
  std::size_t stride_ = 0;
  std::size_t buffers_offset_ = 0;
  std::uint64_t ring_mask_ = 0;
  struct Cell* cells_ = nullptr;
};

// `<directory>/dpa-<fabric>-<port>`.
std::string segment_path(const ShmTransportConfig& config, std::uint16_t port);

}  // namespace dpa::transport::shm

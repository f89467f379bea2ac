// SPDX-License-Identifier: Apache-2.0
#include "transport/shm/shm_queue.hpp"

#include <algorithm>

namespace dpa::transport::shm {
ShmQueue::ShmQueue(const ShmTransportConfig& config, std::uint16_t port)
    : config_(config), own_(Segment::create(config, port)) {
  free_.reserve(own_->buffers());
  pending_.reserve(own_->buffers());
  for (std::uint32_t i = own_->buffers(); i-- > 0;) free_.push_back(static_cast<std::uint16_t>(i));
  received_.resize(kBurst);
  received_from_.resize(kBurst);
  to_wake_.reserve(64);
}

ShmQueue::~ShmQueue() { release_received(); }

Endpoint ShmQueue::local_endpoint() const { return Endpoint{kAddress, own_->port()}; }

Segment* ShmQueue::destination(std::uint16_t port) {
  if (last_destination_ != nullptr && last_destination_->port() == port && !last_destination_->closed()) {
    return last_destination_;
  }
  if (port == own_->port()) return last_destination_ = own_.get();
  auto found = peers_.find(port);
  if (found != peers_.end() && found->second->closed()) {
    // Its owner went (a new one may have the port now). Its packets still in the inbox, or
    // handed out by the last receive, keep reading its buffers: it stays mapped a while.
    constexpr std::size_t kRetiredKept = 64;
    if (retired_.size() == kRetiredKept) {
      if (last_source_ == retired_.front().get()) last_source_ = nullptr;
      retired_.erase(retired_.begin());
    }
    retired_.push_back(std::move(found->second));
    peers_.erase(found);
    found = peers_.end();
    last_destination_ = nullptr;
  }
  if (found == peers_.end()) {
    std::unique_ptr<Segment> attached = Segment::attach(config_, port);
    if (attached == nullptr) return nullptr;
    found = peers_.emplace(port, std::move(attached)).first;
  }
  return last_destination_ = found->second.get();
}

Segment* ShmQueue::source(const Descriptor& packet) {
  const auto matches = [&](const Segment* segment) {
    return segment != nullptr && segment->port() == packet.port && segment->tag() == packet.tag;
  };
  if (matches(last_source_)) return last_source_;  // a burst mostly comes from one sender
  if (packet.port == own_->port()) return matches(own_.get()) ? last_source_ = own_.get() : nullptr;
  if (const auto found = peers_.find(packet.port); found != peers_.end() && matches(found->second.get())) {
    return last_source_ = found->second.get();
  }
  for (const auto& segment : retired_) {
    if (matches(segment.get())) return last_source_ = segment.get();
  }
  // A sender this queue has not sent to yet, or a port's new owner.
  Segment* current = destination(packet.port);
  return matches(current) ? last_source_ = current : nullptr;
}

std::size_t ShmQueue::allocate(std::span<TxBuffer> out) {
  if (free_.size() < out.size()) {
    // Buffers released while still referenced come back once their receivers are done.
    std::erase_if(pending_, [this](std::uint16_t buffer) {
      if (own_->references(buffer).load(std::memory_order_acquire) != 0) return false;
      free_.push_back(buffer);
      return true;
    });
  }
  const std::size_t given = std::min(out.size(), free_.size());
  for (std::size_t i = 0; i < given; ++i) {
    const std::uint16_t buffer = free_.back();
    free_.pop_back();
    own_->references(buffer).store(1, std::memory_order_relaxed);
    out[i] = TxBuffer{own_->payload(buffer), 0, own_->max_payload(), reinterpret_cast<void*>(std::uintptr_t{buffer} + 1)};
  }
  return given;
}

void ShmQueue::release(std::span<TxBuffer> buffers) {
  for (TxBuffer& buffer : buffers) {
    if (buffer.native != nullptr) {
      const auto index = static_cast<std::uint16_t>(reinterpret_cast<std::uintptr_t>(buffer.native) - 1);
      if (own_->references(index).fetch_sub(1, std::memory_order_acq_rel) == 1) {
        free_.push_back(index);
      } else {
        pending_.push_back(index);
      }
    }
    buffer = TxBuffer{};
  }
}

ShmQueue::Enqueued ShmQueue::enqueue(const TxBuffer& buffer, const Endpoint& to) {
  Segment* destination = this->destination(to.port);
  if (destination == nullptr) {
    ++counters_.tx_errors;  // nobody listens there: lost, as a datagram to a closed port
    return Enqueued::dropped;
  }
  const std::uint32_t limit = config_.receiver_backlog_limit;
  if (limit != 0 && destination->holds_unread(limit)) {
    ++counters_.tx_errors;  // a receiver that does not read: lost, as to a full socket buffer
    return Enqueued::dropped;
  }
  const auto index = static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(buffer.native) - 1);
  std::atomic<std::uint32_t>& references = own_->references(index);
  references.fetch_add(1, std::memory_order_relaxed);
  own_->size(index).store(buffer.size, std::memory_order_relaxed);
  if (!destination->push(Descriptor{own_->port(), static_cast<std::uint16_t>(index), own_->tag()}.pack())) {
    references.fetch_sub(1, std::memory_order_relaxed);
    if (limit == 0) return Enqueued::full;
    ++counters_.tx_errors;
    return Enqueued::dropped;
  }
  ++counters_.tx_packets;
  if (to_wake_.empty() || to_wake_.back() != destination) to_wake_.push_back(destination);
  return Enqueued::queued;
}

void ShmQueue::wake_destinations() {
  std::ranges::sort(to_wake_);
  const auto [first, last] = std::ranges::unique(to_wake_);
  to_wake_.erase(first, last);
  for (Segment* destination : to_wake_) {
    if (destination->wake()) ++counters_.tx_syscalls;
  }
  to_wake_.clear();
}

std::size_t ShmQueue::send(std::span<const TxRequest> packets) {
  std::size_t taken = 0;
  for (const TxRequest& request : packets) {
    if (enqueue(*request.buffer, request.to) == Enqueued::full) break;
    ++taken;  // queued, or lost as a datagram is: either way the caller is done with it
  }
  wake_destinations();
  return taken;
}

std::size_t ShmQueue::send_to_all(const TxBuffer& buffer, std::span<const Endpoint> to) {
  std::size_t taken = 0;
  for (const Endpoint& endpoint : to) {  // one buffer, a descriptor per destination
    // A full inbox loses only its own copy: the destinations after it are served all the same.
    if (enqueue(buffer, endpoint) == Enqueued::queued) ++taken;
  }
  wake_destinations();
  return taken;
}

void ShmQueue::drop_reference(Segment& segment, std::uint32_t buffer) {
  segment.references(buffer).fetch_sub(1, std::memory_order_release);
}

void ShmQueue::release_received() {
  for (std::size_t i = 0; i < received_.size() && received_from_[i] != nullptr; ++i) {
    drop_reference(*received_from_[i], Descriptor::unpack(received_[i]).buffer);
    received_from_[i] = nullptr;
  }
}

std::size_t ShmQueue::receive(std::span<RxPacket> out, std::chrono::nanoseconds timeout) {
  release_received();
  const std::size_t capacity = std::min(out.size(), received_.size());
  if (capacity == 0) return 0;
  std::span<std::uint64_t> taken(received_.data(), capacity);
  std::size_t count = own_->pop(taken);
  if (count == 0 && timeout > std::chrono::nanoseconds::zero()) {
    if (own_->wait(timeout)) ++counters_.rx_syscalls;
    count = own_->pop(taken);
  }
  std::size_t delivered = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const Descriptor packet = Descriptor::unpack(received_[i]);
    Segment* sender = source(packet);
    if (sender == nullptr || packet.buffer >= sender->buffers()) {
      // The sender's segment is gone (its reference went with it) or the descriptor is not one.
      ++counters_.rx_dropped;
      continue;
    }
    const std::uint32_t size = sender->size(packet.buffer).load(std::memory_order_relaxed);
    if (size > sender->max_payload()) {
      // Still the sender's reference: dropped with the packet.
      drop_reference(*sender, packet.buffer);
      ++counters_.rx_dropped;
      continue;
    }
    received_[delivered] = received_[i];
    received_from_[delivered] = sender;
    out[delivered++] = RxPacket{std::span(sender->payload(packet.buffer), size), Endpoint{kAddress, packet.port}};
  }
  counters_.rx_packets += delivered;
  return delivered;
}

}  // namespace dpa::transport::shm

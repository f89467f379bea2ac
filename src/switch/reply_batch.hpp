// SPDX-License-Identifier: Apache-2.0
// The replies one received batch causes (the delivery side of the switch, as delivery.p4 is the
// P4 program's): built in transmit buffers of the switch thread's queue, queued in order, and
// sent by finish() as bursts of unicasts and one send_to_all per multicast. With the helpers that
// encode, seal (authenticated sessions, protocol.md §6.6) and queue one reply.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "dpa/switch.hpp"
#include "protocol/auth.hpp"
#include "protocol/mac_nonce.hpp"
#include "protocol/packet_mac.hpp"
#include "protocol/wire.hpp"
#include "switch/prefetch.hpp"
#include "switch/session.hpp"
#include "transport/buffer.hpp"
#include "transport/endpoint.hpp"
#include "transport/queue.hpp"

namespace dpa::sw {

// Per-thread state of one received batch: its packets, the replies they cause, sent by finish()
// after each transport::kSendEveryBytes of received packets handled and at the batch's end, and
// the thread's counters. Every vector is sized once.
class ReplyBatch {
 public:
  // `thread`: the switch thread's index, the sender id of its AES-256-GCM nonces.
  ReplyBatch(transport::Queue& queue, std::size_t batch, std::uint32_t thread);
  ReplyBatch(const ReplyBatch&) = delete;
  ReplyBatch& operator=(const ReplyBatch&) = delete;
  ~ReplyBatch();

  // A transmit buffer for one reply, from a stash the queue refills a burst at a time; null
  // when the pool is empty (the reply is lost; the worker retransmits).
  transport::TxBuffer* next_buffer() {
    if (stash_next_ == stash_count_) {
      stash_count_ = queue_.allocate(stash_);
      stash_next_ = 0;
      if (stash_count_ == 0) {
        ++counters.tx_dropped;
        return nullptr;
      }
    }
    used_.push_back(stash_[stash_next_++]);
    // The next reply's buffer: its lines may sit in the core that read its last contents.
    // The line before the payload too: transports put their own headers there (DPDK's frame).
    if (stash_next_ < stash_count_) prefetch_write(stash_[stash_next_].payload - 64, prefetch_bytes_ + 64);
    return &used_.back();
  }
  // The buffer for a reply of `bytes` to `packet`: the packet's own when the queue gives it up
  // (written in place: its lines are already in this core's cache and nothing is allocated),
  // else next_buffer(). Once per packet: a second reply to it needs a buffer of its own.
  transport::TxBuffer* reply_buffer(const transport::RxPacket& packet, std::uint32_t bytes) {
    transport::TxBuffer own = queue_.take_for_reply(packet, bytes);
    if (own.payload == nullptr) return next_buffer();
    used_.push_back(own);
    return &used_.back();
  }
  void send(const transport::TxBuffer& buffer, const transport::Endpoint& to) { send_to(buffer).push_back(to); }
  [[nodiscard]] bool has_sends() const { return !sends_.empty(); }
  // A buffer of this batch by position: next_buffer() may move them, positions stay.
  [[nodiscard]] std::size_t index_of(const transport::TxBuffer& buffer) const {
    return static_cast<std::size_t>(&buffer - used_.data());
  }
  transport::TxBuffer& buffer_at(std::size_t index) { return used_[index]; }
  // How much of each reply buffer to prefetch for writing: as much as the packet in hand,
  // whose reply is most often as long. Not the largest session's packet: with a 64 KB prefetch
  // for each 4 KB reply, a one-rank round trip took 8.9-9.3 us against 5.9-6.1 (the 2-core VM,
  // docs/benchmarks.md "2026-12-06 (afternoon)").
  void set_prefetch_bytes(std::size_t bytes) { prefetch_bytes_ = bytes; }
  // Adds destinations to the send of `buffer` started by send_to(): one buffer, many ranks.
  std::vector<transport::Endpoint>& send_to(const transport::TxBuffer& buffer) {
    sends_.push_back({static_cast<std::uint32_t>(&buffer - used_.data()), endpoints_.size()});
    return endpoints_;
  }

  // Sends the batch's replies in order (runs of unicasts as one burst, each multicast as one
  // send_to_all) and releases their buffers. No flush: the queue's transmit bursts build up
  // over batches until full or until the transport's flush interval, counted by the receive()
  // calls of the switch thread's loop.
  void finish();

  std::vector<transport::RxPacket> rx;
  SwitchCounters counters;
  // The nonces of every AES-256-GCM reply this thread seals (protocol.md §6.6): one counter for
  // all keys, so it never repeats under any of them.
  protocol::NonceCounter nonces;

 private:
  struct Send {
    std::uint32_t buffer = 0;  // index in used_
    std::size_t first = 0;     // its destinations: endpoints_[first, next send's first)
  };

  void send_unicasts();

  transport::Queue& queue_;
  std::vector<transport::TxBuffer> stash_;
  std::size_t stash_next_ = 0;
  std::size_t stash_count_ = 0;
  std::size_t prefetch_bytes_ = protocol::kHeaderSize;
  std::vector<transport::TxBuffer> used_;  // this batch's reply buffers (reserved: never moves)
  std::vector<Send> sends_;
  std::vector<transport::Endpoint> endpoints_;
  std::vector<transport::TxRequest> unicast_;
};

// The MAC of admission replies to `rank` in a session with a key (protocol.md §6.6); null otherwise.
inline const protocol::PacketMac* reply_key(const Session& session, std::uint32_t rank) {
  const protocol::PacketMacs* macs = session.admission_macs(rank);
  return macs != nullptr ? &macs->reply : nullptr;
}
// The same for replies to data packets and probes, the current generation's: null unless the
// session authenticates data.
inline const protocol::PacketMac* data_reply_key(const Session& session, std::uint32_t rank) {
  const protocol::PacketMacs* macs = session.data_macs(rank);
  return macs != nullptr ? &macs->reply : nullptr;
}
// Which of the two MACs seals a reply.
using ReplyKeyOf = const protocol::PacketMac* (*)(const Session&, std::uint32_t);

// Seals an encoded reply of `bytes` with `key` (null: an unauthenticated session; room for
// protocol::kMaxTrailerSize after it otherwise) and sets its size.
inline void finish_reply(ReplyBatch& batch, transport::TxBuffer& buffer, std::size_t bytes, const protocol::PacketMac* key) {
  buffer.size = static_cast<std::uint32_t>(key != nullptr ? key->seal(buffer.payload, bytes, batch.nonces) : bytes);
}

// A header-only reply to `to`, sealed with `key` when not null.
void send_header(ReplyBatch& batch, const protocol::Header& header, const transport::Endpoint& to,
                 const protocol::PacketMac* key);

// An ERROR reply to `request` (sw::error_reply), counted in errors_sent.
void send_error(ReplyBatch& batch, const protocol::Header& request, protocol::ErrorCode code,
                std::uint32_t expected, const transport::Endpoint& to, const protocol::PacketMac* key);

// session_taken_over (protocol.md §4) to `to`: `bitmap` names the ranks of the replaced job whose
// LEAVE freed the session (0: it went idle), so that job learns why. Counted in errors_sent.
void send_taken_over(ReplyBatch& batch, const protocol::Header& request, const Membership& members,
                     const transport::Endpoint& to, const protocol::PacketMac* key);

// Sends the encoded packet in `original` (`bytes`, not sealed) to each rank of `ranks` at
// `to`, each copy sealed with its rank's key: an authenticated session's multicast is one
// buffer per rank, since every rank's tag differs.
void send_sealed_copies(ReplyBatch& batch, const Session& session, ReplyKeyOf key_of, transport::TxBuffer* original,
                        std::size_t bytes, std::span<const std::uint8_t> ranks,
                        std::span<const transport::Endpoint> to);

// Sends the encoded reply to data in `buffer` (`bytes`) to every rank of the generation at the
// port of worker thread `thread`: one shared buffer (send_to_all never copies it), or in a
// session that authenticates data one sealed copy per rank.
void send_to_members(ReplyBatch& batch, const Session& session, transport::TxBuffer* buffer, std::size_t bytes,
                     const Membership& members, std::uint32_t thread);
// The same to the ranks of `ranks_mask` (bit r: rank r) only; nothing when it names none.
void send_to_ranks(ReplyBatch& batch, const Session& session, transport::TxBuffer* buffer, std::size_t bytes,
                   const Membership& members, std::uint32_t thread, std::uint64_t ranks_mask);

}  // namespace dpa::sw

// SPDX-License-Identifier: Apache-2.0
#include "switch/reply_batch.hpp"

#include <array>
#include <cstring>

#include "switch/slot.hpp"
#include "transport/send.hpp"

namespace dpa::sw {

using protocol::ErrorCode;
using protocol::Header;
using transport::Endpoint;

ReplyBatch::ReplyBatch(transport::Queue& queue, std::size_t batch, std::uint32_t thread)
    : rx(batch), nonces(thread), queue_(queue), stash_(batch) {
  // Every data packet yields at most two replies (a poisoned round's multicast and the sender's
  // own error), each to at most every rank; the JOIN that forms a generation yields one ack per
  // rank. Only a batch with several such JOINs grows these (indices, not pointers, refer into them).
  used_.reserve(2 * batch + protocol::kMaxWorld);
  sends_.reserve(2 * batch + protocol::kMaxWorld);
  endpoints_.reserve(2 * batch * protocol::kMaxWorld);
  unicast_.reserve(2 * batch + protocol::kMaxWorld);
}

ReplyBatch::~ReplyBatch() {
  queue_.release(used_);
  queue_.release(std::span(stash_.data() + stash_next_, stash_count_ - stash_next_));
}

void ReplyBatch::finish() {
  for (std::size_t i = 0; i < sends_.size(); ++i) {
    const std::size_t end = i + 1 < sends_.size() ? sends_[i + 1].first : endpoints_.size();
    const transport::TxBuffer& buffer = used_[sends_[i].buffer];
    const std::span<const Endpoint> to(endpoints_.data() + sends_[i].first, end - sends_[i].first);
    if (to.size() == 1) {
      unicast_.push_back({&buffer, to[0]});
      continue;
    }
    send_unicasts();
    const std::size_t served = queue_.send_to_all(buffer, to);
    counters.tx_packets += served;
    counters.tx_dropped += to.size() - served;
  }
  send_unicasts();
  queue_.release(used_);
  used_.clear();
  sends_.clear();
  endpoints_.clear();
}

void ReplyBatch::send_unicasts() {
  if (unicast_.empty()) return;
  const std::size_t sent = transport::send_all(queue_, unicast_);
  counters.tx_packets += sent;
  counters.tx_dropped += unicast_.size() - sent;
  unicast_.clear();
}

void send_header(ReplyBatch& batch, const protocol::Header& header, const Endpoint& to, const protocol::PacketMac* key) {
  transport::TxBuffer* buffer = batch.next_buffer();
  if (buffer == nullptr) return;
  protocol::encode(header, buffer->payload);
  finish_reply(batch, *buffer, protocol::kHeaderSize, key);
  batch.send(*buffer, to);
}

void send_error(ReplyBatch& batch, const protocol::Header& request, protocol::ErrorCode code, std::uint32_t expected,
                const Endpoint& to, const protocol::PacketMac* key) {
  ++batch.counters.errors_sent;
  send_header(batch, error_reply(request, code, expected), to, key);
}

void send_taken_over(ReplyBatch& batch, const Header& request, const Membership& members, const Endpoint& to,
                     const protocol::PacketMac* key) {
  ++batch.counters.errors_sent;
  Header error = error_reply(request, ErrorCode::session_taken_over, members.generation);
  error.bitmap = members.previous_left;
  send_header(batch, error, to, key);
}

void send_sealed_copies(ReplyBatch& batch, const Session& session, ReplyKeyOf key_of, transport::TxBuffer* original, std::size_t bytes,
                        std::span<const std::uint8_t> ranks, std::span<const Endpoint> to) {
  const std::size_t index = batch.index_of(*original);
  for (std::size_t i = 1; i < ranks.size(); ++i) {
    transport::TxBuffer* copy = batch.next_buffer();  // may move `original`: found again by index
    if (copy == nullptr) break;
    std::memcpy(copy->payload, batch.buffer_at(index).payload, bytes);
    finish_reply(batch, *copy, bytes, key_of(session, ranks[i]));
    batch.send(*copy, to[i]);
  }
  transport::TxBuffer& first = batch.buffer_at(index);
  finish_reply(batch, first, bytes, key_of(session, ranks[0]));
  batch.send(first, to[0]);
}

void send_to_ranks(ReplyBatch& batch, const Session& session, transport::TxBuffer* buffer, std::size_t bytes,
                   const Membership& members, std::uint32_t thread, std::uint64_t ranks_mask) {
  std::array<std::uint8_t, protocol::kMaxWorld> ranks{};
  std::array<Endpoint, protocol::kMaxWorld> to{};
  std::size_t count = 0;
  members.for_each_member([&](std::uint32_t r) {
    if (((ranks_mask >> r) & 1) == 0) return;
    ranks[count] = static_cast<std::uint8_t>(r);
    to[count++] = members.endpoints[r][thread];
  });
  if (count == 0) return;
  if (!session.authenticates_data()) {
    buffer->size = static_cast<std::uint32_t>(bytes);
    std::vector<Endpoint>& destinations = batch.send_to(*buffer);
    destinations.insert(destinations.end(), to.begin(), to.begin() + static_cast<std::ptrdiff_t>(count));
    return;
  }
  send_sealed_copies(batch, session, data_reply_key, buffer, bytes, std::span(ranks.data(), count),
                     std::span(to.data(), count));
}

void send_to_members(ReplyBatch& batch, const Session& session, transport::TxBuffer* buffer, std::size_t bytes,
                     const Membership& members, std::uint32_t thread) {
  send_to_ranks(batch, session, buffer, bytes, members, thread, ~std::uint64_t{0});
}

}  // namespace dpa::sw

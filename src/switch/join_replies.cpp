// SPDX-License-Identifier: Apache-2.0
#include "switch/join_replies.hpp"

#include <algorithm>
#include <vector>

#include "common/logging.hpp"
#include "switch/slot.hpp"

namespace dpa::sw {

using protocol::ErrorCode;
using protocol::Header;
using transport::Endpoint;
namespace flag = protocol::flag;

namespace {

// Each rank's ack carries its own secret (§6.4), so the acks are N unicasts, not one buffer.
void send_acks(ReplyBatch& batch, const Session& session, const JoinOutcome& outcome, const Header& request,
               const Endpoint& from, std::span<const std::uint16_t> switch_ports) {
  const Membership& members = *outcome.members;
  const auto world = static_cast<std::uint32_t>(session.config().world_size);
  protocol::JoinReply reply;
  reply.payload = session.config().payload;
  reply.world_size = world;
  reply.k_default = session.k_default();
  reply.straggler_timeout_ticks = session.limits().straggler_timeout_ticks;
  reply.pool_base = session.config().pool_base;
  reply.pool_size = session.config().pool_size;
  reply.generation = members.generation;
  reply.token = members.token;
  reply.switch_ports = static_cast<std::uint32_t>(switch_ports.size());
  std::copy(switch_ports.begin(), switch_ports.end(), reply.ports);

  Header ack = request;
  ack.flags = flag::kJoin | flag::kResult;
  ack.op_id = static_cast<std::uint32_t>(members.data_mac);  // how data is authenticated (protocol.md §6.2, §6.6)
  ack.token = members.token;
  ack.count = static_cast<std::uint16_t>(reply.words());
  ack.bitmap = members.joined;
  ack.seq = members.generation;
  const auto send_ack = [&](std::uint32_t rank, const Endpoint& to) {
    transport::TxBuffer* buffer = batch.next_buffer();
    if (buffer == nullptr) return;
    ack.rank = static_cast<std::uint8_t>(rank);  // the receiving rank, whose secret and tag it carries
    ack.offset = members.secrets[rank];
    protocol::encode(ack, buffer->payload);
    protocol::encode(reply, buffer->payload + protocol::kHeaderSize);
    finish_reply(batch, *buffer, protocol::kHeaderSize + 4 * reply.words(), reply_key(session, rank));
    batch.send(*buffer, to);
  };
  if (outcome.kind == JoinOutcome::Kind::ack_sender) {
    send_ack(request.rank, from);
    return;
  }
  members.for_each_member([&](std::uint32_t r) { send_ack(r, members.endpoints[r][0]); });
  detail::log().info("session {}: generation {} joined by {} ranks ({} threads, window {}, data MAC {})",
                     request.session, members.generation, world, members.threads, members.window,
                     protocol::to_string(members.data_mac));
}

// Every rank of the attempt learns which rank disagrees, from which host, with what.
void send_disagreement(ReplyBatch& batch, const Session& session, const JoinOutcome& outcome, const Header& request) {
  Header error = error_reply(request, outcome.error, outcome.expected);
  error.rank = outcome.culprit_rank;
  error.bitmap = std::uint64_t{outcome.culprit_value} << 32 | outcome.culprit_address;
  if (transport::TxBuffer* buffer = batch.next_buffer()) {
    protocol::encode(error, buffer->payload);
    batch.counters.errors_sent += outcome.notify.size();
    if (session.admission_macs(0) != nullptr) {
      send_sealed_copies(batch, session, reply_key, buffer, protocol::kHeaderSize, outcome.notify_ranks,
                         outcome.notify);
    } else {
      buffer->size = static_cast<std::uint32_t>(protocol::kHeaderSize);
      std::vector<Endpoint>& to = batch.send_to(*buffer);
      to.insert(to.end(), outcome.notify.begin(), outcome.notify.end());
    }
  }
  detail::log().warn("session {}: join rejected: {} (rank {} at {} uses {}, the others {})", request.session,
             protocol::to_string(outcome.error), outcome.culprit_rank,
             Endpoint{outcome.culprit_address, 0}.to_string(), outcome.culprit_value, outcome.expected);
}

}  // namespace

void reply_to_join(ReplyBatch& batch, const Session& session, const JoinOutcome& outcome, const Header& request,
                   const Endpoint& from, const JoinRateLimiter& limiter, std::span<const std::uint16_t> switch_ports) {
  using Kind = JoinOutcome::Kind;
  switch (outcome.kind) {
    case Kind::waiting:
      return;
    case Kind::reject_sender:
      if (outcome.error == ErrorCode::session_busy) ++batch.counters.joins_refused;
      if (outcome.error == ErrorCode::rank_contended) {
        // The refused rank learns who holds its rank and how many JOINs that source sent.
        ++batch.counters.joins_contended;
        ++batch.counters.errors_sent;
        Header error = error_reply(request, outcome.error, outcome.expected);
        const std::uint64_t heard = std::min<std::uint64_t>(limiter.heard(outcome.holder), 0xffff);
        error.bitmap = heard << 48 | Identity::key_of(outcome.holder);
        send_header(batch, error, from, reply_key(session, request.rank));
        return;
      }
      if (outcome.error == ErrorCode::session_taken_over) {
        send_taken_over(batch, request, *session.membership(), from, reply_key(session, request.rank));
        return;
      }
      send_error(batch, request, outcome.error, outcome.expected, from, reply_key(session, request.rank));
      return;
    case Kind::reject_all:
      send_disagreement(batch, session, outcome, request);
      return;
    case Kind::ack_sender:
    case Kind::ack_all:
      send_acks(batch, session, outcome, request, from, switch_ports);
      return;
  }
}

}  // namespace dpa::sw

// SPDX-License-Identifier: Apache-2.0
#include "protocol/wire.hpp"

#include "protocol/auth.hpp"
#include "protocol/byte_order.hpp"

namespace dpa::protocol {

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::none: return "none";
    case ErrorCode::unknown_session: return "unknown session";
    case ErrorCode::not_registered: return "sender is not registered for the session";
    case ErrorCode::rank_out_of_range: return "rank out of range for the session's world size";
    case ErrorCode::world_size_mismatch: return "world size differs from the session's";
    case ErrorCode::payload_mismatch: return "payload size differs from the session's";
    case ErrorCode::threads_mismatch: return "thread count differs between ranks";
    case ErrorCode::window_mismatch: return "window differs between ranks";
    case ErrorCode::pool_too_small: return "threads * 2 * window exceeds the session's slot pool";
    case ErrorCode::slot_out_of_range: return "slot outside the session's pool";
    case ErrorCode::seq_ahead: return "round ahead of the switch (switch restarted or session reset?)";
    case ErrorCode::op_mismatch: return "ranks are running different operations on one slot";
    case ErrorCode::not_joined: return "rank has not joined the session";
    case ErrorCode::k_invalid: return "K outside 1..world size";
    case ErrorCode::bad_length: return "packet length does not match the session's payload size";
    case ErrorCode::dtype_mismatch: return "ranks disagree on the data type of an operation";
    case ErrorCode::length_mismatch: return "ranks disagree on the element count of an operation";
    case ErrorCode::session_busy: return "the session is in use by another job";
    case ErrorCode::session_taken_over: return "the session was taken over by a new job";
    case ErrorCode::rank_contended: return "another source holds the rank's pending JOIN";
    case ErrorCode::auth_mismatch: return "the JOIN's authentication differs from the session's";
    case ErrorCode::rank_gone: return "a rank the round waits for left the job or went silent";
    case ErrorCode::mode_mismatch: return "the ranks disagree on the round's collective (reduce-scatter, all-gather, broadcast) or its owner rank";
    case ErrorCode::join_cookie: return "the switch asks the JOIN to be repeated with its cookie";
  }
  return "unknown error code";
}

std::string_view to_string(DecodeStatus status) {
  switch (status) {
    case DecodeStatus::ok: return "ok";
    case DecodeStatus::too_short: return "shorter than the 48-byte header (and the trailer of an AUTH packet)";
    case DecodeStatus::bad_version: return "unsupported protocol version";
    case DecodeStatus::unknown_flags: return "unknown flag bits set";
    case DecodeStatus::reserved_nonzero: return "reserved byte is not zero";
    case DecodeStatus::error_flag_mismatch: return "error code and ERROR flag disagree";
    case DecodeStatus::rank_out_of_range: return "rank >= 64";
    case DecodeStatus::bad_payload_length: return "payload length is not a whole number of 32-bit words";
    case DecodeStatus::count_exceeds_payload: return "count exceeds the payload carried";
    case DecodeStatus::conflicting_modes: return "both TO_OWNER and FROM_OWNER set";
    case DecodeStatus::gcm_without_auth: return "GCM set without AUTH";
  }
  return "unknown status";
}

void encode(const Header& h, std::byte* out) {
  out[0] = std::byte{h.version};
  out[1] = std::byte{static_cast<std::uint8_t>(h.error)};
  store_be16(out + 2, h.flags);
  store_be32(out + 4, h.session);
  store_be32(out + 8, h.token);
  store_be32(out + 12, h.op_id);
  store_be32(out + 16, h.slot);
  store_be32(out + 20, h.seq);
  store_be32(out + 24, h.offset);
  store_be32(out + 28, h.op_length);
  store_be16(out + 32, h.count);
  out[34] = std::byte{h.rank};
  out[35] = std::byte{h.k};
  out[36] = std::byte{h.contributors};
  out[37] = std::byte{exp_to_wire(h.exp_used)};
  out[38] = std::byte{exp_to_wire(h.exp_next)};
  out[39] = std::byte{0};
  store_be64(out + 40, h.bitmap);
}

void encode(const JoinRequest& r, std::byte* out) {
  store_be32(out + 0, r.nonce);
  store_be32(out + 4, r.world_size);
  store_be32(out + 8, r.threads);
  store_be32(out + 12, r.window);
  store_be32(out + 16, r.payload);
  std::byte* ports = out + 20;
  for (std::uint32_t t = 0; t < (r.threads + 1) / 2 * 2; ++t) {
    store_be16(ports + 2 * t, t < r.threads ? r.ports[t] : std::uint16_t{0});
  }
}

bool decode(std::span<const std::byte> payload, JoinRequest& r) {
  if (payload.size() < 20) return false;
  const std::byte* in = payload.data();
  r.nonce = load_be32(in + 0);
  r.world_size = load_be32(in + 4);
  r.threads = load_be32(in + 8);
  r.window = load_be32(in + 12);
  r.payload = load_be32(in + 16);
  if (r.threads == 0 || r.threads > kMaxThreads) return false;
  if (payload.size() < r.words() * 4) return false;
  for (std::uint32_t t = 0; t < r.threads; ++t) r.ports[t] = load_be16(in + 20 + 2 * t);
  return true;
}

void encode(const JoinReply& r, std::byte* out) {
  const std::uint32_t words[9] = {r.payload,   r.world_size, r.k_default,
                                  r.straggler_timeout_ticks,   r.pool_base,
                                  r.pool_size, r.generation, r.token,     r.switch_ports};
  for (std::size_t i = 0; i < 9; ++i) store_be32(out + 4 * i, words[i]);
  for (std::uint32_t i = 0; i < (r.switch_ports + 1) / 2 * 2; ++i) {
    store_be16(out + 36 + 2 * i, i < r.switch_ports ? r.ports[i] : std::uint16_t{0});
  }
}

bool decode(std::span<const std::byte> payload, JoinReply& r) {
  if (payload.size() < 36) return false;
  const std::byte* in = payload.data();
  r.payload = load_be32(in + 0);
  r.world_size = load_be32(in + 4);
  r.k_default = load_be32(in + 8);
  r.straggler_timeout_ticks = load_be32(in + 12);
  r.pool_base = load_be32(in + 16);
  r.pool_size = load_be32(in + 20);
  r.generation = load_be32(in + 24);
  r.token = load_be32(in + 28);
  r.switch_ports = load_be32(in + 32);
  if (r.switch_ports == 0 || r.switch_ports > kMaxThreads) return false;
  if (payload.size() < r.words() * 4) return false;
  for (std::uint32_t i = 0; i < r.switch_ports; ++i) r.ports[i] = load_be16(in + 36 + 2 * i);
  return true;
}

}  // namespace dpa::protocol

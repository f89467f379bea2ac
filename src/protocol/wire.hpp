// SPDX-License-Identifier: Apache-2.0
// The dpa wire format: the one definition shared by workers, the software switch and the
// conformance tests. docs/protocol.md describes every field; keep the two in step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "protocol/auth.hpp"
#include "protocol/byte_order.hpp"

namespace dpa::protocol {

inline constexpr std::uint8_t kVersion = 2;
inline constexpr std::size_t kHeaderSize = 48;
inline constexpr std::uint16_t kDefaultPort = 4242;
inline constexpr int kMaxWorld = 64;    // bitmap width; the Tofino program supports 32
inline constexpr int kMaxThreads = 64;  // worker threads per rank (ports listed in JOIN)
// Largest payload (values per packet) that fits a UDP datagram over loopback.
inline constexpr std::uint32_t kMaxPayload = 16 * 1024 - 64;

// The straggler timer counts ticks of 2^16 ns (65.536 us): a 32-bit slice of Tofino's 48-bit
// nanosecond timestamp, which is what one register cell holds. The software switch uses the
// same ticks so both complete a round on the same packet.
inline constexpr unsigned kTickShift = 16;
[[nodiscard]] constexpr std::uint32_t ticks_of_ns(std::uint64_t ns) {
  return static_cast<std::uint32_t>(ns >> kTickShift);
}
// A timeout in ticks: the smallest tick count not shorter than `us`.
[[nodiscard]] constexpr std::uint32_t timeout_ticks(std::uint64_t us) {
  return static_cast<std::uint32_t>((us * 1000 + (std::uint64_t{1} << kTickShift) - 1) >> kTickShift);
}
[[nodiscard]] constexpr std::uint64_t ticks_to_us(std::uint32_t ticks) {
  return (std::uint64_t{ticks} << kTickShift) / 1000;
}

[[nodiscard]] constexpr std::uint8_t exp_to_wire(std::int8_t e) {
  return static_cast<std::uint8_t>(static_cast<std::uint8_t>(e) ^ 0x80u);
}
[[nodiscard]] constexpr std::int8_t exp_from_wire(std::uint8_t code) {
  return static_cast<std::int8_t>(static_cast<std::uint8_t>(code ^ 0x80u));
}

// Block exponents travel as int8. Two values are reserved.
// On the wire and in switch registers an exponent travels biased by 128 (e ^ 0x80), so an
// all-zero register reads as kExpZero and an unsigned byte maximum is the signed maximum.
inline constexpr std::int8_t kExpZero = -128;      // every value of the block is zero
inline constexpr std::int8_t kExpNonFinite = 127;  // the block holds NaN or +-Inf
inline constexpr int kExpMin = -96;                // smallest exponent used for scaling
inline constexpr int kExpMax = 126;                // |v| >= 2^126 counts as non-finite

namespace flag {
inline constexpr std::uint16_t kResult = 0x0001;      // switch -> worker: aggregated block
inline constexpr std::uint16_t kRetransmit = 0x0002;  // a unicast copy of a stored result
inline constexpr std::uint16_t kSyn = 0x0004;         // probe for a slot's state (and its reply)
inline constexpr std::uint16_t kOld = 0x0008;         // reply: the packet's round is behind the slot
inline constexpr std::uint16_t kError = 0x0010;       // reply: see Header::error
inline constexpr std::uint16_t kCountToK = 0x0020;    // complete this round at the first K
inline constexpr std::uint16_t kJoin = 0x0040;        // session join (control plane)
inline constexpr std::uint16_t kComplete = 0x0080;    // in OLD/SYN replies: the slot's round is complete
inline constexpr std::uint16_t kFloat = 0x0100;       // payload is block-floating-point fp32
inline constexpr std::uint16_t kLeave = 0x0200;       // a rank leaves its join generation
inline constexpr std::uint16_t kAuth = 0x0400;        // a MAC trailer follows the payload (auth.hpp)
inline constexpr std::uint16_t kKeepalive = 0x0800;   // a rank's engine is alive (no reply)
// Owned rounds (docs/protocol.md §13): the round's values go to its owner only (reduce-scatter),
// or come from its owner only (all-gather, broadcast). At most one of the two.
inline constexpr std::uint16_t kToOwner = 0x1000;
inline constexpr std::uint16_t kFromOwner = 0x2000;
inline constexpr std::uint16_t kOwned = kToOwner | kFromOwner;
// With AUTH: the trailer is an AES-256-GCM nonce and tag (packet_mac.hpp), not a SipHash tag.
inline constexpr std::uint16_t kGcm = 0x4000;
inline constexpr std::uint16_t kKnown = 0x7fff;
// Flags only the switch sets: a request carrying one is malformed, so a reply looped back to
// the switch can never act as a request.
inline constexpr std::uint16_t kReplyOnly = kResult | kRetransmit | kOld | kError | kComplete;
}  // namespace flag

// Bytes after the payload of a packet with these flags: the MAC trailer of an authenticated one.
[[nodiscard]] constexpr std::size_t trailer_size(std::uint16_t flags) {
  if ((flags & flag::kAuth) == 0) return 0;
  return (flags & flag::kGcm) != 0 ? kGcmTrailerSize : kTagSize;
}

enum class ErrorCode : std::uint8_t {
  none = 0,
  unknown_session = 1,
  not_registered = 2,
  rank_out_of_range = 3,
  world_size_mismatch = 4,
  payload_mismatch = 5,
  threads_mismatch = 6,
  window_mismatch = 7,
  pool_too_small = 8,
  slot_out_of_range = 9,
  seq_ahead = 10,
  op_mismatch = 11,
  not_joined = 12,
  k_invalid = 13,
  bad_length = 14,
  dtype_mismatch = 15,
  length_mismatch = 16,
  session_busy = 17,
  session_taken_over = 18,
  rank_contended = 19,
  auth_mismatch = 20,
  rank_gone = 21,
  mode_mismatch = 22,
  join_cookie = 23,  // not a failure: JOIN again with the cookie in op_id (§6.3, admission under a storm)
};
std::string_view to_string(ErrorCode code);

// Header fields in host byte order. On the wire every multi-byte field is big-endian.
struct Header {
  std::uint8_t version = kVersion;
  ErrorCode error = ErrorCode::none;
  std::uint16_t flags = 0;
  std::uint32_t session = 0;
  std::uint32_t token = 0;   // job token of the join generation (0 in a first JOIN)
  std::uint32_t op_id = 0;   // per-communicator operation counter, equal on every rank
  std::uint32_t slot = 0;    // absolute switch slot index
  std::uint32_t seq = 0;     // per-slot round number; the first use of a slot is 1
  std::uint32_t offset = 0;  // element offset of the block within the operation
  std::uint32_t op_length = 0;  // elements of the whole operation (data packets)
  std::uint16_t count = 0;   // data: valid values; control: payload length in 32-bit words
  std::uint8_t rank = 0;
  std::uint8_t k = 0;             // request: fastest-K target (0: session default)
  // Result: contributions summed. A request of an owned round (kOwned) carries its owner here.
  std::uint8_t contributors = 0;
  std::int8_t exp_used = kExpZero;  // exponent the payload values are scaled with
  std::int8_t exp_next = kExpZero;  // request: local exponent of the next block; result: max
  std::uint64_t bitmap = 0;         // result: contributor bitmap (bit r = rank r)

  [[nodiscard]] bool has(std::uint16_t f) const { return (flags & f) != 0; }
  [[nodiscard]] bool is_control() const { return has(flag::kJoin) || has(flag::kError); }
  [[nodiscard]] bool is_probe() const { return has(flag::kSyn); }
  // Owned rounds (§13): the request's owner rank, byte 36 of a request.
  [[nodiscard]] std::uint8_t owner() const { return contributors; }
  void set_owner(std::uint8_t owner_rank) { contributors = owner_rank; }
  // Whether `r` receives the values of this owned round's result (every rank, for other rounds).
  [[nodiscard]] static bool takes_values(std::uint16_t mode, std::uint8_t owner, std::uint8_t r) {
    if ((mode & flag::kToOwner) != 0) return r == owner;
    if ((mode & flag::kFromOwner) != 0) return r != owner;
    return true;
  }
};

// Writes the kHeaderSize header bytes.
void encode(const Header& header, std::byte* out);

enum class DecodeStatus : std::uint8_t {
  ok,
  too_short,
  bad_version,
  unknown_flags,
  reserved_nonzero,
  error_flag_mismatch,  // an error code without the ERROR flag, or the flag without a code
  rank_out_of_range,
  bad_payload_length,
  count_exceeds_payload,
  conflicting_modes,  // both TO_OWNER and FROM_OWNER
  gcm_without_auth,   // GCM names the form of a trailer that AUTH does not announce
};
std::string_view to_string(DecodeStatus status);

// Parses and validates a datagram. On success `header` is filled and `payload` points at the
// bytes after the header, less the trailer of an AUTH packet (checked with verify_tag, auth.hpp,
// or a PacketMac, packet_mac.hpp).
// Inline: as a call, the span came back through memory in two stores that the caller read as
// one, a load that cannot be forwarded and stalls once per packet.
inline DecodeStatus decode(std::span<const std::byte> datagram, Header& h,
                           std::span<const std::byte>& payload) {
  if (datagram.size() < kHeaderSize) return DecodeStatus::too_short;
  const std::byte* in = datagram.data();
  h.version = std::to_integer<std::uint8_t>(in[0]);
  if (h.version != kVersion) return DecodeStatus::bad_version;
  h.error = static_cast<ErrorCode>(std::to_integer<std::uint8_t>(in[1]));
  h.flags = load_be16(in + 2);
  if ((h.flags & ~flag::kKnown) != 0) return DecodeStatus::unknown_flags;
  if ((h.flags & flag::kOwned) == flag::kOwned) return DecodeStatus::conflicting_modes;
  if ((h.flags & (flag::kGcm | flag::kAuth)) == flag::kGcm) return DecodeStatus::gcm_without_auth;
  if (in[39] != std::byte{0}) return DecodeStatus::reserved_nonzero;
  if ((h.error != ErrorCode::none) != h.has(flag::kError)) return DecodeStatus::error_flag_mismatch;
  h.session = load_be32(in + 4);
  h.token = load_be32(in + 8);
  h.op_id = load_be32(in + 12);
  h.slot = load_be32(in + 16);
  h.seq = load_be32(in + 20);
  h.offset = load_be32(in + 24);
  h.op_length = load_be32(in + 28);
  h.count = load_be16(in + 32);
  h.rank = std::to_integer<std::uint8_t>(in[34]);
  if (h.rank >= kMaxWorld) return DecodeStatus::rank_out_of_range;
  h.k = std::to_integer<std::uint8_t>(in[35]);
  h.contributors = std::to_integer<std::uint8_t>(in[36]);
  h.exp_used = exp_from_wire(std::to_integer<std::uint8_t>(in[37]));
  h.exp_next = exp_from_wire(std::to_integer<std::uint8_t>(in[38]));
  h.bitmap = load_be64(in + 40);

  // An authenticated packet's trailer is no part of its payload.
  const std::size_t trailer = trailer_size(h.flags);
  if (datagram.size() < kHeaderSize + trailer) return DecodeStatus::too_short;
  const std::size_t body = datagram.size() - kHeaderSize - trailer;
  if (body % 4 != 0) return DecodeStatus::bad_payload_length;
  // An owned round's header-only forms keep the block's count (§13).
  if (static_cast<std::size_t>(h.count) * 4 > body && !(body == 0 && (h.flags & flag::kOwned) != 0)) {
    return DecodeStatus::count_exceeds_payload;
  }
  payload = datagram.subspan(kHeaderSize, body);
  return DecodeStatus::ok;
}

// Payload layout of JOIN requests and replies (all fields big-endian 32-bit words).
struct JoinRequest {
  std::uint32_t nonce = 0;       // random per context; tells a restart from a retransmission
  std::uint32_t world_size = 0;
  std::uint32_t threads = 0;
  std::uint32_t window = 0;
  std::uint32_t payload = 0;     // 0: use the session's
  std::uint16_t ports[kMaxThreads] = {};  // UDP port of each worker thread

  [[nodiscard]] std::size_t words() const { return 5 + (threads + 1) / 2; }
};
struct JoinReply {
  std::uint32_t payload = 0;
  std::uint32_t world_size = 0;
  std::uint32_t k_default = 0;
  std::uint32_t straggler_timeout_ticks = 0;  // the effective timeout, in ticks
  std::uint32_t pool_base = 0;
  std::uint32_t pool_size = 0;
  std::uint32_t generation = 0;
  std::uint32_t token = 0;         // job token every request and reply of the generation carries
  std::uint32_t switch_ports = 0;  // worker thread t talks to ports[t % switch_ports]
  std::uint16_t ports[kMaxThreads] = {};

  [[nodiscard]] std::size_t words() const { return 9 + (switch_ports + 1) / 2; }
};
// The largest control packet of either side: a sealed JOIN reply listing kMaxThreads switch ports
// (a JOIN request lists as many worker ports in four words fewer). Transports must carry it.
inline constexpr std::uint32_t kMaxControlBytes = kHeaderSize + 4 * (9 + (kMaxThreads + 1) / 2) + kTagSize;

void encode(const JoinRequest& request, std::byte* out);  // request.words() * 4 bytes
bool decode(std::span<const std::byte> payload, JoinRequest& request);
void encode(const JoinReply& reply, std::byte* out);  // reply.words() * 4 bytes
bool decode(std::span<const std::byte> payload, JoinReply& reply);

// Slot layout shared by worker and switch: thread t of every rank owns 2 * window slots
// starting at pool_base + t * 2 * window; window entry e alternates slots 2e and 2e + 1.
struct SlotLayout {
  std::uint32_t pool_base = 0;
  std::uint32_t window = 0;

  // The pool a session needs for workers of `threads` threads with `window` entries each.
  [[nodiscard]] static constexpr std::uint64_t pool_slots(std::uint64_t threads, std::uint64_t window) {
    return threads * 2 * window;
  }

  [[nodiscard]] std::uint32_t slot(std::uint32_t thread, std::uint32_t entry,
                                   std::uint64_t round) const {
    return pool_base + thread * 2 * window + 2 * entry + static_cast<std::uint32_t>(round & 1);
  }
  [[nodiscard]] std::uint32_t thread_of(std::uint32_t slot) const {
    return (slot - pool_base) / (2 * window);
  }
  [[nodiscard]] std::uint32_t entry_of(std::uint32_t slot) const {
    return (slot - pool_base) % (2 * window) / 2;
  }
  // The switch thread (of `switch_threads`, S) that owns worker thread `thread`'s window entry
  // `entry` in a job of `threads` (T) worker threads: thread t mod S when S <= T; with more
  // switch threads, thread t's entries take turns over switch threads t, t + T, t + 2T, ... < S,
  // so that none of them idles (docs/protocol.md §7.1).
  [[nodiscard]] static std::uint32_t switch_thread(std::uint32_t thread, std::uint32_t entry,
                                                   std::uint32_t threads, std::uint32_t switch_threads) {
    if (thread >= switch_threads) return thread % switch_threads;
    const std::uint32_t spread = (switch_threads - thread + threads - 1) / threads;
    return thread + threads * (entry % spread);
  }
  // Round r of an entry uses slot parity r & 1 and per-slot sequence number r / 2 + 1.
  [[nodiscard]] static std::uint32_t seq_of_round(std::uint64_t round) {
    return static_cast<std::uint32_t>(round / 2 + 1);
  }
};

}  // namespace dpa::protocol

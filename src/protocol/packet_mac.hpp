// SPDX-License-Identifier: Apache-2.0
// The MAC of an authenticated session's data packets, probes and their replies (docs/protocol.md
// §6.6), chosen once per join generation and named in its JOIN acks: SipHash-2-4 under the rank's
// long-lived direction keys (auth.hpp), or, where every rank and the switch have AES-NI and
// PCLMUL, AES-256-GCM's tag over the packet as associated data (GMAC, an empty message) under keys
// of the generation, about twice as fast. One direction of one rank's traffic is one PacketMac:
// the worker engine and the switch seal and verify through it, whichever MAC it is.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "protocol/auth.hpp"
#include "protocol/mac_nonce.hpp"

namespace dpa::protocol {

// How a generation authenticates its data packets and probes: the JOIN ack's `op_id` (§6.2).
enum class DataMac : std::uint32_t {
  none = 0,       // data packets carry no trailer
  siphash24 = 1,  // an 8-byte SipHash-2-4 tag
  aes256gcm = 2,  // a 12-byte nonce and a 16-byte AES-256-GCM tag (flag GCM)
};
// "none", "siphash24", "aes256gcm".
[[nodiscard]] std::string_view to_string(DataMac mac);
// Bit `mac` of a JOIN's `op_length`: the data MACs its rank offers besides SipHash-2-4, which
// every rank computes (a rank that predates the choice sends 0).
[[nodiscard]] constexpr std::uint32_t offer_bit(DataMac mac) { return std::uint32_t{1} << static_cast<std::uint32_t>(mac); }

// Whether this process can compute AES-256-GCM: libsodium's needs AES-NI and PCLMUL.
[[nodiscard]] bool aes256gcm_available();

// What a generation's AES-256-GCM keys of one rank derive from, besides the rank's key: the JOIN
// that formed it (the rank's nonce and its 64-bit salt, both random per JOIN attempt) and the ack
// (generation, token and the rank's secret, random per generation). Both ends know all of it once
// the ack arrives; no two generations share it (protocol.md §6.6 "Nonces").
struct GenerationKeyInput {
  std::uint32_t session = 0;
  std::uint32_t generation = 0;
  std::uint32_t token = 0;
  std::uint32_t rank_secret = 0;
  std::uint32_t join_nonce = 0;
  std::uint64_t join_salt = 0;
};

class PacketMac {
 public:
  PacketMac() = default;  // DataMac::none: for a session that does not authenticate data
  [[nodiscard]] static PacketMac siphash24(const TagKey& key);
  // AES-256-GCM under a 32-byte key (the key is expanded once, here). Throws dpa::Error where
  // aes256gcm_available() is false.
  [[nodiscard]] static PacketMac aes256gcm(const AuthKey& key);

  [[nodiscard]] DataMac kind() const { return kind_; }
  // Bytes the MAC appends after the payload.
  [[nodiscard]] std::size_t trailer_size() const;

  // Seals the encoded packet[0, size): sets AUTH (and GCM for AES-256-GCM) in its flags and writes
  // its trailer at packet + size (trailer_size() bytes of room), taking the next nonce of
  // `nonces` for AES-256-GCM. Returns the sealed size.
  std::size_t seal(std::byte* packet, std::size_t size, NonceCounter& nonces) const;
  // Whether `datagram` carries this MAC's flags and a valid trailer over the bytes before it.
  [[nodiscard]] bool verify(std::span<const std::byte> datagram) const;

 private:
  // libsodium's crypto_aead_aes256gcm_state (the expanded key and the hash key), kept opaque so
  // that this header needs no sodium.h; packet_mac.cpp checks size and alignment.
  struct alignas(16) GcmState {
    std::array<unsigned char, 512> bytes{};
  };

  DataMac kind_ = DataMac::none;
  TagKey siphash_{};
  GcmState gcm_{};
};

// One rank's data MACs: requests (rank -> switch) and replies (switch -> rank) under different keys,
// so a request reflected back to its rank never passes as a reply.
struct PacketMacs {
  PacketMac request;
  PacketMac reply;
};

// The SipHash-2-4 MACs of a rank's tag keys.
[[nodiscard]] PacketMacs siphash24_macs(const RankTagKeys& keys);
// The AES-256-GCM MACs of one generation of a rank: keys derived from the rank's key and `input`
// (keyed BLAKE2b, one key per direction).
[[nodiscard]] PacketMacs aes256gcm_macs(const AuthKey& rank_key, const GenerationKeyInput& input);

}  // namespace dpa::protocol

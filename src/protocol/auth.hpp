// SPDX-License-Identifier: Apache-2.0
// Authenticated mode (docs/protocol.md §6.6): the keys and the SipHash tag. Every admission packet
// of a session with a key ends with a SipHash-2-4 tag (libsodium's crypto_shorthash) over the
// header and payload, keyed per rank and per direction, so that an attacker who sees the job's
// packets (and so knows its token) can neither join nor leave for a rank. Data packets carry the
// MAC their generation chose (packet_mac.hpp): this tag, or AES-256-GCM's.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace dpa::protocol {

inline constexpr std::size_t kTagSize = 8;       // the SipHash trailer after the payload
// The AES-256-GCM trailer (packet_mac.hpp): a 12-byte nonce, then the 16-byte tag.
inline constexpr std::size_t kGcmNonceSize = 12;
inline constexpr std::size_t kGcmTagSize = 16;
inline constexpr std::size_t kGcmTrailerSize = kGcmNonceSize + kGcmTagSize;
inline constexpr std::size_t kMaxTrailerSize = kGcmTrailerSize;  // the largest trailer of any MAC
inline constexpr std::size_t kAuthKeySize = 32;  // a session key and a rank key
using AuthKey = std::array<std::uint8_t, kAuthKeySize>;

// One direction's SipHash key.
using TagKey = std::array<std::uint8_t, 16>;

// The keys of one rank's traffic: requests (rank -> switch) and replies (switch -> rank) use
// different keys, so a request reflected back to its rank never passes as a reply.
struct RankTagKeys {
  TagKey request{};
  TagKey reply{};
};

// Whether this build has libsodium; without it every function below throws dpa::Error.
[[nodiscard]] bool auth_available();

// Rank r's key, derived from the session key (BLAKE2b, libsodium's crypto_kdf): the switch holds
// the session key, rank r only its own key, so one rank cannot forge another's packets.
[[nodiscard]] AuthKey derive_rank_key(const AuthKey& session_key, std::uint32_t rank);
[[nodiscard]] RankTagKeys tag_keys(const AuthKey& rank_key);
[[nodiscard]] AuthKey random_auth_key();

// SipHash-2-4 of `bytes` under `key`: the tag's function, for other keyed uses (JOIN cookies).
[[nodiscard]] std::uint64_t keyed_hash(const TagKey& key, std::span<const std::byte> bytes);
// A fresh random key for keyed_hash.
[[nodiscard]] TagKey random_tag_key();

// Writes the tag of packet[0, size) at packet + size (kTagSize bytes of room there).
void append_tag(const TagKey& key, std::byte* packet, std::size_t size);
// Seals the encoded packet[0, size): sets its AUTH flag and appends its tag (kTagSize bytes of
// room after it). Returns the sealed size, size + kTagSize.
std::size_t seal(const TagKey& key, std::byte* packet, std::size_t size);
// Whether the datagram's last kTagSize bytes are the tag of the bytes before them.
[[nodiscard]] bool verify_tag(const TagKey& key, std::span<const std::byte> datagram);

// A key as 64 hexadecimal digits (surrounding white space ignored); `what` names the source in
// the ConfigError a malformed key raises.
[[nodiscard]] AuthKey parse_auth_key(std::string_view hex, const std::string& what);
// Reads a key file holding parse_auth_key's form; `what` names the setting.
[[nodiscard]] AuthKey read_auth_key_file(const std::string& path, const std::string& what);
[[nodiscard]] std::string to_hex(const AuthKey& key);

}  // namespace dpa::protocol

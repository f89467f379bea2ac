// SPDX-License-Identifier: Apache-2.0
#include "protocol/auth.hpp"

#include <cctype>
#include <cstring>
#include <fstream>
#include <iterator>
#include <tuple>

#include "dpa/error.hpp"
#include "protocol/byte_order.hpp"
#include "protocol/wire.hpp"

#ifdef DPA_HAVE_SODIUM
#include <sodium.h>
#endif

namespace dpa::protocol {

#ifdef DPA_HAVE_SODIUM

namespace {

// crypto_kdf contexts: 8 bytes naming what a derived key is for.
constexpr char kRankContext[] = "dpa-rank";
constexpr char kRequestContext[] = "dpa-req.";
constexpr char kReplyContext[] = "dpa-rep.";
static_assert(sizeof(kRankContext) - 1 == crypto_kdf_CONTEXTBYTES);
static_assert(kAuthKeySize == crypto_kdf_KEYBYTES);
static_assert(std::tuple_size_v<TagKey> == crypto_shorthash_KEYBYTES);
static_assert(kTagSize == crypto_shorthash_BYTES);

void initialise() {
  static const int status = sodium_init();
  if (status < 0) throw Error("authenticated mode: libsodium failed to initialise");
}

template <std::size_t N>
std::array<std::uint8_t, N> derive(const AuthKey& parent, std::uint64_t id, const char* context) {
  initialise();
  std::array<std::uint8_t, N> key{};
  crypto_kdf_derive_from_key(key.data(), key.size(), id, context, parent.data());
  return key;
}

}  // namespace

bool auth_available() { return true; }

AuthKey derive_rank_key(const AuthKey& session_key, std::uint32_t rank) {
  return derive<kAuthKeySize>(session_key, rank, kRankContext);
}

RankTagKeys tag_keys(const AuthKey& rank_key) {
  return {derive<16>(rank_key, 1, kRequestContext), derive<16>(rank_key, 2, kReplyContext)};
}

AuthKey random_auth_key() {
  initialise();
  AuthKey key;
  crypto_kdf_keygen(key.data());
  return key;
}

std::uint64_t keyed_hash(const TagKey& key, std::span<const std::byte> bytes) {
  unsigned char hash[crypto_shorthash_BYTES];
  crypto_shorthash(hash, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), key.data());
  std::uint64_t value = 0;
  std::memcpy(&value, hash, sizeof value);
  return value;
}

TagKey random_tag_key() {
  initialise();
  TagKey key;
  randombytes_buf(key.data(), key.size());
  return key;
}

void append_tag(const TagKey& key, std::byte* packet, std::size_t size) {
  crypto_shorthash(reinterpret_cast<unsigned char*>(packet + size), reinterpret_cast<const unsigned char*>(packet),
                   size, key.data());
}

std::size_t seal(const TagKey& key, std::byte* packet, std::size_t size) {
  store_be16(packet + 2, static_cast<std::uint16_t>(load_be16(packet + 2) | flag::kAuth));
  append_tag(key, packet, size);
  return size + kTagSize;
}

bool verify_tag(const TagKey& key, std::span<const std::byte> datagram) {
  if (datagram.size() < kTagSize) return false;
  const std::size_t size = datagram.size() - kTagSize;
  unsigned char expected[kTagSize];
  crypto_shorthash(expected, reinterpret_cast<const unsigned char*>(datagram.data()), size, key.data());
  return sodium_memcmp(expected, datagram.data() + size, kTagSize) == 0;
}

AuthKey parse_auth_key(std::string_view hex, const std::string& what) {
  initialise();
  while (!hex.empty() && std::isspace(static_cast<unsigned char>(hex.back()))) hex.remove_suffix(1);
  while (!hex.empty() && std::isspace(static_cast<unsigned char>(hex.front()))) hex.remove_prefix(1);
  AuthKey key{};
  std::size_t length = 0;
  const char* end = nullptr;
  if (hex.size() != 2 * kAuthKeySize ||
      sodium_hex2bin(key.data(), key.size(), hex.data(), hex.size(), nullptr, &length, &end) != 0 ||
      length != kAuthKeySize || end != hex.data() + hex.size()) {
    throw ConfigError(what + ": an authentication key is " + std::to_string(2 * kAuthKeySize) +
                      " hexadecimal digits (" + std::to_string(kAuthKeySize) + " bytes); found " +
                      std::to_string(hex.size()) + " characters that are not one");
  }
  return key;
}

std::string to_hex(const AuthKey& key) {
  initialise();
  std::string hex(2 * kAuthKeySize + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), key.data(), key.size());
  hex.pop_back();
  return hex;
}

#else

namespace {
[[noreturn]] void unavailable() {
  throw Error("authenticated mode needs libsodium: this build of dpa has none (install libsodium-dev and rebuild)");
}
}  // namespace

bool auth_available() { return false; }
AuthKey derive_rank_key(const AuthKey&, std::uint32_t) { unavailable(); }
RankTagKeys tag_keys(const AuthKey&) { unavailable(); }
AuthKey random_auth_key() { unavailable(); }
std::uint64_t keyed_hash(const TagKey&, std::span<const std::byte>) { unavailable(); }
TagKey random_tag_key() { unavailable(); }
void append_tag(const TagKey&, std::byte*, std::size_t) { unavailable(); }
std::size_t seal(const TagKey&, std::byte*, std::size_t) { unavailable(); }
bool verify_tag(const TagKey&, std::span<const std::byte>) { unavailable(); }
AuthKey parse_auth_key(std::string_view, const std::string&) { unavailable(); }
std::string to_hex(const AuthKey&) { unavailable(); }

#endif

AuthKey read_auth_key_file(const std::string& path, const std::string& what) {
  std::ifstream file(path);
  if (!file) throw ConfigError(what + ": cannot read the key file '" + path + "'");
  const std::string text{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  return parse_auth_key(text, what + " ('" + path + "')");
}

}  // namespace dpa::protocol

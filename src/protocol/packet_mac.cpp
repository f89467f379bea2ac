// SPDX-License-Identifier: Apache-2.0
#include "protocol/packet_mac.hpp"

#include <cstring>

#include "dpa/error.hpp"
#include "protocol/byte_order.hpp"
#include "protocol/wire.hpp"

#ifdef DPA_HAVE_SODIUM
#include <sodium.h>
#endif

namespace dpa::protocol {

namespace {

// The flags that announce each MAC's trailer; a packet whose flags differ is not of this MAC.
constexpr std::uint16_t kTrailerFlags = flag::kAuth | flag::kGcm;
constexpr std::uint16_t flags_of(DataMac kind) {
  return kind == DataMac::aes256gcm ? kTrailerFlags : kind == DataMac::siphash24 ? flag::kAuth : 0;
}

}  // namespace

std::string_view to_string(DataMac mac) {
  switch (mac) {
    case DataMac::none: return "none";
    case DataMac::siphash24: return "siphash24";
    case DataMac::aes256gcm: return "aes256gcm";
  }
  return "unknown";
}

std::size_t PacketMac::trailer_size() const { return protocol::trailer_size(flags_of(kind_)); }

PacketMacs siphash24_macs(const RankTagKeys& keys) {
  return {PacketMac::siphash24(keys.request), PacketMac::siphash24(keys.reply)};
}

PacketMac PacketMac::siphash24(const TagKey& key) {
  PacketMac mac;
  mac.kind_ = DataMac::siphash24;
  mac.siphash_ = key;
  return mac;
}

#ifdef DPA_HAVE_SODIUM

static_assert(sizeof(crypto_aead_aes256gcm_state) == 512 && alignof(crypto_aead_aes256gcm_state) <= 16,
              "PacketMac::GcmState must hold libsodium's crypto_aead_aes256gcm_state");
static_assert(kGcmNonceSize == crypto_aead_aes256gcm_NPUBBYTES && kGcmTagSize == crypto_aead_aes256gcm_ABYTES);
static_assert(kAuthKeySize == crypto_aead_aes256gcm_KEYBYTES);

namespace {

// Labels of the two directions' key derivations (8 bytes each, like crypto_kdf's contexts).
constexpr char kGcmRequestLabel[] = "dpa-gcmq";
constexpr char kGcmReplyLabel[] = "dpa-gcmr";

bool sodium_ready() {
  static const bool ready = sodium_init() >= 0;
  return ready;
}

// BLAKE2b-256 keyed with the rank's key over the label and `input`, big-endian.
AuthKey derive_generation_key(const AuthKey& rank_key, const char (&label)[9], const GenerationKeyInput& input) {
  std::array<std::byte, 8 + 5 * 4 + 8> message{};
  std::memcpy(message.data(), label, 8);
  store_be32(message.data() + 8, input.session);
  store_be32(message.data() + 12, input.generation);
  store_be32(message.data() + 16, input.token);
  store_be32(message.data() + 20, input.rank_secret);
  store_be32(message.data() + 24, input.join_nonce);
  store_be64(message.data() + 28, input.join_salt);
  AuthKey key{};
  crypto_generichash(key.data(), key.size(), reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                     rank_key.data(), rank_key.size());
  return key;
}

}  // namespace

bool aes256gcm_available() { return sodium_ready() && crypto_aead_aes256gcm_is_available() != 0; }

PacketMac PacketMac::aes256gcm(const AuthKey& key) {
  if (!aes256gcm_available()) {
    throw Error("AES-256-GCM needs a CPU with AES-NI and PCLMUL (libsodium's crypto_aead_aes256gcm)");
  }
  PacketMac mac;
  mac.kind_ = DataMac::aes256gcm;
  crypto_aead_aes256gcm_beforenm(reinterpret_cast<crypto_aead_aes256gcm_state*>(mac.gcm_.bytes.data()), key.data());
  return mac;
}

PacketMacs aes256gcm_macs(const AuthKey& rank_key, const GenerationKeyInput& input) {
  if (!sodium_ready()) throw Error("authenticated mode: libsodium failed to initialise");
  return {PacketMac::aes256gcm(derive_generation_key(rank_key, kGcmRequestLabel, input)),
          PacketMac::aes256gcm(derive_generation_key(rank_key, kGcmReplyLabel, input))};
}

std::size_t PacketMac::seal(std::byte* packet, std::size_t size, NonceCounter& nonces) const {
  switch (kind_) {
    case DataMac::none: return size;
    case DataMac::siphash24: return protocol::seal(siphash_, packet, size);
    case DataMac::aes256gcm: break;
  }
  store_be16(packet + 2, static_cast<std::uint16_t>(load_be16(packet + 2) | kTrailerFlags));
  std::byte* nonce = packet + size;
  nonces.write_next(nonce);
  // GMAC: the packet (flags included) is the associated data, the message is empty; the nonce is
  // GCM's IV, so it is authenticated too. The empty ciphertext still needs a pointer.
  unsigned char no_ciphertext = 0;
  crypto_aead_aes256gcm_encrypt_detached_afternm(
      &no_ciphertext, reinterpret_cast<unsigned char*>(nonce + kGcmNonceSize), nullptr, nullptr, 0,
      reinterpret_cast<const unsigned char*>(packet), size, nullptr, reinterpret_cast<const unsigned char*>(nonce),
      reinterpret_cast<const crypto_aead_aes256gcm_state*>(gcm_.bytes.data()));
  return size + kGcmTrailerSize;
}

bool PacketMac::verify(std::span<const std::byte> datagram) const {
  if (kind_ == DataMac::none) return false;
  if (datagram.size() < kHeaderSize + trailer_size()) return false;
  if ((load_be16(datagram.data() + 2) & kTrailerFlags) != flags_of(kind_)) return false;
  if (kind_ == DataMac::siphash24) return verify_tag(siphash_, datagram);
  const std::size_t size = datagram.size() - kGcmTrailerSize;
  const auto* nonce = reinterpret_cast<const unsigned char*>(datagram.data() + size);
  const unsigned char no_ciphertext = 0;
  return crypto_aead_aes256gcm_decrypt_detached_afternm(
             nullptr, nullptr, &no_ciphertext, 0, nonce + kGcmNonceSize, reinterpret_cast<const unsigned char*>(datagram.data()),
             size, nonce, reinterpret_cast<const crypto_aead_aes256gcm_state*>(gcm_.bytes.data())) == 0;
}

#else

namespace {
[[noreturn]] void unavailable() {
  throw Error("authenticated mode needs libsodium: this build of dpa has none (install libsodium-dev and rebuild)");
}
}  // namespace

bool aes256gcm_available() { return false; }
PacketMac PacketMac::aes256gcm(const AuthKey&) { unavailable(); }
PacketMacs aes256gcm_macs(const AuthKey&, const GenerationKeyInput&) { unavailable(); }
std::size_t PacketMac::seal(std::byte*, std::size_t size, NonceCounter&) const {
  if (kind_ == DataMac::none) return size;
  unavailable();
}
bool PacketMac::verify(std::span<const std::byte>) const { return false; }

#endif

}  // namespace dpa::protocol

// SPDX-License-Identifier: Apache-2.0
// The data MACs (docs/protocol.md §6.6): AES-256-GCM as a MAC against libsodium's own GCM,
// tamper detection over every byte range of a sealed packet, the nonces of one sender and of
// different senders, the generation key derivation as documented, and SipHash behind the same
// interface.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <set>
#include <utility>
#include <vector>

#include <sodium.h>

#include "protocol/auth.hpp"
#include "protocol/byte_order.hpp"
#include "protocol/mac_nonce.hpp"
#include "protocol/packet_mac.hpp"
#include "protocol/wire.hpp"

namespace dpa::protocol {
namespace {

using Bytes = std::vector<std::byte>;

#define SKIP_WITHOUT_AES256GCM()                                                                  \
  if (!aes256gcm_available()) GTEST_SKIP() << "no libsodium, or this CPU lacks AES-NI and PCLMUL"

// A data request of `values` int32 values, with room for the largest trailer after it.
Bytes request_packet(std::size_t values, std::uint32_t seq = 1) {
  Header h;
  h.session = 1;
  h.token = 0x5eed;
  h.op_id = 3;
  h.slot = 4;
  h.seq = seq;
  h.count = static_cast<std::uint16_t>(values);
  h.rank = 2;
  Bytes bytes(kHeaderSize + 4 * values + kMaxTrailerSize);
  encode(h, bytes.data());
  for (std::size_t i = 0; i < values; ++i) store_be32(bytes.data() + kHeaderSize + 4 * i, static_cast<std::uint32_t>(i * 7919));
  bytes.resize(kHeaderSize + 4 * values);
  return bytes;
}

using Nonce = std::array<std::byte, kGcmNonceSize>;
using Tag = std::array<std::byte, kGcmTagSize>;

// The nonce and the tag of an AES-256-GCM-sealed packet.
Nonce nonce_of(const Bytes& packet) {
  Nonce nonce{};
  std::memcpy(nonce.data(), packet.data() + packet.size() - kGcmTrailerSize, nonce.size());
  return nonce;
}
Tag tag_of(const Bytes& packet) {
  Tag tag{};
  std::memcpy(tag.data(), packet.data() + packet.size() - kGcmTagSize, tag.size());
  return tag;
}

Bytes sealed(const PacketMac& mac, Bytes packet, NonceCounter& nonces) {
  const std::size_t size = packet.size();
  packet.resize(size + kMaxTrailerSize);
  packet.resize(mac.seal(packet.data(), size, nonces));
  return packet;
}

AuthKey key_of(std::uint8_t seed) {
  AuthKey key{};
  for (std::size_t i = 0; i < key.size(); ++i) key[i] = static_cast<std::uint8_t>(seed + 13 * i);
  return key;
}

const GenerationKeyInput kInput{1, 7, 0xabcd1234, 0x5ec2e7, 0x1000, 0x0123456789abcdefULL};

TEST(PacketMac, Aes256GcmTagIsLibsodiumsGcmOverThePacketAsAssociatedData) {
  SKIP_WITHOUT_AES256GCM();
  const AuthKey key = key_of(1);
  const PacketMac mac = PacketMac::aes256gcm(key);
  NonceCounter nonces(5);
  for (const std::size_t values : {0u, 1u, 4u, 256u, 4096u}) {
    const Bytes packet = sealed(mac, request_packet(values), nonces);
    ASSERT_EQ(packet.size(), kHeaderSize + 4 * values + kGcmTrailerSize);
    const std::size_t size = packet.size() - kGcmTrailerSize;
    EXPECT_EQ(load_be16(packet.data() + 2) & (flag::kAuth | flag::kGcm), flag::kAuth | flag::kGcm);
    // libsodium's one-shot AES-256-GCM (its own key expansion) over the sealed packet's bytes
    // before the trailer as associated data, an empty message and the trailer's nonce.
    std::array<unsigned char, kGcmTagSize> expected{};
    unsigned long long tag_bytes = 0;
    unsigned char no_ciphertext = 0;
    ASSERT_EQ(crypto_aead_aes256gcm_encrypt(expected.data(), &tag_bytes, &no_ciphertext, 0,
                                            reinterpret_cast<const unsigned char*>(packet.data()), size, nullptr,
                                            reinterpret_cast<const unsigned char*>(packet.data() + size), key.data()),
              0);
    ASSERT_EQ(tag_bytes, kGcmTagSize);
    EXPECT_EQ(std::memcmp(expected.data(), packet.data() + size + kGcmNonceSize, kGcmTagSize), 0) << values << " values";
    EXPECT_TRUE(mac.verify(packet));
  }
}

TEST(PacketMac, TheGenerationKeysAreTheDocumentedKeyedBlake2b) {
  SKIP_WITHOUT_AES256GCM();
  const AuthKey rank_key = key_of(2);
  // protocol.md §6.6: BLAKE2b-256 keyed with the rank key over the direction's label, then
  // session, generation, token, secret, JOIN nonce (32-bit each) and salt (64-bit), big-endian.
  const auto documented = [&](const char* label) {
    std::array<std::byte, 36> message{};
    std::memcpy(message.data(), label, 8);
    store_be32(message.data() + 8, kInput.session);
    store_be32(message.data() + 12, kInput.generation);
    store_be32(message.data() + 16, kInput.token);
    store_be32(message.data() + 20, kInput.rank_secret);
    store_be32(message.data() + 24, kInput.join_nonce);
    store_be64(message.data() + 28, kInput.join_salt);
    AuthKey key{};
    crypto_generichash(key.data(), key.size(), reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                       rank_key.data(), rank_key.size());
    return PacketMac::aes256gcm(key);
  };
  const PacketMacs derived = aes256gcm_macs(rank_key, kInput);
  const std::pair<const PacketMac*, PacketMac> directions[] = {{&derived.request, documented("dpa-gcmq")},
                                                               {&derived.reply, documented("dpa-gcmr")}};
  for (const auto& [mac, expected] : directions) {
    NonceCounter a(0);
    NonceCounter b(0);
    EXPECT_EQ(sealed(*mac, request_packet(8), a), sealed(expected, request_packet(8), b));
  }
}

TEST(PacketMac, EveryChangedByteOfHeaderPayloadNonceOrTagFails) {
  SKIP_WITHOUT_AES256GCM();
  const PacketMacs macs = aes256gcm_macs(key_of(3), kInput);
  NonceCounter nonces(1);
  const Bytes packet = sealed(macs.request, request_packet(16), nonces);
  ASSERT_TRUE(macs.request.verify(packet));
  const std::size_t payload_end = packet.size() - kGcmTrailerSize;
  const struct {
    const char* range;
    std::size_t begin, end;
  } ranges[] = {{"header", 0, kHeaderSize},
                {"payload", kHeaderSize, payload_end},
                {"nonce", payload_end, payload_end + kGcmNonceSize},
                {"tag", payload_end + kGcmNonceSize, packet.size()}};
  for (const auto& range : ranges) {
    for (std::size_t i = range.begin; i < range.end; ++i) {
      for (const std::byte bit : {std::byte{0x01}, std::byte{0x80}}) {
        Bytes changed = packet;
        changed[i] ^= bit;
        EXPECT_FALSE(macs.request.verify(changed)) << range.range << " byte " << i;
      }
    }
  }
  // Shortened, lengthened, or claiming the other trailer form: none passes.
  EXPECT_FALSE(macs.request.verify(std::span(packet).first(packet.size() - 1)));
  EXPECT_FALSE(macs.request.verify(std::span(packet).first(kHeaderSize + kGcmTrailerSize - 1)));
  Bytes longer = packet;
  longer.push_back(std::byte{0});
  EXPECT_FALSE(macs.request.verify(longer));
  Bytes without_gcm = packet;
  store_be16(without_gcm.data() + 2, static_cast<std::uint16_t>(load_be16(packet.data() + 2) & ~flag::kGcm));
  EXPECT_FALSE(macs.request.verify(without_gcm));
}

TEST(PacketMac, AnotherDirectionRankGenerationOrMacFails) {
  SKIP_WITHOUT_AES256GCM();
  const AuthKey rank_key = key_of(4);
  const PacketMacs macs = aes256gcm_macs(rank_key, kInput);
  NonceCounter nonces(0);
  const Bytes packet = sealed(macs.request, request_packet(4), nonces);
  EXPECT_FALSE(macs.reply.verify(packet)) << "a request reflected back is no reply";
  EXPECT_FALSE(aes256gcm_macs(key_of(5), kInput).request.verify(packet)) << "another rank's key";
  // Each input of the derivation makes another key: a generation's packets pass in no other.
  GenerationKeyInput changed[6] = {kInput, kInput, kInput, kInput, kInput, kInput};
  ++changed[0].session;
  ++changed[1].generation;
  ++changed[2].token;
  ++changed[3].rank_secret;
  ++changed[4].join_nonce;
  ++changed[5].join_salt;
  for (const GenerationKeyInput& input : changed) EXPECT_FALSE(aes256gcm_macs(rank_key, input).request.verify(packet));
  // SipHash behind the same interface: neither accepts the other's packets.
  const PacketMacs siphash = siphash24_macs(tag_keys(rank_key));
  EXPECT_FALSE(siphash.request.verify(packet));
  const Bytes siphash_packet = sealed(siphash.request, request_packet(4), nonces);
  EXPECT_EQ(siphash_packet.size(), kHeaderSize + 16 + kTagSize);
  EXPECT_TRUE(siphash.request.verify(siphash_packet));
  EXPECT_FALSE(macs.request.verify(siphash_packet));
  EXPECT_EQ(nonces.used(), 1u) << "SipHash takes no nonce";
  EXPECT_FALSE(PacketMac{}.verify(siphash_packet)) << "a session without data MAC verifies nothing";
}

TEST(PacketMac, OneSendersNoncesNeverRepeatEvenForTheSamePacket) {
  SKIP_WITHOUT_AES256GCM();
  const PacketMac mac = PacketMac::aes256gcm(key_of(6));
  NonceCounter nonces(9);
  const Bytes packet = request_packet(4);
  std::set<Nonce> seen_nonces;
  std::set<Tag> seen_tags;
  constexpr std::uint64_t kPackets = 10000;
  for (std::uint64_t i = 0; i < kPackets; ++i) {
    const Bytes out = sealed(mac, packet, nonces);  // a retransmission sealed afresh takes a fresh nonce
    const Nonce nonce = nonce_of(out);
    EXPECT_EQ(load_be32(nonce.data()), 9u) << "the sender id";
    EXPECT_EQ(load_be64(nonce.data() + 4), i) << "the counter, in order";
    seen_nonces.insert(nonce);
    seen_tags.insert(tag_of(out));
    ASSERT_TRUE(mac.verify(out));
  }
  EXPECT_EQ(seen_nonces.size(), kPackets);
  EXPECT_EQ(seen_tags.size(), kPackets);
  EXPECT_EQ(nonces.used(), kPackets);
}

TEST(PacketMac, DifferentSendersNeverShareANonce) {
  SKIP_WITHOUT_AES256GCM();
  // The senders of one key: a rank's engine threads (requests), or the switch threads (replies).
  const PacketMac mac = PacketMac::aes256gcm(key_of(7));
  std::deque<NonceCounter> senders;  // counters are not copied: a copy would reuse their nonces
  for (std::uint32_t t = 0; t < kMaxThreads; ++t) senders.emplace_back(t);
  std::set<Nonce> seen;
  constexpr int kPerSender = 200;
  for (int i = 0; i < kPerSender; ++i) {
    for (NonceCounter& sender : senders) seen.insert(nonce_of(sealed(mac, request_packet(2), sender)));
  }
  EXPECT_EQ(seen.size(), std::size_t{kMaxThreads} * kPerSender);
}

TEST(PacketMac, TheDecoderSizesEachTrailerAndRefusesGcmWithoutAuth) {
  EXPECT_EQ(trailer_size(0), 0u);
  EXPECT_EQ(trailer_size(flag::kAuth), kTagSize);
  EXPECT_EQ(trailer_size(flag::kAuth | flag::kGcm), kGcmTrailerSize);
  Header h;
  h.count = 4;
  h.flags = flag::kAuth | flag::kGcm;
  Bytes packet(kHeaderSize + 16 + kGcmTrailerSize);
  encode(h, packet.data());
  Header decoded;
  std::span<const std::byte> payload;
  ASSERT_EQ(decode(packet, decoded, payload), DecodeStatus::ok);
  EXPECT_EQ(payload.size(), 16u) << "nonce and tag are no part of the payload";
  EXPECT_EQ(decode(std::span(packet).first(kHeaderSize + kGcmTrailerSize - 4), decoded, payload),
            DecodeStatus::too_short);
  h.flags = flag::kGcm;
  encode(h, packet.data());
  EXPECT_EQ(decode(packet, decoded, payload), DecodeStatus::gcm_without_auth);
}

TEST(PacketMac, TheWireNamesOfTheMacs) {
  EXPECT_EQ(static_cast<std::uint32_t>(DataMac::aes256gcm), 2u);
  EXPECT_EQ(offer_bit(DataMac::aes256gcm), 4u);
  EXPECT_EQ(to_string(DataMac::aes256gcm), "aes256gcm");
  EXPECT_EQ(to_string(DataMac::siphash24), "siphash24");
}

}  // namespace
}  // namespace dpa::protocol

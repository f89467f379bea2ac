// SPDX-License-Identifier: Apache-2.0
// Authenticated data's per-packet cost (docs/protocol.md §6.6), for each data MAC a generation may
// choose: sealing a data packet (what a worker does per request and the switch per reply and
// rank) and verifying one (the switch per request, a worker per reply), for payloads of P int32
// values. Names: BM_Seal<Mac>/<P>, BM_Verify<Mac>/<P> with Mac SipHash (SipHash-2-4, every CPU)
// or Aes256Gcm (AES-256-GCM as a MAC, where the CPU has AES-NI and PCLMUL). BM_TagPoly1305/<P>
// times the tag of ChaCha20-Poly1305, a candidate for CPUs without AES-NI (not offered).
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#ifdef DPA_HAVE_SODIUM
#include <sodium.h>
#endif

#include "protocol/auth.hpp"
#include "protocol/mac_nonce.hpp"
#include "protocol/packet_mac.hpp"
#include "protocol/wire.hpp"

namespace {

namespace protocol = dpa::protocol;

std::vector<std::byte> data_packet(std::int64_t values) {
  std::vector<std::byte> packet(protocol::kHeaderSize + 4 * static_cast<std::size_t>(values) + protocol::kMaxTrailerSize);
  protocol::Header h;
  h.session = 1;
  h.token = 0x5eed;
  h.op_id = 1;
  h.seq = 1;
  h.count = static_cast<std::uint16_t>(values);
  protocol::encode(h, packet.data());
  for (std::size_t i = protocol::kHeaderSize; i + protocol::kMaxTrailerSize < packet.size(); ++i) {
    packet[i] = static_cast<std::byte>(i * 31);
  }
  return packet;
}

void set_counters(benchmark::State& state, std::size_t bytes) {
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes));
}

// The MAC under test, of one direction of a generation; null (after SkipWithError) where the CPU
// cannot compute it.
std::optional<protocol::PacketMac> mac_or_skip(benchmark::State& state, protocol::DataMac kind) {
  if (!protocol::auth_available()) {
    state.SkipWithError("kernel set unavailable");  // no libsodium in this build
    return std::nullopt;
  }
  const protocol::AuthKey rank_key = protocol::random_auth_key();
  if (kind == protocol::DataMac::siphash24) return protocol::siphash24_macs(protocol::tag_keys(rank_key)).request;
  if (!protocol::aes256gcm_available()) {
    // No AES-NI and PCLMUL: microbench_smoke counts this message as a skip, not a failure.
    state.SkipWithError("kernel set unavailable");
    return std::nullopt;
  }
  return protocol::aes256gcm_macs(rank_key, {1, 1, 0x5eed, 0x5ec2e7, 0x1000, 42}).request;
}

template <protocol::DataMac kKind>
void BM_Seal(benchmark::State& state) {
  const std::optional<protocol::PacketMac> mac = mac_or_skip(state, kKind);
  if (!mac) return;
  std::vector<std::byte> packet = data_packet(state.range(0));
  const std::size_t bytes = packet.size() - protocol::kMaxTrailerSize;
  protocol::NonceCounter nonces(0);
  for (auto _ : state) {
    benchmark::DoNotOptimize(mac->seal(packet.data(), bytes, nonces));
    benchmark::ClobberMemory();
  }
  set_counters(state, bytes);
}

template <protocol::DataMac kKind>
void BM_Verify(benchmark::State& state) {
  const std::optional<protocol::PacketMac> mac = mac_or_skip(state, kKind);
  if (!mac) return;
  std::vector<std::byte> packet = data_packet(state.range(0));
  protocol::NonceCounter nonces(0);
  packet.resize(mac->seal(packet.data(), packet.size() - protocol::kMaxTrailerSize, nonces));
  for (auto _ : state) {
    const bool ok = mac->verify(packet);
    benchmark::DoNotOptimize(ok);
    if (!ok) {
      state.SkipWithError("a sealed packet failed verification");
      break;
    }
  }
  set_counters(state, packet.size() - mac->trailer_size());
}

// 256 B, 1 KiB, 4 KiB and 16 KiB of values.
void packet_sizes(benchmark::internal::Benchmark* b) { b->Arg(64)->Arg(256)->Arg(1024)->Arg(4096); }

void BM_SealSipHash(benchmark::State& state) { BM_Seal<protocol::DataMac::siphash24>(state); }
void BM_VerifySipHash(benchmark::State& state) { BM_Verify<protocol::DataMac::siphash24>(state); }
void BM_SealAes256Gcm(benchmark::State& state) { BM_Seal<protocol::DataMac::aes256gcm>(state); }
void BM_VerifyAes256Gcm(benchmark::State& state) { BM_Verify<protocol::DataMac::aes256gcm>(state); }
BENCHMARK(BM_SealSipHash)->Apply(packet_sizes);
BENCHMARK(BM_VerifySipHash)->Apply(packet_sizes);
BENCHMARK(BM_SealAes256Gcm)->Apply(packet_sizes);
BENCHMARK(BM_VerifyAes256Gcm)->Apply(packet_sizes);

#ifdef DPA_HAVE_SODIUM
void BM_TagPoly1305(benchmark::State& state) {
  if (sodium_init() < 0) {
    state.SkipWithError("libsodium failed to initialise");
    return;
  }
  const std::vector<std::byte> packet = data_packet(state.range(0));
  const std::size_t bytes = packet.size() - protocol::kMaxTrailerSize;
  std::array<unsigned char, crypto_aead_chacha20poly1305_ietf_KEYBYTES> secret{};
  randombytes_buf(secret.data(), secret.size());
  std::array<unsigned char, crypto_aead_chacha20poly1305_ietf_NPUBBYTES> nonce{};
  std::array<unsigned char, crypto_aead_chacha20poly1305_ietf_ABYTES> tag{};
  for (auto _ : state) {
    ++nonce[0];  // a nonce per packet, as this AEAD too needs
    unsigned long long tag_bytes = 0;
    unsigned char no_ciphertext = 0;
    crypto_aead_chacha20poly1305_ietf_encrypt_detached(&no_ciphertext, tag.data(), &tag_bytes, nullptr, 0,
                                                       reinterpret_cast<const unsigned char*>(packet.data()), bytes,
                                                       nullptr, nonce.data(), secret.data());
    benchmark::DoNotOptimize(tag);
  }
  set_counters(state, bytes);
}

BENCHMARK(BM_TagPoly1305)->Apply(packet_sizes);
#endif

}  // namespace

// SPDX-License-Identifier: Apache-2.0
// Authenticated mode's per-packet cost (docs/protocol.md §6.6): sealing a data packet (what a worker
// does per request and the switch per reply and rank) and verifying one (the switch per request,
// a worker per reply), for payloads of P int32 values. Names: BM_Seal/<P>, BM_Verify/<P>.
// BM_TagAes256Gcm/<P> and BM_TagPoly1305/<P> time the tag of the faster MACs a session could choose
// instead of SipHash (docs/security.md "Cost of authenticated data"): AES-256-GCM over the packet as
// associated data where the CPU has AES-NI, and Poly1305 keyed per packet by ChaCha20 (the tag of
// ChaCha20-Poly1305) elsewhere. Both need a nonce per packet, which the wire has no room for yet.
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <vector>

#ifdef DPA_HAVE_SODIUM
#include <sodium.h>
#endif

#include "protocol/auth.hpp"
#include "protocol/wire.hpp"

namespace {

namespace protocol = dpa::protocol;

std::vector<std::byte> data_packet(std::int64_t values) {
  std::vector<std::byte> packet(protocol::kHeaderSize + 4 * static_cast<std::size_t>(values) + protocol::kTagSize);
  protocol::Header h;
  h.session = 1;
  h.token = 0x5eed;
  h.op_id = 1;
  h.seq = 1;
  h.count = static_cast<std::uint16_t>(values);
  protocol::encode(h, packet.data());
  for (std::size_t i = protocol::kHeaderSize; i + protocol::kTagSize < packet.size(); ++i) {
    packet[i] = static_cast<std::byte>(i * 31);
  }
  return packet;
}

void set_counters(benchmark::State& state, std::size_t bytes) {
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes));
}

void BM_Seal(benchmark::State& state) {
  std::vector<std::byte> packet = data_packet(state.range(0));
  const protocol::TagKey key = protocol::tag_keys(protocol::random_auth_key()).request;
  const std::size_t bytes = packet.size() - protocol::kTagSize;
  for (auto _ : state) {
    benchmark::DoNotOptimize(protocol::seal(key, packet.data(), bytes));
    benchmark::ClobberMemory();
  }
  set_counters(state, bytes);
}

void BM_Verify(benchmark::State& state) {
  std::vector<std::byte> packet = data_packet(state.range(0));
  const protocol::TagKey key = protocol::tag_keys(protocol::random_auth_key()).request;
  (void)protocol::seal(key, packet.data(), packet.size() - protocol::kTagSize);
  for (auto _ : state) {
    const bool ok = protocol::verify_tag(key, packet);
    benchmark::DoNotOptimize(ok);
    if (!ok) state.SkipWithError("a sealed packet failed verification");
  }
  set_counters(state, packet.size() - protocol::kTagSize);
}

BENCHMARK(BM_Seal)->Arg(256)->Arg(2048)->Arg(16000);
BENCHMARK(BM_Verify)->Arg(256)->Arg(2048);

#ifdef DPA_HAVE_SODIUM
void BM_TagAes256Gcm(benchmark::State& state) {
  if (sodium_init() < 0 || crypto_aead_aes256gcm_is_available() == 0) {
    // No AES-NI and PCLMUL: microbench_smoke counts this message as a skip, not a failure.
    state.SkipWithError("kernel set unavailable");
    return;
  }
  const std::vector<std::byte> packet = data_packet(state.range(0));
  const std::size_t bytes = packet.size() - protocol::kTagSize;
  crypto_aead_aes256gcm_state key;
  std::array<unsigned char, crypto_aead_aes256gcm_KEYBYTES> secret{};
  randombytes_buf(secret.data(), secret.size());
  crypto_aead_aes256gcm_beforenm(&key, secret.data());
  std::array<unsigned char, crypto_aead_aes256gcm_NPUBBYTES> nonce{};
  std::array<unsigned char, crypto_aead_aes256gcm_ABYTES> tag{};
  for (auto _ : state) {
    ++nonce[0];  // a nonce per packet: GCM must never reuse one under a key
    unsigned long long tag_bytes = 0;
    crypto_aead_aes256gcm_encrypt_detached_afternm(nullptr, tag.data(), &tag_bytes, nullptr, 0,
                                                   reinterpret_cast<const unsigned char*>(packet.data()), bytes,
                                                   nullptr, nonce.data(), &key);
    benchmark::DoNotOptimize(tag);
  }
  set_counters(state, bytes);
}

void BM_TagPoly1305(benchmark::State& state) {
  if (sodium_init() < 0) {
    state.SkipWithError("libsodium failed to initialise");
    return;
  }
  const std::vector<std::byte> packet = data_packet(state.range(0));
  const std::size_t bytes = packet.size() - protocol::kTagSize;
  std::array<unsigned char, crypto_aead_chacha20poly1305_ietf_KEYBYTES> secret{};
  randombytes_buf(secret.data(), secret.size());
  std::array<unsigned char, crypto_aead_chacha20poly1305_ietf_NPUBBYTES> nonce{};
  std::array<unsigned char, crypto_aead_chacha20poly1305_ietf_ABYTES> tag{};
  for (auto _ : state) {
    ++nonce[0];
    unsigned long long tag_bytes = 0;
    crypto_aead_chacha20poly1305_ietf_encrypt_detached(nullptr, tag.data(), &tag_bytes, nullptr, 0,
                                                       reinterpret_cast<const unsigned char*>(packet.data()), bytes,
                                                       nullptr, nonce.data(), secret.data());
    benchmark::DoNotOptimize(tag);
  }
  set_counters(state, bytes);
}

BENCHMARK(BM_TagAes256Gcm)->Arg(256)->Arg(2048)->Arg(16000);
BENCHMARK(BM_TagPoly1305)->Arg(256)->Arg(2048)->Arg(16000);
#endif

}  // namespace

// SPDX-License-Identifier: Apache-2.0
// Authenticated mode (docs/protocol.md §6.6): the tag itself, the software switch's check of every
// request and tag of every reply (raw packets from the test's own sockets, so a forgery comes from
// a member's very address and port), and whole jobs of Contexts over UDP and shared memory.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dpa/config.hpp"
#include "dpa/context.hpp"
#include "dpa/error.hpp"
#include "dpa/switch.hpp"
#include "protocol/auth.hpp"
#include "protocol/byte_order.hpp"
#include "protocol/packet_mac.hpp"
#include "protocol/wire.hpp"
#include "transport/send.hpp"
#include "transport/socket/udp_device.hpp"

namespace dpa {
namespace {

using namespace std::chrono_literals;
using protocol::AuthKey;
using protocol::ErrorCode;
using protocol::Header;
using testing::HasSubstr;
namespace flag = protocol::flag;
using Bytes = std::vector<std::byte>;

#define SKIP_WITHOUT_SODIUM()                                                            \
  if (!protocol::auth_available()) GTEST_SKIP() << "this build of dpa has no libsodium"

Bytes packet_of(const Header& h, std::size_t payload_bytes) {
  Bytes bytes(protocol::kHeaderSize + payload_bytes + protocol::kTagSize);
  protocol::encode(h, bytes.data());
  for (std::size_t i = 0; i < payload_bytes; ++i) bytes[protocol::kHeaderSize + i] = static_cast<std::byte>(i);
  bytes.resize(protocol::kHeaderSize + payload_bytes);
  return bytes;
}

// Seals `bytes` in place (room for the tag is made here).
void seal(const protocol::TagKey& key, Bytes& bytes) {
  const std::size_t size = bytes.size();
  bytes.resize(size + protocol::kTagSize);
  bytes.resize(protocol::seal(key, bytes.data(), size));
}

Header data_header(std::uint32_t seq = 1) {
  Header h;
  h.session = 1;
  h.token = 0x5eed;
  h.op_id = 3;
  h.slot = 4;
  h.seq = seq;
  h.count = 4;
  return h;
}

// ---- The tag --------------------------------------------------------------------------------------

TEST(AuthTag, ASealedPacketVerifiesAndDecodesWithoutItsTag) {
  SKIP_WITHOUT_SODIUM();
  const protocol::RankTagKeys keys = protocol::tag_keys(protocol::random_auth_key());
  Bytes packet = packet_of(data_header(), 16);
  seal(keys.request, packet);
  ASSERT_EQ(packet.size(), protocol::kHeaderSize + 16 + protocol::kTagSize);
  EXPECT_TRUE(protocol::verify_tag(keys.request, packet));
  Header h;
  std::span<const std::byte> payload;
  ASSERT_EQ(protocol::decode(packet, h, payload), protocol::DecodeStatus::ok);
  EXPECT_TRUE(h.has(flag::kAuth));
  EXPECT_EQ(payload.size(), 16u) << "the tag is no part of the payload";
  // An AUTH packet too short for its tag is malformed.
  const Bytes header_only(packet.begin(), packet.begin() + protocol::kHeaderSize + 4);
  EXPECT_EQ(protocol::decode(header_only, h, payload), protocol::DecodeStatus::too_short);
}

TEST(AuthTag, EveryChangedByteAnotherKeyOrAnotherDirectionFails) {
  SKIP_WITHOUT_SODIUM();
  const AuthKey session = protocol::random_auth_key();
  const protocol::RankTagKeys rank0 = protocol::tag_keys(protocol::derive_rank_key(session, 0));
  const protocol::RankTagKeys rank1 = protocol::tag_keys(protocol::derive_rank_key(session, 1));
  Bytes packet = packet_of(data_header(), 16);
  seal(rank0.request, packet);
  for (std::size_t i = 0; i < packet.size(); ++i) {
    Bytes changed = packet;
    changed[i] ^= std::byte{0x01};
    EXPECT_FALSE(protocol::verify_tag(rank0.request, changed)) << "byte " << i;
  }
  EXPECT_FALSE(protocol::verify_tag(rank1.request, packet)) << "another rank's key";
  EXPECT_FALSE(protocol::verify_tag(rank0.reply, packet)) << "a request reflected back is no reply";
  EXPECT_NE(protocol::derive_rank_key(session, 0), protocol::derive_rank_key(session, 1));
}

TEST(AuthTag, AStaleTagOverANewRoundFails) {
  SKIP_WITHOUT_SODIUM();
  const protocol::TagKey key = protocol::tag_keys(protocol::random_auth_key()).request;
  Bytes old_round = packet_of(data_header(1), 16);
  seal(key, old_round);
  Bytes new_round = packet_of(data_header(2), 16);
  new_round.insert(new_round.end(), old_round.end() - protocol::kTagSize, old_round.end());
  protocol::store_be16(new_round.data() + 2, static_cast<std::uint16_t>(flag::kAuth));
  EXPECT_FALSE(protocol::verify_tag(key, new_round));
}

TEST(AuthTag, KeysParseFromHexAndBadKeysAreNamed) {
  SKIP_WITHOUT_SODIUM();
  const AuthKey key = protocol::random_auth_key();
  EXPECT_EQ(protocol::parse_auth_key(" " + protocol::to_hex(key) + "\n", "test"), key);
  EXPECT_THAT([] { (void)protocol::parse_auth_key("abcd", "sessions[0].auth_key_file"); },
              testing::ThrowsMessage<ConfigError>(AllOf(HasSubstr("sessions[0].auth_key_file"), HasSubstr("64"))));
  EXPECT_THROW((void)protocol::parse_auth_key(std::string(64, 'g'), "test"), ConfigError);
  EXPECT_THAT([] { (void)protocol::read_auth_key_file("/nonexistent/rank-0.key", "DPA_AUTH_KEY_FILE"); },
              testing::ThrowsMessage<ConfigError>(
                  AllOf(HasSubstr("DPA_AUTH_KEY_FILE"), HasSubstr("/nonexistent/rank-0.key"))));
}

// A key file of this test, removed with it.
class KeyFile {
 public:
  KeyFile(const std::string& name, const std::string& text)
      : path_(std::filesystem::temp_directory_path() / ("dpa-auth-test-" + std::to_string(getpid()) + "-" + name)) {
    std::ofstream(path_) << text;
  }
  KeyFile(const KeyFile&) = delete;
  KeyFile& operator=(const KeyFile&) = delete;
  ~KeyFile() { std::filesystem::remove(path_); }
  [[nodiscard]] std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

TEST(AuthConfig, SessionAndWorkerKeyFilesAreReadAndBadOnesNamed) {
  SKIP_WITHOUT_SODIUM();
  const AuthKey key = protocol::random_auth_key();
  const KeyFile good("good.key", protocol::to_hex(key));
  const KeyFile short_key("short.key", "0123");
  const std::string session = R"({"id": 7, "world_size": 2, "auth_key_file": ")";
  EXPECT_EQ(SessionConfig::from_json(session + good.path() + "\"}", "test").auth_key, key);
  EXPECT_THAT([&] { (void)SessionConfig::from_json(session + short_key.path() + "\"}", "sw.json"); },
              testing::ThrowsMessage<ConfigError>(AllOf(HasSubstr("auth_key_file"), HasSubstr(short_key.path()))));
  EXPECT_THAT([&] { (void)SessionConfig::from_json(session + "/nonexistent.key\"}", "sw.json"); },
              testing::ThrowsMessage<ConfigError>(AllOf(HasSubstr("auth_key_file"), HasSubstr("/nonexistent.key"))));
  ASSERT_EQ(setenv("DPA_AUTH_KEY_FILE", good.path().c_str(), 1), 0);
  EXPECT_EQ(Config::from_env().auth_key, key);
  ASSERT_EQ(setenv("DPA_AUTH_KEY_FILE", short_key.path().c_str(), 1), 0);
  EXPECT_THAT([] { (void)Config::from_env(); }, testing::ThrowsMessage<ConfigError>(HasSubstr("DPA_AUTH_KEY_FILE")));
  unsetenv("DPA_AUTH_KEY_FILE");
}

TEST(AuthConfig, TheDataMacComesFromTheEnvironmentAndAnUnknownOneIsNamed) {
  ASSERT_EQ(setenv("DPA_DATA_MAC", "siphash", 1), 0);
  Config config = Config::from_env();
  unsetenv("DPA_DATA_MAC");
  EXPECT_EQ(config.data_mac, "siphash");
  EXPECT_EQ(Config{}.data_mac, "auto");
  config.data_mac = "poly1305";
  EXPECT_THAT([&] { config.validate(); },
              testing::ThrowsMessage<ConfigError>(AllOf(HasSubstr("poly1305"), HasSubstr("DPA_DATA_MAC"))));
}

// A session whose largest packet (header, values, tag) does not fit the switch's transport is
// refused when the config loads and when it is added, naming the session, the sizes and the setting.
TEST(AuthConfig, ASessionWhosePacketsDoNotFitTheTransportIsRefused) {
  SKIP_WITHOUT_SODIUM();
  // The trailer of the largest MAC a generation may choose on this CPU (protocol.md §6.6).
  const std::uint32_t trailer = protocol::aes256gcm_available() ? protocol::kGcmTrailerSize : protocol::kTagSize;
  const auto text = [](std::uint32_t n) { return std::to_string(n); };
  SwitchConfig config;
  UdpTransportConfig udp = SwitchConfig::udp_defaults();
  udp.bind_port = 0;
  udp.max_payload = 48 + 4 * 256 + trailer;  // exactly an authenticated packet of 256 values
  config.transport = udp;
  SessionConfig session;
  session.id = 3;
  session.world_size = 2;
  session.payload = 256;
  session.auth_key = protocol::random_auth_key();
  session.auth_data = true;
  config.sessions = {session};
  EXPECT_NO_THROW(config.validate());
  config.sessions[0].payload = 257;
  EXPECT_THAT([&] { config.validate(); },
              testing::ThrowsMessage<ConfigError>(
                  AllOf(HasSubstr("session 3: payload 257 needs " + text(48 + 1028 + trailer) + "-byte packets"),
                        HasSubstr(text(trailer) + "-byte MAC trailer"),
                        HasSubstr("switch.udp.max_payload " + text(48 + 1024 + trailer)))));
  config.sessions[0].payload = 256 + trailer / 4;
  config.sessions[0].auth_data = false;  // admission alone tags no data packet
  EXPECT_NO_THROW(config.validate());
  config.sessions[0].auth_key.reset();
  EXPECT_NO_THROW(config.validate());
  config.sessions[0].auth_data = true;
  EXPECT_THAT([&] { config.validate(); },
              testing::ThrowsMessage<ConfigError>(AllOf(HasSubstr("session 3: auth_data"), HasSubstr("auth_key_file"))));
  config.sessions[0].auth_data = false;

  DpdkTransportConfig dpdk;
  dpdk.local_ip = "10.0.0.1";
  dpdk.mtu = 1500;
  config.transport = dpdk;
  config.sessions[0].payload = 356;
  config.sessions[0].auth_key = session.auth_key;
  config.sessions[0].auth_data = true;
  EXPECT_THAT([&] { config.validate(); },
              testing::ThrowsMessage<ConfigError>(
                  AllOf(HasSubstr("session 3: payload 356 needs " + text(48 + 1424 + trailer) + "-byte packets"),
                        HasSubstr("switch.dpdk.mtu 1500 (UDP payloads of up to 1472"))));

  config.transport = udp;
  config.sessions.clear();
  SoftwareSwitch running(config);
  session.payload = 300;
  EXPECT_THAT([&] { running.add_session(session); },
              testing::ThrowsMessage<ConfigError>(
                  AllOf(HasSubstr("session 3: payload 300 needs " + text(48 + 1200 + trailer) + "-byte packets"),
                        HasSubstr("switch.udp.max_payload " + text(48 + 1024 + trailer)))));
  session.payload = 256;
  EXPECT_NO_THROW(running.add_session(session));
}

// ---- The software switch ----------------------------------------------------------------------------

constexpr std::uint32_t kLoopback = 0x7f000001;
constexpr std::uint32_t kPayload = 4;

// A rank's thread-0 socket on 127.0.0.1 that sends raw datagrams and keeps the replies' bytes.
class RawRank {
 public:
  RawRank() {
    UdpTransportConfig options;
    options.bind_host = "127.0.0.1";
    options.batch = 16;
    io_ = transport::socket::open_udp_queue(options);
  }
  [[nodiscard]] std::uint16_t port() const { return io_->local_endpoint().port; }
  void send(const Bytes& datagram, const transport::Endpoint& to) {
    ASSERT_TRUE(transport::send_datagram(*io_, datagram, to));
  }
  // The next datagram within `wait`.
  std::optional<Bytes> receive(std::chrono::milliseconds wait = 2000ms) {
    std::vector<transport::RxPacket> batch(1);
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (std::chrono::steady_clock::now() < deadline) {
      if (io_->receive(batch, 50ms) == 1) return Bytes(batch[0].data.begin(), batch[0].data.end());
    }
    return std::nullopt;
  }

 private:
  std::unique_ptr<transport::Queue> io_;
};

Header decoded(const Bytes& datagram) {
  Header h;
  std::span<const std::byte> payload;
  EXPECT_EQ(protocol::decode(datagram, h, payload), protocol::DecodeStatus::ok);
  return h;
}

std::vector<std::int32_t> values_of(const Bytes& datagram) {
  Header h;
  std::span<const std::byte> payload;
  EXPECT_EQ(protocol::decode(datagram, h, payload), protocol::DecodeStatus::ok);
  std::vector<std::int32_t> values;
  for (std::size_t i = 0; i + 4 <= payload.size(); i += 4) {
    values.push_back(static_cast<std::int32_t>(protocol::load_be32(payload.data() + i)));
  }
  return values;
}

class AuthenticatedSwitch : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_SODIUM();
    session_key_ = protocol::random_auth_key();
    for (std::uint32_t r = 0; r < 2; ++r) keys_[r] = protocol::tag_keys(protocol::derive_rank_key(session_key_, r));
    SwitchConfig config;
    std::get<UdpTransportConfig>(config.transport).bind_port = 0;
    SessionConfig session;
    session.id = 1;
    session.world_size = 2;
    session.payload = kPayload;
    session.pool_size = 64;
    session.auth_key = session_key_;
    session.auth_data = auth_data_;
    config.sessions = {session};
    switch_.emplace(config);
    switch_endpoint_ = {kLoopback, switch_->port()};
  }

  static std::uint32_t nonce_of(int rank) { return 0x1000u + static_cast<std::uint32_t>(rank); }
  static std::uint64_t salt_of(int rank) { return 0x5a175a17'00000000ULL + static_cast<std::uint64_t>(rank); }

  Bytes join(int rank, const RawRank& socket, bool sealed = true) const {
    protocol::JoinRequest request;
    request.nonce = nonce_of(rank);
    request.world_size = 2;
    request.threads = 1;
    request.window = 4;
    request.payload = kPayload;
    request.ports[0] = socket.port();
    Header h;
    h.flags = flag::kJoin;
    h.session = 1;
    h.rank = static_cast<std::uint8_t>(rank);
    h.count = static_cast<std::uint16_t>(request.words());
    if (offers_gcm_[rank]) {
      h.op_length = protocol::offer_bit(protocol::DataMac::aes256gcm);
      h.bitmap = salt_of(rank);
    }
    Bytes bytes(protocol::kHeaderSize + 4 * request.words());
    protocol::encode(h, bytes.data());
    protocol::encode(request, bytes.data() + protocol::kHeaderSize);
    if (sealed) seal(keys_[rank].request, bytes);
    return bytes;
  }

  Bytes data(int rank, std::uint32_t token, const std::vector<std::int32_t>& values) const {
    Header h;
    h.session = 1;
    h.token = token;
    h.op_id = 1;
    h.slot = 0;
    h.seq = 1;
    h.count = static_cast<std::uint16_t>(values.size());
    h.rank = static_cast<std::uint8_t>(rank);
    Bytes bytes(protocol::kHeaderSize + 4 * values.size());
    protocol::encode(h, bytes.data());
    for (std::size_t i = 0; i < values.size(); ++i) {
      protocol::store_be32(bytes.data() + protocol::kHeaderSize + 4 * i, static_cast<std::uint32_t>(values[i]));
    }
    return bytes;
  }

  // Joins both ranks; returns the token.
  std::uint32_t join_both() {
    for (int attempt = 0; attempt < 2; ++attempt) {
      ranks_[0].send(join(0, ranks_[0]), switch_endpoint_);
      ranks_[1].send(join(1, ranks_[1]), switch_endpoint_);
    }
    std::uint32_t token = 0;
    for (int r = 0; r < 2; ++r) {
      const std::optional<Bytes> ack = ranks_[r].receive();
      EXPECT_TRUE(ack.has_value()) << "no JOIN ack for rank " << r;
      if (!ack) return 0;
      EXPECT_TRUE(protocol::verify_tag(keys_[r].reply, *ack)) << "rank " << r << "'s ack carries its tag";
      EXPECT_FALSE(protocol::verify_tag(keys_[1 - r].reply, *ack));
      acks_[r] = decoded(*ack);
      token = acks_[r].token;
      // The data MACs the ack names, as a rank derives them (protocol.md §6.6).
      if (acks_[r].op_id == static_cast<std::uint32_t>(protocol::DataMac::aes256gcm)) {
        data_macs_[r] = protocol::aes256gcm_macs(
            protocol::derive_rank_key(session_key_, static_cast<std::uint32_t>(r)),
            {1, acks_[r].seq, acks_[r].token, acks_[r].offset, nonce_of(r), salt_of(r)});
      } else {
        data_macs_[r] = protocol::siphash24_macs(keys_[r]);
      }
    }
    return token;
  }

  // The switch's counters once `ready` holds (published once per batch), bounded.
  template <class Ready>
  SwitchCounters counters_when(Ready ready) const {
    const auto deadline = std::chrono::steady_clock::now() + 2s;
    SwitchCounters counters = switch_->counters();
    while (!ready(counters) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
      counters = switch_->counters();
    }
    return counters;
  }

  Bytes leave(int rank, std::uint32_t token, std::uint32_t secret, bool sealed) const {
    Header h;
    h.flags = flag::kLeave;
    h.session = 1;
    h.token = token;
    h.offset = secret;
    h.rank = static_cast<std::uint8_t>(rank);
    Bytes bytes(protocol::kHeaderSize);
    protocol::encode(h, bytes.data());
    if (sealed) seal(keys_[rank].request, bytes);
    return bytes;
  }

  bool auth_data_ = true;  // the session authenticates data too (protocol.md §6.6)
  bool offers_gcm_[2] = {false, false};  // whether each rank's JOIN offers AES-256-GCM
  Header acks_[2];         // join_both(): each rank's JOIN ack
  protocol::PacketMacs data_macs_[2];  // join_both(): each rank's data MACs of the generation
  AuthKey session_key_{};
  protocol::RankTagKeys keys_[2];
  std::optional<SoftwareSwitch> switch_;
  transport::Endpoint switch_endpoint_;
  RawRank ranks_[2];
};

TEST_F(AuthenticatedSwitch, AForgedContributionFromAMembersOwnSocketIsDroppedAndCounted) {
  const std::uint32_t token = join_both();
  ASSERT_NE(token, 0u);
  // The on-path attacker of issue 22: the token, rank 0's address and port (here its very socket),
  // but no key: no tag, another rank's tag, and a genuine packet's tag over changed values.
  ranks_[0].send(data(0, token, {1000, 1000, 1000, 1000}), switch_endpoint_);
  Bytes other_rank = data(0, token, {1000, 1000, 1000, 1000});
  seal(keys_[1].request, other_rank);
  ranks_[0].send(other_rank, switch_endpoint_);
  Bytes genuine = data(0, token, {1, 2, 3, 4});
  seal(keys_[0].request, genuine);
  Bytes altered = genuine;
  protocol::store_be32(altered.data() + protocol::kHeaderSize, 1000);
  ranks_[0].send(altered, switch_endpoint_);
  const SwitchCounters dropped = counters_when([](const SwitchCounters& c) { return c.dropped_bad_tag == 3; });
  EXPECT_EQ(dropped.dropped_bad_tag, 3u);
  EXPECT_EQ(dropped.aggregated, 0u) << "nothing forged reached a slot";

  ranks_[0].send(genuine, switch_endpoint_);
  Bytes second = data(1, token, {10, 20, 30, 40});
  seal(keys_[1].request, second);
  ranks_[1].send(second, switch_endpoint_);
  for (int r = 0; r < 2; ++r) {
    const std::optional<Bytes> result = ranks_[r].receive();
    ASSERT_TRUE(result.has_value()) << "no result for rank " << r;
    EXPECT_TRUE(protocol::verify_tag(keys_[r].reply, *result)) << "each rank's copy carries its own tag";
    EXPECT_FALSE(protocol::verify_tag(keys_[1 - r].reply, *result));
    EXPECT_EQ(decoded(*result).flags, flag::kResult | flag::kAuth);
    EXPECT_EQ(values_of(*result), (std::vector<std::int32_t>{11, 22, 33, 44})) << "the forged values are not in";
  }
  for (const SessionStatus& status : switch_->session_status()) EXPECT_EQ(status.counters.dropped, 3u);
}

TEST_F(AuthenticatedSwitch, EachAckNamesItsRankAndTheDataMac) {
  ASSERT_NE(join_both(), 0u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(acks_[r].rank, r) << "the receiving rank (protocol.md §6.2)";
    EXPECT_EQ(acks_[r].op_id, static_cast<std::uint32_t>(protocol::DataMac::siphash24));
  }
}

// Ranks whose JOINs offer AES-256-GCM, as a worker on a CPU with AES-NI does (protocol.md §6.6).
class GcmSwitch : public AuthenticatedSwitch {
 protected:
  void SetUp() override {
    if (!protocol::aes256gcm_available()) GTEST_SKIP() << "no libsodium, or this CPU lacks AES-NI and PCLMUL";
    offers_gcm_[0] = offers_gcm_[1] = true;
    AuthenticatedSwitch::SetUp();
  }
  Bytes sealed(const protocol::PacketMac& mac, Bytes packet) {
    const std::size_t size = packet.size();
    packet.resize(size + protocol::kMaxTrailerSize);
    packet.resize(mac.seal(packet.data(), size, nonces_));
    return packet;
  }
  protocol::NonceCounter nonces_{0};  // the test's one engine thread per rank
};

TEST_F(GcmSwitch, TheGenerationChoosesGcmAndDropsForgeriesDowngradesAndReplays) {
  const std::uint32_t token = join_both();
  ASSERT_NE(token, 0u);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(acks_[r].op_id, static_cast<std::uint32_t>(protocol::DataMac::aes256gcm));
  EXPECT_EQ(switch_->session_status()[0].data_mac, "aes256gcm");
  const Bytes genuine = sealed(data_macs_[0].request, data(0, token, {1, 2, 3, 4}));
  Bytes altered = genuine;
  protocol::store_be32(altered.data() + protocol::kHeaderSize, 1000);
  // The genuine packet's tag with another nonce: the nonce is GCM's IV, so the tag no longer fits.
  Bytes renonced = genuine;
  renonced[genuine.size() - protocol::kGcmTrailerSize + 4] ^= std::byte{1};
  const Bytes forgeries[] = {
      data(0, token, {1000, 1000, 1000, 1000}),                                // no trailer
      sealed(data_macs_[1].request, data(0, token, {1000, 1000, 1000, 1000})),  // rank 1's key
      sealed(protocol::siphash24_macs(keys_[0]).request, data(0, token, {1000, 1000, 1000, 1000})),  // downgrade
      altered,
      renonced,
  };
  for (const Bytes& forgery : forgeries) ranks_[0].send(forgery, switch_endpoint_);
  const SwitchCounters dropped = counters_when([](const SwitchCounters& c) { return c.dropped_bad_tag == 5; });
  EXPECT_EQ(dropped.dropped_bad_tag, 5u);
  EXPECT_EQ(dropped.aggregated, 0u) << "nothing forged reached a slot";

  ranks_[0].send(genuine, switch_endpoint_);
  ranks_[1].send(sealed(data_macs_[1].request, data(1, token, {10, 20, 30, 40})), switch_endpoint_);
  std::set<std::array<std::byte, protocol::kGcmNonceSize>> reply_nonces;
  for (int r = 0; r < 2; ++r) {
    const std::optional<Bytes> result = ranks_[r].receive();
    ASSERT_TRUE(result.has_value()) << "no result for rank " << r;
    EXPECT_TRUE(data_macs_[r].reply.verify(*result)) << "each rank's copy carries its own GCM tag";
    EXPECT_FALSE(data_macs_[1 - r].reply.verify(*result));
    EXPECT_FALSE(data_macs_[r].request.verify(*result)) << "a reply is no request";
    EXPECT_EQ(decoded(*result).flags, flag::kResult | flag::kAuth | flag::kGcm);
    EXPECT_EQ(values_of(*result), (std::vector<std::int32_t>{11, 22, 33, 44})) << "the forged values are not in";
    std::array<std::byte, protocol::kGcmNonceSize> nonce{};
    std::memcpy(nonce.data(), result->data() + result->size() - protocol::kGcmTrailerSize, nonce.size());
    EXPECT_EQ(protocol::load_be32(nonce.data()), 0u) << "sender id: the switch thread";
    reply_nonces.insert(nonce);
  }
  EXPECT_EQ(reply_nonces.size(), 2u) << "the switch thread's copies take nonces of its one counter";
}

TEST_F(GcmSwitch, ARankThatDoesNotOfferGcmMakesTheGenerationSipHash) {
  offers_gcm_[1] = false;  // a CPU without AES-NI, or DPA_DATA_MAC=siphash
  const std::uint32_t token = join_both();
  ASSERT_NE(token, 0u);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(acks_[r].op_id, static_cast<std::uint32_t>(protocol::DataMac::siphash24));
  EXPECT_EQ(switch_->session_status()[0].data_mac, "siphash24");
  ranks_[0].send(sealed(data_macs_[0].request, data(0, token, {1, 2, 3, 4})), switch_endpoint_);
  ranks_[1].send(sealed(data_macs_[1].request, data(1, token, {10, 20, 30, 40})), switch_endpoint_);
  for (int r = 0; r < 2; ++r) {
    const std::optional<Bytes> result = ranks_[r].receive();
    ASSERT_TRUE(result.has_value()) << "no result for rank " << r;
    EXPECT_TRUE(protocol::verify_tag(keys_[r].reply, *result));
    EXPECT_EQ(decoded(*result).flags, flag::kResult | flag::kAuth);
  }
}

// The default of the PyTorch backend and dpa-bench: a key authenticates admission only.
class AdmissionOnlySwitch : public AuthenticatedSwitch {
 protected:
  AdmissionOnlySwitch() { auth_data_ = false; }
};

TEST_F(AdmissionOnlySwitch, TheAckSaysDataIsUntaggedAndUntaggedDataIsSummed) {
  const std::uint32_t token = join_both();
  ASSERT_NE(token, 0u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(acks_[r].op_id, static_cast<std::uint32_t>(protocol::DataMac::none));
    EXPECT_EQ(acks_[r].rank, r);
  }
  ranks_[0].send(data(0, token, {1, 2, 3, 4}), switch_endpoint_);
  ranks_[1].send(data(1, token, {10, 20, 30, 40}), switch_endpoint_);
  for (int r = 0; r < 2; ++r) {
    const std::optional<Bytes> result = ranks_[r].receive();
    ASSERT_TRUE(result.has_value()) << "no result for rank " << r;
    EXPECT_EQ(decoded(*result).flags, flag::kResult) << "untagged";
    EXPECT_EQ(values_of(*result), (std::vector<std::int32_t>{11, 22, 33, 44}));
  }
}

// Issue 51's spoofed LEAVE: an on-path process that read a rank's secret from its JOIN ack sends
// LEAVE from that rank's very socket. Without the rank's tag it is dropped, and the session stays
// held against another job; the rank's own LEAVE frees it.
TEST_F(AdmissionOnlySwitch, ALeaveWithoutTheRanksTagCannotFreeTheSession) {
  const std::uint32_t token = join_both();
  ASSERT_NE(token, 0u);
  ranks_[1].send(leave(1, token, acks_[1].offset, /*sealed=*/false), switch_endpoint_);
  EXPECT_EQ(counters_when([](const SwitchCounters& c) { return c.dropped_bad_tag == 1; }).dropped_bad_tag, 1u);
  RawRank other_job;
  Bytes other = join(0, other_job);  // a second job of the key's holder, from another socket
  other_job.send(other, switch_endpoint_);
  const std::optional<Bytes> refused = other_job.receive();
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(decoded(*refused).error, ErrorCode::session_busy) << "the session is still held";
  ranks_[1].send(leave(1, token, acks_[1].offset, /*sealed=*/true), switch_endpoint_);
  EXPECT_EQ(counters_when([](const SwitchCounters& c) { return c.leaves == 1; }).leaves, 1u);
}

TEST_F(AuthenticatedSwitch, AJoinWithoutATagLearnsTheSessionAuthenticates) {
  ranks_[0].send(join(0, ranks_[0], /*sealed=*/false), switch_endpoint_);
  const std::optional<Bytes> reply = ranks_[0].receive();
  ASSERT_TRUE(reply.has_value());
  const Header h = decoded(*reply);
  EXPECT_EQ(h.error, ErrorCode::auth_mismatch);
  EXPECT_FALSE(h.has(flag::kAuth)) << "the switch shares no key with an unkeyed rank";
  EXPECT_EQ(switch_->counters().dropped_bad_tag + switch_->counters().joins, 1u);
}

// ---- Whole jobs -------------------------------------------------------------------------------------

enum class Wire { udp, shm };

class AuthenticatedJob : public ::testing::TestWithParam<Wire> {
 protected:
  // An authenticated session of `world_size` ranks on a switch of this test's wire, and the
  // workers' config pointing at it (without a rank key: each test hands out its own).
  void start_switch(int world_size, std::uint32_t shm_max_payload = ShmTransportConfig{}.max_payload) {
    sw.reset();  // a previous job's switch, whose shm fabric has this name
    SwitchConfig switch_config;
    if (GetParam() == Wire::shm) {
      ShmTransportConfig shm;
      shm.fabric = "dpa-auth-test-" + std::to_string(getpid());
      shm.max_payload = shm_max_payload;
      switch_config.transport = shm;
      worker.transport = shm;
    } else {
      std::get<UdpTransportConfig>(switch_config.transport).bind_port = 0;
    }
    session_key = protocol::random_auth_key();  // after the libsodium check of the test
    SessionConfig session;
    session.id = 1;
    session.world_size = world_size;
    session.payload = 256;
    session.pool_size = 64;
    session.auth_key = session_key;
    session.auth_data = true;
    switch_config.sessions = {session};
    sw = std::make_unique<SoftwareSwitch>(switch_config);
    worker.switches = {{"127.0.0.1", sw->port()}};
  }

  // One job of two ranks in threads of this process, each with its own key: exact sums, no
  // reply rejected, no packet dropped for its tag.
  void run_two_ranks();

  AuthKey session_key{};
  std::unique_ptr<SoftwareSwitch> sw;
  Config worker;
};

// Two ranks in threads of this process, each with its own key, against an authenticated session:
// with the data MAC the CPU allows (AES-256-GCM where it has AES-NI), then with SipHash-2-4.
TEST_P(AuthenticatedJob, SumsAreExactAndNoReplyIsRejected) {
  SKIP_WITHOUT_SODIUM();
  for (const std::string data_mac : {"auto", "siphash"}) {
    SCOPED_TRACE("data_mac " + data_mac);
    worker.data_mac = data_mac;
    run_two_ranks();
    const std::string chosen = data_mac == "auto" && protocol::aes256gcm_available() ? "aes256gcm" : "siphash24";
    EXPECT_EQ(sw->session_status()[0].data_mac, chosen);
  }
}

void AuthenticatedJob::run_two_ranks() {
  start_switch(2, 8192);
  worker.world_size = 2;
  worker.window = 8;
  worker.timeout = 10s;
  worker.join_timeout = 10s;

  constexpr std::size_t kCount = 5000;
  std::vector<std::int32_t> out[2];
  OpStats stats[2];
  std::string errors[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      try {
        Config config = worker;
        config.rank = r;
        config.auth_key = protocol::derive_rank_key(session_key, static_cast<std::uint32_t>(r));
        Context context(config);
        std::vector<std::int32_t> in(kCount);
        std::iota(in.begin(), in.end(), 1000 * r);
        out[r].resize(kCount);
        stats[r] = context.allreduce(std::span<const std::int32_t>(in), std::span<std::int32_t>(out[r]));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (std::thread& rank : ranks) rank.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    for (std::size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(out[r][i], static_cast<std::int32_t>(2 * i + 1000)) << "rank " << r << ", element " << i;
    }
    EXPECT_EQ(stats[r].replies_rejected, 0u);
  }
  EXPECT_EQ(sw->counters().dropped_bad_tag, 0u);
}

TEST_P(AuthenticatedJob, ARankWithoutAKeyOrWithAnotherRanksKeyGetsAClearError) {
  SKIP_WITHOUT_SODIUM();
  start_switch(1);
  worker.join_timeout = 500ms;
  EXPECT_THAT([&] { Context context(worker); },
              testing::ThrowsMessage<ConfigError>(AllOf(HasSubstr("authenticates"), HasSubstr("DPA_AUTH_KEY_FILE"))));
  worker.auth_key = protocol::derive_rank_key(session_key, 1);  // rank 1's key for rank 0
  EXPECT_THAT([&] { Context context(worker); }, testing::Throws<Error>());
  EXPECT_GT(sw->counters().dropped_bad_tag, 0u);
}

INSTANTIATE_TEST_SUITE_P(Wires, AuthenticatedJob, ::testing::Values(Wire::udp, Wire::shm),
                         [](const auto& instance) { return instance.param == Wire::udp ? "udp" : "shm"; });

}  // namespace
}  // namespace dpa

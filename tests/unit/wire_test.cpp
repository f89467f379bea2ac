// SPDX-License-Identifier: Apache-2.0
// The wire format against hand-written golden packets (tests/golden/*.hex), plus the decoder's
// rejections and the slot layout. The golden files are written from docs/protocol.md's field
// table, never produced by the encoder, so a change to either side of the format shows here.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "protocol/wire.hpp"

namespace dpa::protocol {
namespace {

using Bytes = std::vector<std::byte>;

// Reads a golden file: hex byte pairs; whitespace ignored; lines starting with '#' are comments.
Bytes read_golden(const std::string& name) {
  const std::string path = std::string(DPA_SOURCE_DIR) + "/tests/golden/" + name;
  std::ifstream file(path);
  if (!file) throw std::runtime_error("cannot open golden file " + path);
  std::string digits;
  std::string line;
  while (std::getline(file, line)) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    for (const char c : line) {
      if (std::isspace(static_cast<unsigned char>(c)) != 0) continue;
      if (std::isxdigit(static_cast<unsigned char>(c)) == 0) {
        throw std::runtime_error(path + ": not a hex digit: '" + std::string(1, c) + "'");
      }
      digits += c;
    }
  }
  if (digits.size() % 2 != 0) throw std::runtime_error(path + ": odd number of hex digits");
  Bytes bytes;
  for (std::size_t i = 0; i < digits.size(); i += 2) {
    bytes.push_back(static_cast<std::byte>(std::stoi(digits.substr(i, 2), nullptr, 16)));
  }
  return bytes;
}

std::string hex(std::span<const std::byte> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (i != 0) text += (i % 4 == 0) ? " | " : " ";
    const auto b = std::to_integer<unsigned>(bytes[i]);
    text += kDigits[b >> 4];
    text += kDigits[b & 15];
  }
  return text;
}

// Big-endian int32 payload bytes, written out independently of the code under test.
Bytes be_words(std::initializer_list<std::uint32_t> words) {
  Bytes bytes;
  for (const std::uint32_t w : words) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<std::byte>(w >> shift));
  }
  return bytes;
}

// Encodes `header` followed by `payload` into a buffer pre-filled with a marker byte, so bytes
// the encoder forgets to write show up as 0xaa.
Bytes encode_packet(const Header& header, const Bytes& payload) {
  Bytes packet(kHeaderSize, std::byte{0xaa});
  encode(header, packet.data());
  packet.insert(packet.end(), payload.begin(), payload.end());
  return packet;
}

void expect_same_header(const Header& actual, const Header& expected) {
  EXPECT_EQ(actual.version, expected.version);
  EXPECT_EQ(actual.error, expected.error);
  EXPECT_EQ(actual.flags, expected.flags);
  EXPECT_EQ(actual.session, expected.session);
  EXPECT_EQ(actual.op_id, expected.op_id);
  EXPECT_EQ(actual.slot, expected.slot);
  EXPECT_EQ(actual.seq, expected.seq);
  EXPECT_EQ(actual.offset, expected.offset);
  EXPECT_EQ(actual.count, expected.count);
  EXPECT_EQ(actual.rank, expected.rank);
  EXPECT_EQ(actual.k, expected.k);
  EXPECT_EQ(actual.contributors, expected.contributors);
  EXPECT_EQ(actual.exp_used, expected.exp_used);
  EXPECT_EQ(actual.exp_next, expected.exp_next);
  EXPECT_EQ(actual.bitmap, expected.bitmap);
}

// Decodes the golden file, checks every header field and the payload bytes, and checks that
// encoding `expected` reproduces the file byte for byte.
void check_golden(const std::string& file, const Header& expected, const Bytes& expected_payload) {
  SCOPED_TRACE(file);
  const Bytes golden = read_golden(file);
  ASSERT_EQ(golden.size(), kHeaderSize + expected_payload.size());

  Header decoded;
  std::span<const std::byte> payload;
  ASSERT_EQ(decode(golden, decoded, payload), DecodeStatus::ok);
  expect_same_header(decoded, expected);
  EXPECT_EQ(hex(payload), hex(expected_payload));

  const Bytes encoded = encode_packet(expected, expected_payload);
  EXPECT_EQ(hex(encoded), hex(golden));
}

// ---- Golden packets -------------------------------------------------------------------------

TEST(WireGolden, FloatDataRequestWithCountToK) {
  Header h;
  h.flags = flag::kFloat | flag::kCountToK;
  h.session = 7;
  h.token = 0xa1b2c3d4;
  h.op_id = 0x01020304;
  h.slot = 261;
  h.seq = 3;
  h.offset = 2048;
  h.op_length = 20000;
  h.count = 8;
  h.rank = 5;
  h.k = 3;
  h.exp_used = -3;
  h.exp_next = 2;
  EXPECT_TRUE(h.has(flag::kFloat));
  EXPECT_FALSE(h.is_control());
  check_golden("data_float_request.hex", h,
               be_words({1, 0xffffffff, 0x7fffffff, 0x80000000, 0x12345678, 0, 0xffffff00,
                         0x00010000}));
}

TEST(WireGolden, Int32DataRequest) {
  Header h;
  h.session = 1;
  h.token = 0x0badf00d;
  h.op_id = 42;
  h.slot = 0;
  h.seq = 1;
  h.op_length = 3;
  h.count = 3;
  h.rank = 0;
  check_golden("data_int32_request.hex", h, be_words({10, 0xfffffffe, 0x01000000, 0}));
}

TEST(WireGolden, MulticastResult) {
  Header h;
  h.flags = flag::kResult | flag::kFloat;
  h.session = 7;
  h.token = 0xa1b2c3d4;
  h.op_id = 0x01020304;
  h.slot = 261;
  h.seq = 3;
  h.offset = 2048;
  h.op_length = 20000;
  h.count = 8;
  h.rank = 5;
  h.k = 3;
  h.contributors = 3;
  h.exp_used = -3;
  h.exp_next = 4;
  h.bitmap = (std::uint64_t{1} << 63) | (1u << 5) | 1u;
  check_golden("multicast_result.hex", h,
               be_words({3, 0xfffffffd, 100000, 0xfffe7960, 0, 0x7fffffff, 1, 0x0a0b0c0d}));
}

TEST(WireGolden, OldReplyWithComplete) {
  Header h;
  h.flags = flag::kOld | flag::kComplete;
  h.session = 1;
  h.token = 0x0badf00d;
  h.op_id = 42;
  h.slot = 17;
  h.seq = 9;
  h.offset = 4096;
  h.op_length = 8192;
  h.rank = 1;
  h.k = 2;
  h.contributors = 2;
  h.bitmap = 3;
  check_golden("old_reply_complete.hex", h, {});
}

TEST(WireGolden, SynProbe) {
  Header h;
  h.flags = flag::kSyn;
  h.session = 1;
  h.token = 0x0badf00d;
  h.op_id = 42;
  h.slot = 17;
  h.seq = 9;
  h.rank = 3;
  check_golden("syn_probe.hex", h, {});
}

TEST(WireGolden, ErrorReplyOpMismatch) {
  Header h;
  h.flags = flag::kError;
  h.error = ErrorCode::op_mismatch;
  h.session = 1;
  h.token = 0x0badf00d;
  h.op_id = 42;
  h.slot = 17;
  h.seq = 9;
  h.offset = 42;
  h.rank = 1;
  h.bitmap = 43;
  EXPECT_TRUE(h.is_control());
  check_golden("error_op_mismatch.hex", h, {});
}

TEST(WireGolden, JoinRequestWithThreeThreadPorts) {
  JoinRequest request;
  request.nonce = 0xdeadbeef;
  request.world_size = 4;
  request.threads = 3;
  request.window = 16;
  request.payload = 1024;
  request.ports[0] = 40000;
  request.ports[1] = 40001;
  request.ports[2] = 40002;
  ASSERT_EQ(request.words(), 7u);

  Header h;
  h.flags = flag::kJoin;
  h.session = 1;
  h.count = static_cast<std::uint16_t>(request.words());
  h.rank = 2;
  EXPECT_TRUE(h.is_control());

  // Encoding the payload writes exactly words() * 4 bytes, the pad port included.
  Bytes payload(request.words() * 4 + 4, std::byte{0xaa});
  encode(request, payload.data());
  EXPECT_EQ(payload.back(), std::byte{0xaa}) << "wrote past words() * 4";
  payload.resize(request.words() * 4);
  check_golden("join_request.hex", h, payload);

  const Bytes golden = read_golden("join_request.hex");
  JoinRequest decoded;
  ASSERT_TRUE(decode(std::span(golden).subspan(kHeaderSize), decoded));
  EXPECT_EQ(decoded.nonce, 0xdeadbeefu);
  EXPECT_EQ(decoded.world_size, 4u);
  EXPECT_EQ(decoded.threads, 3u);
  EXPECT_EQ(decoded.window, 16u);
  EXPECT_EQ(decoded.payload, 1024u);
  EXPECT_EQ(decoded.ports[0], 40000);
  EXPECT_EQ(decoded.ports[1], 40001);
  EXPECT_EQ(decoded.ports[2], 40002);
}

TEST(WireGolden, JoinReplyWithTwoSwitchPorts) {
  JoinReply reply;
  reply.payload = 1024;
  reply.world_size = 4;
  reply.k_default = 3;
  reply.straggler_timeout_ticks = timeout_ticks(10000);
  reply.pool_base = 256;
  reply.pool_size = 4096;
  reply.generation = 3;
  reply.token = 0xa1b2c3d4;
  reply.switch_ports = 2;
  reply.ports[0] = 4242;
  reply.ports[1] = 4243;
  ASSERT_EQ(reply.words(), 10u);
  EXPECT_EQ(reply.straggler_timeout_ticks, 153u);  // 10 ms in 65.536 us ticks, rounded up

  Header h;
  h.flags = flag::kJoin | flag::kResult;
  h.session = 1;
  h.token = 0xa1b2c3d4;
  h.seq = 3;
  h.count = static_cast<std::uint16_t>(reply.words());
  h.rank = 2;
  h.bitmap = 0xf;

  Bytes payload(reply.words() * 4 + 4, std::byte{0xaa});
  encode(reply, payload.data());
  EXPECT_EQ(payload.back(), std::byte{0xaa}) << "wrote past words() * 4";
  payload.resize(reply.words() * 4);
  check_golden("join_reply.hex", h, payload);

  const Bytes golden = read_golden("join_reply.hex");
  JoinReply decoded;
  ASSERT_TRUE(decode(std::span(golden).subspan(kHeaderSize), decoded));
  EXPECT_EQ(decoded.payload, 1024u);
  EXPECT_EQ(decoded.world_size, 4u);
  EXPECT_EQ(decoded.k_default, 3u);
  EXPECT_EQ(decoded.straggler_timeout_ticks, 153u);
  EXPECT_EQ(decoded.token, 0xa1b2c3d4u);
  EXPECT_EQ(decoded.pool_base, 256u);
  EXPECT_EQ(decoded.pool_size, 4096u);
  EXPECT_EQ(decoded.generation, 3u);
  EXPECT_EQ(decoded.switch_ports, 2u);
  EXPECT_EQ(decoded.ports[0], 4242);
  EXPECT_EQ(decoded.ports[1], 4243);
}

TEST(WireGolden, ByteOffsetsOfEveryHeaderField) {
  // Each field set to a distinct value on its own, so a swapped or shifted field is named.
  struct Field {
    const char* name;
    void (*set)(Header&);
    std::size_t offset;
    Bytes bytes;
  };
  const Field fields[] = {
      {"error", [](Header& h) { h.error = ErrorCode::dtype_mismatch; }, 1, {std::byte{15}}},
      {"flags", [](Header& h) { h.flags = 0x0102; }, 2, {std::byte{1}, std::byte{2}}},
      {"session", [](Header& h) { h.session = 0x11223344; }, 4, be_words({0x11223344})},
      {"token", [](Header& h) { h.token = 0x1a2b3c4d; }, 8, be_words({0x1a2b3c4d})},
      {"op_id", [](Header& h) { h.op_id = 0x55667788; }, 12, be_words({0x55667788})},
      {"slot", [](Header& h) { h.slot = 0x99aabbcc; }, 16, be_words({0x99aabbcc})},
      {"seq", [](Header& h) { h.seq = 0xddeeff01; }, 20, be_words({0xddeeff01})},
      {"offset", [](Header& h) { h.offset = 0x02030405; }, 24, be_words({0x02030405})},
      {"op_length", [](Header& h) { h.op_length = 0x0b0c0d0e; }, 28, be_words({0x0b0c0d0e})},
      {"count", [](Header& h) { h.count = 0x0607; }, 32, {std::byte{6}, std::byte{7}}},
      {"rank", [](Header& h) { h.rank = 0x3f; }, 34, {std::byte{0x3f}}},
      {"k", [](Header& h) { h.k = 0x08; }, 35, {std::byte{0x08}}},
      {"contributors", [](Header& h) { h.contributors = 0x09; }, 36, {std::byte{0x09}}},
      // Exponents travel biased by 128: 10 -> 0x8a, -2 -> 0x7e.
      {"exp_used", [](Header& h) { h.exp_used = 0x0a; }, 37, {std::byte{0x8a}}},
      {"exp_next", [](Header& h) { h.exp_next = -2; }, 38, {std::byte{0x7e}}},
      {"bitmap", [](Header& h) { h.bitmap = 0x0102030405060708; }, 40,
       {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}, std::byte{5}, std::byte{6},
        std::byte{7}, std::byte{8}}},
  };
  Header base;  // exponents kExpZero: biased, they encode as zero bytes
  Bytes zero(kHeaderSize, std::byte{0});
  zero[0] = std::byte{kVersion};
  ASSERT_EQ(hex(encode_packet(base, {})), hex(zero));
  for (const Field& field : fields) {
    SCOPED_TRACE(field.name);
    Header h = base;
    field.set(h);
    Bytes expected = zero;
    std::copy(field.bytes.begin(), field.bytes.end(), expected.begin() + static_cast<long>(field.offset));
    EXPECT_EQ(hex(encode_packet(h, {})), hex(expected));
  }
}

// ---- Decode rejections ----------------------------------------------------------------------

class WireDecodeRejects : public ::testing::Test {
 protected:
  // A valid int32 request with a 4-value payload, as raw bytes to corrupt.
  Bytes packet = read_golden("data_int32_request.hex");

  DecodeStatus decode_packet(const Bytes& bytes) {
    Header h;
    std::span<const std::byte> payload;
    return decode(bytes, h, payload);
  }
};

TEST_F(WireDecodeRejects, GoldenPacketIsAccepted) { EXPECT_EQ(decode_packet(packet), DecodeStatus::ok); }

TEST_F(WireDecodeRejects, ShorterThanHeader) {
  EXPECT_EQ(decode_packet({}), DecodeStatus::too_short);
  EXPECT_EQ(decode_packet(Bytes(packet.begin(), packet.begin() + kHeaderSize - 1)),
            DecodeStatus::too_short);
  EXPECT_EQ(decode_packet(Bytes(packet.begin(), packet.begin() + kHeaderSize)), DecodeStatus::count_exceeds_payload)
      << "a bare header with count 3 carries no values";
}

TEST_F(WireDecodeRejects, BadVersion) {
  for (const int version : {0, 1, 3, 255}) {
    packet[0] = static_cast<std::byte>(version);
    EXPECT_EQ(decode_packet(packet), DecodeStatus::bad_version) << "version " << version;
  }
}

TEST_F(WireDecodeRejects, UnknownFlagBits) {
  packet[2] = std::byte{0x80};
  packet[3] = std::byte{0x00};
  EXPECT_EQ(decode_packet(packet), DecodeStatus::unknown_flags) << "flag 0x8000";
  // GCM (0x4000) names the form of an AUTH trailer: alone it is malformed.
  packet[2] = std::byte{0x40};
  EXPECT_EQ(decode_packet(packet), DecodeStatus::gcm_without_auth);
  packet[1] = std::byte{1};  // every known flag but AUTH at once (ERROR with a code) is accepted
  packet[2] = std::byte{0x0b};
  packet[3] = std::byte{0xff};
  EXPECT_EQ(decode_packet(packet), DecodeStatus::ok);
  // AUTH too: the packet's last 8 bytes are then its tag, which leaves too little for its values.
  packet[2] = std::byte{0x07};
  EXPECT_EQ(decode_packet(packet), DecodeStatus::count_exceeds_payload);
  // One of the owned modes is known (§13); both at once are not.
  packet[2] = std::byte{0x30};
  packet[3] = std::byte{0x00};
  packet[1] = std::byte{0};
  EXPECT_EQ(decode_packet(packet), DecodeStatus::conflicting_modes);
}

TEST_F(WireDecodeRejects, ReservedByteNonzero) {
  packet[39] = std::byte{1};
  EXPECT_EQ(decode_packet(packet), DecodeStatus::reserved_nonzero);
}

TEST_F(WireDecodeRejects, ErrorCodeWithoutErrorFlagAndTheReverse) {
  packet[1] = std::byte{14};  // a request must carry error 0
  EXPECT_EQ(decode_packet(packet), DecodeStatus::error_flag_mismatch);
  packet[1] = std::byte{0};
  packet[3] = std::byte{static_cast<std::uint8_t>(flag::kError)};  // ERROR must name a code
  EXPECT_EQ(decode_packet(packet), DecodeStatus::error_flag_mismatch);
  packet[1] = std::byte{14};
  EXPECT_EQ(decode_packet(packet), DecodeStatus::ok);
}

TEST_F(WireDecodeRejects, RankOf64OrMore) {
  packet[34] = std::byte{63};
  EXPECT_EQ(decode_packet(packet), DecodeStatus::ok);
  for (const int rank : {64, 65, 255}) {
    packet[34] = static_cast<std::byte>(rank);
    EXPECT_EQ(decode_packet(packet), DecodeStatus::rank_out_of_range) << "rank " << rank;
  }
}

TEST_F(WireDecodeRejects, PayloadNotWholeWords) {
  for (const int extra : {1, 2, 3}) {
    Bytes bytes = packet;
    bytes.resize(bytes.size() + static_cast<std::size_t>(extra));
    EXPECT_EQ(decode_packet(bytes), DecodeStatus::bad_payload_length) << extra << " extra bytes";
  }
}

TEST_F(WireDecodeRejects, CountExceedsPayload) {
  packet[33] = std::byte{4};  // 4 values in a 4-value payload: fine
  EXPECT_EQ(decode_packet(packet), DecodeStatus::ok);
  packet[33] = std::byte{5};
  EXPECT_EQ(decode_packet(packet), DecodeStatus::count_exceeds_payload);
  packet[32] = std::byte{0xff};
  EXPECT_EQ(decode_packet(packet), DecodeStatus::count_exceeds_payload);
}

TEST_F(WireDecodeRejects, PayloadSpanStartsAfterHeader) {
  Header h;
  std::span<const std::byte> payload;
  ASSERT_EQ(decode(packet, h, payload), DecodeStatus::ok);
  EXPECT_EQ(payload.data(), packet.data() + kHeaderSize);
  EXPECT_EQ(payload.size(), 16u);
}

TEST(WireStrings, EveryErrorCodeAndDecodeStatusHasAText) {
  std::set<std::string_view> error_texts;
  for (int code = 0; code <= static_cast<int>(ErrorCode::rank_contended); ++code) {
    const std::string_view text = to_string(static_cast<ErrorCode>(code));
    EXPECT_FALSE(text.empty()) << "error code " << code;
    EXPECT_NE(text, "unknown error code") << "error code " << code << " has no text of its own";
    error_texts.insert(text);
  }
  EXPECT_EQ(error_texts.size(), static_cast<std::size_t>(ErrorCode::rank_contended) + 1)
      << "two error codes share a text";
  EXPECT_FALSE(to_string(static_cast<ErrorCode>(200)).empty());

  std::set<std::string_view> status_texts;
  for (int status = 0; status <= static_cast<int>(DecodeStatus::count_exceeds_payload); ++status) {
    const std::string_view text = to_string(static_cast<DecodeStatus>(status));
    EXPECT_FALSE(text.empty()) << "decode status " << status;
    EXPECT_NE(text, "unknown status") << "decode status " << status;
    status_texts.insert(text);
  }
  EXPECT_EQ(status_texts.size(), static_cast<std::size_t>(DecodeStatus::count_exceeds_payload) + 1);
  EXPECT_FALSE(to_string(static_cast<DecodeStatus>(200)).empty());
}

// ---- JOIN payload rejections ----------------------------------------------------------------

Bytes golden_payload(const std::string& file) {
  const Bytes golden = read_golden(file);
  return {golden.begin() + kHeaderSize, golden.end()};
}

void set_word(Bytes& bytes, std::size_t word, std::uint32_t value) {
  const Bytes be = be_words({value});
  std::copy(be.begin(), be.end(), bytes.begin() + static_cast<long>(4 * word));
}

TEST(WireJoinRequest, RejectsZeroOrTooManyThreads) {
  for (const std::uint32_t threads : {0u, 65u, 1000u, 0xffffffffu}) {
    Bytes payload = golden_payload("join_request.hex");
    payload.resize(4 * 40, std::byte{0});  // room for 64 threads' ports
    set_word(payload, 2, threads);
    JoinRequest request;
    EXPECT_FALSE(decode(payload, request)) << threads << " threads";
  }
}

TEST(WireJoinRequest, AcceptsSixtyFourThreads) {
  Bytes payload = golden_payload("join_request.hex");
  payload.resize(4 * (5 + 32), std::byte{0x01});
  set_word(payload, 2, 64);
  JoinRequest request;
  ASSERT_TRUE(decode(payload, request));
  EXPECT_EQ(request.threads, 64u);
  EXPECT_EQ(request.ports[63], 0x0101);
}

TEST(WireJoinRequest, RejectsTruncatedPayload) {
  const Bytes payload = golden_payload("join_request.hex");
  JoinRequest request;
  ASSERT_TRUE(decode(payload, request));
  for (std::size_t size = 0; size < payload.size(); ++size) {
    EXPECT_FALSE(decode(std::span(payload).first(size), request)) << size << " bytes";
  }
}

TEST(WireJoinReply, RejectsZeroOrTooManySwitchPorts) {
  for (const std::uint32_t ports : {0u, 65u, 0xffffffffu}) {
    Bytes payload = golden_payload("join_reply.hex");
    payload.resize(4 * 40, std::byte{0});
    set_word(payload, 8, ports);
    JoinReply reply;
    EXPECT_FALSE(decode(payload, reply)) << ports << " switch ports";
  }
}

TEST(WireJoinReply, RejectsTruncatedPayload) {
  const Bytes payload = golden_payload("join_reply.hex");
  JoinReply reply;
  ASSERT_TRUE(decode(payload, reply));
  for (std::size_t size = 0; size < payload.size(); ++size) {
    EXPECT_FALSE(decode(std::span(payload).first(size), reply)) << size << " bytes";
  }
}

// ---- Straggler timer ticks and exponent codes -----------------------------------------------

TEST(WireTicks, TimeoutsRoundUpToWholeTicks) {
  EXPECT_EQ(timeout_ticks(0), 0u);
  EXPECT_EQ(timeout_ticks(1), 1u);        // any positive timeout waits at least one tick
  EXPECT_EQ(timeout_ticks(65), 1u);       // 65 us < 65.536 us
  EXPECT_EQ(timeout_ticks(66), 2u);
  EXPECT_EQ(timeout_ticks(10000), 153u);  // 152.6 ticks
  EXPECT_EQ(ticks_to_us(153), 10027u);    // the effective timeout the JOIN reply reports
  EXPECT_EQ(ticks_of_ns(65535), 0u);
  EXPECT_EQ(ticks_of_ns(65536), 1u);
  // The 32-bit slice of a 48-bit nanosecond clock wraps every 2^48 ns.
  EXPECT_EQ(ticks_of_ns((std::uint64_t{1} << 48) + 65536), 1u);
}

TEST(WireExponentCodes, BiasedSoThatZeroMeansNoExponentAndUnsignedMaxIsSignedMax) {
  EXPECT_EQ(exp_to_wire(kExpZero), 0u);
  EXPECT_EQ(exp_to_wire(kExpNonFinite), 255u);
  EXPECT_EQ(exp_to_wire(0), 128u);
  for (int a = -128; a <= 127; ++a) {
    EXPECT_EQ(exp_from_wire(exp_to_wire(static_cast<std::int8_t>(a))), a);
    for (const int b : {-128, -96, -1, 0, 1, 126, 127}) {
      EXPECT_EQ(exp_from_wire(std::max(exp_to_wire(static_cast<std::int8_t>(a)),
                                       exp_to_wire(static_cast<std::int8_t>(b)))),
                std::max(a, b));
    }
  }
}

// ---- Slot layout ----------------------------------------------------------------------------

TEST(WireSlotLayout, KnownSlots) {
  const SlotLayout layout{100, 4};
  EXPECT_EQ(layout.slot(0, 0, 0), 100u);
  EXPECT_EQ(layout.slot(0, 0, 1), 101u);
  EXPECT_EQ(layout.slot(0, 0, 2), 100u);
  EXPECT_EQ(layout.slot(0, 3, 0), 106u);
  EXPECT_EQ(layout.slot(0, 3, 1), 107u);
  EXPECT_EQ(layout.slot(1, 0, 0), 108u);
  EXPECT_EQ(layout.slot(2, 1, 5), 119u);
  EXPECT_EQ(layout.thread_of(100), 0u);
  EXPECT_EQ(layout.thread_of(107), 0u);
  EXPECT_EQ(layout.thread_of(108), 1u);
  EXPECT_EQ(layout.thread_of(119), 2u);
}

TEST(WireSlotLayout, EveryThreadEntryAndParityHasItsOwnSlotInsideThePool) {
  for (const std::uint32_t base : {0u, 7u, 4096u}) {
    for (const std::uint32_t window : {1u, 2u, 3u, 16u}) {
      for (const std::uint32_t threads : {1u, 2u, 5u}) {
        const SlotLayout layout{base, window};
        std::set<std::uint32_t> used;
        for (std::uint32_t t = 0; t < threads; ++t) {
          for (std::uint32_t e = 0; e < window; ++e) {
            for (const std::uint64_t round : {0u, 1u}) {
              const std::uint32_t slot = layout.slot(t, e, round);
              EXPECT_GE(slot, base);
              EXPECT_LT(slot, base + threads * 2 * window);
              EXPECT_EQ(layout.thread_of(slot), t);
              EXPECT_EQ(layout.entry_of(slot), e);
              EXPECT_TRUE(used.insert(slot).second) << "slot " << slot << " assigned twice";
            }
          }
        }
        EXPECT_EQ(used.size(), threads * 2 * window);
      }
    }
  }
}

TEST(WireSlotLayout, SwitchThreadsOwnTheWorkersThreadsModuloSOrTakeTurnsBeyondThem) {
  // S <= T: worker thread t on switch thread t mod S, every entry (the layout before S > T).
  for (std::uint32_t e = 0; e < 8; ++e) {
    EXPECT_EQ(SlotLayout::switch_thread(0, e, 4, 4), 0u);
    EXPECT_EQ(SlotLayout::switch_thread(3, e, 4, 4), 3u);
    EXPECT_EQ(SlotLayout::switch_thread(3, e, 4, 2), 1u);
    EXPECT_EQ(SlotLayout::switch_thread(2, e, 3, 1), 0u);
  }
  // S > T: thread t's entries take turns over switch threads t, t + T, ... < S.
  EXPECT_EQ(SlotLayout::switch_thread(0, 0, 4, 8), 0u);
  EXPECT_EQ(SlotLayout::switch_thread(0, 1, 4, 8), 4u);
  EXPECT_EQ(SlotLayout::switch_thread(0, 2, 4, 8), 0u);
  EXPECT_EQ(SlotLayout::switch_thread(3, 1, 4, 8), 7u);
  EXPECT_EQ(SlotLayout::switch_thread(1, 1, 2, 4), 3u);
  EXPECT_EQ(SlotLayout::switch_thread(0, 1, 3, 4), 3u);  // only thread 0 has a second
  EXPECT_EQ(SlotLayout::switch_thread(1, 1, 3, 4), 1u);
  // Every switch thread owns some entry while S <= T * W, and an entry's two slots one thread.
  for (const std::uint32_t window : {1u, 2u, 8u}) {
    for (std::uint32_t threads = 1; threads <= 5; ++threads) {
      for (std::uint32_t switch_threads = 1; switch_threads <= std::min(12u, threads * window); ++switch_threads) {
        const SlotLayout layout{16, window};
        std::set<std::uint32_t> owners;
        for (std::uint32_t t = 0; t < threads; ++t) {
          for (std::uint32_t e = 0; e < window; ++e) {
            const std::uint32_t owner = SlotLayout::switch_thread(t, e, threads, switch_threads);
            ASSERT_LT(owner, switch_threads);
            const std::uint32_t slot0 = layout.slot(t, e, 0);
            EXPECT_EQ(SlotLayout::switch_thread(layout.thread_of(slot0), layout.entry_of(slot0), threads,
                                                switch_threads),
                      owner);
            const std::uint32_t slot1 = layout.slot(t, e, 1);
            EXPECT_EQ(SlotLayout::switch_thread(layout.thread_of(slot1), layout.entry_of(slot1), threads,
                                                switch_threads),
                      owner);
            owners.insert(owner);
          }
        }
        EXPECT_EQ(owners.size(), switch_threads) << "T " << threads << " S " << switch_threads << " W " << window;
      }
    }
  }
}

TEST(WireSlotLayout, SequenceNumbersOfRounds) {
  EXPECT_EQ(SlotLayout::seq_of_round(0), 1u);  // the first use of a slot is seq 1
  EXPECT_EQ(SlotLayout::seq_of_round(1), 1u);
  EXPECT_EQ(SlotLayout::seq_of_round(2), 2u);
  EXPECT_EQ(SlotLayout::seq_of_round(3), 2u);
  EXPECT_EQ(SlotLayout::seq_of_round(101), 51u);
  // Consecutive uses of one slot (rounds r and r + 2) get consecutive sequence numbers, also
  // where the 32-bit number wraps.
  for (const std::uint64_t round :
       {std::uint64_t{0}, std::uint64_t{5}, 2 * std::uint64_t{0xfffffffe}, 2 * std::uint64_t{0xfffffffe} + 1,
        2 * std::uint64_t{0xffffffff}, std::uint64_t{1} << 40}) {
    EXPECT_EQ(static_cast<std::uint32_t>(SlotLayout::seq_of_round(round + 2) - SlotLayout::seq_of_round(round)), 1u)
        << "round " << round;
  }
  EXPECT_EQ(SlotLayout::seq_of_round(2 * std::uint64_t{0xfffffffe}), 0xffffffffu);
  EXPECT_EQ(SlotLayout::seq_of_round(2 * std::uint64_t{0xffffffff}), 0u);
}

}  // namespace
}  // namespace dpa::protocol

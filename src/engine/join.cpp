// SPDX-License-Identifier: Apache-2.0
#include "engine/join.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <random>
#include <span>
#include <string>

#include "common/logging.hpp"
#include "dpa/error.hpp"
#include "transport/send.hpp"

namespace dpa::detail {

using protocol::ErrorCode;
using protocol::Header;
namespace flag = protocol::flag;

namespace {

// Room for the largest JOIN request (64 words after the header), sealed.
constexpr std::size_t kJoinPacketBytes = protocol::kHeaderSize + 4 * 64 + protocol::kTagSize;

std::uint32_t random_nonce() {
  std::random_device device;
  std::uint32_t nonce = 0;
  while (nonce == 0) nonce = device();
  return nonce;
}

std::uint64_t random_salt() {
  std::random_device device;
  return std::uint64_t{device()} << 32 | device();
}

// Whether this rank offers AES-256-GCM for data (protocol.md §6.6): it has a key, data_mac allows
// it and the CPU has AES-NI and PCLMUL. The switch chooses it only if every rank offers it.
bool offers_aes256gcm(const Config& config) {
  return config.auth_key && config.data_mac == "auto" && protocol::aes256gcm_available();
}

std::string who_joins(const Config& config, const transport::Endpoint& switch_endpoint) {
  return "rank " + std::to_string(config.rank) + ", session " + std::to_string(config.session) + " at " +
         switch_endpoint.to_string();
}

[[noreturn]] void throw_join_error(const Config& config, const Header& reply,
                                   const transport::Endpoint& switch_endpoint) {
  const std::string who = "rank " + std::to_string(config.rank) + ", session " +
                          std::to_string(config.session) + " at " + switch_endpoint.to_string();
  const std::uint32_t expected = reply.offset;
  switch (reply.error) {
    case ErrorCode::unknown_session:
      throw ConfigError("session " + std::to_string(config.session) + " is unknown to the switch at " +
                        switch_endpoint.to_string() + " (check DPA_SESSION / the switch config)");
    case ErrorCode::not_registered:
      throw ConfigError(who + ": this host is not registered as a worker of the session");
    case ErrorCode::rank_out_of_range:
      throw ConfigError(who + ": rank " + std::to_string(config.rank) +
                        " out of range for the session's world size " + std::to_string(expected));
    case ErrorCode::world_size_mismatch:
      throw ConfigError(who + ": world_size " + std::to_string(config.world_size) +
                        " differs from the session's world size " + std::to_string(expected));
    case ErrorCode::payload_mismatch:
      throw ConfigError(who + ": payload " + std::to_string(config.payload) +
                        " differs from the session's payload " + std::to_string(expected));
    case ErrorCode::auth_mismatch:
      throw ConfigError(who + ": the session authenticates its packets (protocol.md §6.6) and this rank has no "
                        "key: set auth_key_file / DPA_AUTH_KEY_FILE to this rank's key (dpa-switch-ctl rank-key)");
    case ErrorCode::session_taken_over:
      throw ProtocolError(who + ": " + taken_over_reason(reply) + ": this job's generation is gone");
    case ErrorCode::pool_too_small:
      throw ConfigError(who + ": threads * 2 * window = " + std::to_string(config.pool_slots()) +
                        " slots exceed the session's pool of " + std::to_string(expected));
    case ErrorCode::threads_mismatch:
    case ErrorCode::window_mismatch: {
      // The switch names the rank that differs from the others, its host and its value.
      const std::string setting = reply.error == ErrorCode::threads_mismatch ? "threads" : "window";
      const transport::Endpoint culprit{static_cast<std::uint32_t>(reply.bitmap), 0};
      const auto value = static_cast<std::uint32_t>(reply.bitmap >> 32);
      throw ConfigError(who + ": ranks disagree on " + setting + ": rank " +
                        std::to_string(reply.rank) + " at " +
                        culprit.to_string().substr(0, culprit.to_string().rfind(':')) + " uses " +
                        std::to_string(value) + ", the other ranks " + std::to_string(expected) +
                        " (this rank: " +
                        std::to_string(setting == "threads" ? config.threads : config.window) + ")");
    }
    default:
      throw ProtocolError(who + ": join rejected: " + std::string(protocol::to_string(reply.error)));
  }
}

// This rank's JOIN: a fresh nonce per join attempt, kept when the switch asks for a cookie.
struct JoinRequestPacket {
  Header header;
  protocol::JoinRequest request;

  JoinRequestPacket(const Config& config, const std::vector<std::uint16_t>& thread_ports, const SessionInfo* rejoining) {
    request.nonce = random_nonce();
    request.world_size = static_cast<std::uint32_t>(config.world_size);
    request.threads = static_cast<std::uint32_t>(config.threads);
    request.window = static_cast<std::uint32_t>(config.window);
    request.payload = config.payload;
    std::copy(thread_ports.begin(), thread_ports.end(), request.ports);
    header.flags = flag::kJoin;
    header.session = config.session;
    if (rejoining != nullptr) {
      header.token = rejoining->token;
      header.offset = rejoining->rank_secret;
    }
    header.rank = static_cast<std::uint8_t>(config.rank);
    header.count = static_cast<std::uint16_t>(request.words());
    if (offers_aes256gcm(config)) {
      // The data MACs offered besides SipHash, and the salt the generation's keys derive from.
      header.op_length = protocol::offer_bit(protocol::DataMac::aes256gcm);
      header.bitmap = random_salt();
    }
  }

  // The datagram (sealed with `keys` when the rank has them) in `packet`; returns its bytes.
  std::span<const std::byte> encode(const std::optional<protocol::RankTagKeys>& keys,
                                    std::span<std::byte, kJoinPacketBytes> packet) const {
    protocol::encode(header, packet.data());
    protocol::encode(request, packet.data() + protocol::kHeaderSize);
    std::size_t bytes = protocol::kHeaderSize + 4 * request.words();
    if (keys) bytes = protocol::seal(keys->request, packet.data(), bytes);
    return packet.first(bytes);
  }
};

// Refusals that may pass (another job holds the session, another source holds this rank's
// pending JOIN) and replies that cannot end the join (untagged or badly tagged): the JOIN is
// repeated meanwhile, and at the deadline they explain why it failed.
struct JoinHindrances {
  std::uint32_t busy_generation = 0;  // the switch refused: another job holds the session
  // The switch refused: another source holds this rank's pending JOIN (a JOIN storm, or a stale
  // process of this rank). Transient while that source gives way, so keep asking.
  std::uint64_t contended_refusals = 0;
  transport::Endpoint contender;
  std::uint64_t contender_joins = 0;
  bool session_without_auth = false;  // the switch said the session does not authenticate
  std::uint64_t rejected_replies = 0;  // replies without this rank's tag
  // The switch hears a JOIN storm and asks for this cookie in op_id (§6.3): resend at once.
  std::optional<std::uint32_t> cookie;

  // The error of a join that did not complete by the deadline, naming what hindered it.
  [[noreturn]] void throw_at_deadline(const Config& config, const transport::Queue& control,
                                      const transport::Endpoint& switch_endpoint) const {
    if (busy_generation != 0) {
      throw ConfigError("rank " + std::to_string(config.rank) + ": session " +
                        std::to_string(config.session) + " at " + switch_endpoint.to_string() +
                        " is in use by another job (its generation " +
                        std::to_string(busy_generation) + " is active) for the whole " +
                        std::to_string(config.join_timeout.count()) +
                        " ms join timeout: use another DPA_SESSION, or stop that job");
    }
    if (contended_refusals != 0) {
      throw ConfigError("rank " + std::to_string(config.rank) + ": session " +
                        std::to_string(config.session) + " at " + switch_endpoint.to_string() +
                        ": the switch refused this rank's JOIN " + std::to_string(contended_refusals) +
                        " times within the " + std::to_string(config.join_timeout.count()) +
                        " ms join timeout because " + contender.to_string() +
                        ", not this rank's socket, held rank " + std::to_string(config.rank) +
                        "'s pending JOIN (" + std::to_string(contender_joins) +
                        (contender_joins == 0xffff ? " or more" : "") +
                        " JOINs from that source, not in this job): a process on a worker host is "
                        "sending JOINs for this session (a stale rank, or a JOIN storm)");
    }
    if (session_without_auth) {
      throw ConfigError("rank " + std::to_string(config.rank) + ": session " + std::to_string(config.session) +
                        " at " + switch_endpoint.to_string() +
                        " does not authenticate, but this rank has an authentication key (auth_key_file / "
                        "DPA_AUTH_KEY_FILE): give the session an auth_key_file, or this rank none");
    }
    if (rejected_replies != 0) {
      throw ConfigError("rank " + std::to_string(config.rank) + ": session " + std::to_string(config.session) +
                        " at " + switch_endpoint.to_string() + ": " + std::to_string(rejected_replies) +
                        " replies to this rank's JOIN failed authentication within the " +
                        std::to_string(config.join_timeout.count()) +
                        " ms join timeout: is this rank's key (auth_key_file / DPA_AUTH_KEY_FILE) the one "
                        "dpa-switch-ctl rank-key derives from the session's for rank " +
                        std::to_string(config.rank) + "?");
    }
    // A port without link explains the silence better than the switch or the other ranks.
    const std::string link_problems = control.link_problems();
    throw TimeoutError("rank " + std::to_string(config.rank) + ": session " +
                       std::to_string(config.session) + " at " + switch_endpoint.to_string() +
                       " did not complete its join within " +
                       std::to_string(config.join_timeout.count()) +
                       " ms: is dpa-switch running there and have all " +
                       std::to_string(config.world_size) + " ranks started?" +
                       (link_problems.empty() ? "" : " This rank's " + link_problems));
  }
};

// The data MACs the JOIN ack `reply` names (its op_id, protocol.md §6.2) for this rank, which
// sent `sent`; the ack itself is tagged whenever this rank has a key, so a forger cannot change it.
std::optional<protocol::PacketMacs> data_macs(const Config& config, const Header& reply, const JoinRequestPacket& sent,
                                              const std::optional<protocol::RankTagKeys>& keys,
                                              const transport::Endpoint& switch_endpoint) {
  using protocol::DataMac;
  const auto unusable = [&](const char* why) {
    return ProtocolError(who_joins(config, switch_endpoint) + ": the JOIN ack names data authentication " +
                         std::to_string(reply.op_id) + ", which this rank " + why);
  };
  switch (static_cast<DataMac>(reply.op_id)) {
    case DataMac::none: return std::nullopt;
    case DataMac::siphash24:
      if (!keys) throw unusable("cannot use without a key");
      return protocol::siphash24_macs(*keys);
    case DataMac::aes256gcm:
      if (!keys) throw unusable("cannot use without a key");
      if ((sent.header.op_length & protocol::offer_bit(DataMac::aes256gcm)) == 0) throw unusable("did not offer");
      return protocol::aes256gcm_macs(*config.auth_key, {config.session, reply.seq, reply.token, reply.offset,
                                                         sent.request.nonce, sent.header.bitmap});
  }
  throw unusable(keys ? "does not know (a newer switch?)" : "cannot use without a key");
}

// What the JOIN ack `reply` with `answer` tells this rank, which sent `sent`.
SessionInfo session_info(const Config& config, const Header& reply, const protocol::JoinReply& answer,
                         const JoinRequestPacket& sent, const std::optional<protocol::RankTagKeys>& keys,
                         const transport::Endpoint& switch_endpoint) {
  SessionInfo info;
  info.payload = answer.payload;
  info.world_size = static_cast<int>(answer.world_size);
  info.k_default = static_cast<std::uint8_t>(answer.k_default);
  info.straggler_timeout = std::chrono::microseconds(protocol::ticks_to_us(answer.straggler_timeout_ticks));
  info.pool_base = answer.pool_base;
  info.generation = answer.generation;
  info.token = answer.token;
  info.rank_secret = reply.offset;
  info.tag_keys = keys;
  info.data_macs = data_macs(config, reply, sent, keys, switch_endpoint);
  if (config.auth_data && !info.data_macs) {
    throw ConfigError(who_joins(config, switch_endpoint) + ": this rank requires authenticated data (auth_data / "
                      "DPA_AUTH=data) and the session does not authenticate data: set \"auth_data\": true on "
                      "the session (dpa-switch --auth-data, dpa-switch-ctl add-session --auth-data)");
  }
  for (std::uint32_t p = 0; p < answer.switch_ports; ++p) {
    info.switch_ports.push_back({switch_endpoint.address, answer.ports[p]});
  }
  return info;
}

// One received packet: the session's ack (returned), a refusal that ends the join (thrown), or
// something to note in `hindrances` or ignore (nothing returned).
std::optional<SessionInfo> read_join_reply(const Config& config, const transport::RxPacket& packet,
                                           const JoinRequestPacket& sent,
                                           const std::optional<protocol::RankTagKeys>& keys,
                                           const transport::Endpoint& switch_endpoint, JoinHindrances& hindrances) {
  if (packet.from != switch_endpoint) return std::nullopt;
  Header reply;
  std::span<const std::byte> payload;
  if (protocol::decode(packet.data, reply, payload) != protocol::DecodeStatus::ok) return std::nullopt;
  if (reply.session != config.session || !reply.has(flag::kJoin)) return std::nullopt;
  if (reply.has(flag::kError) && reply.error == ErrorCode::auth_mismatch) {
    // Untagged (the switch has no key to share with this rank): a forgery could send it, so
    // it ends nothing for a rank with a key; it explains the timeout instead.
    if (!keys) throw_join_error(config, reply, switch_endpoint);
    hindrances.session_without_auth = true;
    return std::nullopt;
  }
  if (keys && !(reply.has(flag::kAuth) && protocol::verify_tag(keys->reply, packet.data))) {
    ++hindrances.rejected_replies;
    return std::nullopt;
  }
  if (reply.has(flag::kError) && reply.error == ErrorCode::session_busy) {
    hindrances.busy_generation = reply.offset;  // keep asking: the session frees when that job ends
    return std::nullopt;
  }
  if (reply.has(flag::kError) && reply.error == ErrorCode::join_cookie) {
    hindrances.cookie = reply.offset;
    return std::nullopt;
  }
  if (reply.has(flag::kError) && reply.error == ErrorCode::rank_contended) {
    ++hindrances.contended_refusals;
    hindrances.contender = {static_cast<std::uint32_t>(reply.bitmap >> 16), static_cast<std::uint16_t>(reply.bitmap)};
    hindrances.contender_joins = reply.bitmap >> 48;
    return std::nullopt;
  }
  if (reply.has(flag::kError)) throw_join_error(config, reply, switch_endpoint);
  protocol::JoinReply answer;
  if (!reply.has(flag::kResult) || !protocol::decode(payload, answer)) return std::nullopt;
  return session_info(config, reply, answer, sent, keys, switch_endpoint);
}

}  // namespace

std::string taken_over_reason(const Header& error) {
  std::string reason = "generation " + std::to_string(error.offset) + " of another job took the session over after ";
  if (error.bitmap == 0) return reason + "this job sent nothing for longer than the session's idle_timeout_ms";
  std::string ranks;
  for (std::uint32_t r = 0; r < protocol::kMaxWorld; ++r) {
    if (((error.bitmap >> r) & 1) != 0) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  }
  return reason + "a LEAVE with the rank's secret from the address of rank " + ranks +
         " of this job freed it (that rank's context closed, or a process that captured its JOIN ack sent it)";
}

SessionInfo join_session(const Config& config, transport::Queue& control,
                         const transport::Endpoint& switch_endpoint,
                         const std::vector<std::uint16_t>& thread_ports,
                         const SessionInfo* rejoining) {
  if (config.auth_data && !config.auth_key) {
    throw ConfigError("rank " + std::to_string(config.rank) + ": auth_data (DPA_AUTH=data) authenticates data with "
                      "this rank's key, and it has none: set auth_key_file / DPA_AUTH_KEY_FILE");
  }
  // Authenticated admission: the JOIN is sealed with this rank's key, and only replies with its tag count.
  std::optional<protocol::RankTagKeys> keys;
  if (config.auth_key) keys = protocol::tag_keys(*config.auth_key);
  std::array<std::byte, kJoinPacketBytes> packet{};
  JoinRequestPacket request(config, thread_ports, rejoining);
  std::span<const std::byte> join = request.encode(keys, packet);

  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + config.join_timeout;
  // JOINs are cheap and the other ranks may start late: retry often, at least every 100 ms
  // (the switch forgets a pending JOIN that is not repeated within a second).
  const auto max_retry = std::chrono::duration_cast<clock::duration>(std::chrono::milliseconds(100));
  auto retry = std::min(std::chrono::duration_cast<clock::duration>(config.retransmit_timeout), max_retry);
  JoinHindrances hindrances;
  std::array<transport::RxPacket, 16> received;

  log().debug("rank {} joining session {} at {}", config.rank, config.session,
              switch_endpoint.to_string());
  transport::send_datagram(control, join, switch_endpoint);
  auto resend_at = clock::now() + retry;
  while (true) {
    const auto now = clock::now();
    if (now >= deadline) hindrances.throw_at_deadline(config, control, switch_endpoint);
    if (now >= resend_at) {
      transport::send_datagram(control, join, switch_endpoint);
      retry = std::min(retry * 2, max_retry);
      resend_at = now + retry;
    }
    const std::size_t n = control.receive(received, std::min(resend_at, deadline) - now);
    for (std::size_t i = 0; i < n; ++i) {
      if (std::optional<SessionInfo> info = read_join_reply(config, received[i], request, keys, switch_endpoint, hindrances)) {
        log().debug("rank {} joined session {} generation {} (payload {}, K {})", config.rank,
                    config.session, info->generation, info->payload, info->k_default);
        return *info;
      }
      if (hindrances.cookie) {
        // The same JOIN, with the cookie the switch sent this socket, at once.
        request.header.op_id = *hindrances.cookie;
        hindrances.cookie.reset();
        join = request.encode(keys, packet);
        transport::send_datagram(control, join, switch_endpoint);
      }
    }
  }
}

void leave_session(const Config& config, const SessionInfo& session, transport::Queue& control,
                   const transport::Endpoint& switch_endpoint) {
  Header header;
  header.flags = flag::kLeave;
  header.session = config.session;
  header.token = session.token;
  header.offset = session.rank_secret;
  header.rank = static_cast<std::uint8_t>(config.rank);
  std::array<std::byte, protocol::kHeaderSize + protocol::kTagSize> packet{};
  protocol::encode(header, packet.data());
  const std::size_t bytes =
      session.tag_keys ? protocol::seal(session.tag_keys->request, packet.data(), protocol::kHeaderSize)
                       : protocol::kHeaderSize;
  transport::send_datagram(control, std::span(packet.data(), bytes), switch_endpoint);
}

}  // namespace dpa::detail

// SPDX-License-Identifier: Apache-2.0
// Joining a session: every rank announces its configuration and thread ports through the
// switch, which resets the session's slots for the new generation once all ranks are in.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "dpa/config.hpp"
#include "protocol/auth.hpp"
#include "protocol/packet_mac.hpp"
#include "protocol/wire.hpp"
#include "transport/queue.hpp"

namespace dpa::detail {

// What the switch told this rank in its JOIN reply.
struct SessionInfo {
  std::uint32_t payload = 0;
  int world_size = 0;
  std::uint8_t k_default = 0;
  std::chrono::microseconds straggler_timeout{0};
  std::uint32_t pool_base = 0;
  std::uint32_t generation = 0;
  std::uint32_t token = 0;  // job token: every request carries it, every reply must
  std::uint32_t rank_secret = 0;  // this rank's secret: its rejoin and LEAVE carry it (protocol.md §6.4)
  std::vector<transport::Endpoint> switch_ports;  // worker thread t uses [t % size()]
  // Authenticated admission (protocol.md §6.6): this rank's tag keys; its JOIN, LEAVE and
  // KEEPALIVE are sealed with them and every JOIN reply must carry their tag.
  std::optional<protocol::RankTagKeys> tag_keys;
  // The MACs of this generation's data if the session authenticates data (the JOIN ack says so
  // and which): every data packet and probe is then sealed with `request` (each engine thread
  // with its own nonces, protocol.md §6.6) and every reply to them must pass `reply`. Empty
  // otherwise. The engines made right after the JOIN are the only senders with these keys.
  std::optional<protocol::PacketMacs> data_macs;
};

// Sends JOIN from `control` (thread 0's queue) and waits for the switch's answer.
// `rejoining` is the rank's current generation when the ranks rejoin after a failed
// operation (null for a first join): its token and the rank's secret prove the rejoin is this
// rank's. Throws ConfigError when the switch rejects the configuration (naming the setting),
// ProtocolError when another job took the session over, and TimeoutError when not every rank
// joined within config.join_timeout.
SessionInfo join_session(const Config& config, transport::Queue& control,
                         const transport::Endpoint& switch_endpoint,
                         const std::vector<std::uint16_t>& thread_ports,
                         const SessionInfo* rejoining = nullptr);

// Why another job holds the session, from a session_taken_over ERROR (protocol.md §4): `offset`
// the generation in use, `bitmap` the ranks of this job whose LEAVE freed the session (0: it was
// idle longer than the session's idle_timeout_ms).
std::string taken_over_reason(const protocol::Header& error);

// Tells the switch that this rank leaves its generation, so another job may use the session
// at once instead of after the session's idle timeout. Best effort: one datagram.
void leave_session(const Config& config, const SessionInfo& session, transport::Queue& control,
                   const transport::Endpoint& switch_endpoint);

}  // namespace dpa::detail

// Joining a session: every rank announces its configuration and thread ports through the
// switch, which resets the session's slots for the new generation once all ranks are in.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "dpa/config.hpp"
#include "protocol/wire.hpp"
#include "transport/transport.hpp"

namespace dpa::detail {

// What the switch told this rank in its JOIN reply.
struct SessionInfo {
  std::uint32_t payload = 0;
  int world_size = 0;
  std::uint8_t k_default = 0;
  std::chrono::microseconds straggler_timeout{0};
  std::uint32_t pool_base = 0;
  std::uint32_t generation = 0;
  std::vector<transport::Endpoint> switch_ports;  // worker thread t uses [t % size()]
};

// Sends JOIN from `control` (thread 0's transport) and waits for the switch's answer.
// Throws ConfigError when the switch rejects the configuration (naming the setting) and
// TimeoutError when not every rank joined within config.join_timeout.
SessionInfo join_session(const Config& config, transport::Transport& control,
                         const transport::Endpoint& switch_endpoint,
                         const std::vector<std::uint16_t>& thread_ports);

}  // namespace dpa::detail

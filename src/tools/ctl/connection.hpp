// SPDX-License-Identifier: Apache-2.0
// A connection to dpa-switch's control channel (a Unix socket or TCP): one JSON request line, one
// JSON reply line, every step within one deadline.
#pragma once

#include <chrono>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "common/unique_fd.hpp"
#include "dpa/host_port.hpp"

namespace dpa::tools::ctl {

// A request that could not be made or that the switch refused: exit 1 with the message.
struct Failure {
  std::string message;
};

using UnixPath = std::string;

// "unix:PATH" or anything with a '/': dpa-switch --control's Unix socket; else "host:port", or a
// port alone on 127.0.0.1 (dpa-switch's --control-host default).
std::variant<UnixPath, dpa::HostPort> control_address(const std::string& text, const std::string& source);

class Connection {
 public:
  using Clock = std::chrono::steady_clock;

  // Connects to `to`, failing (Failure) once `deadline` has passed.
  Connection(const std::variant<UnixPath, dpa::HostPort>& to, Clock::time_point deadline);

  // Sends one request line and returns the reply line, parsed.
  nlohmann::json request(const nlohmann::json& message);

 private:
  [[noreturn]] void fail_with_errno(const char* doing) const;
  void wait_for(short events, const char* doing) const;

  detail::UniqueFd fd_;
  Clock::time_point deadline_;
  std::string where_;
};

}  // namespace dpa::tools::ctl

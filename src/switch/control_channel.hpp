// The software switch's control channel: JSON requests, one per line, over a TCP connection to
// a loopback port; one JSON reply line per request. Lets an operator or a job launcher add and
// remove sessions of a running dpa-switch and read its counters.
//
//   {"op": "add_session", "session": {"id": 2, "world_size": 4, ...}}  -> {"ok": true}
//   {"op": "remove_session", "id": 2}                                  -> {"ok": true}
//   {"op": "sessions"}                                 -> {"ok": true, "sessions": [1, 2]}
//   {"op": "session_status"}  -> {"ok": true, "sessions": [{"id": 1, "world_size": 4, ...,
//                                  "generation": 3, "joined": [0, 1, 2, 3], "counters": {...}}]}
//   {"op": "counters"}                                 -> {"ok": true, "counters": {...}}
//   {"op": "set_clock", "ticks": 7}    -> {"ok": true} (SwitchConfig::manual_clock)
//   anything else                                      -> {"ok": false, "error": "..."}
//
// One thread serves every client with poll() over non-blocking sockets, so a slow or idle
// client never delays another. Every failure of a request, whatever its cause, is an error
// reply; the switch keeps running.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>

#include "dpa/switch.hpp"

namespace dpa::sw {

struct ControlChannelOptions {
  // A client that sends no request for this long is told so and disconnected.
  std::chrono::milliseconds idle_timeout{30000};
  // Connections beyond this many are told so and closed at once.
  std::size_t max_clients = 16;
  // A request line longer than this is answered with an error and the connection closed.
  std::size_t max_request_bytes = 64 * 1024;

  void validate() const;  // throws ConfigError naming dpa-switch's flag for the setting
};

class ControlChannel {
 public:
  // Binds host:port (port 0: ephemeral) and serves requests on a thread of its own.
  // Throws dpa::Error if the port cannot be bound.
  ControlChannel(SoftwareSwitch& target, const std::string& host, std::uint16_t port,
                 const ControlChannelOptions& options = {});
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  [[nodiscard]] std::uint16_t port() const { return port_; }

  // Executes one request line and returns the reply line (without the newline); a request that
  // fails for any reason gets an error reply.
  std::string handle(const std::string& request);

 private:
  struct Client;
  void serve();

  SoftwareSwitch& switch_;
  ControlChannelOptions options_;
  int listener_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace dpa::sw

// The software switch's control channel: JSON requests, one per line, over a TCP connection to
// a loopback port; one JSON reply line per request. Lets an operator or a job launcher add and
// remove sessions of a running dpa-switch and read its counters.
//
//   {"op": "add_session", "session": {"id": 2, "world_size": 4, ...}}  -> {"ok": true}
//   {"op": "remove_session", "id": 2}                                  -> {"ok": true}
//   {"op": "sessions"}                                 -> {"ok": true, "sessions": [1, 2]}
//   {"op": "counters"}                                 -> {"ok": true, "counters": {...}}
//   anything else                                      -> {"ok": false, "error": "..."}
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "dpa/switch.hpp"

namespace dpa::sw {

class ControlChannel {
 public:
  // Binds host:port (port 0: ephemeral) and serves requests on a thread of its own.
  // Throws dpa::Error if the port cannot be bound.
  ControlChannel(SoftwareSwitch& target, const std::string& host, std::uint16_t port);
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  [[nodiscard]] std::uint16_t port() const { return port_; }

  // Executes one request line and returns the reply line (without the newline).
  std::string handle(const std::string& request);

 private:
  void serve();
  void serve_connection(int connection);

  SoftwareSwitch& switch_;
  int listener_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace dpa::sw

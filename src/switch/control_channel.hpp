// SPDX-License-Identifier: Apache-2.0
// The software switch's control channel: JSON requests, one per line, over a Unix-domain socket
// or a TCP connection (control_listener.hpp); one JSON reply line per request. Lets an operator or
// a job launcher add and remove sessions of a running dpa-switch and read its counters.
//
//   {"op": "auth", "secret": "..."}                                    -> {"ok": true}
//   {"op": "add_session", "session": {"id": 2, "world_size": 4, ...}}  -> {"ok": true}
//   {"op": "remove_session", "id": 2}                                  -> {"ok": true}
//   {"op": "sessions"}                                 -> {"ok": true, "sessions": [1, 2]}
//   {"op": "session_status"}  -> {"ok": true, "sessions": [{"id": 1, "world_size": 4, ...,
//                                  "generation": 3, "joined": [0, 1, 2, 3], "counters": {...}}]}
//   {"op": "counters"}                                 -> {"ok": true, "counters": {...}}
//   {"op": "set_clock", "ticks": 7}    -> {"ok": true} (SwitchConfig::manual_clock)
//   anything else                                      -> {"ok": false, "error": "..."}
//
// Who may do what (docs/switch-control.md, "Who may use the control channel"): a connection is
// trusted when it comes over the Unix socket from the switch's own uid or root (SO_PEERCRED), or
// once it sent the channel's secret. Other connections may make the read-only requests (sessions,
// session_status, counters) only where the channel is opened for reading, and nothing else; a
// connection that can do nothing at all is told so and closed.
//
// One thread serves every client with poll() over non-blocking sockets, so a slow or idle
// client never delays another. Every failure of a request, whatever its cause, is an error
// reply; the switch keeps running.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "dpa/switch.hpp"
#include "switch/control_listener.hpp"

namespace dpa::sw {

struct ControlChannelOptions {
  // A client that sends no request for this long is told so and disconnected.
  std::chrono::milliseconds idle_timeout{30000};
  // Connections beyond this many are told so and closed at once.
  std::size_t max_clients = 16;
  // A request line longer than this is answered with an error and the connection closed.
  std::size_t max_request_bytes = 64 * 1024;

  // The secret ({"op": "auth"}) that makes any connection trusted; empty: none.
  std::string secret;
  // Untrusted connections may make the read-only requests. A Unix socket is then created 0666
  // instead of 0600, so that other users can connect at all.
  bool read_only_open = false;

  void validate() const;  // throws ConfigError naming dpa-switch's flag for the setting
};

// What a connection was refused, for an operator to see attempts (the "counters" reply's
// "control_channel" object).
struct ControlChannelCounters {
  std::uint64_t connections = 0;             // accepted
  std::uint64_t connections_refused = 0;     // closed at once: not trusted, and nothing is open to them
  std::uint64_t requests_refused = 0;        // a request the connection was not entitled to
  std::uint64_t authentications_failed = 0;  // a wrong secret (the connection is closed)
};

class ControlChannel {
 public:
  // Listens at `address` and serves requests on a thread of its own. Throws ConfigError for a
  // TCP address without a secret or read_only_open (no one could ever add a session there, and
  // the switch's user could not be told from anyone else), dpa::Error if it cannot listen.
  ControlChannel(SoftwareSwitch& target, const ControlAddress& address, const ControlChannelOptions& options = {});
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  [[nodiscard]] std::uint16_t port() const { return listener_.port(); }  // TCP: the bound port
  [[nodiscard]] std::string where() const { return listener_.where(); }    // "unix:PATH" or "HOST:PORT"

 private:
  enum class Access { none, read_only, full };
  struct Client;
  void serve();
  void admit(ControlPeer peer, std::list<Client>& clients);
  // Executes one request line of `client` and returns the reply line (without the newline); a
  // request that fails for any reason gets an error reply.
  std::string handle(const std::string& request, Client& client);
  std::string execute(const std::string& op, const nlohmann::json& message);
  std::string authenticate(const nlohmann::json& message, Client& client);

  SoftwareSwitch& switch_;
  ControlChannelOptions options_;
  ControlListener listener_;
  ControlChannelCounters counters_;  // the serving thread's alone
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace dpa::sw

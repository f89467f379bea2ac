// SPDX-License-Identifier: Apache-2.0
#include "switch/control_channel.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <list>
#include <nlohmann/json.hpp>
#include <vector>

#include <fmt/format.h>

#include "common/logging.hpp"
#include "common/unique_fd.hpp"
#include "dpa/error.hpp"
#include "switch/control_secret.hpp"
#include "switch/counter_fields.hpp"

namespace dpa::sw {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr auto kStopCheck = std::chrono::milliseconds(100);  // how often the thread checks for shutdown
constexpr std::size_t kLoggedRequestChars = 200;
constexpr std::size_t kMaxClients = 1024;
constexpr std::size_t kMaxRequestBytes = std::size_t{16} << 20;
constexpr auto kMaxIdleTimeout = std::chrono::hours(24);

template <class Counters, std::size_t N>
json counters_json(const Counters& counters, const std::array<CounterField<Counters>, N>& fields) {
  json object = json::object();
  for (const auto& field : fields) object[std::string(field.name)] = counters.*field.member;
  return object;
}

json session_json(const SessionStatus& session) {
  const SessionConfig& config = session.config;
  json ranks = json::array();
  for (std::uint32_t rank = 0; rank < 64; ++rank) {
    if (((session.joined >> rank) & 1) != 0) ranks.push_back(rank);
  }
  return json{{"id", config.id},
              {"world_size", config.world_size},
              {"k", config.k == 0 ? config.world_size : config.k},
              {"payload", config.payload},
              {"pool_base", config.pool_base},
              {"pool_size", config.pool_size},
              {"straggler_timeout_us", config.straggler_timeout.count()},
              {"idle_timeout_ms", config.idle_timeout.count()},
              {"authenticated", config.auth_key.has_value()},
              {"auth_data", config.auth_data},
              {"generation", session.generation},
              {"data_mac", session.data_mac},
              {"joined", ranks},
              {"counters", counters_json(session.counters, kSessionCounterFields)}};
}

std::string failure(const std::string& message) {
  return json{{"ok", false}, {"error", message}}.dump();
}

constexpr mode_t kOwnerOnly = 0600;
constexpr mode_t kAnyUser = 0666;

bool is_read_only(const std::string& op) { return op == "sessions" || op == "session_status" || op == "counters"; }
bool is_known(const std::string& op) {
  return is_read_only(op) || op == "add_session" || op == "remove_session" || op == "set_clock" || op == "auth";
}

std::string abbreviated(const std::string& text) {
  return text.size() <= kLoggedRequestChars ? text : text.substr(0, kLoggedRequestChars) + "...";
}

// The request as the log shows it: an auth request's secret never reaches the log.
std::string loggable(const std::string& request) {
  json message = json::parse(request, nullptr, /*allow_exceptions=*/false);
  if (!message.is_object() || !message.contains("secret")) return abbreviated(request);
  message["secret"] = "(hidden)";
  return abbreviated(message.dump());
}

}  // namespace

void ControlChannelOptions::validate() const {
  if (idle_timeout.count() <= 0 || idle_timeout > kMaxIdleTimeout) {
    throw ConfigError(fmt::format("--control-idle-timeout-ms {} out of range [1, {}]", idle_timeout.count(),
                                  std::chrono::milliseconds(kMaxIdleTimeout).count()));
  }
  if (max_clients < 1 || max_clients > kMaxClients) {
    throw ConfigError(fmt::format("--control-max-clients {} out of range [1, {}]", max_clients, kMaxClients));
  }
  if (max_request_bytes < 64 || max_request_bytes > kMaxRequestBytes) {
    throw ConfigError(fmt::format("--control-max-request-bytes {} out of range [64, {}]", max_request_bytes,
                                  kMaxRequestBytes));
  }
}

// One connection: what it sent that is not a whole line yet, and the replies not sent yet.
struct ControlChannel::Client {
  detail::UniqueFd fd;
  Access access = Access::none;
  std::string peer;  // who it is, for the log
  std::string received;
  std::string unsent;
  Clock::time_point last_request;
  // Closing: no more requests are read; once `unsent` is sent the write side is shut and what
  // the client still sends is discarded until it closes, so it never loses its last reply to a
  // reset.
  bool closing = false;
  bool write_shut = false;
  bool peer_done = false;  // the client shut its write side: answer what it sent, then close

  explicit Client(int connection) : fd(connection), last_request(Clock::now()) {}

  // Sends what the socket takes now; false when the connection is broken.
  bool flush() {
    while (!unsent.empty()) {
      const ssize_t sent = send(fd.get(), unsent.data(), unsent.size(), MSG_NOSIGNAL);
      if (sent < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      unsent.erase(0, static_cast<std::size_t>(sent));
    }
    return true;
  }

  void reply(const std::string& line) { unsent += line + "\n"; }
};

namespace {

// TCP without a secret or read_only_open: no one could ever add a session there, and the switch's
// user could not be told from anyone else.
const ControlAddress& checked(const ControlAddress& address, const ControlChannelOptions& options) {
  options.validate();
  if (const auto* tcp = std::get_if<HostPort>(&address); tcp && options.secret.empty() && !options.read_only_open) {
    throw ConfigError(fmt::format(
        "control channel on {} (--control-port): over TCP the switch's user cannot be told from anyone who reaches "
        "the port; give --control-secret-file FILE (clients send the secret before add/remove requests) or "
        "--control-read-only-open (sessions and counters only), or use --control PATH (a Unix socket only the "
        "switch's user can open)",
        tcp->to_string()));
  }
  return address;
}

}  // namespace

ControlChannel::ControlChannel(SoftwareSwitch& target, const ControlAddress& address,
                               const ControlChannelOptions& options)
    : switch_(target),
      options_(options),
      listener_(checked(address, options_), options_.read_only_open ? kAnyUser : kOwnerOnly) {
  thread_ = std::thread([this] { serve(); });
}

ControlChannel::~ControlChannel() {
  stop_.store(true, std::memory_order_relaxed);
  thread_.join();
}

std::string ControlChannel::handle(const std::string& request, Client& client) {
  try {
    const json message = json::parse(request);
    if (!message.is_object() || !message.contains("op") || !message["op"].is_string()) {
      return failure("a request is a JSON object with a string \"op\"");
    }
    const std::string op = message["op"];
    if (!is_known(op)) {
      return failure("unknown op \"" + op +
                     "\" (auth, add_session, remove_session, sessions, session_status, counters, set_clock)");
    }
    if (op == "auth") return authenticate(message, client);
    if (client.access == Access::full || (client.access == Access::read_only && is_read_only(op))) {
      return execute(op, message);
    }
    ++counters_.requests_refused;
    detail::log().warn("control: refused {} from {}: not authenticated", op, client.peer);
    if (!options_.secret.empty()) {
      return failure(op + " needs an authenticated connection: send {\"op\":\"auth\",\"secret\":\"...\"} "
                     "first (dpa-switch-ctl --secret-file)");
    }
    return failure(op + ": this connection may make only the read-only requests (sessions, session_status, "
                   "counters); add, remove and set_clock need the switch's user on its Unix socket");
  } catch (const json::exception& error) {
    return failure(std::string("invalid request: ") + error.what());
  } catch (const Error& error) {
    return failure(error.what());
  } catch (const std::exception& error) {
    return failure(std::string("request failed: ") + error.what());
  } catch (...) {
    return failure("request failed");
  }
}

std::string ControlChannel::authenticate(const json& message, Client& client) {
  if (options_.secret.empty()) {
    return failure("auth: this control channel has no secret (dpa-switch --control-secret-file)");
  }
  if (!message.contains("secret") || !message["secret"].is_string()) return failure("auth needs a string \"secret\"");
  if (!secrets_equal(options_.secret, message["secret"].get<std::string>())) {
    ++counters_.authentications_failed;
    detail::log().warn("control: wrong secret from {}; closing", client.peer);
    client.closing = true;
    return failure("auth: wrong secret; closing");
  }
  client.access = Access::full;
  return json{{"ok", true}}.dump();
}

std::string ControlChannel::execute(const std::string& op, const json& message) {
  if (op == "add_session") {
    if (!message.contains("session")) return failure("add_session needs \"session\"");
    switch_.add_session(SessionConfig::from_json(message["session"].dump(), "session"));
    return json{{"ok", true}}.dump();
  }
  if (op == "remove_session") {
    if (!message.contains("id") || !message["id"].is_number_unsigned() ||
        message["id"].get<std::uint64_t>() > std::numeric_limits<std::uint32_t>::max()) {
      return failure("remove_session needs a numeric \"id\" in [0, 4294967295]");
    }
    switch_.remove_session(message["id"].get<std::uint32_t>());
    return json{{"ok", true}}.dump();
  }
  if (op == "sessions") return json{{"ok", true}, {"sessions", switch_.session_ids()}}.dump();
  if (op == "counters") {
    const json control{{"connections", counters_.connections},
                       {"connections_refused", counters_.connections_refused},
                       {"requests_refused", counters_.requests_refused},
                       {"authentications_failed", counters_.authentications_failed}};
    return json{{"ok", true},
                {"counters", counters_json(switch_.counters(), kSwitchCounterFields)},
                {"control_channel", control}}
        .dump();
  }
  if (op == "session_status") {
    json sessions = json::array();
    for (const SessionStatus& session : switch_.session_status()) sessions.push_back(session_json(session));
    return json{{"ok", true}, {"sessions", sessions}}.dump();
  }
  // set_clock, the last op is_known admits besides auth
  if (!message.contains("ticks") || !message["ticks"].is_number_unsigned() ||
      message["ticks"].get<std::uint64_t>() > 0xffffffffu) {
    return failure("set_clock needs \"ticks\", an integer in [0, 2^32)");
  }
  switch_.set_clock(message["ticks"].get<std::uint32_t>());
  return json{{"ok", true}}.dump();
}

void ControlChannel::admit(ControlPeer peer, std::list<Client>& clients) {
  Client& client = clients.emplace_back(peer.fd);
  ++counters_.connections;
  client.peer = std::move(peer.name);
  const bool owner = peer.uid && (*peer.uid == geteuid() || *peer.uid == 0);
  client.access = owner ? Access::full : options_.read_only_open ? Access::read_only : Access::none;
  if (clients.size() > options_.max_clients) {
    client.reply(failure(fmt::format("the control channel serves at most {} clients at once; try again later",
                                     options_.max_clients)));
    client.flush();
    clients.pop_back();
    return;
  }
  if (client.access == Access::none && options_.secret.empty()) {
    // Reachable only where the operator widened the socket file's mode: the kernel's word wins.
    ++counters_.connections_refused;
    detail::log().warn("control: refused a connection from {}: not the switch's user (uid {})", client.peer,
                       geteuid());
    client.reply(failure(fmt::format("{} may not use this control channel: only the switch's user (uid {}) and root "
                                     "may; closing",
                                     client.peer, geteuid())));
    client.closing = true;  // it gets the reply, then end of stream, never a reset
  }
}

void ControlChannel::serve() {
  std::list<Client> clients;
  std::vector<pollfd> polled;
  char buffer[4096];
  while (!stop_.load(std::memory_order_relaxed)) {
    polled.clear();
    polled.push_back({listener_.fd(), POLLIN, 0});
    for (const Client& client : clients) {
      const short events = static_cast<short>((client.peer_done ? 0 : POLLIN) | (client.unsent.empty() ? 0 : POLLOUT));
      polled.push_back({client.fd.get(), events, 0});
    }
    // Wake up for shutdown and for the earliest idle deadline.
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(kStopCheck);
    const auto now = Clock::now();
    for (const Client& client : clients) {
      const auto deadline = client.last_request + (client.closing ? 2 : 1) * options_.idle_timeout;
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
      wait = std::clamp(left, std::chrono::milliseconds(0), wait);
    }
    if (poll(polled.data(), polled.size(), static_cast<int>(wait.count())) < 0 && errno != EINTR) {
      detail::log().error("control channel: poll failed: {}", std::strerror(errno));
      return;
    }

    auto entry = polled.begin() + 1;
    for (auto client = clients.begin(); client != clients.end(); ++entry) {
      bool keep = true;
      try {
        if ((entry->revents & (POLLIN | POLLHUP | POLLERR)) != 0 && !client->peer_done) {
          const ssize_t received = recv(client->fd.get(), buffer, sizeof buffer, 0);
          if (received == 0) {
            client->peer_done = true;
          } else if (received < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            keep = false;
          } else if (received > 0 && !client->closing) {
            client->received.append(buffer, static_cast<std::size_t>(received));
          }
        }
        for (auto newline = client->received.find('\n'); keep && !client->closing && newline != std::string::npos;
             newline = client->received.find('\n')) {
          const std::string request = client->received.substr(0, newline);
          client->received.erase(0, newline + 1);
          client->last_request = Clock::now();
          if (request.size() > options_.max_request_bytes) {
            client->reply(failure(fmt::format("request of {} bytes is longer than the limit of {}; closing",
                                              request.size(), options_.max_request_bytes)));
            client->closing = true;
            break;
          }
          if (request.find_first_not_of(" \t\r") == std::string::npos) continue;
          const std::string reply = handle(request, *client);
          detail::log().info("control: {} {} -> {}", client->peer, loggable(request), abbreviated(reply));
          client->reply(reply);
        }
        if (keep && !client->closing && client->received.size() > options_.max_request_bytes) {
          client->reply(failure(fmt::format("request longer than the limit of {} bytes; closing",
                                            options_.max_request_bytes)));
          client->closing = true;
        }
        if (keep && !client->closing && Clock::now() - client->last_request >= options_.idle_timeout) {
          client->reply(failure(fmt::format("no request for {} ms; closing", options_.idle_timeout.count())));
          client->closing = true;
        }
        // A client that does not read its replies is not worth a growing buffer either.
        keep = keep && client->flush() && client->unsent.size() <= options_.max_request_bytes &&
               !(client->peer_done && client->unsent.empty());
        if (keep && client->closing && client->unsent.empty() && !client->write_shut) {
          shutdown(client->fd.get(), SHUT_WR);
          client->write_shut = true;
        }
        // A closing client gets one more idle timeout to take its last reply and hang up.
        if (keep && client->closing && Clock::now() - client->last_request >= 2 * options_.idle_timeout) keep = false;
      } catch (const std::exception& error) {
        detail::log().error("control channel: dropping a client: {}", error.what());
        keep = false;
      }
      client = keep ? std::next(client) : clients.erase(client);
    }

    if ((polled.front().revents & POLLIN) != 0) {
      std::optional<ControlPeer> peer = listener_.accept();
      if (!peer) continue;
      try {
        admit(std::move(*peer), clients);
      } catch (const std::exception& error) {
        detail::log().error("control channel: refusing a client: {}", error.what());
      }
    }
  }
}

}  // namespace dpa::sw

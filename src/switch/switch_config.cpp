// SPDX-License-Identifier: Apache-2.0
#include <arpa/inet.h>

#include <array>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/json_fields.hpp"
#include "transport/transport_json.hpp"
#include "dpa/error.hpp"
#include "dpa/host_port.hpp"
#include "dpa/switch.hpp"
#include "protocol/auth.hpp"
#include "protocol/wire.hpp"
#include "switch/metrics_text.hpp"
#include "switch/session_memory.hpp"

namespace dpa {
namespace {

using detail::fail;
using detail::FieldReader;
using detail::FieldReaders;
using detail::json;
using detail::read_json;
using detail::read_object;
using detail::require_array;
using detail::require_object;

constexpr int kMaxSwitchThreads = 64;
constexpr std::uint32_t kMaxSessions = 65536;
constexpr std::uint64_t kMaxMemoryMb = std::uint64_t{1} << 20;  // 1 TiB
constexpr std::uint64_t kSlotSpace = std::uint64_t{1} << 32;  // slot indices are 32-bit on the wire
constexpr std::int64_t kMaxStragglerTimeoutUs = 3'600'000'000;  // one hour
constexpr std::int64_t kMaxLivenessTimeoutMs = 86'400'000;     // one day

template <class... Args>
void require(bool ok, fmt::format_string<Args...> format, Args&&... args) {
  if (!ok) fail("invalid switch config: " + fmt::format(format, std::forward<Args>(args)...));
}

// ---- JSON ---------------------------------------------------------------------------------
// `where` in these readers names the file and the key ("softswitch.json: sessions[0].k").

// Unlike the worker config, the switch config calls unsigned fields "an integer" too.
template <class Target, class Field>
FieldReader<Target> reader_for(Field Target::*member) {
  return detail::reader_for<detail::IntegerWording::plain>(member);
}

// "a.b.c.d" or "a.b.c.d:port" (port 0: any); the address itself is checked by
// SessionConfig::validate.
WorkerAddress parse_worker(const json& value, const std::string& where) {
  std::string text;
  read_json(value, where, text);
  const HostPort address = parse_host_port(text, where + ": ", 0, 0);
  return WorkerAddress{address.host, address.port};
}

void read_workers(const json& value, const std::string& where, std::vector<WorkerAddress>& out) {
  require_array(value, where);
  out.clear();
  for (std::size_t i = 0; i < value.size(); ++i) {
    out.push_back(parse_worker(value[i], fmt::format("{}[{}]", where, i)));
  }
}

const FieldReaders<SessionConfig>& session_readers() {
  static const FieldReaders<SessionConfig> readers{
      {"id", reader_for(&SessionConfig::id)},
      {"world_size", reader_for(&SessionConfig::world_size)},
      {"k", reader_for(&SessionConfig::k)},
      {"payload", reader_for(&SessionConfig::payload)},
      {"pool_base", reader_for(&SessionConfig::pool_base)},
      {"pool_size", reader_for(&SessionConfig::pool_size)},
      {"straggler_timeout_us", reader_for(&SessionConfig::straggler_timeout)},
      {"idle_timeout_ms", reader_for(&SessionConfig::idle_timeout)},
      {"liveness_timeout_ms", reader_for(&SessionConfig::liveness_timeout)},
      {"workers",
       [](const json& value, const std::string& where, SessionConfig& session) {
         read_workers(value, where, session.workers);
       }},
      {"auth_key_file",
       [](const json& value, const std::string& where, SessionConfig& session) {
         std::string path;
         read_json(value, where, path);
         session.auth_key = protocol::read_auth_key_file(path, where);
       }},
      {"auth_key",
       [](const json& value, const std::string& where, SessionConfig& session) {
         std::string hex;
         read_json(value, where, hex);
         session.auth_key = protocol::parse_auth_key(hex, where);
       }},
      {"auth_data", reader_for(&SessionConfig::auth_data)},
  };
  return readers;
}

// Keys of earlier versions that moved into the transport section: reading one names where it went.
constexpr std::array<std::pair<const char*, const char*>, 4> kMovedKeys{{
    {"host", "udp.bind_host"},
    {"port", "udp.bind_port"},
    {"batch", "udp.batch"},
    {"socket_buffer_bytes", "udp.socket_buffer_bytes"},
}};

const FieldReaders<SwitchConfig>& switch_readers() {
  static const FieldReaders<SwitchConfig> readers = [] {
    FieldReaders<SwitchConfig> table{
        {"threads", reader_for(&SwitchConfig::threads)},
        {"busy_poll_us", reader_for(&SwitchConfig::busy_poll)},
        {"busy_poll_threads", reader_for(&SwitchConfig::busy_poll_threads)},
        {"max_sessions", reader_for(&SwitchConfig::max_sessions)},
        {"max_memory_mb", reader_for(&SwitchConfig::max_memory_mb)},
        {"metrics", reader_for(&SwitchConfig::metrics)},
        {"udp",
         [](const json& v, const std::string& w, SwitchConfig& c) {
           detail::read_transport_section(v, w, "udp", c.transport);
         }},
        {"dpdk",
         [](const json& v, const std::string& w, SwitchConfig& c) {
           detail::read_transport_section(v, w, "dpdk", c.transport);
         }},
        {"shm",
         [](const json& v, const std::string& w, SwitchConfig& c) {
           detail::read_transport_section(v, w, "shm", c.transport);
         }},
    };
    for (const auto& [old_key, new_key] : kMovedKeys) {
      table.emplace(old_key, [new_key](const json&, const std::string& where, SwitchConfig&) {
        fail(fmt::format("{}: moved to switch.{} (the switch's transport settings are a \"udp\" or \"dpdk\" "
                         "section inside \"switch\", as in a worker config; see configs/softswitch.json)",
                         where, new_key));
      });
    }
    return table;
  }();
  return readers;
}

const FieldReaders<SwitchConfig>& top_level_readers() {
  static const FieldReaders<SwitchConfig> readers{
      {"switch",
       [](const json& value, const std::string& where, SwitchConfig& config) {
         require_object(value, where);
         detail::require_one_transport_section(value, where + ": ");
         read_object(value, where + ".", switch_readers(), config);
       }},
      {"sessions",
       [](const json& value, const std::string& where, SwitchConfig& config) {
         require_array(value, where);
         config.sessions.clear();
         for (std::size_t i = 0; i < value.size(); ++i) {
           const std::string session_where = fmt::format("{}[{}]", where, i);
           require_object(value[i], session_where);
           read_object(value[i], session_where + ".", session_readers(), config.sessions.emplace_back());
         }
       }},
  };
  return readers;
}

bool is_ipv4_address(const std::string& text) {
  in_addr address{};
  return inet_pton(AF_INET, text.c_str(), &address) == 1;
}

}  // namespace

void SessionConfig::validate() const {
  require(id != 0, "session id must not be 0");
  require(world_size >= 1 && world_size <= protocol::kMaxWorld, "session {}: world_size {} out of range [1, {}]",
          id, world_size, protocol::kMaxWorld);
  require(k >= 0 && k <= world_size, "session {}: k {} out of range [0, world_size {}]", id, k, world_size);
  require(payload >= 1 && payload <= protocol::kMaxPayload, "session {}: payload {} out of range [1, {}]", id,
          payload, protocol::kMaxPayload);
  // Slots come in pairs: a window entry alternates between two of them.
  require(pool_size >= 2 && pool_size % 2 == 0, "session {}: pool_size {} must be even and at least 2", id,
          pool_size);
  require(std::uint64_t{pool_base} + pool_size <= kSlotSpace, "session {}: pool_base {} + pool_size {} exceeds 2^32",
          id, pool_base, pool_size);
  // The timer is a 32-bit count of 65.536 us ticks; stay far below its wrap-around.
  require(straggler_timeout.count() > 0 && straggler_timeout.count() <= kMaxStragglerTimeoutUs,
          "session {}: straggler_timeout_us {} out of range [1, {}]", id, straggler_timeout.count(),
          kMaxStragglerTimeoutUs);
  require(idle_timeout.count() > 0, "session {}: idle_timeout_ms {} must be positive", id,
          idle_timeout.count());
  // Ticks are 32-bit: a day is far below their wrap-around (78 h).
  require(liveness_timeout.count() > 0 && liveness_timeout.count() <= kMaxLivenessTimeoutMs,
          "session {}: liveness_timeout_ms {} out of range [1, {}]", id, liveness_timeout.count(),
          kMaxLivenessTimeoutMs);
  require(workers.size() <= 1 || workers.size() == static_cast<std::size_t>(world_size),
          "session {}: workers lists {} addresses; expected 0, 1 or world_size {}", id, workers.size(), world_size);
  for (std::size_t i = 0; i < workers.size(); ++i) {
    require(is_ipv4_address(workers[i].host), "session {}: workers[{}]: \"{}\" is not an IPv4 address", id, i,
            workers[i].host);
  }
  require(!auth_data || auth_key.has_value(),
          "session {}: auth_data authenticates data with the session key: give the session an auth_key_file", id);
}

SessionConfig SessionConfig::from_json(const std::string& text, const std::string& where) {
  json object;
  try {
    object = json::parse(text, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::exception& error) {
    detail::fail(where + ": invalid JSON: " + error.what());
  }
  require_object(object, where);
  SessionConfig session;
  read_object(object, where + ".", session_readers(), session);
  session.validate();
  return session;
}

SwitchConfig SwitchConfig::from_json_file(const std::string& path) {
  const json root = detail::parse_json_object_file(path);
  SwitchConfig config;
  read_object(root, path + ": ", top_level_readers(), config);
  return config;
}

UdpTransportConfig SwitchConfig::udp_defaults() {
  UdpTransportConfig udp;
  udp.bind_host = "127.0.0.1";
  udp.bind_port = protocol::kDefaultPort;
  udp.batch = 64;
  udp.buffers = 2 * udp.batch;  // at most two replies per received packet
  udp.socket_buffer_bytes = 32 << 20;
  return udp;
}

void SwitchConfig::validate() const {
  require(threads >= 1 && threads <= kMaxSwitchThreads, "switch.threads {} out of range [1, {}]", threads,
          kMaxSwitchThreads);
  validate_transport(transport, threads, "switch.", "", "", protocol::kMaxControlBytes);
  require(busy_poll.count() >= 0 && busy_poll <= std::chrono::seconds(1),
          "switch.busy_poll_us {} out of range [0, 1000000]", busy_poll.count());
  require(busy_poll_threads >= 0 && busy_poll_threads <= threads,
          "switch.busy_poll_threads {} out of range [0 (every thread), threads {}]", busy_poll_threads, threads);
  require(max_sessions >= 1 && max_sessions <= kMaxSessions, "switch.max_sessions {} out of range [1, {}]",
          max_sessions, kMaxSessions);
  require(max_memory_mb >= 1 && max_memory_mb <= kMaxMemoryMb, "switch.max_memory_mb {} out of range [1, {}]",
          max_memory_mb, kMaxMemoryMb);
  if (!metrics.empty()) {
    try {
      sw::metrics_address(metrics, "switch.metrics: ");
    } catch (const ConfigError& error) {
      fail(std::string("invalid switch config: ") + error.what());
    }
  }
  std::set<std::uint32_t> ids;
  std::uint64_t bytes = 0;
  for (const SessionConfig& session : sessions) {
    session.validate();
    require(ids.insert(session.id).second, "sessions: session id {} appears twice", session.id);
    try {
      sw::check_admission(*this, ids.size() - 1, bytes, session);
    } catch (const ConfigError& error) {
      fail(std::string("invalid switch config: ") + error.what());
    }
    bytes += sw::session_memory_bytes(session);
  }
}

}  // namespace dpa

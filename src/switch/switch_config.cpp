#include <arpa/inet.h>

#include <cerrno>
#include <charconv>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dpa/error.hpp"
#include "dpa/switch.hpp"
#include "protocol/wire.hpp"

namespace dpa {
namespace {

using nlohmann::json;

constexpr int kMaxSwitchThreads = 64;
constexpr std::size_t kMaxBatch = 1024;  // packets one recvmmsg/sendmmsg call moves
constexpr std::uint64_t kSlotSpace = std::uint64_t{1} << 32;  // slot indices are 32-bit on the wire

[[noreturn]] void fail(std::string message) { throw ConfigError(std::move(message)); }

template <class... Args>
void require(bool ok, fmt::format_string<Args...> format, Args&&... args) {
  if (!ok) fail("invalid switch config: " + fmt::format(format, std::forward<Args>(args)...));
}

// ---- JSON ---------------------------------------------------------------------------------
// `where` in these readers names the file and the key ("softswitch.json: sessions[0].k").

template <std::integral T>
T json_integer(const json& value, const std::string& where) {
  // nlohmann keeps non-negative literals as uint64 and negative ones as int64.
  if (value.is_number_unsigned()) {
    if (const auto number = value.get<std::uint64_t>(); std::in_range<T>(number)) {
      return static_cast<T>(number);
    }
  } else if (value.is_number_integer()) {
    if (const auto number = value.get<std::int64_t>(); std::in_range<T>(number)) {
      return static_cast<T>(number);
    }
  } else {
    fail(fmt::format("{}: expected an integer, got {}", where, value.type_name()));
  }
  fail(fmt::format("{}: {} is out of range [{}, {}]", where, value.dump(), std::numeric_limits<T>::min(),
                   std::numeric_limits<T>::max()));
}

template <std::integral T>
void read_json(const json& value, const std::string& where, T& out) {
  out = json_integer<T>(value, where);
}

void read_json(const json& value, const std::string& where, std::string& out) {
  if (!value.is_string()) fail(fmt::format("{}: expected a string, got {}", where, value.type_name()));
  out = value.get<std::string>();
}

// Durations are integers in the unit of the field's type, which the key's suffix spells out.
template <class Rep, class Period>
void read_json(const json& value, const std::string& where, std::chrono::duration<Rep, Period>& out) {
  out = std::chrono::duration<Rep, Period>{json_integer<Rep>(value, where)};
}

// "a.b.c.d" or "a.b.c.d:port"; the address itself is checked by SessionConfig::validate.
WorkerAddress parse_worker(const json& value, const std::string& where) {
  std::string text;
  read_json(value, where, text);
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) return WorkerAddress{text, 0};
  std::uint16_t port = 0;
  const char* const end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data() + colon + 1, end, port);
  if (error != std::errc{} || stop != end) {
    fail(fmt::format("{}: \"{}\": expected \"a.b.c.d\" or \"a.b.c.d:port\"", where, text));
  }
  return WorkerAddress{text.substr(0, colon), port};
}

void read_json(const json& value, const std::string& where, std::vector<WorkerAddress>& out) {
  if (!value.is_array()) fail(fmt::format("{}: expected an array, got {}", where, value.type_name()));
  out.clear();
  for (std::size_t i = 0; i < value.size(); ++i) {
    out.push_back(parse_worker(value[i], fmt::format("{}[{}]", where, i)));
  }
}

template <class Target>
using FieldReader = std::function<void(const json& value, const std::string& where, Target& target)>;
template <class Target>
using FieldReaders = std::map<std::string_view, FieldReader<Target>, std::less<>>;

template <class Target, class Field>
FieldReader<Target> reader_for(Field Target::*member) {
  return [member](const json& value, const std::string& where, Target& target) {
    read_json(value, where, target.*member);
  };
}

void require_object(const json& value, const std::string& where) {
  if (!value.is_object()) fail(fmt::format("{}: expected an object, got {}", where, value.type_name()));
}

// Reads every key of `object`; `key_prefix` is what precedes a key in messages ("file: switch.").
template <class Target>
void read_object(const json& object, const std::string& key_prefix, const FieldReaders<Target>& readers,
                 Target& target) {
  for (const auto& [key, value] : object.items()) {
    const std::string where = key_prefix + key;
    const auto reader = readers.find(key);
    if (reader == readers.end()) fail(where + ": unknown key");
    reader->second(value, where, target);
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
      {"workers", reader_for(&SessionConfig::workers)},
  };
  return readers;
}

const FieldReaders<SwitchConfig>& switch_readers() {
  static const FieldReaders<SwitchConfig> readers{
      {"host", reader_for(&SwitchConfig::host)},
      {"port", reader_for(&SwitchConfig::port)},
      {"threads", reader_for(&SwitchConfig::threads)},
      {"batch", reader_for(&SwitchConfig::batch)},
      {"socket_buffer_bytes", reader_for(&SwitchConfig::socket_buffer_bytes)},
  };
  return readers;
}

const FieldReaders<SwitchConfig>& top_level_readers() {
  static const FieldReaders<SwitchConfig> readers{
      {"switch",
       [](const json& value, const std::string& where, SwitchConfig& config) {
         require_object(value, where);
         read_object(value, where + ".", switch_readers(), config);
       }},
      {"sessions",
       [](const json& value, const std::string& where, SwitchConfig& config) {
         if (!value.is_array()) fail(fmt::format("{}: expected an array, got {}", where, value.type_name()));
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
  require(straggler_timeout.count() > 0, "session {}: straggler_timeout_us {} must be positive", id,
          straggler_timeout.count());
  require(workers.size() <= 1 || workers.size() == static_cast<std::size_t>(world_size),
          "session {}: workers lists {} addresses; expected 0, 1 or world_size {}", id, workers.size(), world_size);
  for (std::size_t i = 0; i < workers.size(); ++i) {
    require(is_ipv4_address(workers[i].host), "session {}: workers[{}]: \"{}\" is not an IPv4 address", id, i,
            workers[i].host);
  }
}

SwitchConfig SwitchConfig::from_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  json root;
  try {
    root = json::parse(in, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::parse_error& error) {
    fail(fmt::format("{}: invalid JSON: {}", path, error.what()));
  }
  if (!root.is_object()) fail(fmt::format("{}: expected a JSON object, got {}", path, root.type_name()));

  SwitchConfig config;
  read_object(root, path + ": ", top_level_readers(), config);
  return config;
}

void SwitchConfig::validate() const {
  require(!host.empty(), "switch.host is empty");
  require(threads >= 1 && threads <= kMaxSwitchThreads, "switch.threads {} out of range [1, {}]", threads,
          kMaxSwitchThreads);
  // Thread i listens on port + i, so the last thread's port must exist too.
  require(port == 0 || port + threads - 1 <= std::numeric_limits<std::uint16_t>::max(),
          "switch.port {} + threads {} - 1 exceeds 65535", port, threads);
  require(batch >= 1 && batch <= kMaxBatch, "switch.batch {} out of range [1, {}]", batch, kMaxBatch);
  require(socket_buffer_bytes > 0, "switch.socket_buffer_bytes {} must be positive", socket_buffer_bytes);
  std::set<std::uint32_t> ids;
  for (const SessionConfig& session : sessions) {
    session.validate();
    require(ids.insert(session.id).second, "sessions: session id {} appears twice", session.id);
  }
}

}  // namespace dpa

#include "dpa/config.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <concepts>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/env.hpp"
#include "api/json_fields.hpp"
#include "dpa/error.hpp"
#include "protocol/wire.hpp"

namespace dpa {
namespace {

using detail::fail;
using detail::FieldReaders;
using detail::integer_kind;
using detail::integer_range;
using detail::json;
using detail::read_json;
using detail::read_object;
using detail::reader_for;
using detail::require_object;

// Outstanding packets per thread; each needs two switch slots, so this bounds the pool a
// rank occupies.
constexpr int kMaxWindow = 4096;

template <class... Args>
void require(bool ok, fmt::format_string<Args...> format, Args&&... args) {
  if (!ok) fail("invalid dpa config: " + fmt::format(format, std::forward<Args>(args)...));
}

struct HostPort {
  std::string host;
  std::uint16_t port = protocol::kDefaultPort;
};

// "host" or "host:port"; std::nullopt when the port is not a number in [0, 65535].
std::optional<HostPort> parse_host_port(std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return HostPort{std::string(text)};
  const std::string_view port_text = text.substr(colon + 1);
  std::uint16_t port = 0;
  const char* const end = port_text.data() + port_text.size();
  const auto [stop, error] = std::from_chars(port_text.data(), end, port);
  if (error != std::errc{} || stop != end) return std::nullopt;
  return HostPort{std::string(text.substr(0, colon)), port};
}

// ---- JSON ---------------------------------------------------------------------------------

const FieldReaders<FaultInjection>& fault_readers() {
  static const FieldReaders<FaultInjection> readers{
      {"drop", reader_for(&FaultInjection::drop)},
      {"duplicate", reader_for(&FaultInjection::duplicate)},
      {"reorder", reader_for(&FaultInjection::reorder)},
      {"delay", reader_for(&FaultInjection::delay)},
      {"delay_time_us", reader_for(&FaultInjection::delay_time)},
      {"seed", reader_for(&FaultInjection::seed)},
  };
  return readers;
}

const FieldReaders<Config>& config_readers() {
  static const FieldReaders<Config> readers{
      {"rank", reader_for(&Config::rank)},
      {"world_size", reader_for(&Config::world_size)},
      {"switch",
       [](const json& value, const std::string& where, Config& config) {
         std::string text;
         read_json(value, where, text);
         const auto address = parse_host_port(text);
         if (!address) fail(fmt::format("{}: \"{}\": expected \"host\" or \"host:port\"", where, text));
         config.switch_host = address->host;
         config.switch_port = address->port;
       }},
      {"session", reader_for(&Config::session)},
      {"threads", reader_for(&Config::threads)},
      {"window", reader_for(&Config::window)},
      {"payload", reader_for(&Config::payload)},
      {"local_host", reader_for(&Config::local_host)},
      {"local_port", reader_for(&Config::local_port)},
      {"retransmit_timeout_us", reader_for(&Config::retransmit_timeout)},
      {"max_retransmit_timeout_us", reader_for(&Config::max_retransmit_timeout)},
      {"timeout_ms", reader_for(&Config::timeout)},
      {"join_timeout_ms", reader_for(&Config::join_timeout)},
      {"busy_poll_us", reader_for(&Config::busy_poll)},
      {"k", reader_for(&Config::k)},
      {"preemptive", reader_for(&Config::preemptive)},
      {"syn_disable", reader_for(&Config::syn_disable)},
      {"faults",
       [](const json& value, const std::string& where, Config& config) {
         require_object(value, where);
         read_object(value, where + ".", fault_readers(), config.faults);
       }},
  };
  return readers;
}

// ---- Environment --------------------------------------------------------------------------

[[noreturn]] void fail_env(const char* name, const std::string& text, std::string_view expected) {
  fail(fmt::format("{}=\"{}\": expected {}", name, text, expected));
}

template <std::integral T>
T parse_env_integer(const char* name, const std::string& text) {
  T value{};
  const char* const end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error == std::errc{} && stop == end) return value;
  if (error == std::errc::result_out_of_range && stop == end) {
    fail_env(name, text, fmt::format("an integer in {}", integer_range<T>()));
  }
  fail_env(name, text, integer_kind<T>());
}

// Each apply_env reads one variable into `field` when it is set and says whether it was.
template <std::integral T>
  requires(!std::same_as<T, bool>)
bool apply_env(const char* name, T& field) {
  const auto text = detail::env_string(name);
  if (text) field = parse_env_integer<T>(name, *text);
  return text.has_value();
}

bool apply_env(const char* name, bool& field) {
  const bool was_set = detail::env_string(name).has_value();
  field = detail::env_flag(name, field);
  return was_set;
}

bool apply_env(const char* name, double& field) {
  const auto text = detail::env_string(name);
  if (!text) return false;
  const char* const end = text->data() + text->size();
  const auto [stop, error] = std::from_chars(text->data(), end, field);
  if (error != std::errc{} || stop != end) fail_env(name, *text, "a number");
  return true;
}

bool apply_env(const char* name, std::string& field) {
  const auto text = detail::env_string(name);
  if (text) field = *text;
  return text.has_value();
}

template <class Rep, class Period>
bool apply_env(const char* name, std::chrono::duration<Rep, Period>& field) {
  Rep count = field.count();
  const bool was_set = apply_env(name, count);
  field = std::chrono::duration<Rep, Period>{count};
  return was_set;
}

std::optional<bool> parse_flag(std::string_view text) {
  std::string lower(text);
  std::ranges::transform(lower, lower.begin(),
                         [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "1" || lower == "on" || lower == "true" || lower == "yes") return true;
  if (lower == "0" || lower == "off" || lower == "false" || lower == "no") return false;
  return std::nullopt;
}

void require_probability(double probability, std::string_view key) {
  // Written so that NaN fails too.
  require(probability >= 0.0 && probability <= 1.0, "faults.{} {} out of range [0, 1]", key, probability);
}

}  // namespace

namespace detail {

std::optional<std::string> env_string(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

bool env_flag(const char* name, bool fallback) {
  const auto text = env_string(name);
  if (!text) return fallback;
  const auto flag = parse_flag(*text);
  if (!flag) fail_env(name, *text, "a boolean (1/0, on/off, true/false, yes/no)");
  return *flag;
}

}  // namespace detail

Config Config::from_json_file(const std::string& path) {
  const json root = detail::parse_json_object_file(path);
  Config config;
  read_object(root, path + ": ", config_readers(), config);
  return config;
}

Config Config::from_env() {
  Config config;
  if (const auto file = detail::env_string("DPA_CONFIG")) config = from_json_file(*file);

  // torchrun exports RANK and WORLD_SIZE; the DPA_ names win when both are present.
  if (!apply_env("DPA_RANK", config.rank)) apply_env("RANK", config.rank);
  if (!apply_env("DPA_WORLD_SIZE", config.world_size)) apply_env("WORLD_SIZE", config.world_size);
  if (const auto text = detail::env_string("DPA_SWITCH")) {
    const auto address = parse_host_port(*text);
    if (!address) fail_env("DPA_SWITCH", *text, "host or host:port");
    config.switch_host = address->host;
    config.switch_port = address->port;
  }
  apply_env("DPA_SESSION", config.session);
  apply_env("DPA_THREADS", config.threads);
  apply_env("DPA_WINDOW", config.window);
  apply_env("DPA_PAYLOAD", config.payload);
  apply_env("DPA_LOCAL_HOST", config.local_host);
  apply_env("DPA_LOCAL_PORT", config.local_port);
  apply_env("DPA_RTO_US", config.retransmit_timeout);
  apply_env("DPA_MAX_RTO_US", config.max_retransmit_timeout);
  apply_env("DPA_TIMEOUT_MS", config.timeout);
  apply_env("DPA_JOIN_TIMEOUT_MS", config.join_timeout);
  apply_env("DPA_BUSY_POLL_US", config.busy_poll);
  apply_env("DPA_K", config.k);
  apply_env("DPA_PREEMPTIVE", config.preemptive);
  apply_env("DPA_SYN_DISABLE", config.syn_disable);
  apply_env("DPA_FAULT_DROP", config.faults.drop);
  apply_env("DPA_FAULT_DUPLICATE", config.faults.duplicate);
  apply_env("DPA_FAULT_REORDER", config.faults.reorder);
  apply_env("DPA_FAULT_DELAY", config.faults.delay);
  apply_env("DPA_FAULT_DELAY_US", config.faults.delay_time);
  apply_env("DPA_FAULT_SEED", config.faults.seed);
  return config;
}

void Config::validate() const {
  require(world_size >= 1 && world_size <= protocol::kMaxWorld, "world_size {} out of range [1, {}]",
          world_size, protocol::kMaxWorld);
  require(rank >= 0 && rank < world_size, "rank {} out of range for world_size {}", rank, world_size);
  require(!switch_host.empty(), "switch: host is empty");
  require(switch_port != 0, "switch: port must not be 0");
  require(threads >= 1 && threads <= protocol::kMaxThreads, "threads {} out of range [1, {}]", threads,
          protocol::kMaxThreads);
  require(window >= 1 && window <= kMaxWindow, "window {} out of range [1, {}]", window, kMaxWindow);
  require(payload <= protocol::kMaxPayload, "payload {} out of range: 0 (the session's) or [1, {}]",
          payload, protocol::kMaxPayload);
  require(retransmit_timeout.count() > 0, "retransmit_timeout_us {} must be positive",
          retransmit_timeout.count());
  require(max_retransmit_timeout >= retransmit_timeout,
          "max_retransmit_timeout_us {} is below retransmit_timeout_us {}", max_retransmit_timeout.count(),
          retransmit_timeout.count());
  require(timeout.count() > 0, "timeout_ms {} must be positive", timeout.count());
  require(join_timeout.count() > 0, "join_timeout_ms {} must be positive", join_timeout.count());
  require(k >= 0 && k <= world_size, "k {} out of range [0, world_size {}]", k, world_size);
  require_probability(faults.drop, "drop");
  require_probability(faults.duplicate, "duplicate");
  require_probability(faults.reorder, "reorder");
  require_probability(faults.delay, "delay");
  require(faults.delay_time.count() >= 0, "faults.delay_time_us {} must not be negative",
          faults.delay_time.count());
  // Thread t binds local_port + t, so the last thread's port must exist too.
  require(local_port == 0 || local_port + threads - 1 <= std::numeric_limits<std::uint16_t>::max(),
          "local_port {} + threads {} - 1 exceeds 65535", local_port, threads);
}

}  // namespace dpa

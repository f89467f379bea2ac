// SPDX-License-Identifier: Apache-2.0
#include "dpa/config.hpp"

#include <algorithm>
#include <charconv>
#include <concepts>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/env.hpp"
#include "common/json_fields.hpp"
#include "transport/transport_json.hpp"
#include "dpa/auth_key.hpp"
#include "dpa/env.hpp"
#include "dpa/error.hpp"
#include "dpa/host_port.hpp"
#include "protocol/auth.hpp"
#include "protocol/wire.hpp"

namespace dpa {
namespace {

using detail::fail;
using detail::fail_env;
using detail::FieldReaders;
using detail::integer_kind;
using detail::integer_range;
using detail::json;
using detail::read_json;
using detail::read_object;
using detail::read_transport_section;
using detail::reader_for;
using detail::require_object;

// The values each setting accepts, whatever its source: validate() checks them for every
// config, from_env() for each variable as it reads it, so both name the same range.
template <class T>
struct Range {
  T min;
  T max;
  [[nodiscard]] constexpr bool contains(T value) const { return value >= min && value <= max; }  // NaN: false
};

constexpr Range<int> kWorldSizes{1, protocol::kMaxWorld};
constexpr Range<int> kRanks{0, protocol::kMaxWorld - 1};
constexpr Range<std::uint32_t> kSessions{1, std::numeric_limits<std::uint32_t>::max()};  // 0 is no session
constexpr Range<std::uint16_t> kSwitchPorts{1, std::numeric_limits<std::uint16_t>::max()};
constexpr Range<std::uint16_t> kLocalPorts{0, std::numeric_limits<std::uint16_t>::max()};
constexpr Range<int> kThreads{1, protocol::kMaxThreads};
// Outstanding packets per thread; each needs two switch slots, so this bounds the pool a
// rank occupies.
constexpr Range<int> kWindows{1, 4096};
constexpr Range<std::uint32_t> kPayloads{0, protocol::kMaxPayload};  // 0 adopts the session's
constexpr Range<std::int64_t> kRetransmitUs{1, 60'000'000};         // up to a minute
constexpr Range<std::int64_t> kTimeoutMs{1, 86'400'000};            // up to a day
constexpr Range<std::int64_t> kBusyPollUs{0, 1'000'000};
constexpr Range<int> kKs{0, protocol::kMaxWorld};  // 0: the session's default
constexpr Range<double> kProbabilities{0.0, 1.0};
constexpr Range<std::int64_t> kFaultDelayUs{0, 10'000'000};
constexpr Range<std::int64_t> kMonitorIntervalUs{1, 60'000'000};

template <class... Args>
void require(bool ok, fmt::format_string<Args...> format, Args&&... args) {
  if (!ok) fail("invalid dpa config: " + fmt::format(format, std::forward<Args>(args)...));
}

// `key` is the JSON key, `variable` the DPA_* variable that sets it.
template <class T>
void require_in(Range<T> range, T value, std::string_view key, std::string_view variable) {
  require(range.contains(value), "{} {} out of range [{}, {}] ({})", key, value, range.min, range.max, variable);
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
         if (!value.is_array()) {
           std::string text;
           read_json(value, where, text);
           config.switches =
               parse_host_port_list(text, where + ": ", protocol::kDefaultPort, kSwitchPorts.min);
           return;
         }
         config.switches.clear();
         for (std::size_t i = 0; i < value.size(); ++i) {
           const std::string entry_where = fmt::format("{}[{}]", where, i);
           std::string text;
           read_json(value[i], entry_where, text);
           config.switches.push_back(
               parse_host_port(text, entry_where + ": ", protocol::kDefaultPort, kSwitchPorts.min));
         }
         require_distinct(config.switches, where);
       }},
      {"session", reader_for(&Config::session)},
      {"threads", reader_for(&Config::threads)},
      {"window", reader_for(&Config::window)},
      {"payload", reader_for(&Config::payload)},
      {"udp", [](const json& v, const std::string& w, Config& c) { read_transport_section(v, w, "udp", c.transport); }},
      {"dpdk",
       [](const json& v, const std::string& w, Config& c) { read_transport_section(v, w, "dpdk", c.transport); }},
      {"shm", [](const json& v, const std::string& w, Config& c) { read_transport_section(v, w, "shm", c.transport); }},
      {"retransmit_timeout_us", reader_for(&Config::retransmit_timeout)},
      {"max_retransmit_timeout_us", reader_for(&Config::max_retransmit_timeout)},
      {"timeout_ms", reader_for(&Config::timeout)},
      {"join_timeout_ms", reader_for(&Config::join_timeout)},
      {"liveness_timeout_ms", reader_for(&Config::liveness_timeout)},
      {"pending_warn_ms", reader_for(&Config::pending_warn)},
      {"busy_poll_us", reader_for(&Config::busy_poll)},
      {"k", reader_for(&Config::k)},
      {"preemptive", reader_for(&Config::preemptive)},
      {"syn_disable", reader_for(&Config::syn_disable)},
      {"waiter_runs", reader_for(&Config::waiter_runs)},
      {"auth_key_file",
       [](const json& value, const std::string& where, Config& config) {
         std::string path;
         read_json(value, where, path);
         config.auth_key = protocol::read_auth_key_file(path, where);
       }},
      {"auth_key",
       [](const json& value, const std::string& where, Config& config) {
         std::string hex;
         read_json(value, where, hex);
         config.auth_key = protocol::parse_auth_key(hex, where);
       }},
      {"auth_data", reader_for(&Config::auth_data)},
      {"data_mac", reader_for(&Config::data_mac)},
      {"faults",
       [](const json& value, const std::string& where, Config& config) {
         require_object(value, where);
         read_object(value, where + ".", fault_readers(), config.faults);
       }},
  };
  return readers;
}

// ---- Environment --------------------------------------------------------------------------

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

template <std::integral T>
T parse_env_integer(const char* name, const std::string& text, Range<T> range) {
  T value{};
  const char* const end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc{} || stop != end || !range.contains(value)) {
    fail_env(name, text, fmt::format("an integer in [{}, {}]", range.min, range.max));
  }
  return value;
}

// Each apply_env reads one variable into `field` when it is set and says whether it was; a
// value of the wrong type or outside `range` is a ConfigError naming the variable.
template <std::integral T>
  requires(!std::same_as<T, bool>)
bool apply_env(const char* name, T& field) {
  const auto text = env_string(name);
  if (text) field = parse_env_integer<T>(name, *text);
  return text.has_value();
}

template <std::integral T>
  requires(!std::same_as<T, bool>)
bool apply_env(const char* name, T& field, Range<T> range) {
  const auto text = env_string(name);
  if (text) field = parse_env_integer<T>(name, *text, range);
  return text.has_value();
}

bool apply_env(const char* name, bool& field) {
  const bool was_set = env_string(name).has_value();
  field = env_flag(name, field);
  return was_set;
}

bool apply_env(const char* name, double& field, Range<double> range) {
  const auto text = env_string(name);
  if (!text) return false;
  const char* const end = text->data() + text->size();
  const auto [stop, error] = std::from_chars(text->data(), end, field);
  if (error != std::errc{} || stop != end || !range.contains(field)) {
    fail_env(name, *text, fmt::format("a number in [{}, {}]", range.min, range.max));
  }
  return true;
}

bool apply_env(const char* name, std::string& field) {
  const auto text = env_string(name);
  if (text) field = *text;
  return text.has_value();
}

template <class Rep, class Period>
bool apply_env(const char* name, std::chrono::duration<Rep, Period>& field, Range<Rep> range) {
  Rep count = field.count();
  const bool was_set = apply_env(name, count, range);
  field = std::chrono::duration<Rep, Period>{count};
  return was_set;
}

// A variable whose value must be one of `names`.
void check_env_choice(const char* name, std::initializer_list<std::string_view> names) {
  const auto text = env_string(name);
  if (!text || std::ranges::find(names, std::string_view(*text)) != names.end()) return;
  std::string expected = "one of";
  for (const std::string_view choice : names) expected += fmt::format(" {}", choice);
  fail_env(name, *text, expected);
}

// DPA_TRANSPORT picks the transport; the other variables set fields of the transport they name,
// and naming the other transport's field is an error rather than a setting silently ignored.
void apply_transport_env(TransportConfig& transport) {
  if (const auto kind = env_string("DPA_TRANSPORT")) {
    if (*kind == "dpdk" && !std::holds_alternative<DpdkTransportConfig>(transport)) {
      transport = DpdkTransportConfig{};
    } else if (*kind == "udp" && !std::holds_alternative<UdpTransportConfig>(transport)) {
      transport = UdpTransportConfig{};
    } else if (*kind == "shm" && !std::holds_alternative<ShmTransportConfig>(transport)) {
      transport = ShmTransportConfig{};
    } else if (*kind != "udp" && *kind != "dpdk" && *kind != "shm") {
      fail_env("DPA_TRANSPORT", *kind, "udp, dpdk or shm");
    }
  }
  const auto only_for = [](std::initializer_list<const char*> names, const char* kind) {
    for (const char* name : names) {
      if (env_string(name)) {
        fail(fmt::format("{} applies to the {} transport, but the config selects another one (DPA_TRANSPORT, "
                         "or the \"udp\"/\"dpdk\"/\"shm\" section of DPA_CONFIG)",
                         name, kind));
      }
    }
  };
  const std::initializer_list<const char*> kDpdkOnly = {"DPA_DPDK_MONITOR", "DPA_DPDK_MONITOR_INTERVAL_US",
                                                           "DPA_DPDK_MONITOR_OUTPUT"};
  const std::initializer_list<const char*> kShmOnly = {"DPA_SHM_FABRIC", "DPA_SHM_DIR"};
  if (auto* udp = std::get_if<UdpTransportConfig>(&transport)) {
    apply_env("DPA_LOCAL_HOST", udp->bind_host);
    apply_env("DPA_LOCAL_PORT", udp->bind_port, kLocalPorts);
    only_for(kDpdkOnly, "dpdk");
    only_for(kShmOnly, "shm");
  } else if (auto* shm = std::get_if<ShmTransportConfig>(&transport)) {
    only_for({"DPA_LOCAL_HOST"}, "udp");
    only_for(kDpdkOnly, "dpdk");
    apply_env("DPA_LOCAL_PORT", shm->base_port, kLocalPorts);
    apply_env("DPA_SHM_FABRIC", shm->fabric);
    apply_env("DPA_SHM_DIR", shm->directory);
  } else {
    auto& dpdk = std::get<DpdkTransportConfig>(transport);
    only_for({"DPA_LOCAL_HOST", "DPA_LOCAL_PORT"}, "udp");
    only_for(kShmOnly, "shm");
    apply_env("DPA_DPDK_MONITOR", dpdk.monitor);
    apply_env("DPA_DPDK_MONITOR_INTERVAL_US", dpdk.monitor_interval, kMonitorIntervalUs);
    apply_env("DPA_DPDK_MONITOR_OUTPUT", dpdk.monitor_output);
  }
}

// ---- DPA_CONFIG placeholders -------------------------------------------------------------

// One DPA_CONFIG for every rank of a launcher: "{rank}" and "{local_rank}" in its path and in
// its string values become this process's rank (DPA_RANK, else RANK) and its rank on its host
// (LOCAL_RANK, which torchrun sets).
struct Placeholder {
  std::string_view token;
  std::string_view variables;  // where the value comes from, for the message
  std::optional<std::string> value;
};

std::vector<Placeholder> rank_placeholders() {
  int rank = 0;
  const bool has_rank = apply_env("DPA_RANK", rank, kRanks) || apply_env("RANK", rank, kRanks);
  int local_rank = 0;
  const bool has_local_rank = apply_env("LOCAL_RANK", local_rank, kRanks);
  return {{"{rank}", "DPA_RANK or RANK", has_rank ? std::optional(std::to_string(rank)) : std::nullopt},
          {"{local_rank}", "LOCAL_RANK", has_local_rank ? std::optional(std::to_string(local_rank)) : std::nullopt}};
}

std::string fill_placeholders(std::string text, const std::vector<Placeholder>& placeholders, std::string_view where) {
  for (const Placeholder& placeholder : placeholders) {
    for (auto at = text.find(placeholder.token); at != std::string::npos;
         at = text.find(placeholder.token, at + placeholder.value->size())) {
      if (!placeholder.value) {
        fail(fmt::format("{} uses {}, but {} is not set (torchrun sets it for every rank)", where, placeholder.token,
                         placeholder.variables));
      }
      text.replace(at, placeholder.token.size(), *placeholder.value);
    }
  }
  return text;
}

void fill_placeholders(json& value, const std::vector<Placeholder>& placeholders, const std::string& where) {
  if (value.is_string()) {
    value = fill_placeholders(value.get<std::string>(), placeholders, where);
  } else if (value.is_object()) {
    for (auto& [key, member] : value.items()) fill_placeholders(member, placeholders, where + "." + key);
  } else if (value.is_array()) {
    for (std::size_t i = 0; i < value.size(); ++i) {
      fill_placeholders(value[i], placeholders, fmt::format("{}[{}]", where, i));
    }
  }
}

Config config_from_json(const json& root, const std::string& path) {
  Config config;
  detail::require_one_transport_section(root, path + ": ");
  read_object(root, path + ": ", config_readers(), config);
  return config;
}

}  // namespace

Config Config::from_json_file(const std::string& path) {
  return config_from_json(detail::parse_json_object_file(path), path);
}

Config Config::from_env() {
  Config config;
  if (const auto pattern = env_string("DPA_CONFIG")) {
    const std::vector<Placeholder> placeholders = rank_placeholders();
    const std::string path = fill_placeholders(*pattern, placeholders, "DPA_CONFIG=\"" + *pattern + "\"");
    json root = detail::parse_json_object_file(path);
    for (auto& [key, member] : root.items()) fill_placeholders(member, placeholders, path + ": " + key);
    config = config_from_json(root, path);
  }

  // Every variable a worker reads, with the values it accepts. Settings that depend on each
  // other (rank < world size, K <= world size, ...) are checked by validate(), whose messages
  // name the variables too.
  // torchrun exports RANK and WORLD_SIZE; the DPA_ names win when both are present.
  if (!apply_env("DPA_RANK", config.rank, kRanks)) apply_env("RANK", config.rank, kRanks);
  if (!apply_env("DPA_WORLD_SIZE", config.world_size, kWorldSizes)) {
    apply_env("WORLD_SIZE", config.world_size, kWorldSizes);
  }
  if (const auto text = env_string("DPA_SWITCH")) {
    config.switches = parse_host_port_list(*text, "DPA_SWITCH=", protocol::kDefaultPort, kSwitchPorts.min);
  }
  apply_env("DPA_SESSION", config.session, kSessions);
  apply_env("DPA_THREADS", config.threads, kThreads);
  apply_env("DPA_WINDOW", config.window, kWindows);
  apply_env("DPA_PAYLOAD", config.payload, kPayloads);
  apply_transport_env(config.transport);
  apply_env("DPA_RTO_US", config.retransmit_timeout, kRetransmitUs);
  apply_env("DPA_MAX_RTO_US", config.max_retransmit_timeout, kRetransmitUs);
  apply_env("DPA_TIMEOUT_MS", config.timeout, kTimeoutMs);
  apply_env("DPA_JOIN_TIMEOUT_MS", config.join_timeout, kTimeoutMs);
  apply_env("DPA_LIVENESS_TIMEOUT_MS", config.liveness_timeout, kTimeoutMs);
  apply_env("DPA_PENDING_WARN_MS", config.pending_warn, kTimeoutMs);
  apply_env("DPA_BUSY_POLL_US", config.busy_poll, kBusyPollUs);
  apply_env("DPA_K", config.k, kKs);
  apply_env("DPA_PREEMPTIVE", config.preemptive);
  apply_env("DPA_SYN_DISABLE", config.syn_disable);
  apply_env("DPA_WAITER_RUNS", config.waiter_runs);
  if (const auto path = env_string("DPA_AUTH_KEY_FILE")) {
    config.auth_key = protocol::read_auth_key_file(*path, "DPA_AUTH_KEY_FILE");
  }
  if (env_string("DPA_AUTH")) config.auth_data = auth_mode_from_env() == AuthMode::data;
  if (const auto mac = env_string("DPA_DATA_MAC")) config.data_mac = *mac;
  apply_env("DPA_FAULT_DROP", config.faults.drop, kProbabilities);
  apply_env("DPA_FAULT_DUPLICATE", config.faults.duplicate, kProbabilities);
  apply_env("DPA_FAULT_REORDER", config.faults.reorder, kProbabilities);
  apply_env("DPA_FAULT_DELAY", config.faults.delay, kProbabilities);
  apply_env("DPA_FAULT_DELAY_US", config.faults.delay_time, kFaultDelayUs);
  apply_env("DPA_FAULT_SEED", config.faults.seed);
  // Read elsewhere (logging, the quantisation kernels), where a bad value can only be warned
  // about; a worker refuses it here.
  check_env_choice("DPA_LOG", {"trace", "debug", "info", "warn", "warning", "err", "error", "critical", "off"});
  check_env_choice("DPA_SIMD", {"auto", "avx512", "avx2", "scalar"});
  return config;
}

const HostPort& Config::switch_of_thread(int thread) const {
  return switches[static_cast<std::size_t>(thread) % switches.size()];
}

std::uint32_t Config::pool_slots() const {
  const std::uint64_t slots = protocol::SlotLayout::pool_slots(static_cast<std::uint64_t>(std::max(threads, 0)),
                                                               static_cast<std::uint64_t>(std::max(window, 0)));
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(slots, std::numeric_limits<std::uint32_t>::max()));
}

void Config::validate() const {
  require_in(kWorldSizes, world_size, "world_size", "DPA_WORLD_SIZE");
  require(rank >= 0 && rank < world_size, "rank {} out of range for world_size {} (DPA_RANK, DPA_WORLD_SIZE)", rank,
          world_size);
  for (const HostPort& address : switches) {
    require(!address.host.empty(), "switch: host is empty (DPA_SWITCH)");
    require(address.port != 0, "switch: port must not be 0 (DPA_SWITCH)");
  }
  require_distinct(switches, "invalid dpa config: switch (DPA_SWITCH)");
  require_in(kSessions, session, "session", "DPA_SESSION");
  require_in(kThreads, threads, "threads", "DPA_THREADS");
  require(threads >= static_cast<int>(switches.size()),
          "threads {} is fewer than the {} switch servers: each server needs at least one worker thread (DPA_THREADS, "
          "DPA_SWITCH)",
          threads, switches.size());
  require_in(kWindows, window, "window", "DPA_WINDOW");
  require(kPayloads.contains(payload), "payload {} out of range: 0 (the session's) or [1, {}] (DPA_PAYLOAD)", payload,
          kPayloads.max);
  require_in(kRetransmitUs, retransmit_timeout.count(), "retransmit_timeout_us", "DPA_RTO_US");
  require_in(kRetransmitUs, max_retransmit_timeout.count(), "max_retransmit_timeout_us", "DPA_MAX_RTO_US");
  require(max_retransmit_timeout >= retransmit_timeout,
          "max_retransmit_timeout_us {} is below retransmit_timeout_us {} (DPA_MAX_RTO_US, DPA_RTO_US)",
          max_retransmit_timeout.count(), retransmit_timeout.count());
  require_in(kTimeoutMs, std::chrono::milliseconds(timeout).count(), "timeout_ms", "DPA_TIMEOUT_MS");
  require_in(kTimeoutMs, std::chrono::milliseconds(join_timeout).count(), "join_timeout_ms", "DPA_JOIN_TIMEOUT_MS");
  require_in(kTimeoutMs, std::chrono::milliseconds(liveness_timeout).count(), "liveness_timeout_ms",
             "DPA_LIVENESS_TIMEOUT_MS");
  require_in(kTimeoutMs, std::chrono::milliseconds(pending_warn).count(), "pending_warn_ms", "DPA_PENDING_WARN_MS");
  require_in(kBusyPollUs, std::chrono::microseconds(busy_poll).count(), "busy_poll_us", "DPA_BUSY_POLL_US");
  require(k >= 0 && k <= world_size, "k {} out of range [0, world_size {}] (DPA_K)", k, world_size);
  require(data_mac == "auto" || data_mac == "siphash", "data_mac '{}' is none of auto, siphash (DPA_DATA_MAC)", data_mac);
  require_in(kProbabilities, faults.drop, "faults.drop", "DPA_FAULT_DROP");
  require_in(kProbabilities, faults.duplicate, "faults.duplicate", "DPA_FAULT_DUPLICATE");
  require_in(kProbabilities, faults.reorder, "faults.reorder", "DPA_FAULT_REORDER");
  require_in(kProbabilities, faults.delay, "faults.delay", "DPA_FAULT_DELAY");
  require_in(kFaultDelayUs, std::chrono::microseconds(faults.delay_time).count(), "faults.delay_time_us",
             "DPA_FAULT_DELAY_US");
  validate_transport(transport, threads, "", "DPA_LOCAL_PORT", "DPA_THREADS", protocol::kMaxControlBytes);
}

}  // namespace dpa

// SPDX-License-Identifier: Apache-2.0
#include "switch/metrics_text.hpp"

#include <array>
#include <bit>
#include <iterator>
#include <cstdint>
#include <string_view>

#include <fmt/format.h>

#include "dpa/error.hpp"
#include "switch/counter_fields.hpp"

namespace dpa::sw {
namespace {

struct TransportField {
  std::string_view name;
  std::uint64_t TransportCounters::*member;
  std::string_view help;
};

// The transport queue's counters as the switch exports them (idle_ns becomes idle seconds).
constexpr std::array kTransportFields{
    TransportField{"rx_packets", &TransportCounters::rx_packets, "Packets the transport queue received"},
    TransportField{"tx_packets", &TransportCounters::tx_packets, "Packets the transport queue sent"},
    TransportField{"tx_errors", &TransportCounters::tx_errors, "Packets the device or kernel refused"},
    TransportField{"rx_dropped", &TransportCounters::rx_dropped,
                   "Frames that were not dpa packets (other protocols, bad headers)"},
    TransportField{"rx_syscalls", &TransportCounters::rx_syscalls, "Receive system calls (sockets)"},
    TransportField{"tx_syscalls", &TransportCounters::tx_syscalls, "Send system calls (sockets)"},
    TransportField{"tx_bursts", &TransportCounters::tx_bursts, "DPDK transmit bursts that sent"},
    TransportField{"tx_unresolved", &TransportCounters::tx_unresolved,
                   "DPDK: packets for a destination whose MAC address was not known yet"},
    TransportField{"rx_dispatched", &TransportCounters::rx_dispatched,
                   "DPDK: packets handed to another queue by destination port"},
    TransportField{"rx_bad_checksum", &TransportCounters::rx_bad_checksum,
                   "DPDK: frames dropped for a wrong IPv4 or UDP checksum"},
    TransportField{"idle_ns", &TransportCounters::idle_ns,
                   "Time spent waiting with nothing to do (blocked, or polls that found nothing)"},
    TransportField{"injected_drops", &TransportCounters::injected_drops, "Fault injection: packets dropped"},
    TransportField{"injected_duplicates", &TransportCounters::injected_duplicates,
                   "Fault injection: packets duplicated"},
    TransportField{"injected_reorders", &TransportCounters::injected_reorders, "Fault injection: packets reordered"},
    TransportField{"injected_delays", &TransportCounters::injected_delays, "Fault injection: packets delayed"},
};
static_assert(sizeof(TransportCounters) == kTransportFields.size() * sizeof(std::uint64_t));

// A counter named *_ns is exported in seconds: "busy_ns" -> "busy_seconds_total".
std::string counter_name(std::string_view prefix, std::string_view field) {
  if (field.ends_with("_ns")) {
    field.remove_suffix(3);
    return fmt::format("{}{}_seconds_total", prefix, field);
  }
  return fmt::format("{}{}_total", prefix, field);
}

std::string counter_value(std::string_view field, std::uint64_t value) {
  return field.ends_with("_ns") ? fmt::format("{}", static_cast<double>(value) * 1e-9) : fmt::format("{}", value);
}

void family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

template <class Value>
void write_sample(std::string& out, std::string_view name, std::string_view label, std::uint64_t label_value,
            const Value& value) {
  fmt::format_to(std::back_inserter(out), "{}{{{}=\"{}\"}} {}\n", name, label, label_value, value);
}

struct SessionGauge {
  std::string_view name;
  std::string_view help;
  double (*value)(const SessionStatus&);
};

constexpr std::array kSessionGauges{
    SessionGauge{"dpa_switch_session_world_size", "Ranks in the session (N)",
                 [](const SessionStatus& s) { return static_cast<double>(s.config.world_size); }},
    SessionGauge{"dpa_switch_session_fastest_k", "Fastest-K default of the session (K; N when not set)",
                 [](const SessionStatus& s) {
                   return static_cast<double>(s.config.k == 0 ? s.config.world_size : s.config.k);
                 }},
    SessionGauge{"dpa_switch_session_payload_values", "Values per packet (P)",
                 [](const SessionStatus& s) { return static_cast<double>(s.config.payload); }},
    SessionGauge{"dpa_switch_session_pool_slots", "Switch slots the session owns",
                 [](const SessionStatus& s) { return static_cast<double>(s.config.pool_size); }},
    SessionGauge{"dpa_switch_session_straggler_timeout_seconds",
                 "Reactive fastest-K: how long a slot waits for all N before completing with K",
                 [](const SessionStatus& s) { return static_cast<double>(s.config.straggler_timeout.count()) * 1e-6; }},
    SessionGauge{"dpa_switch_session_generation", "Current join generation (0: no job has joined)",
                 [](const SessionStatus& s) { return static_cast<double>(s.generation); }},
    SessionGauge{"dpa_switch_session_joined_ranks", "Ranks of the current join generation",
                 [](const SessionStatus& s) { return static_cast<double>(std::popcount(s.joined)); }},
};

}  // namespace

std::string metrics_text(const std::vector<SwitchThreadCounters>& threads, const std::vector<SessionStatus>& sessions) {
  std::string out;
  out.reserve(256 * (threads.size() * (kSwitchCounterFields.size() + kTransportFields.size()) +
                     sessions.size() * (kSessionCounterFields.size() + kSessionGauges.size())));
  for (const auto& field : kSwitchCounterFields) {
    const std::string name = counter_name("dpa_switch_", field.name);
    family(out, name, "counter", field.help);
    for (std::size_t i = 0; i < threads.size(); ++i) {
      write_sample(out, name, "thread", i, counter_value(field.name, threads[i].counters.*field.member));
    }
  }
  for (const auto& field : kTransportFields) {
    const std::string name = counter_name("dpa_switch_transport_", field.name);
    family(out, name, "counter", field.help);
    for (std::size_t i = 0; i < threads.size(); ++i) {
      write_sample(out, name, "thread", i, counter_value(field.name, threads[i].transport.*field.member));
    }
  }
  family(out, "dpa_switch_sessions", "gauge", "Sessions the switch holds");
  fmt::format_to(std::back_inserter(out), "dpa_switch_sessions {}\n", sessions.size());
  for (const auto& field : kSessionCounterFields) {
    const std::string name = counter_name("dpa_switch_session_", field.name);
    family(out, name, "counter", field.help);
    for (const SessionStatus& session : sessions) {
      write_sample(out, name, "session", session.config.id, session.counters.*field.member);
    }
  }
  for (const SessionGauge& gauge : kSessionGauges) {
    family(out, gauge.name, "gauge", gauge.help);
    for (const SessionStatus& session : sessions) {
      write_sample(out, gauge.name, "session", session.config.id, gauge.value(session));
    }
  }
  return out;
}

HostPort metrics_address(std::string_view text, std::string_view source) {
  const bool port_only = text.find_first_not_of("0123456789") == std::string_view::npos;
  try {
    if (!text.empty() && (port_only || text.find(':') != std::string_view::npos)) {
      return parse_host_port(port_only ? fmt::format("127.0.0.1:{}", text) : std::string(text), source, 0, 0);
    }
  } catch (const ConfigError&) {
  }
  throw ConfigError(fmt::format("{}\"{}\": expected host:port or a port (127.0.0.1), with a port in [0, 65535]",
                                source, text));
}

std::string metrics_text(const SoftwareSwitch& target) {
  return metrics_text(target.thread_counters(), target.session_status());
}

}  // namespace dpa::sw

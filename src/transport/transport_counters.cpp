// SPDX-License-Identifier: Apache-2.0
#include "dpa/transport_counters.hpp"

#include <array>

namespace dpa {
namespace {

using Field = std::uint64_t TransportCounters::*;

// Every counter once: the single list both operations walk.
constexpr std::array kFields{
    &TransportCounters::rx_packets,     &TransportCounters::tx_packets,          &TransportCounters::tx_errors,
    &TransportCounters::rx_dropped,     &TransportCounters::rx_syscalls,         &TransportCounters::tx_syscalls,
    &TransportCounters::tx_bursts,      &TransportCounters::tx_unresolved,       &TransportCounters::rx_dispatched,
    &TransportCounters::rx_bad_checksum,
    &TransportCounters::idle_ns,        &TransportCounters::injected_drops,      &TransportCounters::injected_duplicates,
    &TransportCounters::injected_reorders, &TransportCounters::injected_delays,
};
// A counter added to the struct but not to the list above would be silently skipped.
static_assert(sizeof(TransportCounters) == kFields.size() * sizeof(std::uint64_t));

}  // namespace

TransportCounters& TransportCounters::operator+=(const TransportCounters& other) {
  for (const Field field : kFields) this->*field += other.*field;
  return *this;
}

TransportCounters TransportCounters::since(const TransportCounters& before) const {
  TransportCounters difference = *this;
  for (const Field field : kFields) difference.*field -= before.*field;
  return difference;
}

}  // namespace dpa

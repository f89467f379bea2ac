#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "dpa/switch.hpp"

namespace dpa {
namespace {

using CounterField = std::pair<std::string_view, std::uint64_t SwitchCounters::*>;

// Every counter once, in declaration order: the single list both operations walk.
constexpr std::array kCounterFields{
    CounterField{"rx_packets", &SwitchCounters::rx_packets},
    CounterField{"tx_packets", &SwitchCounters::tx_packets},
    CounterField{"tx_dropped", &SwitchCounters::tx_dropped},
    CounterField{"aggregated", &SwitchCounters::aggregated},
    CounterField{"completed_full", &SwitchCounters::completed_full},
    CounterField{"completed_partial", &SwitchCounters::completed_partial},
    CounterField{"retransmitted_results", &SwitchCounters::retransmitted_results},
    CounterField{"duplicates", &SwitchCounters::duplicates},
    CounterField{"late_contributions", &SwitchCounters::late_contributions},
    CounterField{"old_replies", &SwitchCounters::old_replies},
    CounterField{"syn_replies", &SwitchCounters::syn_replies},
    CounterField{"joins", &SwitchCounters::joins},
    CounterField{"errors_sent", &SwitchCounters::errors_sent},
    CounterField{"dropped_malformed", &SwitchCounters::dropped_malformed},
    CounterField{"dropped_unknown_session", &SwitchCounters::dropped_unknown_session},
    CounterField{"dropped_unregistered", &SwitchCounters::dropped_unregistered},
    CounterField{"dropped_not_joined", &SwitchCounters::dropped_not_joined},
    CounterField{"dropped_bad_token", &SwitchCounters::dropped_bad_token},
    CounterField{"joins_refused", &SwitchCounters::joins_refused},
    CounterField{"leaves", &SwitchCounters::leaves},
    CounterField{"busy_ns", &SwitchCounters::busy_ns},
};
// A counter added to the struct but not to the list above would be silently skipped.
static_assert(sizeof(SwitchCounters) == kCounterFields.size() * sizeof(std::uint64_t));

}  // namespace

SwitchCounters& SwitchCounters::operator+=(const SwitchCounters& other) {
  for (const auto& [name, member] : kCounterFields) this->*member += other.*member;
  return *this;
}

std::string SwitchCounters::to_string() const {
  std::string text;
  for (const auto& [name, member] : kCounterFields) text += fmt::format("{} {}\n", name, this->*member);
  return text;
}

}  // namespace dpa

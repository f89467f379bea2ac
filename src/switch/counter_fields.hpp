// SPDX-License-Identifier: Apache-2.0
// Every counter of SwitchCounters and SessionCounters once, with what it counts: the single list
// that adding, printing (SwitchCounters::to_string, the control channel) and the Prometheus
// endpoint (metrics_text.cpp) walk.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "dpa/switch.hpp"

namespace dpa::sw {

template <class Counters>
struct CounterField {
  std::string_view name;
  std::uint64_t Counters::*member;
  std::string_view help;
};

using SwitchField = CounterField<SwitchCounters>;
using SessionField = CounterField<SessionCounters>;

inline constexpr std::array kSwitchCounterFields{
    SwitchField{"rx_packets", &SwitchCounters::rx_packets, "Packets received"},
    SwitchField{"tx_packets", &SwitchCounters::tx_packets, "Packets sent (a multicast counts once per rank)"},
    SwitchField{"tx_dropped", &SwitchCounters::tx_dropped,
                "Replies lost: no transmit buffer, or the device queue stayed full"},
    SwitchField{"aggregated", &SwitchCounters::aggregated, "Contributions added to a slot"},
    SwitchField{"completed_full", &SwitchCounters::completed_full, "Rounds completed with all N contributions"},
    SwitchField{"completed_partial", &SwitchCounters::completed_partial,
                "Rounds completed with K <= contributions < N (fastest-K)"},
    SwitchField{"retransmitted_results", &SwitchCounters::retransmitted_results,
                "Unicast copies of stored results sent to retransmitting ranks"},
    SwitchField{"duplicates", &SwitchCounters::duplicates, "Contributions already counted, dropped"},
    SwitchField{"late_contributions", &SwitchCounters::late_contributions,
                "Contributions to a round already complete"},
    SwitchField{"old_replies", &SwitchCounters::old_replies, "OLD replies: the slot has moved past the request"},
    SwitchField{"syn_replies", &SwitchCounters::syn_replies, "Replies to SYN probes"},
    SwitchField{"joins", &SwitchCounters::joins, "JOIN requests handled"},
    SwitchField{"errors_sent", &SwitchCounters::errors_sent, "Error replies sent"},
    SwitchField{"dropped_malformed", &SwitchCounters::dropped_malformed,
                "Packets dropped: malformed, or at the wrong switch port"},
    SwitchField{"dropped_unknown_session", &SwitchCounters::dropped_unknown_session,
                "Packets dropped: no such session"},
    SwitchField{"dropped_unregistered", &SwitchCounters::dropped_unregistered,
                "Packets dropped: the sender is not a registered worker of the session"},
    SwitchField{"dropped_not_joined", &SwitchCounters::dropped_not_joined,
                "Packets dropped: the sender has not joined the session's generation"},
    SwitchField{"dropped_bad_token", &SwitchCounters::dropped_bad_token,
                "Packets dropped: without the generation's job token"},
    SwitchField{"dropped_bad_tag", &SwitchCounters::dropped_bad_tag,
                "Packets dropped: an authenticated session's packet without its rank's tag, or a tagged "
                "packet for a session without authentication"},
    SwitchField{"joins_refused", &SwitchCounters::joins_refused,
                "JOINs refused because another job holds the session"},
    SwitchField{"joins_contended", &SwitchCounters::joins_contended,
                "JOINs refused because another source holds the rank's pending JOIN"},
    SwitchField{"joins_rate_limited", &SwitchCounters::joins_rate_limited,
                "JOINs dropped because their source exceeded its JOIN rate"},
    SwitchField{"leaves", &SwitchCounters::leaves, "LEAVE requests applied"},
    SwitchField{"busy_ns", &SwitchCounters::busy_ns,
                "Time the switch threads spent on packets (running time less transport idle time)"},
};
// A counter added to the struct but not to the list above would be silently skipped.
static_assert(sizeof(SwitchCounters) == kSwitchCounterFields.size() * sizeof(std::uint64_t));

inline constexpr std::array kSessionCounterFields{
    SessionField{"rx_packets", &SessionCounters::rx_packets, "Packets naming the session"},
    SessionField{"aggregated", &SessionCounters::aggregated, "Contributions added to the session's slots"},
    SessionField{"completed_full", &SessionCounters::completed_full, "Rounds completed with all N contributions"},
    SessionField{"completed_partial", &SessionCounters::completed_partial,
                 "Rounds completed with K <= contributions < N (fastest-K)"},
    SessionField{"retransmitted_results", &SessionCounters::retransmitted_results,
                 "Unicast copies of stored results sent to retransmitting ranks"},
    SessionField{"duplicates", &SessionCounters::duplicates, "Contributions already counted, dropped"},
    SessionField{"late_contributions", &SessionCounters::late_contributions,
                 "Contributions to a round already complete"},
    SessionField{"old_replies", &SessionCounters::old_replies, "OLD replies: the slot has moved past the request"},
    SessionField{"syn_replies", &SessionCounters::syn_replies, "Replies to SYN probes"},
    SessionField{"errors_sent", &SessionCounters::errors_sent, "Error replies sent"},
    SessionField{"dropped", &SessionCounters::dropped,
                 "Packets dropped: sender not registered or not joined, wrong job token or tag, wrong switch port, "
                 "malformed JOIN"},
    SessionField{"joins", &SessionCounters::joins, "JOIN requests handled"},
};
static_assert(sizeof(SessionCounters) == kSessionCounterFields.size() * sizeof(std::uint64_t));

}  // namespace dpa::sw

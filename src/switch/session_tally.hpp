// SPDX-License-Identifier: Apache-2.0
// The events of a session's packets that a switch thread counts twice: in its own counters
// (SwitchCounters, published once per batch) and in its share of the session's (SessionCounters,
// read by other threads), under the same name in both.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dpa/switch.hpp"
#include "switch/published_counters.hpp"

namespace dpa::sw {

enum class Counted : std::uint8_t {
  aggregated,
  completed_full,
  completed_partial,
  retransmitted_results,
  duplicates,
  late_contributions,
  old_replies,
  syn_replies,
  joins,
};

class SessionTally {
 public:
  SessionTally(SwitchCounters& thread, SessionCounters& session) : thread_(thread), session_(session) {}

  void operator()(Counted event) const {
    const Pair pair = pair_of(event);
    ++(thread_.*pair.thread);
    add_to_counter(session_.*pair.session);
  }

 private:
  struct Pair {
    std::uint64_t SwitchCounters::*thread;
    std::uint64_t SessionCounters::*session;
  };
  static constexpr Pair pair_of(Counted event) {
    switch (event) {
      case Counted::aggregated: return {&SwitchCounters::aggregated, &SessionCounters::aggregated};
      case Counted::completed_full: return {&SwitchCounters::completed_full, &SessionCounters::completed_full};
      case Counted::completed_partial: return {&SwitchCounters::completed_partial, &SessionCounters::completed_partial};
      case Counted::retransmitted_results: return {&SwitchCounters::retransmitted_results, &SessionCounters::retransmitted_results};
      case Counted::duplicates: return {&SwitchCounters::duplicates, &SessionCounters::duplicates};
      case Counted::late_contributions: return {&SwitchCounters::late_contributions, &SessionCounters::late_contributions};
      case Counted::old_replies: return {&SwitchCounters::old_replies, &SessionCounters::old_replies};
      case Counted::syn_replies: return {&SwitchCounters::syn_replies, &SessionCounters::syn_replies};
      case Counted::joins: return {&SwitchCounters::joins, &SessionCounters::joins};
    }
    return {};  // not reached: the switch names every event
  }

  SwitchCounters& thread_;
  SessionCounters& session_;
};

}  // namespace dpa::sw

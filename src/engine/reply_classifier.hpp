// SPDX-License-Identifier: Apache-2.0
// What a worker thread does with a reply from the switch: the step table of docs/protocol.md
// §9.2 as a pure function of the reply header and the state of the window entry it is about.
// No I/O, no clocks, no buffers: the engine applies the action, the tests drive every row.
#pragma once

#include <cstdint>
#include <optional>

#include "protocol/wire.hpp"

namespace dpa::detail {

// Where the replies of one worker thread belong, and how it reads them.
struct ReplyScope {
  std::uint32_t session = 0;
  std::uint32_t token = 0;      // the generation's job token: replies without it are not ours
  std::uint32_t slot_base = 0;  // the thread's first slot; entry e owns slot_base + 2e and + 2e + 1
  std::uint32_t window = 0;     // entries of the thread
  std::uint32_t op_id = 0;      // the operation the thread is running
  std::uint8_t rank = 0;
  bool syn_disable = false;     // Config::syn_disable: skip a complete round instead of fetching it
};

// The state of the window entry a reply is about, as far as classification needs it.
struct EntryView {
  bool active = false;          // the entry has rounds left in the running operation
  std::uint64_t round = 0;      // its current round
  std::uint64_t end_round = 0;  // one past its last round in the running operation
  bool probing = false;         // a skip-forward SYN probe is outstanding
};

enum class ReplyKind : std::uint8_t {
  ignore,           // steps 2 (another operation's error), 4, 5 (nothing newer), 7: not for us
  fail,             // step 2: ERROR for the running operation
  resend_now,       // step 3: the probed slot never counted this rank: send the data again now
  counted_wait,     // step 3: the probed slot counted this rank and is still open
  expedite,         // step 5: the other slot shows progress: retransmit the current round now
  later_operation,  // step 6: the slot serves a later operation: the entry's rest is missed
  keep_waiting,     // steps 10, 11: accepted (restarts the give-up clock), nothing else to do
  deliver_result,   // step 9: miss [current, round), deliver round, move to round + 1
  fetch_complete,   // step 12: miss [current, round), SYN-probe round for its stored result
  skip_complete,    // step 12': miss [current, round], take exp_next, move to round + 1
  join_open,        // step 13: miss [current, round), take exp_used, send data for round
};

struct ReplyAction {
  ReplyKind kind = ReplyKind::ignore;
  std::uint64_t round = 0;  // R, the round the reply speaks of (deliver, fetch, skip, join)

  // Steps 8 onwards: the reply shows the entry's slot alive and in step with it.
  [[nodiscard]] bool accepted() const {
    return kind == ReplyKind::keep_waiting || kind == ReplyKind::deliver_result ||
           kind == ReplyKind::fetch_complete || kind == ReplyKind::skip_complete ||
           kind == ReplyKind::join_open;
  }
};

// Step 1, the header part: the window entry whose slot the reply is about, or nothing when the
// reply is for another session, a JOIN, or about a slot outside this thread's 2W slots.
// (The sender address and the decoding are checked by the caller.) Inline: it runs for every
// reply, and as a call its std::optional came back through memory (a stalled load per packet).
[[nodiscard]] inline std::optional<std::uint32_t> reply_entry(const protocol::Header& reply,
                                                              const ReplyScope& scope) {
  if (reply.session != scope.session || reply.token != scope.token || reply.has(protocol::flag::kJoin)) {
    return std::nullopt;
  }
  if (reply.slot < scope.slot_base || reply.slot - scope.slot_base >= 2 * scope.window) {
    return std::nullopt;
  }
  return (reply.slot - scope.slot_base) / 2;
}

// Steps 2 to 13 for a reply that reply_entry() placed at `entry`. The reply's payload holds
// `count` values (protocol::decode checks that).
[[nodiscard]] ReplyAction classify_reply(const EntryView& entry, const protocol::Header& reply,
                                         const ReplyScope& scope);

}  // namespace dpa::detail

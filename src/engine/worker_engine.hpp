// SPDX-License-Identifier: Apache-2.0
// The protocol side of one worker thread, as a step machine: its window of W entries over its
// slot range, and what each packet and each expired deadline does to them (send, retransmit,
// deliver, skip forward). No thread, no clock, no I/O: the caller passes the time, feeds received
// packets in and sends the packets it queues (EngineRunner on a std::thread or a DPDK lcore; the
// unit tests with a fake clock). Packets are built in place in transmit buffers of the thread's
// queue: each entry holds its current data packet (quantised straight into the buffer) and its
// retransmission probe, and a retransmission queues the same buffer again.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "dpa/config.hpp"
#include "dpa/types.hpp"
#include "engine/join.hpp"
#include "engine/operation.hpp"
#include "engine/reply_classifier.hpp"
#include "engine/rtt_estimator.hpp"
#include "protocol/wire.hpp"
#include "transport/queue.hpp"

namespace dpa::detail {

class WorkerEngine {
 public:
  // Transmit buffers come from `queue` (allocate and release only: the caller sends), which
  // must outlive the engine.
  WorkerEngine(std::uint32_t thread_index, const Config& config, const SessionInfo& session,
               transport::Queue& queue);
  ~WorkerEngine();
  WorkerEngine(const WorkerEngine&) = delete;
  WorkerEngine& operator=(const WorkerEngine&) = delete;

  // Starts this thread's part of `op` (one at a time: the previous part must have finished) and
  // queues the first packets. A part without blocks, or of an operation another part already
  // failed, finishes at once. `op` must outlive the part.
  void start(Operation& op, std::uint64_t now_ns);
  // A datagram that arrived on this thread's port.
  void on_packet(const transport::RxPacket& packet, std::uint64_t now_ns);
  // Expired deadlines (retransmission probes, give-up) and the abort of an operation that
  // another thread's part failed. Call after each batch of packets and when next_deadline()
  // has passed.
  void poll(std::uint64_t now_ns);
  // Ends the running part with `error`, or with none of its own (null: the operation already
  // failed elsewhere). Its rounds are consumed as if it had completed; queued packets dropped.
  void fail(std::exception_ptr error);
  // Liveness (docs/protocol.md §6.7): the first thread of each switch server tells it that this
  // rank lives, busy or idle. Queues a KEEPALIVE when one is due (from next_keepalive()).
  void keepalive(std::uint64_t now_ns);
  // When the next KEEPALIVE is due (UINT64_MAX on threads that send none; 0 before the first
  // call, which only starts the interval).
  [[nodiscard]] std::uint64_t next_keepalive() const { return next_keepalive_ns_; }
  // The running part, if the switch reports one of its rounds pending (it counted this rank,
  // other ranks are missing): as of the latest pending reply. Any thread may ask.
  [[nodiscard]] std::optional<PendingWait> pending(std::uint64_t now_ns) const;

  // Whether a part is running; it finishes (Operation::finish_part) inside the call that
  // completes or fails it.
  [[nodiscard]] bool busy() const { return op_ != nullptr; }
  // The earliest retransmission deadline of the running part (UINT64_MAX when idle); scans
  // the window.
  [[nodiscard]] std::uint64_t next_deadline() const;
  // No later than next_deadline(), without a scan: how long the runner may wait for packets.
  // Early when the entry that held the earliest deadline moved on since the last poll(); a
  // poll() at or after it makes it exact again.
  [[nodiscard]] std::uint64_t deadline_bound() const { return op_ != nullptr ? earliest_deadline_ : kNever; }
  // Packets queued since the last clear. They point at the entries' buffers, which stay
  // unchanged until the next start/on_packet/poll call; the engine keeps its reference to each
  // buffer (send them, never release them).
  [[nodiscard]] std::span<const transport::TxRequest> outgoing() const { return tx_; }
  void clear_outgoing() { tx_.clear(); }

 private:
  // A window entry: alternates between its two slots, one round at a time.
  struct Entry {
    std::uint64_t round = 0;      // next round of this entry (persists across operations)
    std::uint64_t first_round = 0;  // the current operation's rounds: [first_round, end_round)
    std::uint64_t end_round = 0;
    std::size_t blocks = 0;       // blocks of the current operation on this entry
    bool active = false;
    bool probing = false;         // a SYN probe is outstanding
    bool count_to_k = false;
    std::int8_t exponent = protocol::kExpZero;  // negotiated exponent of the block being sent
    std::uint64_t deadline_ns = 0;
    std::uint64_t last_reply_ns = 0;
    std::uint64_t rto_ns = 0;
    std::uint64_t rto_cap_ns = 0;  // back-off cap of the current round
    std::uint64_t sent_ns = 0;    // first transmission of the current round
    bool data_resent = false;     // Karn: a result may answer the resend, so it is no sample
    bool probed = false;          // a probe went: the wait may include another rank's recovery
    bool expedited = false;       // resend now: a reply showed the round is already complete
    std::uint64_t data_send = 0;  // this thread's data-send count when the round's data went out
    bool loss_probed = false;     // rounds sent after this one completed first: probed once
    std::uint64_t counted_reply_ns = 0;  // last probe reply saying "counted, still open" (0: none)
    std::uint64_t waiting_for = 0;       // the ranks that reply said the round lacks
    std::uint64_t heard_ns = 0;          // last reply of any kind about the entry: the switch lives
    // Replies about this entry's slots since the last accepted one that it did not accept, and
    // the last of them: a give-up then names what the switch kept answering.
    std::uint32_t unaccepted_replies = 0;
    protocol::Header last_unaccepted{};
    transport::TxBuffer packet;   // the current data packet (or the skip-forward SYN probe)
    transport::TxBuffer probe;    // header-only retransmission probe for the current round
    bool probe_built = false;     // `probe` holds the current round's probe
    transport::Endpoint switch_port;  // the switch thread that owns the entry's slots

    [[nodiscard]] EntryView view() const { return {active, round, end_round, probing}; }
  };

  // Swaps `buffer` for a fresh one of the queue: the old one may still be in flight (the
  // transport holds its own reference), so it is never rewritten.
  void renew(transport::TxBuffer& buffer);
  void start_entry(std::uint32_t e, std::uint64_t now);
  void build_data(std::uint32_t e);
  // This rank's exponent of block `block` of the plan (float_blocks.hpp).
  std::int8_t exponent_of(std::size_t block);
  // Owned operations (§13): the request flag of the running operation (0 for an all-reduce),
  // the owner of a block, and where a block sits in the input and the output.
  [[nodiscard]] std::uint16_t mode_flag() const;
  [[nodiscard]] std::uint8_t owner_of(std::size_t block) const;
  [[nodiscard]] std::size_t input_index(std::size_t block) const;
  [[nodiscard]] std::size_t output_index(std::size_t block) const;
  // The one place request headers are built: the fields every request of entry e's current
  // round shares.
  [[nodiscard]] protocol::Header request_header(std::uint32_t e, std::uint16_t flags) const;
  void build_probe(std::uint32_t e);
  // Sets the size of an encoded request of `bytes`, sealed in authenticated mode.
  void finish_request(transport::TxBuffer& buffer, std::size_t bytes);
  void send_retransmit_probe(std::uint32_t e, std::uint64_t now);
  void queue_send(std::uint32_t e, std::uint64_t now);
  void handle_packet(const transport::RxPacket& packet, std::uint64_t now);
  void apply(std::uint32_t e, const ReplyAction& action, const protocol::Header& h,
             std::span<const std::byte> payload, std::uint64_t now);
  void deliver(std::uint32_t e, std::uint64_t round, const protocol::Header& h,
               std::span<const std::byte> payload);
  void miss_blocks(std::uint32_t e, std::uint64_t from_round, std::uint64_t to_round);
  // Resets an entry's per-round state for a round sent now and arms its timer.
  void begin_round(Entry& entry, std::uint64_t now);
  void move_to(std::uint32_t e, std::uint64_t round, std::uint64_t now);
  void finish_entry(std::uint32_t e);
  void check_timeouts(std::uint64_t now);
  // Every write of an entry's deadline: keeps earliest_deadline_ a lower bound.
  void set_deadline(Entry& entry, std::uint64_t at) {
    entry.deadline_ns = at;
    earliest_deadline_ = std::min(earliest_deadline_, at);
  }
  // Loss probes, oldest data send first (the probe-on-reorder rule of check_timeouts()).
  void probe_overtaken(std::uint64_t now);
  [[noreturn]] void throw_timeout(std::uint32_t e, std::uint64_t now) const;
  [[noreturn]] void throw_switch_silent(std::uint32_t e, std::uint64_t now) const;
  // A pending reply (§8.2): the switch counted this rank and waits for `h`'s missing ranks.
  void on_pending(std::uint32_t e, const protocol::Header& h, std::uint64_t now);
  [[noreturn]] void throw_error_reply(const protocol::Header& h) const;
  // Completes the part when no entry is active any more.
  void finish_if_done();
  // Ends the part: rounds of unfinished entries are consumed, the part handed to the operation.
  void end_part(std::exception_ptr error);

  [[nodiscard]] bool is_float() const { return op_->type == DataType::float32; }
  // Block index within the entry for a round of the current operation (-1: exponent priming).
  [[nodiscard]] std::int64_t block_index(const Entry& entry, std::uint64_t round) const;

  // Sets the entry's timeout for a new round (or a skip-forward probe) from the estimates.
  void arm_rto(Entry& entry) const;

  const std::uint32_t index_;
  const Config config_;
  const SessionInfo session_;
  // This thread's AES-256-GCM nonces (protocol.md §6.6): sender id = the thread index, unique
  // among the rank's engines, which are the only senders under the generation's request key.
  protocol::NonceCounter request_nonces_;
  const protocol::SlotLayout layout_;
  std::vector<transport::Endpoint> switch_ports_;  // the entries' switch ports, each once
  const std::uint64_t max_rto_ns_;            // back-off cap when K = N
  const std::uint64_t fastest_k_max_rto_ns_;  // cap when a slot may complete early
  const std::uint64_t liveness_ns_;           // no reply this long: the switch is dead
  // Probe interval of a pending round, keepalive interval, and the bound of every timeout (a
  // probe must go well within the liveness timeout): min(1 s, liveness / 5).
  const std::uint64_t slow_probe_ns_;
  const std::uint64_t pending_warn_ns_;
  ReplyScope scope_;                          // op_id: the running operation's

  transport::Queue& queue_;
  // The queue never loses a packet (shared memory): a late round is a stalled peer, not a loss.
  const bool lossless_;
  std::vector<Entry> entries_;
  std::vector<transport::TxRequest> tx_;
  std::size_t active_entries_ = 0;

  // Round trips of this thread's rounds, from a request to the multicast result that its
  // round's completion sent, in two kinds: an entry's first round of an operation also waits
  // for the ranks to reach the operation (their arrival skew), its later rounds only for the
  // path (the switch, the other ranks' threads, the scheduler when cores are overcommitted).
  RttEstimator round_rtt_;
  RttEstimator first_round_rtt_;
  // Karn: a timeout doubles the timeout of later rounds too, until a round completes and gives
  // a fresh sample. Keeps an overloaded path from a resend storm.
  unsigned backoff_shift_ = 0;
  // Loss detection without the timer: data sends numbered in order, and the newest number
  // whose round completed. A round that kReorderRounds later rounds overtook is probed at once,
  // so the timeout can follow slow rounds without slowing the recovery of lost ones.
  std::uint64_t data_sends_ = 0;
  std::uint64_t newest_completed_send_ = 0;
  // The data sends in send order, so that the rule looks at the oldest outstanding ones only:
  // a ring of (data_send, entry), an item stale once its entry sent again, completed, or
  // probed. Sized for the window and its retransmissions; grows (rarely) if that is short.
  struct DataSend {
    std::uint64_t number = 0;
    std::uint32_t entry = 0;
  };
  std::vector<DataSend> data_send_ring_;
  std::size_t data_send_head_ = 0;
  std::size_t data_send_count_ = 0;
  // Lower bound of the active entries' deadlines, exact after each scan of check_timeouts(),
  // which scans only once it has passed.
  static constexpr std::uint64_t kNever = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t earliest_deadline_ = kNever;

  // The running part (op_ null when idle).
  Operation* op_ = nullptr;
  bool op_waits_for_all_ = true;         // K = N: no round completes without every rank
  std::uint64_t op_max_rto_ns_ = 0;      // back-off cap
  std::uint64_t op_rto_floor_ns_ = 0;    // the estimates' floor
  std::uint64_t op_rto_ceiling_ns_ = 0;  // the estimates' ceiling
  BlockPlan plan_{0, 1, 0, 1};
  OpStats stats_;

  // Keepalives: one header-only packet, built once, sent again and again.
  transport::TxBuffer keepalive_;
  std::uint64_t next_keepalive_ns_ = kNever;
  // The running part's pending state for pending(): the operation (0: none), since when its
  // oldest pending round waits, and the ranks the latest pending reply lacked.
  std::atomic<std::uint32_t> pending_op_{0};
  std::atomic<std::uint64_t> pending_since_ns_{0};
  std::atomic<std::uint64_t> pending_ranks_{0};
};

}  // namespace dpa::detail

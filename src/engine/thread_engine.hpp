// One worker thread of a context: its transport, its window of W entries over its slot range,
// and the packet loop that drives them (send, receive, retransmit, skip forward).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "dpa/config.hpp"
#include "engine/join.hpp"
#include "engine/operation.hpp"
#include "protocol/wire.hpp"
#include "transport/transport.hpp"

namespace dpa::detail {

class ThreadEngine {
 public:
  ThreadEngine(std::uint32_t thread_index, const Config& config, const SessionInfo& session,
               std::unique_ptr<transport::Transport> transport);
  ~ThreadEngine();
  ThreadEngine(const ThreadEngine&) = delete;
  ThreadEngine& operator=(const ThreadEngine&) = delete;

  void submit(std::shared_ptr<Operation> op);
  // Stops the thread once its current operation ends; the transport stays open.
  void stop();
  // Thread 0's transport also carries the context's JOIN and LEAVE. Only after stop().
  [[nodiscard]] transport::Transport& transport() { return *transport_; }

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
    std::uint64_t sent_ns = 0;    // first transmission of the current round
    bool retransmitted = false;   // Karn: no RTT sample from a retransmitted round
    bool expedited = false;       // resend now: a reply showed the round is already complete
    std::uint64_t counted_reply_ns = 0;  // last probe reply saying "counted, still open" (0: none)
    std::uint32_t packet_size = 0;
    std::byte* packet = nullptr;  // the current data packet (or the skip-forward SYN probe)
    std::byte* probe = nullptr;   // header-only retransmission probe for the current round
  };

  void run();
  void execute(Operation& op);
  std::size_t receive(std::chrono::nanoseconds wait, std::uint64_t now);

  // Per-operation helpers (all on the engine thread).
  void start_entry(Operation& op, std::uint32_t e, std::uint64_t now);
  void build_data(Operation& op, std::uint32_t e);
  // Header fields every request of entry e's current round shares.
  [[nodiscard]] protocol::Header request_header(const Operation& op, std::uint32_t e,
                                                std::uint16_t flags) const;
  void build_probe(Operation& op, std::uint32_t e);
  void send_retransmit_probe(const Operation& op, std::uint32_t e, std::uint64_t now);
  void queue_send(std::uint32_t e, std::uint64_t now);
  void handle_packet(Operation& op, const transport::RxPacket& packet, std::uint64_t now);
  void deliver(Operation& op, std::uint32_t e, std::uint64_t round, const protocol::Header& h,
               std::span<const std::byte> payload);
  void miss_blocks(Operation& op, std::uint32_t e, std::uint64_t from_round, std::uint64_t to_round);
  void move_to(Operation& op, std::uint32_t e, std::uint64_t round, std::uint64_t now);
  void finish_entry(std::uint32_t e);
  void check_timeouts(Operation& op, std::uint64_t now);
  [[noreturn]] void fail_on_error_reply(const Operation& op, const protocol::Header& h) const;

  [[nodiscard]] bool is_float(const Operation& op) const { return op.type == DataType::float32; }
  // Block index within the entry for a round of the current operation (-1: exponent priming).
  [[nodiscard]] std::int64_t block_index(const Operation& op, const Entry& entry,
                                         std::uint64_t round) const;

  const std::uint32_t index_;
  const Config config_;
  const SessionInfo session_;
  const protocol::SlotLayout layout_;
  const std::uint32_t slot_base_;
  const transport::Endpoint switch_port_;
  const std::uint64_t max_rto_ns_;        // back-off cap when K = N
  const std::uint64_t fastest_k_max_rto_ns_;  // cap when a slot may complete early
  std::unique_ptr<transport::Transport> transport_;

  std::vector<Entry> entries_;
  std::vector<std::byte> packet_memory_;
  std::vector<std::byte> probe_memory_;
  std::vector<transport::RxPacket> rx_;
  std::vector<transport::TxPacket> tx_;
  std::size_t active_entries_ = 0;

  // Smoothed round-trip time of this thread's rounds (RFC 6298 style), which sets the first
  // retransmission timeout of each round; the configured timeout is its floor.
  void sample_rtt(std::uint64_t rtt_ns);
  [[nodiscard]] std::uint64_t initial_rto() const;
  std::uint64_t srtt_ns_ = 0;
  std::uint64_t rttvar_ns_ = 0;
  // Karn: a timeout doubles the timeout of later rounds too, until a round completes without
  // a retransmission and gives a fresh sample. Keeps an overloaded path from a resend storm.
  unsigned backoff_shift_ = 0;

  // State of the operation being executed.
  std::uint64_t op_max_rto_ns_ = 0;
  BlockPlan plan_{0, 1, 0, 1};
  OpStats stats_;

  std::mutex queue_mutex_;
  std::condition_variable queue_ready_;
  std::deque<std::shared_ptr<Operation>> queue_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace dpa::detail

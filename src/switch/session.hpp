// One allreduce session on the software switch: its configuration, its slot pool and who has
// joined it from where.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dpa/switch.hpp"
#include "protocol/wire.hpp"
#include "switch/slot.hpp"
#include "transport/transport.hpp"

namespace dpa::sw {

// The members of one join generation. Immutable once published; every switch thread reads it.
struct Membership {
  std::uint32_t generation = 0;
  std::uint32_t threads = 0;  // worker threads per rank
  std::uint32_t window = 0;
  std::uint64_t joined = 0;   // rank bitmap
  std::array<std::uint32_t, protocol::kMaxWorld> nonces{};
  std::array<std::array<transport::Endpoint, protocol::kMaxThreads>, protocol::kMaxWorld> endpoints{};

  [[nodiscard]] bool has(std::uint32_t rank) const { return ((joined >> rank) & 1) != 0; }
};

// Outcome of a JOIN request.
struct JoinOutcome {
  enum class Kind : std::uint8_t {
    waiting,        // recorded; other ranks have not joined yet
    ack_sender,     // a retransmitted JOIN of a completed generation: acknowledge the sender
    ack_all,        // the join completed now: acknowledge every rank
    reject_sender,  // the request is invalid: error to the sender only
    reject_all,     // ranks disagree: error to the sender and every rank waiting so far
  };
  Kind kind = Kind::waiting;
  protocol::ErrorCode error = protocol::ErrorCode::none;
  std::uint32_t expected = 0;
  const Membership* members = nullptr;  // ack_*: the generation; reject_all: ranks to notify
};

class Session {
 public:
  explicit Session(const SessionConfig& config);  // resolves worker addresses
  ~Session();

  [[nodiscard]] const SessionConfig& config() const { return config_; }
  [[nodiscard]] const SessionLimits& limits() const { return limits_; }
  [[nodiscard]] std::uint32_t k_default() const { return limits_.k; }

  // Whether `from` is a registered address for `rank` (rank < world size is checked first).
  // The registered port, if any, is thread 0's: only JOINs (sent by thread 0) check it; data
  // packets are matched against the exact per-thread endpoints announced in the JOIN.
  [[nodiscard]] bool registered(std::uint32_t rank, const transport::Endpoint& from,
                                bool check_port) const;

  [[nodiscard]] const Membership* membership() const {
    return membership_.load(std::memory_order_acquire);
  }

  // Slot `index` is absolute; callers check it lies in the pool first.
  [[nodiscard]] bool in_pool(std::uint32_t index) const {
    return index >= config_.pool_base && index - config_.pool_base < config_.pool_size;
  }
  SlotState& slot(std::uint32_t index) { return slots_[index - config_.pool_base]; }
  std::span<std::int32_t> values(std::uint32_t index) {
    return {values_.data() + static_cast<std::size_t>(index - config_.pool_base) * config_.payload,
            config_.payload};
  }

  // Handles a JOIN. Called only from the switch thread that owns port 0.
  JoinOutcome join(const protocol::Header& header, const protocol::JoinRequest& request,
                   const transport::Endpoint& from);

 private:
  JoinOutcome reject_all(protocol::ErrorCode code, std::uint32_t expected);

  SessionConfig config_;
  SessionLimits limits_;
  std::vector<transport::Endpoint> registered_;  // one per rank, one for all, or none
  std::vector<SlotState> slots_;
  std::vector<std::int32_t> values_;

  std::atomic<const Membership*> membership_{nullptr};
  // Earlier generations stay allocated: another thread may still be reading one.
  std::vector<std::unique_ptr<Membership>> generations_;
  Membership pending_;
  Membership rejected_;  // the ranks a reject_all outcome must notify
  std::uint32_t next_generation_ = 1;
};

}  // namespace dpa::sw

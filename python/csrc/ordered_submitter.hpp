// Keeps dpa submissions in the order the all_reduce calls were made.
//
// Every rank must submit its dpa operations in the same order: operation ids and switch slots
// line up only then. Pool threads stage operations concurrently and would race to submit, so each
// call takes a ticket on the calling thread, and a thread submits only in its ticket's turn.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace dpa::torch_backend {

class OrderedSubmitter {
 public:
  // Held while submitting; destroying it passes the turn to the next ticket.
  class Turn {
   public:
    explicit Turn(OrderedSubmitter& owner) : owner_(&owner) {}
    Turn(Turn&& other) noexcept : owner_(other.owner_) { other.owner_ = nullptr; }
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;
    Turn& operator=(Turn&&) = delete;
    ~Turn();

   private:
    OrderedSubmitter* owner_;
  };

  std::uint64_t take_ticket();
  // Blocks until every earlier ticket has had its turn. Throws dpa::Error once closed.
  Turn wait_turn(std::uint64_t ticket);
  // Wakes and fails every waiter: the process group is shutting down.
  void close();

 private:
  void pass_turn();

  std::mutex mutex_;
  std::condition_variable turn_changed_;
  std::uint64_t next_ticket_ = 0;
  std::uint64_t now_serving_ = 0;
  bool closed_ = false;
};

}  // namespace dpa::torch_backend

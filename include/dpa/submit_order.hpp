// SPDX-License-Identifier: Apache-2.0
// The order in which asynchronous operations reach a Context when several threads submit.
//
// Every rank must submit its operations in the same order: operation ids and switch slots line
// up only then. A program that prepares operations on several threads (staging buffers, say)
// decides the order where the operations are issued by taking a ticket there, and lets whichever
// thread prepared an operation submit it in that ticket's turn:
//
//   SubmitOrder::Ticket ticket = context.submit_order().take_ticket();  // issuing thread
//   ...                                                                  // any thread, later
//   SubmitOrder::Turn turn = context.submit_order().wait_turn(std::move(ticket));
//   Handle handle = context.allreduce_async(turn, in, out, count, type);
//
// A turn comes once every earlier ticket's turn has ended or the ticket was dropped unused, and
// lasts until the Turn is destroyed; it may submit any number of operations. Submissions without
// a turn (Context::allreduce, allreduce_async) take a ticket when called and wait for its turn, so
// a thread that holds a Turn, or a ticket it has yet to use, must not make one: it would wait for
// itself. Contexts created with the same SubmitOrder share one sequence of tickets.
#pragma once

#include <cstdint>
#include <memory>

namespace dpa {

namespace detail {
struct SubmitOrderState;
}  // namespace detail

class SubmitOrder {
 public:
  // A place in the order. Move-only; destroying a ticket that was never turned into a Turn gives
  // up its place, so later turns do not wait for it.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept;
    Ticket& operator=(Ticket&& other) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket();

    [[nodiscard]] bool valid() const { return state_ != nullptr; }

   private:
    friend class SubmitOrder;
    void give_up();

    std::shared_ptr<detail::SubmitOrderState> state_;
    std::uint64_t number_ = 0;
  };

  // The right to submit now. Move-only; destroying it passes the turn to the next ticket.
  class Turn {
   public:
    Turn(Turn&& other) noexcept = default;
    Turn& operator=(Turn&& other) noexcept;
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;
    ~Turn();

   private:
    friend class SubmitOrder;
    explicit Turn(std::shared_ptr<detail::SubmitOrderState> state) : state_(std::move(state)) {}
    void end();

    std::shared_ptr<detail::SubmitOrderState> state_;
  };

  SubmitOrder();  // a new order; copies share it

  // Thread-safe; tickets are numbered in the order of these calls.
  [[nodiscard]] Ticket take_ticket() const;
  // Blocks until every earlier ticket's turn has ended (or the ticket was dropped). Throws
  // dpa::Error for an empty ticket or one of another order.
  [[nodiscard]] Turn wait_turn(Ticket ticket) const;
  // take_ticket() and wait_turn() in one.
  [[nodiscard]] Turn wait_turn() const;

  // Whether `turn` is a current turn of this order.
  [[nodiscard]] bool holds(const Turn& turn) const { return turn.state_ == state_ && state_ != nullptr; }

 private:
  std::shared_ptr<detail::SubmitOrderState> state_;
};

}  // namespace dpa

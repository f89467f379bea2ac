// SPDX-License-Identifier: Apache-2.0
#include "dpa/submit_order.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <utility>
#include <vector>

#include "dpa/error.hpp"

namespace dpa {

namespace detail {

struct SubmitOrderState {
  std::mutex mutex;
  std::condition_variable turn_changed;
  std::uint64_t next_ticket = 0;
  std::uint64_t now_serving = 0;
  std::vector<std::uint64_t> given_up;  // dropped tickets that now_serving has not reached yet

  // Under `mutex`: the turn moves past `now_serving` and every dropped ticket right after it.
  void advance() {
    ++now_serving;
    for (auto found = std::ranges::find(given_up, now_serving); found != given_up.end();
         found = std::ranges::find(given_up, now_serving)) {
      given_up.erase(found);
      ++now_serving;
    }
  }
};

}  // namespace detail

SubmitOrder::Ticket::Ticket(Ticket&& other) noexcept
    : state_(std::move(other.state_)), number_(other.number_) {}

SubmitOrder::Ticket& SubmitOrder::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    give_up();
    state_ = std::move(other.state_);
    number_ = other.number_;
  }
  return *this;
}

SubmitOrder::Ticket::~Ticket() { give_up(); }

void SubmitOrder::Ticket::give_up() {
  if (!state_) return;
  {
    std::lock_guard lock(state_->mutex);
    if (state_->now_serving == number_) {
      state_->advance();
    } else {
      state_->given_up.push_back(number_);
    }
  }
  state_->turn_changed.notify_all();
  state_.reset();
}

SubmitOrder::Turn& SubmitOrder::Turn::operator=(Turn&& other) noexcept {
  if (this != &other) {
    end();
    state_ = std::move(other.state_);
  }
  return *this;
}

SubmitOrder::Turn::~Turn() { end(); }

void SubmitOrder::Turn::end() {
  if (!state_) return;
  {
    std::lock_guard lock(state_->mutex);
    state_->advance();
  }
  state_->turn_changed.notify_all();
  state_.reset();
}

SubmitOrder::SubmitOrder() : state_(std::make_shared<detail::SubmitOrderState>()) {}

SubmitOrder::Ticket SubmitOrder::take_ticket() const {
  Ticket ticket;
  std::lock_guard lock(state_->mutex);
  ticket.number_ = state_->next_ticket++;
  ticket.state_ = state_;
  return ticket;
}

SubmitOrder::Turn SubmitOrder::wait_turn(Ticket ticket) const {
  if (ticket.state_ != state_) {
    throw Error(ticket.valid() ? "SubmitOrder::wait_turn: the ticket belongs to another SubmitOrder"
                               : "SubmitOrder::wait_turn: empty ticket (moved from or default-constructed)");
  }
  std::unique_lock lock(state_->mutex);
  state_->turn_changed.wait(lock, [&] { return state_->now_serving == ticket.number_; });
  // The ticket is used: its turn now ends with the Turn, not with the ticket.
  ticket.state_.reset();
  return Turn(state_);
}

SubmitOrder::Turn SubmitOrder::wait_turn() const {
  std::unique_lock lock(state_->mutex);
  const std::uint64_t number = state_->next_ticket++;
  state_->turn_changed.wait(lock, [&] { return state_->now_serving == number; });
  return Turn(state_);
}

}  // namespace dpa

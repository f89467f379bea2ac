#include "ordered_submitter.hpp"

#include "dpa/error.hpp"

namespace dpa::torch_backend {

OrderedSubmitter::Turn::~Turn() {
  if (owner_ != nullptr) owner_->pass_turn();
}

std::uint64_t OrderedSubmitter::take_ticket() {
  std::lock_guard lock(mutex_);
  return next_ticket_++;
}

OrderedSubmitter::Turn OrderedSubmitter::wait_turn(std::uint64_t ticket) {
  std::unique_lock lock(mutex_);
  turn_changed_.wait(lock, [&] { return closed_ || now_serving_ == ticket; });
  if (closed_) throw Error("the dpa process group is shutting down");
  return Turn(*this);
}

void OrderedSubmitter::close() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
  }
  turn_changed_.notify_all();
}

void OrderedSubmitter::pass_turn() {
  {
    std::lock_guard lock(mutex_);
    ++now_serving_;
  }
  turn_changed_.notify_all();
}

}  // namespace dpa::torch_backend

// SPDX-License-Identifier: Apache-2.0
#include "cuda/device_completion.hpp"

#include <algorithm>
#include <utility>

#include <c10/core/impl/VirtualGuardImpl.h>


namespace dpa::torch_backend {
namespace {

template <typename Event>
void synchronize_event(const Event& event, const c10::Stream& recorded_on) {
  if constexpr (requires(const Event& e) { e.synchronize(); }) {
    event.synchronize();
  } else {
    recorded_on.synchronize();
  }
}

}  // namespace

void synchronize(const c10::Event& event, const c10::Stream& recorded_on) {
  synchronize_event(event, recorded_on);
}

std::shared_ptr<c10::Event> EventPool::take() {
  std::unique_ptr<c10::Event> event;
  {
    std::lock_guard lock(shelf_->mutex);
    if (!shelf_->free.empty()) {
      event = std::move(shelf_->free.back());
      shelf_->free.pop_back();
    }
  }
  if (!event) event = std::make_unique<c10::Event>(type_);
  return {event.release(), [shelf = shelf_](c10::Event* returned) {
            std::unique_ptr<c10::Event> owned(returned);
            std::lock_guard lock(shelf->mutex);
            try {
              shelf->free.push_back(std::move(owned));
            } catch (...) {
              // No room to keep it: destroyed instead.
            }
          }};
}

SideStreams SideStreamsByDevice::for_device(c10::Device device) {
  std::lock_guard lock(mutex_);
  const auto found = queues_.find(device.index());
  if (found != queues_.end()) return found->second.streams;
  c10::impl::VirtualGuardImpl guard(device.type());
  auto events = std::make_unique<EventPool>(device.type());
  const SideStreams streams{guard.getStreamFromGlobalPool(device, /*isHighPriority=*/true),
                            guard.getStreamFromGlobalPool(device, /*isHighPriority=*/true), events.get()};
  queues_.emplace(device.index(), Queues{streams, std::move(events)});
  return streams;
}

Retirement::~Retirement() {
  for (Retiree& retiree : retirees_) {
    if (retiree.done) synchronize(*retiree.done, retiree.recorded_on);
  }
}

void Retirement::retire(std::shared_ptr<void> operation, std::shared_ptr<c10::Event> done,
                        c10::Stream recorded_on) {
  if (!done || done->query()) return;  // destroyed here: nothing left on the device
  std::lock_guard lock(mutex_);
  retirees_.push_back(Retiree{std::move(operation), std::move(done), recorded_on});
}

void Retirement::sweep() {
  std::vector<Retiree> finished;
  {
    std::lock_guard lock(mutex_);
    if (retirees_.empty()) return;
    const auto still_copying = std::stable_partition(
        retirees_.begin(), retirees_.end(), [](const Retiree& r) { return r.done->query(); });
    finished.assign(std::make_move_iterator(retirees_.begin()),
                    std::make_move_iterator(still_copying));
    retirees_.erase(retirees_.begin(), still_copying);
  }
  // Destroyed outside the lock: they give their buffers back to the pool.
}

}  // namespace dpa::torch_backend

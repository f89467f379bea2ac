// SPDX-License-Identifier: Apache-2.0
// How CUDA all_reduces complete in stream order, the way NCCL's and Gloo's do: the host waits
// for the network, never for the copy of the result back to the device. The copy is queued on a
// side stream and an event marks its end; Work::wait() and the work's future make the caller's
// stream wait for that event, and the operation's buffers stay on loan until the event has
// passed (Retirement), so nothing is freed or reused while the device still copies.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

namespace dpa::torch_backend {

// Blocks the calling thread until `event` has passed on the device (not by polling where torch
// can wait on an event; torch 1.13 cannot, and has no CUDA in the builds that use it, so there
// `recorded_on`, the stream the event was recorded on, is synchronised instead).
void synchronize(const c10::Event& event, const c10::Stream& recorded_on);

// A device's events, reused from operation to operation: creating and destroying a CUDA event is
// a driver call each, and an operation records three (the caller's stream, the copy to the host,
// the copy back). An event records on one device only, hence a pool per device. Thread-safe.
class EventPool {
 public:
  explicit EventPool(c10::DeviceType type) : type_(type) {}

  // An event that goes back to the pool when its last holder drops it (the pool may be gone by
  // then: the free list outlives it).
  [[nodiscard]] std::shared_ptr<c10::Event> take();

 private:
  struct Shelf {
    std::mutex mutex;
    std::vector<std::unique_ptr<c10::Event>> free;
  };

  c10::DeviceType type_;
  std::shared_ptr<Shelf> shelf_ = std::make_shared<Shelf>();
};

// The two side streams of a device, one for copies to the host and one for copies back, taken
// once per process group so every operation on that device queues on the same pair: the results
// of all tensors of a request are then ready on one stream. With them the device's event pool.
struct SideStreams {
  c10::Stream to_host;
  c10::Stream to_device;
  EventPool* events;  // owned by the SideStreamsByDevice that made these
};

class SideStreamsByDevice {
 public:
  SideStreams for_device(c10::Device device);

 private:
  struct Queues {
    SideStreams streams;
    std::unique_ptr<EventPool> events;
  };

  std::mutex mutex_;
  std::map<c10::DeviceIndex, Queues> queues_;
};

// Operations whose results are still being copied to the device. Each is destroyed (returning
// its staging buffers to the pool) once its event has passed; sweep() is called before an
// operation takes buffers, so the pool sees what earlier operations have given back.
class Retirement {
 public:
  Retirement() = default;
  Retirement(const Retirement&) = delete;
  Retirement& operator=(const Retirement&) = delete;
  // Waits for every retired operation's device work.
  ~Retirement();

  // `operation`: what owns the buffers the device still copies (a TensorAllreduce, a
  // ShardedStaging); `done` the event after its last copy, recorded on `recorded_on`.
  void retire(std::shared_ptr<void> operation, std::shared_ptr<c10::Event> done, c10::Stream recorded_on);
  void sweep();

 private:
  struct Retiree {
    std::shared_ptr<void> operation;
    std::shared_ptr<c10::Event> done;
    c10::Stream recorded_on;
  };

  std::mutex mutex_;
  std::vector<Retiree> retirees_;
};

}  // namespace dpa::torch_backend

// SPDX-License-Identifier: Apache-2.0
#include "run/serial_worker.hpp"

#include <utility>

#include <c10/util/thread_name.h>

#include "dpa/error.hpp"

namespace dpa::torch_backend {

SerialWorker::SerialWorker(std::string name) : name_(std::move(name)), thread_([this] { run(); }) {}

SerialWorker::~SerialWorker() { shutdown(); }

void SerialWorker::post(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw Error("the dpa process group is shut down");
    tasks_.push_back(std::move(task));
  }
  posted_.notify_one();
}

void SerialWorker::shutdown() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  posted_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void SerialWorker::run() {
  c10::setThreadName(name_);
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mutex_);
      posted_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace dpa::torch_backend

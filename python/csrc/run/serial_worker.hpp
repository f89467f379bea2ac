// SPDX-License-Identifier: Apache-2.0
// One thread that runs tasks in the order they were posted: the sharded collectives' steps that
// must keep the order of the calls (submitting in their turn, completing in turn).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace dpa::torch_backend {

class SerialWorker {
 public:
  explicit SerialWorker(std::string name);
  ~SerialWorker();  // shutdown()
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  // Throws dpa::Error once shut down. A task must not throw.
  void post(std::function<void()> task);
  // Runs the tasks already posted, then stops the thread. Idempotent.
  void shutdown();

 private:
  void run();

  std::string name_;
  std::mutex mutex_;
  std::condition_variable posted_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace dpa::torch_backend

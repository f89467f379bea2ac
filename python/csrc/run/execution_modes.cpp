// SPDX-License-Identifier: Apache-2.0
#include "run/execution_modes.hpp"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <c10/util/thread_name.h>

#include "dpa/error.hpp"

namespace dpa::torch_backend {
namespace {

// A FIFO that consumer threads block on.
template <typename Item>
class BlockingQueue {
 public:
  // `prepare` runs under the queue's lock, just before the item is queued.
  template <typename Prepare>
  void push(Item item, Prepare prepare) {
    {
      std::lock_guard lock(mutex_);
      if (closed_) throw Error("the dpa process group is shut down");
      prepare(item);
      items_.push_back(std::move(item));
    }
    changed_.notify_one();
  }

  // Waits for an item; std::nullopt once closed.
  std::optional<Item> pop() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return closed_ || !items_.empty(); });
    if (closed_) return std::nullopt;
    Item item = std::move(items_.front());
    items_.pop_front();
    return item;
  }

  // Stops the consumers; returns what they had not taken.
  std::deque<Item> close() {
    std::deque<Item> left;
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
      left.swap(items_);
    }
    changed_.notify_all();
    return left;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Item> items_;
  bool closed_ = false;
};

// Requests take their submission ticket under the queue's lock, so queue order and ticket order
// agree even when several user threads issue all_reduce at once; a single consumer thread would
// otherwise wait for a turn that sits behind it in its own queue.
class RequestQueue {
 public:
  explicit RequestQueue(const SubmitOrder& order) : order_(order) {}

  void push(AllreduceRequest request) {
    queue_.push(std::move(request),
                [this](AllreduceRequest& queued) { queued.ticket = order_.take_ticket(); });
  }
  std::optional<AllreduceRequest> pop() { return queue_.pop(); }
  std::deque<AllreduceRequest> close() { return queue_.close(); }

 private:
  const SubmitOrder& order_;
  BlockingQueue<AllreduceRequest> queue_;
};

void fail_unstarted(AllreduceRunner& runner, std::deque<AllreduceRequest> requests) {
  for (auto& request : requests) {
    runner.fail(request, std::make_exception_ptr(
                             Error("the process group was shut down before the all_reduce ran")));
  }
}

void join_all(std::vector<std::thread>& threads) {
  for (auto& thread : threads) {
    if (thread.joinable()) thread.join();
  }
  threads.clear();
}

class SimpleExecutor final : public Executor {
 public:
  explicit SimpleExecutor(AllreduceRunner& runner) : runner_(runner) {}

  void enqueue(AllreduceRequest request) override {
    request.ticket = runner_.submit_order().take_ticket();
    runner_.run_whole(request);
  }
  void shutdown() override {}

 private:
  AllreduceRunner& runner_;
};

// True when `request` is small enough to run on the calling thread: waking a pool thread costs
// more than such an operation's network time. CPU tensors up to DPA_TORCH_INLINE_BYTES; CUDA
// tensors up to DPA_TORCH_CUDA_INLINE_BYTES, where the caller waits for the copy to the host
// (measured on one H200 shared by 4 ranks: 4 KiB 785 -> 623 us, 64 KiB 509 -> 443 us, 1 MiB
// 1112 -> 970 us per operation).
bool runs_inline(const AllreduceRequest& request, const TorchSettings& settings) {
  bool cuda = false;
  for (const at::Tensor& tensor : request.tensors) {
    if (tensor.is_cuda()) {
      cuda = true;
    } else if (!tensor.device().is_cpu()) {
      return false;
    }
  }
  const std::size_t limit = cuda ? settings.cuda_inline_bytes : settings.inline_bytes;
  return limit > 0 && request.largest_tensor_bytes() <= limit;
}

// True when worksteal cuts `request` in chunks: CUDA tensors of at least
// DPA_TORCH_PIPELINE_THRESH, whose copies to and from the device then overlap the network
// (measured: 16 MiB 7.6 -> 6.5 ms, 64 MiB 30.3 -> 23.0 ms per operation). CPU tensors have no
// copies to hide and go whole.
bool pipelines_cuda(const AllreduceRequest& request, const TorchSettings& settings) {
  for (const at::Tensor& tensor : request.tensors) {
    if (tensor.is_cuda() && static_cast<std::size_t>(tensor.nbytes()) >= settings.pipeline_threshold) {
      return true;
    }
  }
  return false;
}

class WorkStealExecutor final : public Executor {
 public:
  WorkStealExecutor(AllreduceRunner& runner, int workers)
      : runner_(runner), queue_(runner.submit_order()) {
    for (int i = 0; i < workers; ++i) {
      threads_.emplace_back([this, i] {
        c10::setThreadName("dpa-torch-" + std::to_string(i));
        while (auto request = queue_.pop()) {
          if (pipelines_cuda(*request, runner_.settings())) {
            runner_.run_chunked(*request);
          } else {
            runner_.run_whole(*request);
          }
          handed_off_.fetch_sub(1, std::memory_order_release);
        }
      });
    }
  }
  ~WorkStealExecutor() override { shutdown(); }

  // A small CPU request with nothing handed off before it runs inline: it would otherwise wait
  // for a pool thread to wake. With requests in flight it is queued, so it does not wait for
  // their turns on the caller's thread. Tickets keep the submission order either way.
  void enqueue(AllreduceRequest request) override {
    if (handed_off_.load(std::memory_order_acquire) == 0 &&
        runs_inline(request, runner_.settings())) {
      request.ticket = runner_.submit_order().take_ticket();
      runner_.run_whole(request);
      return;
    }
    handed_off_.fetch_add(1, std::memory_order_acq_rel);
    try {
      queue_.push(std::move(request));
    } catch (...) {
      handed_off_.fetch_sub(1, std::memory_order_release);
      throw;
    }
  }
  void shutdown() override {
    fail_unstarted(runner_, queue_.close());
    join_all(threads_);
  }

 private:
  AllreduceRunner& runner_;
  RequestQueue queue_;
  std::vector<std::thread> threads_;
  std::atomic<int> handed_off_{0};  // queued or running on a pool thread
};

class PipelineExecutor final : public Executor {
 public:
  explicit PipelineExecutor(AllreduceRunner& runner)
      : runner_(runner), queue_(runner.submit_order()) {
    thread_ = std::thread([this] {
      c10::setThreadName("dpa-torch-0");
      while (auto request = queue_.pop()) runner_.run_chunked(*request);
    });
  }
  ~PipelineExecutor() override { shutdown(); }

  void enqueue(AllreduceRequest request) override { queue_.push(std::move(request)); }
  void shutdown() override {
    fail_unstarted(runner_, queue_.close());
    if (thread_.joinable()) thread_.join();
  }

 private:
  AllreduceRunner& runner_;
  RequestQueue queue_;
  std::thread thread_;
};

class HybridExecutor final : public Executor {
 public:
  explicit HybridExecutor(AllreduceRunner& runner)
      : runner_(runner), queue_(runner.submit_order()) {
    worker_ = std::thread([this] { run_worker(); });
  }
  ~HybridExecutor() override { shutdown(); }

  void enqueue(AllreduceRequest request) override { queue_.push(std::move(request)); }
  void shutdown() override {
    fail_unstarted(runner_, queue_.close());
    if (worker_.joinable()) worker_.join();
    // The runner and the contexts must outlive the callbacks of requests still on the network;
    // those end within DPA_TIMEOUT_MS.
    std::unique_lock lock(pending_mutex_);
    all_finished_.wait(lock, [this] { return pending_ == 0; });
  }

 private:
  // A request submitted whole: the completion callback of its last dpa operation finishes it.
  struct Submitted {
    AllreduceRequest request;
    InFlight in_flight;
    std::atomic<std::size_t> operations_left{0};
  };

  void run_worker() {
    c10::setThreadName("dpa-torch-0");
    while (auto request = queue_.pop()) {
      if (request->largest_tensor_bytes() >= runner_.settings().pipeline_threshold) {
        runner_.run_chunked(*request);
      } else {
        submit_whole(std::move(*request));
      }
    }
  }

  void submit_whole(AllreduceRequest request) {
    auto submitted = std::make_shared<Submitted>();
    submitted->in_flight = runner_.stage_and_submit(request, /*caller_waits=*/false);
    submitted->request = std::move(request);
    InFlight& in_flight = submitted->in_flight;
    if (in_flight.error) {
      // Some tensors may not have been submitted: finish here (complete() waits for the others).
      runner_.complete(submitted->request, in_flight);
      return;
    }
    {
      std::lock_guard lock(pending_mutex_);
      ++pending_;
    }
    submitted->operations_left = in_flight.tensors.size();
    // Copies: once the last callback is registered, completing may clear in_flight.tensors.
    std::vector<Handle> handles;
    for (auto& tensor : in_flight.tensors) handles.push_back(tensor->handle(0));
    // Runs on the engine thread that finished the operation, or here if it already has: copying
    // the result out and completing the work there saves a hand-off to another thread.
    for (Handle& handle : handles) {
      handle.on_complete([this, submitted](const OpStats&, std::exception_ptr) {
        if (submitted->operations_left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
        const FinishOnExit finish{*this};
        runner_.complete(submitted->request, submitted->in_flight);
      });
    }
  }

  // Counts a submitted request as finished, even if completing it threw.
  struct FinishOnExit {
    HybridExecutor& executor;
    ~FinishOnExit() {
      // Notified under the lock: shutdown() may destroy the executor as soon as it sees 0.
      std::lock_guard lock(executor.pending_mutex_);
      --executor.pending_;
      executor.all_finished_.notify_all();
    }
  };

  AllreduceRunner& runner_;
  RequestQueue queue_;
  std::thread worker_;
  std::mutex pending_mutex_;
  std::condition_variable all_finished_;
  std::size_t pending_ = 0;  // requests submitted whole and not yet finished
};

}  // namespace

std::unique_ptr<Executor> make_executor(ExecutionMode mode, AllreduceRunner& runner) {
  switch (mode) {
    case ExecutionMode::worksteal:
      return std::make_unique<WorkStealExecutor>(runner, runner.settings().worksteal_workers);
    case ExecutionMode::pipeline: return std::make_unique<PipelineExecutor>(runner);
    case ExecutionMode::hybrid: return std::make_unique<HybridExecutor>(runner);
    case ExecutionMode::simple: return std::make_unique<SimpleExecutor>(runner);
  }
  throw ConfigError("DPA_TORCH_MODE: unknown execution mode");
}

}  // namespace dpa::torch_backend

#include "execution_modes.hpp"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

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
  void push(Item item) {
    push(std::move(item), [](Item&) {});
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
  explicit RequestQueue(OrderedSubmitter& submitter) : submitter_(submitter) {}

  void push(AllreduceRequest request) {
    queue_.push(std::move(request),
                [this](AllreduceRequest& queued) { queued.ticket = submitter_.take_ticket(); });
  }
  std::optional<AllreduceRequest> pop() { return queue_.pop(); }
  std::deque<AllreduceRequest> close() { return queue_.close(); }

 private:
  OrderedSubmitter& submitter_;
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
    request.ticket = runner_.submitter().take_ticket();
    runner_.run_whole(request);
  }
  void shutdown() override {}

 private:
  AllreduceRunner& runner_;
};

// True when `request` is small enough, and on the CPU, to run on the calling thread: waking a
// pool thread costs more than such an operation's network time, and a CPU tensor has no stream
// order that running inline would make the caller wait for.
bool runs_inline(const AllreduceRequest& request, std::size_t inline_bytes) {
  for (const at::Tensor& tensor : request.tensors) {
    if (!tensor.device().is_cpu()) return false;
  }
  return inline_bytes > 0 && request.largest_tensor_bytes() <= inline_bytes;
}

class WorkStealExecutor final : public Executor {
 public:
  WorkStealExecutor(AllreduceRunner& runner, int workers)
      : runner_(runner), queue_(runner.submitter()) {
    for (int i = 0; i < workers; ++i) {
      threads_.emplace_back([this] {
        while (auto request = queue_.pop()) {
          runner_.run_whole(*request);
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
        runs_inline(request, runner_.settings().inline_bytes)) {
      request.ticket = runner_.submitter().take_ticket();
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
  explicit PipelineExecutor(AllreduceRunner& runner) : runner_(runner), queue_(runner.submitter()) {
    thread_ = std::thread([this] {
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
  explicit HybridExecutor(AllreduceRunner& runner) : runner_(runner), queue_(runner.submitter()) {
    worker_ = std::thread([this] { run_worker(); });
    completer_ = std::thread([this] {
      while (auto submitted = submitted_.pop())
        runner_.complete(submitted->request, submitted->in_flight);
    });
  }
  ~HybridExecutor() override { shutdown(); }

  void enqueue(AllreduceRequest request) override { queue_.push(std::move(request)); }
  void shutdown() override {
    fail_unstarted(runner_, queue_.close());
    if (worker_.joinable()) worker_.join();
    // The worker is gone, so nothing more is submitted: finish what it handed over.
    for (auto& submitted : submitted_.close())
      runner_.complete(submitted.request, submitted.in_flight);
    if (completer_.joinable()) completer_.join();
  }

 private:
  struct Submitted {
    AllreduceRequest request;
    InFlight in_flight;
  };

  void run_worker() {
    while (auto request = queue_.pop()) {
      if (request->largest_tensor_bytes() >= runner_.settings().pipeline_threshold) {
        runner_.run_chunked(*request);
      } else {
        InFlight in_flight = runner_.stage_and_submit(*request);
        submitted_.push(Submitted{std::move(*request), std::move(in_flight)});
      }
    }
  }

  AllreduceRunner& runner_;
  RequestQueue queue_;
  BlockingQueue<Submitted> submitted_;
  std::thread worker_;
  std::thread completer_;
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

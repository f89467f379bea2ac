#include "transport/queue_thread.hpp"

#include <pthread.h>

#include <thread>

namespace dpa::transport {
namespace {

class StdQueueThread final : public QueueThread {
 public:
  StdQueueThread(std::function<void()> body, std::string where)
      : where_(std::move(where)), thread_(std::move(body)) {}
  ~StdQueueThread() override { thread_.join(); }
  [[nodiscard]] std::string where() const override { return where_; }

 private:
  std::string where_;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<QueueThread> launch_std_thread(std::function<void()> body, std::string where) {
  return std::make_unique<StdQueueThread>(std::move(body), std::move(where));
}

void name_this_thread(const std::string& name) {
  // Longer names are refused (ERANGE), so they are cut; a name is a convenience, never an error.
  ::pthread_setname_np(::pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace dpa::transport

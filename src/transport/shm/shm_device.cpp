// SPDX-License-Identifier: Apache-2.0
#include "transport/shm/shm_device.hpp"

#include <fmt/format.h>

#include "dpa/error.hpp"
#include "transport/shm/shm_queue.hpp"

namespace dpa::transport::shm {
namespace {

class ShmDevice final : public Device {
 public:
  ShmDevice(const ShmTransportConfig& config, std::size_t queues)
      : config_(config), queues_(queues), opened_(queues, false) {}

  [[nodiscard]] DeviceProperties properties() const override {
    return DeviceProperties{.name = "shm " + config_.fabric,
                            .max_payload = config_.max_payload,
                            .queues = queues_,
                            .burst = ShmQueue::kBurst,
                            .checksum_offload = true,  // nothing to check: memory does not corrupt
                            .flow_steering = true,     // each queue has its own inbox
                            .zero_copy_multicast = true,
                            .any_thread_may_poll = true};
  }

  std::unique_ptr<Queue> open_queue(std::size_t index) override {
    if (index >= queues_ || opened_[index]) {
      throw Error(fmt::format("shm device: queue {} is out of range (0..{}) or already open", index, queues_ - 1));
    }
    opened_[index] = true;
    const auto port = static_cast<std::uint16_t>(config_.base_port == 0 ? 0 : config_.base_port + index);
    return std::make_unique<ShmQueue>(config_, port);
  }

  std::unique_ptr<QueueThread> launch(std::size_t /*index*/, std::function<void()> body) override {
    return launch_std_thread(std::move(body));
  }

 private:
  ShmTransportConfig config_;
  std::size_t queues_;
  std::vector<bool> opened_;
};

}  // namespace

std::unique_ptr<Device> open_shm_device(const ShmTransportConfig& config, std::size_t queues) {
  config.validate("shm");
  if (queues == 0) throw ConfigError("shm: a device needs at least one queue");
  if (config.base_port != 0 && config.base_port + queues - 1 > 65535) {
    throw ConfigError(fmt::format("shm.base_port {} + {} queues exceeds port 65535", config.base_port, queues));
  }
  return std::make_unique<ShmDevice>(config, queues);
}

}  // namespace dpa::transport::shm

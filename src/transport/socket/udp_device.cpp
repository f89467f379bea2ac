// SPDX-License-Identifier: Apache-2.0
#include "transport/socket/udp_device.hpp"

#include <fmt/format.h>

#include "dpa/error.hpp"
#include "transport/socket/udp_queue.hpp"

namespace dpa::transport::socket {
namespace {

class UdpDevice final : public Device {
 public:
  UdpDevice(const UdpTransportConfig& config, std::size_t queues)
      : config_(config), queues_(queues), opened_(queues, false) {}

  [[nodiscard]] DeviceProperties properties() const override {
    return DeviceProperties{.name = "udp " + config_.bind_host,
                            .max_payload = config_.max_payload,
                            .queues = queues_,
                            .burst = config_.batch,
                            .checksum_offload = false,
                            .flow_steering = true,  // each queue has its own socket
                            .zero_copy_multicast = true,  // one iovec, many addresses
                            .any_thread_may_poll = true};
  }

  std::unique_ptr<Queue> open_queue(std::size_t index) override {
    if (index >= queues_ || opened_[index]) {
      throw Error(fmt::format("UDP device: queue {} is out of range (0..{}) or already open", index,
                              queues_ - 1));
    }
    opened_[index] = true;
    UdpTransportConfig queue_config = config_;
    if (config_.bind_port != 0) queue_config.bind_port = static_cast<std::uint16_t>(config_.bind_port + index);
    return std::make_unique<UdpQueue>(queue_config);
  }

  std::unique_ptr<QueueThread> launch(std::size_t /*index*/, std::function<void()> body) override {
    return launch_std_thread(std::move(body));
  }

 private:
  UdpTransportConfig config_;
  std::size_t queues_;
  std::vector<bool> opened_;
};

}  // namespace

std::unique_ptr<Device> open_udp_device(const UdpTransportConfig& config, std::size_t queues) {
  config.validate("udp");
  if (queues == 0) throw ConfigError("udp: a device needs at least one queue");
  if (config.bind_port != 0 && config.bind_port + queues - 1 > 65535) {
    throw ConfigError(fmt::format("udp.bind_port {} + {} queues exceeds port 65535", config.bind_port, queues));
  }
  return std::make_unique<UdpDevice>(config, queues);
}

std::unique_ptr<Queue> open_udp_queue(const UdpTransportConfig& config) {
  config.validate("udp");
  return std::make_unique<UdpQueue>(config);
}

}  // namespace dpa::transport::socket

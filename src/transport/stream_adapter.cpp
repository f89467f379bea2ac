#include <array>
#include <cstring>

#include "transport/socket/udp_device.hpp"
#include "transport/transport.hpp"

namespace dpa::transport {
namespace {

// Packets copied per round; a send call with more goes in several rounds.
constexpr std::size_t kChunk = 64;
// Rounds in a row in which the queue takes nothing before the rest counts as failed.
constexpr int kStalledRounds = 16;

class QueueStream final : public Transport {
 public:
  explicit QueueStream(std::unique_ptr<Queue> queue) : queue_(std::move(queue)) {}

  std::size_t receive(std::span<RxPacket> out, std::chrono::nanoseconds timeout) override {
    return queue_->receive(out, timeout);
  }

  void send(std::span<const TxPacket> packets) override {
    std::size_t next = 0;
    int stalled = 0;
    while (next < packets.size()) {
      const std::size_t wanted = std::min(packets.size() - next, kChunk);
      const std::size_t allocated = queue_->allocate(std::span(buffers_.data(), wanted));
      std::size_t prepared = 0;
      for (; prepared < allocated; ++prepared) {
        const TxPacket& packet = packets[next + prepared];
        TxBuffer& buffer = buffers_[prepared];
        if (packet.size > buffer.capacity) break;
        std::memcpy(buffer.payload, packet.data, packet.size);
        buffer.size = packet.size;
        requests_[prepared] = TxRequest{&buffer, packet.to};
      }
      std::size_t taken = 0;
      while (taken < prepared && stalled < kStalledRounds) {
        const std::size_t now_taken = queue_->send(std::span(requests_.data() + taken, prepared - taken));
        taken += now_taken;
        stalled = now_taken == 0 ? stalled + 1 : 0;
        if (now_taken == 0) queue_->flush();
      }
      queue_->release(std::span(buffers_.data(), allocated));
      next += prepared;
      errors_ += prepared - taken;
      if (prepared < allocated) {
        ++errors_;  // larger than a queue buffer: no transport can send it
        ++next;
      } else if (allocated == 0 && ++stalled >= kStalledRounds) {
        errors_ += packets.size() - next;  // the pool stays empty: give up on the rest
        break;
      }
      if (allocated == 0) queue_->flush();  // lets sent buffers come back to the pool
    }
    queue_->flush();
  }

  [[nodiscard]] Endpoint local_endpoint() const override { return queue_->local_endpoint(); }

  [[nodiscard]] TransportCounters counters() const override {
    TransportCounters counters = queue_->counters();
    counters.tx_errors += errors_;
    return counters;
  }

 private:
  std::unique_ptr<Queue> queue_;
  std::array<TxBuffer, kChunk> buffers_{};
  std::array<TxRequest, kChunk> requests_{};
  std::uint64_t errors_ = 0;
};

}  // namespace

std::unique_ptr<Transport> as_stream(std::unique_ptr<Queue> queue) {
  return std::make_unique<QueueStream>(std::move(queue));
}

std::unique_ptr<Transport> make_udp_transport(const UdpOptions& options) {
  UdpTransportConfig config;
  config.bind_host = options.bind_host;
  config.bind_port = options.bind_port;
  config.max_payload = static_cast<std::uint32_t>(options.max_datagram);
  config.batch = options.batch;
  config.buffers = std::max<std::size_t>(options.batch, kChunk);
  config.socket_buffer_bytes = options.socket_buffer_bytes;
  return as_stream(socket::open_udp_queue(config));
}

}  // namespace dpa::transport

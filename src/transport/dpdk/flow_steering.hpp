// SPDX-License-Identifier: Apache-2.0
// Hardware steering: one rte_flow rule per queue sends IPv4/UDP packets for base_port + q to
// RX queue q. Devices without rte_flow (memif, ring, af_packet) fall back to software dispatch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

struct rte_flow;

namespace dpa::transport::dpdk {

class FlowSteering {
 public:
  // Installs the rules, or none (then installed() is false and `reason` says why).
  FlowSteering(std::uint16_t port_id, std::uint16_t base_port, std::uint16_t queues);
  FlowSteering(const FlowSteering&) = delete;
  FlowSteering& operator=(const FlowSteering&) = delete;
  ~FlowSteering();

  [[nodiscard]] bool installed() const { return !rules_.empty(); }
  [[nodiscard]] const std::string& reason() const { return reason_; }

 private:
  std::uint16_t port_id_;
  std::vector<rte_flow*> rules_;
  std::string reason_;
};

}  // namespace dpa::transport::dpdk

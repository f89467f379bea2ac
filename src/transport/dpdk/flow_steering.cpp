// SPDX-License-Identifier: Apache-2.0
#include "transport/dpdk/flow_steering.hpp"

#include <rte_flow.h>

#include <fmt/format.h>

namespace dpa::transport::dpdk {

FlowSteering::FlowSteering(std::uint16_t port_id, std::uint16_t base_port, std::uint16_t queues)
    : port_id_(port_id) {
  for (std::uint16_t queue = 0; queue < queues; ++queue) {
    const rte_flow_attr attr{.group = 0, .priority = 0, .ingress = 1, .egress = 0, .transfer = 0, .reserved = 0};
    rte_flow_item_udp udp_spec{};
    rte_flow_item_udp udp_mask{};
    udp_spec.hdr.dst_port = rte_cpu_to_be_16(static_cast<std::uint16_t>(base_port + queue));
    udp_mask.hdr.dst_port = 0xffff;
    const rte_flow_item pattern[] = {
        {.type = RTE_FLOW_ITEM_TYPE_ETH, .spec = nullptr, .last = nullptr, .mask = nullptr},
        {.type = RTE_FLOW_ITEM_TYPE_IPV4, .spec = nullptr, .last = nullptr, .mask = nullptr},
        {.type = RTE_FLOW_ITEM_TYPE_UDP, .spec = &udp_spec, .last = nullptr, .mask = &udp_mask},
        {.type = RTE_FLOW_ITEM_TYPE_END, .spec = nullptr, .last = nullptr, .mask = nullptr}};
    const rte_flow_action_queue target{.index = queue};
    const rte_flow_action actions[] = {{.type = RTE_FLOW_ACTION_TYPE_QUEUE, .conf = &target},
                                       {.type = RTE_FLOW_ACTION_TYPE_END, .conf = nullptr}};
    rte_flow_error error{};
    rte_flow* rule = nullptr;
    if (rte_flow_validate(port_id, &attr, pattern, actions, &error) == 0) {
      rule = rte_flow_create(port_id, &attr, pattern, actions, &error);
    }
    if (rule == nullptr) {
      reason_ = fmt::format("rte_flow rule for UDP port {}: {}", base_port + queue,
                            error.message != nullptr ? error.message : "not supported");
      rte_flow_error ignored{};
      for (rte_flow* created : rules_) rte_flow_destroy(port_id, created, &ignored);
      rules_.clear();
      return;
    }
    rules_.push_back(rule);
  }
}

FlowSteering::~FlowSteering() {
  rte_flow_error ignored{};
  for (rte_flow* rule : rules_) rte_flow_destroy(port_id_, rule, &ignored);
}

}  // namespace dpa::transport::dpdk

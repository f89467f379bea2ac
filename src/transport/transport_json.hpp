// SPDX-License-Identifier: Apache-2.0
// JSON readers for the typed transport sections ("udp", "dpdk", "shm": {...}), shared by the
// worker config and the switch config. Messages name the file and the key ("w.json: dpdk.mtu").
#pragma once

#include <string>

#include "common/json_fields.hpp"
#include "dpa/transport_config.hpp"

namespace dpa::detail {

// Reads section `key` ("udp", "dpdk" or "shm") into `transport`: over the values it holds when it
// already is that transport (keys left out keep them), else over that transport's defaults.
void read_transport_section(const json& value, const std::string& where, const std::string& key,
                            TransportConfig& transport);

// A process runs one transport: fails naming `where` when `root` has several sections.
void require_one_transport_section(const json& root, const std::string& where);

}  // namespace dpa::detail

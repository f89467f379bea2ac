// SPDX-License-Identifier: Apache-2.0
// The kernel's boot id: the same for every process of one kernel (one host, or one VM), different
// after a reboot and on another host. Ranks compare it to know whether they share a host.
#pragma once

#include <optional>
#include <string>

namespace dpa::detail {

// /proc/sys/kernel/random/boot_id, or nothing where it cannot be read.
std::optional<std::string> boot_id();

}  // namespace dpa::detail

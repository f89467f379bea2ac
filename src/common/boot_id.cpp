// SPDX-License-Identifier: Apache-2.0
#include "common/boot_id.hpp"

#include <fstream>

namespace dpa::detail {

std::optional<std::string> boot_id() {
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (!(file >> id)) return std::nullopt;
  return id;
}

}  // namespace dpa::detail

// SPDX-License-Identifier: Apache-2.0
// Text values in a c10d::Store, which holds bytes: what the job's ranks tell each other at set-up
// (sizing, placements, JOIN outcomes, authentication requests).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace dpa::torch_backend {

// Waits for `key` as the store's get() does.
inline std::string read_text(c10d::Store& store, const std::string& key) {
  const std::vector<std::uint8_t> bytes = store.get(key);
  return {bytes.begin(), bytes.end()};
}

inline void write_text(c10d::Store& store, const std::string& key, const std::string& text) {
  store.set(key, std::vector<std::uint8_t>(text.begin(), text.end()));
}

}  // namespace dpa::torch_backend

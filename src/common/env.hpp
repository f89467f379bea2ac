// SPDX-License-Identifier: Apache-2.0
// How a bad environment variable is reported, shared by Config::from_env and dpa/env.hpp.
#pragma once

#include <string>
#include <string_view>

namespace dpa::detail {

// Throws ConfigError: NAME="text": expected <expected>.
[[noreturn]] void fail_env(const char* name, const std::string& text, std::string_view expected);

}  // namespace dpa::detail

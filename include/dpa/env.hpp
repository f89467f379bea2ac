// SPDX-License-Identifier: Apache-2.0
// Environment variables read the way Config::from_env() reads the DPA_* ones, for programs that
// add variables of their own (the PyTorch backend's DPA_TORCH_*). A malformed value is a
// ConfigError that names the variable, its value and what it accepts:
//   NAME="text": expected <what it accepts>
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dpa {

// The variable's value; std::nullopt when it is unset or empty (an empty value counts as unset
// so that `DPA_X= cmd` clears a setting inherited from the shell).
std::optional<std::string> env_string(const char* name);

// A boolean variable: 1/0, on/off, true/false, yes/no in any case; `fallback` when unset.
bool env_flag(const char* name, bool fallback);

// A decimal integer in [min, max]; std::nullopt when unset.
std::optional<std::int64_t> env_integer(const char* name, std::int64_t min, std::int64_t max);

}  // namespace dpa

// Environment variable access shared by the configuration, logging and the engine.
#pragma once

#include <optional>
#include <string>

namespace dpa::detail {

// The variable's value; std::nullopt when it is unset or empty (an empty value counts as unset
// so that `DPA_X= cmd` clears a setting inherited from the shell).
std::optional<std::string> env_string(const char* name);

// A boolean variable: 1/0, on/off, true/false, yes/no in any case; `fallback` when unset.
// Any other value is a ConfigError naming the variable.
bool env_flag(const char* name, bool fallback);

}  // namespace dpa::detail

// SPDX-License-Identifier: Apache-2.0
#include "dpa/env.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <string_view>
#include <system_error>

#include <fmt/format.h>

#include "common/env.hpp"
#include "dpa/error.hpp"

namespace dpa {

namespace {

std::optional<bool> parse_flag(std::string_view text) {
  std::string lower(text);
  std::ranges::transform(lower, lower.begin(),
                         [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "1" || lower == "on" || lower == "true" || lower == "yes") return true;
  if (lower == "0" || lower == "off" || lower == "false" || lower == "no") return false;
  return std::nullopt;
}

}  // namespace

namespace detail {

void fail_env(const char* name, const std::string& text, std::string_view expected) {
  throw ConfigError(fmt::format("{}=\"{}\": expected {}", name, text, expected));
}

}  // namespace detail

std::optional<std::string> env_string(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

bool env_flag(const char* name, bool fallback) {
  const auto text = env_string(name);
  if (!text) return fallback;
  const auto flag = parse_flag(*text);
  if (!flag) detail::fail_env(name, *text, "a boolean (1/0, on/off, true/false, yes/no)");
  return *flag;
}

std::optional<std::int64_t> env_integer(const char* name, std::int64_t min, std::int64_t max) {
  const auto text = env_string(name);
  if (!text) return std::nullopt;
  std::int64_t value = 0;
  const char* const end = text->data() + text->size();
  const auto [stop, error] = std::from_chars(text->data(), end, value);
  if (error != std::errc{} || stop != end || value < min || value > max) {
    detail::fail_env(name, *text, fmt::format("an integer in [{}, {}]", min, max));
  }
  return value;
}

}  // namespace dpa

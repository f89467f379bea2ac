// SPDX-License-Identifier: Apache-2.0
#include "common/logging.hpp"

#include <cstdlib>
#include <optional>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <string_view>

namespace dpa::detail {

namespace {

// Nothing when DPA_LOG names no level (Config::from_env() refuses that value; programs that do
// not read a worker config get a warning).
std::optional<spdlog::level::level_enum> level_from_env() {
  const char* value = std::getenv("DPA_LOG");
  if (value == nullptr || *value == '\0') return spdlog::level::warn;
  const spdlog::level::level_enum level = spdlog::level::from_str(value);
  // from_str answers "off" for names it does not know; only "off" itself may mean off.
  if (level == spdlog::level::off && std::string_view(value) != "off") return std::nullopt;
  return level;
}

}  // namespace

spdlog::logger& log() {
  static const std::shared_ptr<spdlog::logger> logger = [] {
    auto created = spdlog::get("dpa");
    if (!created) created = spdlog::stderr_color_mt("dpa");
    const auto level = level_from_env();
    created->set_level(level.value_or(spdlog::level::warn));
    created->set_pattern("[%H:%M:%S.%e] [dpa] [%^%l%$] %v");
    if (!level) {
      created->warn("DPA_LOG=\"{}\": expected one of trace, debug, info, warn, error, critical, off; using warn",
                    std::getenv("DPA_LOG"));
    }
    return created;
  }();
  return *logger;
}

}  // namespace dpa::detail

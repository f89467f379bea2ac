#include "api/logging.hpp"

#include <cstdlib>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <string_view>

namespace dpa::detail {

namespace {

spdlog::level::level_enum level_from_env() {
  const char* value = std::getenv("DPA_LOG");
  if (value == nullptr || *value == '\0') return spdlog::level::warn;
  const spdlog::level::level_enum level = spdlog::level::from_str(value);
  // from_str answers "off" for names it does not know; only "off" itself may mean off.
  if (level == spdlog::level::off && std::string_view(value) != "off") return spdlog::level::warn;
  return level;
}

}  // namespace

spdlog::logger& log() {
  static const std::shared_ptr<spdlog::logger> logger = [] {
    auto created = spdlog::get("dpa");
    if (!created) created = spdlog::stderr_color_mt("dpa");
    created->set_level(level_from_env());
    created->set_pattern("[%H:%M:%S.%e] [dpa] [%^%l%$] %v");
    return created;
  }();
  return *logger;
}

}  // namespace dpa::detail

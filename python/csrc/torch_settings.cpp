#include "torch_settings.hpp"

#include <cerrno>
#include <cstdlib>
#include <limits>

#include "dpa/error.hpp"

namespace dpa::torch_backend {
namespace {

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

long long env_integer(const char* name, long long fallback, long long min, long long max) {
  const auto text = env(name);
  if (!text) return fallback;
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text->c_str(), &end, 10);
  if (errno != 0 || end == text->c_str() || *end != '\0' || value < min || value > max) {
    throw ConfigError(std::string(name) + "='" + *text + "' is not an integer in " +
                      std::to_string(min) + ".." + std::to_string(max));
  }
  return value;
}

ExecutionMode parse_mode(const std::string& text) {
  if (text == "worksteal" || text == "throughput") return ExecutionMode::worksteal;
  if (text == "pipeline" || text == "latency") return ExecutionMode::pipeline;
  if (text == "hybrid") return ExecutionMode::hybrid;
  if (text == "simple") return ExecutionMode::simple;
  throw ConfigError("DPA_TORCH_MODE='" + text +
                    "' is not one of worksteal, pipeline, hybrid, simple");
}

}  // namespace

TorchSettings TorchSettings::from_env() {
  TorchSettings settings;
  if (const auto mode = env("DPA_TORCH_MODE")) settings.mode = parse_mode(*mode);
  settings.pipeline_chunks = static_cast<int>(env_integer("DPA_TORCH_PIPELINE_CHUNKS", 4, 1, 1024));
  settings.pipeline_threshold = static_cast<std::size_t>(
      env_integer("DPA_TORCH_PIPELINE_THRESH", 4194304, 0, std::numeric_limits<long long>::max()));
  settings.worksteal_workers = static_cast<int>(env_integer("DPA_TORCH_WORKERS", 4, 1, 256));
  settings.inline_bytes = static_cast<std::size_t>(env_integer(
      "DPA_TORCH_INLINE_BYTES", 65536, 0, std::numeric_limits<long long>::max()));
  return settings;
}

std::string TorchSettings::chunking_signature() const {
  if (mode == ExecutionMode::pipeline || mode == ExecutionMode::hybrid) {
    return "chunks " + std::to_string(pipeline_chunks) +
           " at >= " + std::to_string(pipeline_threshold) + " bytes";
  }
  return "whole operations";
}

std::string to_string(ExecutionMode mode) {
  switch (mode) {
    case ExecutionMode::worksteal: return "worksteal";
    case ExecutionMode::pipeline: return "pipeline";
    case ExecutionMode::hybrid: return "hybrid";
    case ExecutionMode::simple: return "simple";
  }
  return "unknown";
}

EmbeddedSwitchSettings EmbeddedSwitchSettings::from_env() {
  EmbeddedSwitchSettings settings;
  settings.straggler_timeout = std::chrono::microseconds(
      env_integer("DPA_STRAGGLER_TIMEOUT_US", 10000, 1, std::numeric_limits<std::int32_t>::max()));
  return settings;
}

bool switch_configured() { return env("DPA_SWITCH") || env("DPA_CONFIG"); }

}  // namespace dpa::torch_backend

// SPDX-License-Identifier: Apache-2.0
#include "job/torch_settings.hpp"

#include <algorithm>
#include <limits>

#include "dpa/env.hpp"
#include "dpa/error.hpp"

namespace dpa::torch_backend {
namespace {

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
  if (const auto mode = env_string("DPA_TORCH_MODE")) settings.mode = parse_mode(*mode);
  constexpr std::int64_t kUnbounded = std::numeric_limits<std::int64_t>::max();
  settings.pipeline_chunks =
      static_cast<int>(env_integer("DPA_TORCH_PIPELINE_CHUNKS", 1, 1024).value_or(settings.pipeline_chunks));
  settings.pipeline_threshold = static_cast<std::size_t>(
      env_integer("DPA_TORCH_PIPELINE_THRESH", 0, kUnbounded).value_or(4194304));
  settings.worksteal_workers = static_cast<int>(env_integer("DPA_TORCH_WORKERS", 1, 256).value_or(4));
  settings.inline_bytes =
      static_cast<std::size_t>(env_integer("DPA_TORCH_INLINE_BYTES", 0, kUnbounded).value_or(65536));
  settings.cuda_inline_bytes = static_cast<std::size_t>(
      env_integer("DPA_TORCH_CUDA_INLINE_BYTES", 0, kUnbounded).value_or(1 << 20));
  return settings;
}

std::string TorchSettings::chunking_signature() const {
  if (mode == ExecutionMode::pipeline || mode == ExecutionMode::hybrid) {
    return "chunks " + std::to_string(pipeline_chunks) +
           " at >= " + std::to_string(pipeline_threshold) + " bytes";
  }
  if (mode == ExecutionMode::worksteal) {
    return "CUDA tensors in chunks " + std::to_string(pipeline_chunks) + " at >= " +
           std::to_string(pipeline_threshold) + " bytes";
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
      env_integer("DPA_STRAGGLER_TIMEOUT_US", 1, std::numeric_limits<std::int32_t>::max()).value_or(10000));
  return settings;
}

bool switch_configured() { return env_string("DPA_SWITCH") || env_string("DPA_CONFIG"); }

void apply_process_group_timeout(Config& config, std::chrono::milliseconds timeout) {
  if (env_string("DPA_TIMEOUT_MS") || config.timeout != Config{}.timeout) return;
  constexpr std::chrono::milliseconds kLongest{86'400'000};  // Config's limit: a day
  config.timeout = std::clamp(timeout, std::chrono::milliseconds(1), kLongest);
}

}  // namespace dpa::torch_backend

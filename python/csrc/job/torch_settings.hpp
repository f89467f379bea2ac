// SPDX-License-Identifier: Apache-2.0
// The backend's own DPA_TORCH_* / embedded-switch environment variables, read once per process
// group. Every malformed value is a dpa::ConfigError that names the variable.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "dpa/config.hpp"

namespace dpa::torch_backend {

enum class ExecutionMode { worksteal, pipeline, hybrid, simple };

struct TorchSettings {
  ExecutionMode mode = ExecutionMode::worksteal;  // DPA_TORCH_MODE
  // DPA_TORCH_PIPELINE_CHUNKS. 8: on an H100 shared by 4 ranks a 64 MiB CUDA all_reduce took
  // 27.7 ms (p50) against 31.0 with 4 chunks, while Gloo's took longer in the same run.
  int pipeline_chunks = 8;
  std::size_t pipeline_threshold = 4194304;       // DPA_TORCH_PIPELINE_THRESH, bytes
  int worksteal_workers = 4;                      // DPA_TORCH_WORKERS
  std::size_t inline_bytes = 65536;               // DPA_TORCH_INLINE_BYTES (worksteal)
  // DPA_TORCH_CUDA_INLINE_BYTES (worksteal): CUDA all_reduces up to this size run on the calling
  // thread, which waits for the copy to the host instead of handing the request to a pool thread.
  std::size_t cuda_inline_bytes = 1 << 20;

  static TorchSettings from_env();
  // The part that decides how operations are cut into dpa operations, which must agree on every
  // rank (the ranks' dpa operation sequences must be identical).
  [[nodiscard]] std::string chunking_signature() const;
};

std::string to_string(ExecutionMode mode);

// The software switch that rank 0 starts when no switch is configured (its threads and buffers
// are sized with the job: job_sizing.hpp).
struct EmbeddedSwitchSettings {
  std::chrono::microseconds straggler_timeout{10000};  // DPA_STRAGGLER_TIMEOUT_US

  static EmbeddedSwitchSettings from_env();
};

// True when DPA_SWITCH or DPA_CONFIG names a switch for the workers.
bool switch_configured();

// torch's meaning of a timeout: a collective fails only after the process group's timeout
// (init_process_group / new_group, torch's default when none is given). DPA_TIMEOUT_MS, or a
// timeout_ms in DPA_CONFIG, still wins where set. Clamped to the range Config accepts.
void apply_process_group_timeout(Config& config, std::chrono::milliseconds timeout);

}  // namespace dpa::torch_backend

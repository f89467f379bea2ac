// SPDX-License-Identifier: Apache-2.0
// The settings of a job whose switch runs on the host of its rank 0 (the PyTorch backend's
// embedded switch, dpa-bench's own), sized from the job (world size, and which ranks run on other
// hosts: dpa/job_layout.hpp) and the host (cores, socket buffers, shared memory) once and agreed
// by every rank, which then applies its own DPA_* overrides (a rank
// that overrides alone then fails to join, naming the setting). docs/configuration.md §8 states the rule.
//
// Two sessions share the switch: operations of fewer than `payload` elements go to a small-packet
// session (one engine thread, `small_payload` values per packet), so a 4 KiB all_reduce does not
// move and aggregate 64 KB packets; larger ones go to the wide session (`threads` engine threads,
// `payload` values per packet). Routing depends only on the element count, so every rank sends
// each operation to the same session.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "dpa/config.hpp"
#include "dpa/job_layout.hpp"
#include "dpa/switch.hpp"

namespace dpa {

struct HostResources {
  int cores = 1;                      // CPUs this process may run on
  std::uint64_t shm_free_bytes = 0;   // free space in the shared-memory directory (DPA_SHM_DIR)
  int worker_receive_buffer = 0;      // bytes a worker socket gets for its 16 MiB request
  int switch_receive_buffer = 0;      // bytes a switch socket gets for `switch_buffer_request`
  int switch_buffer_request = 0;

  static HostResources probe(int switch_buffer_request);
};

struct JobSizing {
  int threads = 1;                // engine threads of the wide session (DPA_THREADS)
  int window = 32;                // its packets in flight per thread (DPA_WINDOW)
  std::uint32_t payload = 2048;   // its values per packet (DPA_PAYLOAD)
  std::uint32_t small_payload = 0;  // the small session's; 0: no small session
  int small_window = 16;
  int switch_threads = 1;         // DPA_SWITCH_THREADS
  int switch_buffer_bytes = 32 << 20;  // DPA_SWITCH_BUFFER_BYTES
  std::chrono::microseconds busy_poll{0};  // DPA_BUSY_POLL_US
  // The small session's spin, and the switch thread's that serves it (thread 0): small
  // operations are latency-bound, and one spinning thread per rank plus one switch thread fit
  // where the wide session's threads do not. DPA_BUSY_POLL_US sets both.
  std::chrono::microseconds small_busy_poll{0};
  // The embedded switch's every thread spins this long before it sleeps (DPA_SWITCH_BUSY_POLL_US);
  // 0: it follows the sessions' spins (every thread the wide session's, thread 0 the small one's).
  std::chrono::microseconds switch_busy_poll{0};
  // The ranks and the embedded switch share memory (the shm transport, fabric "job-<n>") where
  // the shared-memory directory has room for their buffers and no DPA_TRANSPORT / DPA_LOCAL_*
  // asks for sockets; 0: UDP on loopback. DPA_TRANSPORT=shm keeps the fabric it names.
  std::uint64_t shm_fabric = 0;
  int shm_buffers = 0;         // transmit buffers of a rank's queue
  int switch_shm_buffers = 0;  // of a switch thread's queue

  // The rule (docs/configuration.md §8) for the ranks of `layout`, then this process's DPA_* overrides.
  // On one host: shared memory or loopback, large packets. Across hosts (docs/multi-host.md):
  // UDP (the switch serves one transport, and shared memory reaches one host only), packets of
  // at most layout.max_payload values, and cores shared by the ranks of one host.
  // `shared_memory`: whether the caller's transport is the shm one (dpa-bench decides that
  // itself); unset: the rule decides from the variables and the room in the directory.
  static JobSizing for_job(const JobLayout& layout, const HostResources& host, const Config& from_env,
                           std::optional<bool> shared_memory = std::nullopt);
  // `world_size` ranks, all on this host.
  static JobSizing for_job(int world_size, const HostResources& host, const Config& from_env,
                           std::optional<bool> shared_memory = std::nullopt);
  // Shared memory a job of `ranks` ranks needs with these settings (every queue's buffers).
  [[nodiscard]] std::uint64_t shm_bytes(int ranks) const;
  // Applies the variables this process sets on top of `this`: the worker's as Config::from_env()
  // read them into `from_env`, the embedded switch's (DPA_SWITCH_*) from the environment.
  void apply_overrides(const Config& from_env);

  [[nodiscard]] std::string to_text() const;
  static JobSizing from_text(const std::string& text);

  // The wide session's worker settings (its transport included), and the small session's
  // (valid if small_payload > 0).
  void configure_wide(Config& config) const;
  [[nodiscard]] Config small_config(const Config& wide) const;
  // The switch that serves them on this host: one session per worker config (the small one's
  // slots after the wide one's), on the workers' transport (a free port of their shared-memory
  // fabric, or UDP on 127.0.0.1), sized threads and spinning. Not validated.
  [[nodiscard]] SwitchConfig switch_config(const Config& wide, const std::optional<Config>& small,
                                           std::chrono::microseconds straggler_timeout) const;
};

}  // namespace dpa

// SPDX-License-Identifier: Apache-2.0
// Which cores a process's busy-polling threads (DPDK lcores) run on when no core list is
// configured: one core each, among the CPUs the process may use (its affinity: taskset, a cgroup
// cpuset), none that another dpa process on the host has taken. Two busy pollers on one core cut
// both to a fraction of their speed, so when there are too few free cores the threads are left
// floating (the scheduler spreads them) and the caller warns once.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dpa::transport {

struct CoreChoice {
  std::vector<int> cores;  // one per thread, in thread order; empty: the threads float
  std::string warning;     // why they float, naming the counts; empty when pinned or nothing to pin
};

// The rule, pure: the lowest `threads` cores of `allowed` (the process's CPUs, ascending) that
// `take` grants (false: another process holds that core), or none and a warning when fewer are
// granted than there are threads. `release` gives back what was granted in that case.
CoreChoice choose_cores(std::span<const int> allowed, std::size_t threads, const std::function<bool(int)>& take,
                        const std::function<void(int)>& release);

// The CPUs this thread may run on (sched_getaffinity), ascending.
std::vector<int> allowed_cpus();

// "0-3,6": a CPU list as Linux writes one (Cpus_allowed_list, taskset -c).
std::string cpu_list(std::span<const int> cpus);

// Host-wide claims on cores: an exclusive flock on `directory`/dpa-core-<cpu>.lock per core,
// held while this object lives (the kernel drops it when the process dies, so a crashed
// process frees its cores). Processes that claim through the same directory never share a core.
class CoreClaims {
 public:
  static constexpr std::string_view kDefaultDirectory = "/dev/shm";

  explicit CoreClaims(std::string directory = std::string(kDefaultDirectory));
  CoreClaims(const CoreClaims&) = delete;
  CoreClaims& operator=(const CoreClaims&) = delete;
  ~CoreClaims();

  // True when this object now holds `cpu` (or already did); false when another holder has it.
  // A lock file that cannot be opened counts as free (nothing to coordinate through), with one
  // warning.
  bool take(int cpu);
  void release(int cpu);

 private:
  struct Held;
  std::string directory_;
  std::vector<Held> held_;
  bool warned_ = false;
};

}  // namespace dpa::transport

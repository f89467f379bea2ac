// SPDX-License-Identifier: Apache-2.0
#include "transport/core_choice.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "common/logging.hpp"

namespace dpa::transport {

CoreChoice choose_cores(std::span<const int> allowed, std::size_t threads, const std::function<bool(int)>& take,
                        const std::function<void(int)>& release) {
  CoreChoice choice;
  if (threads == 0) return choice;
  for (const int cpu : allowed) {
    if (choice.cores.size() == threads) break;
    if (take(cpu)) choice.cores.push_back(cpu);
  }
  if (choice.cores.size() == threads) return choice;
  for (const int cpu : choice.cores) release(cpu);
  choice.warning = fmt::format(
      "{} busy-polling thread(s) but only {} free core(s) among the {} this process may use ({}; other dpa "
      "processes on this host hold the rest): the threads float over the process's CPUs rather than share cores",
      threads, choice.cores.size(), allowed.size(), cpu_list(allowed));
  choice.cores.clear();
  return choice;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

std::string cpu_list(std::span<const int> cpus) {
  std::vector<int> sorted(cpus.begin(), cpus.end());
  std::sort(sorted.begin(), sorted.end());
  std::string text;
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t last = i;
    while (last + 1 < sorted.size() && sorted[last + 1] == sorted[last] + 1) ++last;
    text += fmt::format("{}{}", text.empty() ? "" : ",", sorted[i]);
    if (last > i) text += fmt::format("-{}", sorted[last]);
    i = last + 1;
  }
  return text;
}

struct CoreClaims::Held {
  int cpu = -1;
  int fd = -1;  // -1: taken without a lock file (none could be opened)
};

CoreClaims::CoreClaims(std::string directory) : directory_(std::move(directory)) {}

CoreClaims::~CoreClaims() {
  for (const Held& held : held_) {
    if (held.fd >= 0) ::close(held.fd);
  }
}

bool CoreClaims::take(int cpu) {
  if (std::any_of(held_.begin(), held_.end(), [cpu](const Held& held) { return held.cpu == cpu; })) return true;
  const std::string path = fmt::format("{}/dpa-core-{}.lock", directory_, cpu);
  // Read-only: a lock file another user created (mode 0644 under the usual umask) still locks.
  // Created only when missing: O_CREAT on another user's file in a sticky directory such as
  // /dev/shm fails where fs.protected_regular is set.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (!warned_) {
      detail::log().warn("cannot open {} ({}): cores are chosen without knowing which other dpa processes "
                         "on this host use",
                         path, std::strerror(errno));
      warned_ = true;
    }
    held_.push_back(Held{cpu, -1});
    return true;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return false;
  }
  held_.push_back(Held{cpu, fd});
  return true;
}

void CoreClaims::release(int cpu) {
  const auto held = std::find_if(held_.begin(), held_.end(), [cpu](const Held& entry) { return entry.cpu == cpu; });
  if (held == held_.end()) return;
  if (held->fd >= 0) ::close(held->fd);
  held_.erase(held);
}

}  // namespace dpa::transport

// SPDX-License-Identifier: Apache-2.0
#include "transport/dpdk/eal.hpp"

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/logging.hpp"
#include "dpa/error.hpp"
#include "transport/core_choice.hpp"

namespace dpa::transport::dpdk {

std::vector<unsigned> parse_core_list(const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return ConfigError(fmt::format(
        "dpdk.cores: \"{}\" is not a core list like \"2-5\" or \"0,2,4\", nor \"none\" ({})", text, why));
  };
  const auto number = [&](std::string_view digits) {
    unsigned value = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (error != std::errc() || end != digits.data() + digits.size() || digits.empty() || value >= CPU_SETSIZE) {
      throw bad(fmt::format("\"{}\" is not a CPU number", digits));
    }
    return value;
  };
  std::vector<unsigned> cores;
  std::string_view rest = text;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const std::size_t dash = item.find('-');
    const unsigned first = number(item.substr(0, dash));
    const unsigned last = dash == std::string_view::npos ? first : number(item.substr(dash + 1));
    if (last < first) throw bad(fmt::format("range {} is empty", item));
    for (unsigned core = first; core <= last; ++core) {
      if (std::find(cores.begin(), cores.end(), core) != cores.end()) throw bad(fmt::format("core {} twice", core));
      cores.push_back(core);
    }
  }
  if (cores.empty()) throw bad("no core");
  if (cores.size() + 1 > RTE_MAX_LCORE) throw bad(fmt::format("more than {} cores", RTE_MAX_LCORE - 1));
  return cores;
}

namespace {

// The CPUs this process may run on, as an EAL CPU group "(0,1,3)".
std::string own_cpus() {
  std::vector<int> cpus = allowed_cpus();
  if (cpus.empty()) cpus.push_back(0);
  return fmt::format("({})", fmt::join(cpus, ","));
}

// The cores this process's busy lcores hold against other dpa processes on the host, for its life.
CoreClaims& core_claims() {
  static CoreClaims instance;
  return instance;
}

// The core each worker lcore pins itself to when it first runs a queue (the default, dpdk.cores
// empty), or -1: it floats (also after a refused pin), or the EAL pinned it from dpdk.cores' list.
std::array<std::atomic<int>, RTE_MAX_LCORE>& auto_core_of_lcore() {
  struct Table {
    std::array<std::atomic<int>, RTE_MAX_LCORE> cores;
    Table() {
      for (std::atomic<int>& core : cores) core.store(-1, std::memory_order_relaxed);
    }
  };
  static Table instance;
  return instance.cores;
}

// Chooses and claims the worker lcores' cores (docs/dpdk.md, "Cores"): dpdk.cores empty picks
// free ones from the process's CPUs; a list pins as given and only warns about cores another
// dpa process holds; "none" leaves every lcore floating.
void choose_lcore_cores(const DpdkTransportConfig& config, std::size_t threads) {
  if (config.cores == kFloatingCores) return;
  if (!config.cores.empty()) {
    for (const unsigned core : parse_core_list(config.cores)) {
      if (!core_claims().take(static_cast<int>(core))) {
        detail::log().warn("dpdk.cores: core {} is also held by another dpa process on this host; two busy pollers "
                           "on one core slow both down",
                           core);
      }
    }
    return;
  }
  const std::vector<int> allowed = allowed_cpus();
  const CoreChoice choice = choose_cores(
      allowed, threads, [](int cpu) { return core_claims().take(cpu); }, [](int cpu) { core_claims().release(cpu); });
  if (!choice.warning.empty()) {
    detail::log().warn("dpdk: {} (dpdk.cores lists cores to pin to anyway; \"none\" turns pinning off)",
                       choice.warning);
  }
  for (std::size_t i = 0; i < choice.cores.size(); ++i) auto_core_of_lcore()[i + 1].store(choice.cores[i]);
}

// On the lcore itself, before its first queue: pins it to its chosen core. A refusal (a CPU
// taken away since, a seccomp or cgroup rule) costs the pinning, not the thread.
void pin_this_lcore(unsigned lcore) {
  static std::array<bool, RTE_MAX_LCORE> attempted{};
  const int core = auto_core_of_lcore()[lcore].load();
  if (core < 0 || attempted[lcore]) return;
  attempted[lcore] = true;
  rte_cpuset_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  if (const int error = pthread_setaffinity_np(pthread_self(), sizeof set, &set); error != 0) {
    detail::log().warn("dpdk: cannot pin lcore {} to core {}: {}; it floats over the process's CPUs", lcore, core,
                       std::strerror(error));
    auto_core_of_lcore()[lcore].store(-1);
    return;
  }
  rte_thread_set_affinity(&set);  // DPDK's own record of the lcore's CPUs and NUMA socket
}

// Worker lcores handed out to queue threads (the EAL refuses a second launch on a busy one).
class LcoreClaims {
 public:
  static std::optional<unsigned> claim() {
    std::lock_guard lock(mutex());
    unsigned lcore = 0;
    RTE_LCORE_FOREACH_WORKER(lcore) {
      if (!claimed().contains(lcore) && rte_eal_get_lcore_state(lcore) == WAIT) {
        claimed().insert(lcore);
        return lcore;
      }
    }
    return std::nullopt;
  }
  static void release(unsigned lcore) {
    std::lock_guard lock(mutex());
    claimed().erase(lcore);
  }

 private:
  static std::mutex& mutex() {
    static std::mutex instance;
    return instance;
  }
  static std::set<unsigned>& claimed() {
    static std::set<unsigned> instance;
    return instance;
  }
};

class LcoreThread final : public QueueThread {
 public:
  LcoreThread(unsigned lcore, std::function<void()> body) : lcore_(lcore), body_(std::move(body)) {
    if (const int status = rte_eal_remote_launch(&LcoreThread::run, this, lcore_); status != 0) {
      LcoreClaims::release(lcore_);
      throw Error(fmt::format("dpdk: cannot launch on lcore {}: {}", lcore_, rte_strerror(-status)));
    }
  }
  ~LcoreThread() override {
    // The lcore may not have picked the launch up yet (it still reads WAIT): wait for the body.
    while (!finished_.load(std::memory_order_acquire)) std::this_thread::yield();
    rte_eal_wait_lcore(lcore_);
    LcoreClaims::release(lcore_);
  }
  [[nodiscard]] std::string where() const override {
    if (const int chosen = auto_core_of_lcore()[lcore_].load(); chosen >= 0) {
      return fmt::format("lcore {} (core {})", lcore_, chosen);
    }
    rte_cpuset_t cpus = rte_lcore_cpuset(lcore_);
    if (CPU_COUNT(&cpus) != 1) return fmt::format("lcore {} (floating)", lcore_);
    return fmt::format("lcore {} (core {})", lcore_, rte_lcore_to_cpu_id(static_cast<int>(lcore_)));
  }

 private:
  static int run(void* self) {
    auto& thread = *static_cast<LcoreThread*>(self);
    pin_this_lcore(thread.lcore_);
    thread.body_();
    thread.finished_.store(true, std::memory_order_release);
    return 0;
  }

  unsigned lcore_;
  std::function<void()> body_;
  std::atomic<bool> finished_{false};
};

}  // namespace

std::vector<std::string> eal_arguments(const DpdkTransportConfig& config, std::size_t threads) {
  std::vector<std::string> args{"dpa"};
  const std::string cpus = own_cpus();
  std::string lcores = "0@" + cpus;
  if (config.cores.empty() || config.cores == kFloatingCores) {
    // Pinned later, by each lcore itself (choose_lcore_cores), or never.
    for (std::size_t i = 1; i <= threads; ++i) lcores += fmt::format(",{}@{}", i, cpus);
  } else {
    const std::vector<unsigned> cores = parse_core_list(config.cores);
    for (std::size_t i = 0; i < cores.size(); ++i) lcores += fmt::format(",{}@{}", i + 1, cores[i]);
  }
  args.push_back("--lcores=" + lcores);
  for (const std::string& device : config.allow) args.insert(args.end(), {"-a", device});
  for (const std::string& vdev : config.vdevs) args.push_back("--vdev=" + vdev);
  if (!config.file_prefix.empty()) args.push_back("--file-prefix=" + config.file_prefix);
  if (config.no_huge) args.push_back("--no-huge");
  if (config.memory_mb != 0) args.insert(args.end(), {"-m", std::to_string(config.memory_mb)});
  args.insert(args.end(), config.eal_args.begin(), config.eal_args.end());
  return args;
}

void start_eal(const DpdkTransportConfig& config, std::size_t threads) {
  static std::mutex mutex;
  static bool started = false;
  std::lock_guard lock(mutex);
  if (started) return;
  std::vector<std::string> args = eal_arguments(config, threads);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  // rte_eal_init permutes argv; the strings themselves stay ours.
  if (rte_eal_init(static_cast<int>(args.size()), argv.data()) < 0) {
    const int error = rte_errno;
    // The EAL may already be up: started by the embedding program (a test, an application).
    if (error == EALREADY) {
      started = true;
      return;
    }
    throw Error(fmt::format("dpdk: EAL did not start with [{}]: {} (check dpdk.cores, dpdk.allow, dpdk.vdevs, "
                            "dpdk.file_prefix, hugepages or dpdk.no_huge)",
                            fmt::join(args, " "), rte_strerror(error)));
  }
  choose_lcore_cores(config, threads);
  started = true;
}

std::unique_ptr<QueueThread> launch_on_lcore(std::function<void()> body) {
  if (const std::optional<unsigned> lcore = LcoreClaims::claim()) {
    return std::make_unique<LcoreThread>(*lcore, std::move(body));
  }
  return launch_std_thread(std::move(body),
                           "an unpinned std::thread (no free worker lcore: list one core per thread in dpdk.cores)");
}

}  // namespace dpa::transport::dpdk

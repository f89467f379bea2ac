#include "transport/dpdk/eal.hpp"

#include <rte_eal.h>
#include <rte_errno.h>

#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dpa/error.hpp"

namespace dpa::transport::dpdk {

std::vector<std::string> eal_arguments(const DpdkTransportConfig& config) {
  std::vector<std::string> args{"dpa"};
  if (!config.cores.empty()) args.insert(args.end(), {"-l", config.cores});
  for (const std::string& device : config.allow) args.insert(args.end(), {"-a", device});
  for (const std::string& vdev : config.vdevs) args.push_back("--vdev=" + vdev);
  if (!config.file_prefix.empty()) args.push_back("--file-prefix=" + config.file_prefix);
  if (config.no_huge) args.push_back("--no-huge");
  if (config.memory_mb != 0) args.insert(args.end(), {"-m", std::to_string(config.memory_mb)});
  args.insert(args.end(), config.eal_args.begin(), config.eal_args.end());
  return args;
}

void start_eal(const DpdkTransportConfig& config) {
  static std::mutex mutex;
  static bool started = false;
  std::lock_guard lock(mutex);
  if (started) return;
  std::vector<std::string> args = eal_arguments(config);
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
  started = true;
}

}  // namespace dpa::transport::dpdk

// SPDX-License-Identifier: Apache-2.0
// DPA_DPDK_MONITOR: a thread that samples the byte and packet counters of the device's ports
// (added up over all of them) every interval and appends the rates to a CSV file (time_us, rx/tx Gbit/s, rx/tx Mpps, rx_missed). It reads the
// NIC's counters only, so the packet path pays nothing for it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace dpa::transport::dpdk {

class NicMonitor {
 public:
  // Opens `output` (dpa::Error naming dpdk.monitor_output when it cannot) and starts sampling.
  NicMonitor(std::vector<std::uint16_t> port_ids, std::chrono::microseconds interval, const std::string& output);
  NicMonitor(const NicMonitor&) = delete;
  NicMonitor& operator=(const NicMonitor&) = delete;
  ~NicMonitor();

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace dpa::transport::dpdk

// SPDX-License-Identifier: Apache-2.0
#include "transport/dpdk/nic_monitor.hpp"

#include <rte_ethdev.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "dpa/error.hpp"

namespace dpa::transport::dpdk {

namespace {

// The device's counters: every port's, added up. A port whose counters cannot be read is left out.
rte_eth_stats device_stats(const std::vector<std::uint16_t>& port_ids) {
  rte_eth_stats total{};
  for (const std::uint16_t port_id : port_ids) {
    rte_eth_stats port{};
    if (rte_eth_stats_get(port_id, &port) != 0) continue;
    total.ibytes += port.ibytes;
    total.obytes += port.obytes;
    total.ipackets += port.ipackets;
    total.opackets += port.opackets;
    total.imissed += port.imissed;
  }
  return total;
}

}  // namespace

NicMonitor::NicMonitor(std::vector<std::uint16_t> port_ids, std::chrono::microseconds interval,
                       const std::string& output) {
  std::unique_ptr<std::FILE, decltype(&std::fclose)> file(std::fopen(output.c_str(), "w"), &std::fclose);
  if (!file) {
    throw Error(fmt::format("dpdk.monitor_output \"{}\": cannot open: {}", output, std::strerror(errno)));
  }
  std::fputs("time_us,rx_gbps,tx_gbps,rx_mpps,tx_mpps,rx_missed\n", file.get());
  thread_ = std::thread([this, port_ids = std::move(port_ids), interval, file = std::move(file)] {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    rte_eth_stats previous = device_stats(port_ids);
    Clock::time_point previous_time = start;
    while (!stop_.load(std::memory_order_relaxed)) {
      std::this_thread::sleep_for(interval);  // a sampling period, not synchronisation
      const rte_eth_stats now = device_stats(port_ids);
      const Clock::time_point now_time = Clock::now();
      const double seconds = std::chrono::duration<double>(now_time - previous_time).count();
      const auto rate = [seconds](std::uint64_t later, std::uint64_t earlier) {
        return static_cast<double>(later - earlier) / seconds;
      };
      std::fprintf(file.get(), "%lld,%.4f,%.4f,%.4f,%.4f,%llu\n",
                   static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(now_time - start).count()),
                   rate(now.ibytes, previous.ibytes) * 8e-9, rate(now.obytes, previous.obytes) * 8e-9,
                   rate(now.ipackets, previous.ipackets) * 1e-6, rate(now.opackets, previous.opackets) * 1e-6,
                   static_cast<unsigned long long>(now.imissed - previous.imissed));
      previous = now;
      previous_time = now_time;
    }
    std::fflush(file.get());
  });
}

NicMonitor::~NicMonitor() {
  stop_.store(true);
  thread_.join();
}

}  // namespace dpa::transport::dpdk

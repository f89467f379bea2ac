// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/report.hpp"

#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

extern char** environ;

namespace dpa::tools::bench {
namespace {

using nlohmann::json;

// Nearest rank: the smallest value with at least `percent` % of the values at or below it.
double percentile(const std::vector<double>& sorted, std::size_t percent) {
  if (sorted.empty()) return 0;
  const std::size_t rank = std::max<std::size_t>(1, (percent * sorted.size() + 99) / 100);
  return sorted[rank - 1];
}

std::string format_size(std::uint64_t bytes) {
  for (const auto& [unit, scale] :
       {std::pair{"GiB", 1ULL << 30}, std::pair{"MiB", 1ULL << 20}, std::pair{"KiB", 1ULL << 10}}) {
    if (bytes >= scale && bytes % scale == 0) return fmt::format("{}{}", bytes / scale, unit);
  }
  return fmt::format("{}B", bytes);
}

json spread(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return {{"p50_us", percentile(values, 50)}, {"p99_us", percentile(values, 99)}};
}

// The barrier's exit skew and the time after the last start of each operation, over `lines`, or
// nulls where their clocks are not known to be one.
std::pair<json, json> split_latency(const std::vector<const json*>& lines, std::size_t iterations) {
  if (lines.size() < 2) return {nullptr, nullptr};
  const json& boot = (*lines.front())["boot_id"];
  for (const json* line : lines) {
    if (!boot.is_string() || boot.get<std::string>().empty() || (*line)["boot_id"] != boot) return {nullptr, nullptr};
  }
  std::vector<double> skew;
  std::vector<double> after_last_start;
  for (std::size_t i = 0; i < iterations; ++i) {
    double first_start = 0;
    double last_start = 0;
    double last_end = 0;
    for (std::size_t r = 0; r < lines.size(); ++r) {
      const double start = (*lines[r])["latency_start_us"].at(i).get<double>();
      const double end = (*lines[r])["latency_end_us"].at(i).get<double>();
      first_start = r == 0 ? start : std::min(first_start, start);
      last_start = r == 0 ? start : std::max(last_start, start);
      last_end = r == 0 ? end : std::max(last_end, end);
    }
    skew.push_back(last_start - first_start);
    after_last_start.push_back(last_end - last_start);
  }
  return {spread(std::move(skew)), spread(std::move(after_last_start))};
}

}  // namespace

json result_row(const std::vector<json>& rank_lines, int world, const std::string& dtype, int straggler_rank) {
  const json& first = rank_lines.front();
  const auto iterations = first["iterations"].get<std::size_t>();
  double seconds = 0;
  int measured = 0;
  std::vector<double> latencies(iterations, 0.0);
  std::uint64_t wrong = 0;
  std::uint64_t checked = 0;
  json counters = {{"retransmissions", 0}, {"blocks", 0},     {"blocks_partial", 0},
                   {"blocks_missed", 0},   {"tx_packets", 0}, {"tx_bursts", 0}};
  json ranks = json::array();
  std::vector<const json*> measured_lines;
  for (const json& line : rank_lines) {
    wrong += line["wrong"].get<std::uint64_t>();
    checked += line["checked"].get<std::uint64_t>();
    for (const char* name : {"retransmissions", "blocks", "tx_packets", "tx_bursts"}) {
      counters[name] = counters[name].get<std::uint64_t>() + line[name].get<std::uint64_t>();
    }
    counters["blocks_partial"] = counters["blocks_partial"].get<std::uint64_t>() + line["partial"].get<std::uint64_t>();
    counters["blocks_missed"] = counters["blocks_missed"].get<std::uint64_t>() + line["missed"].get<std::uint64_t>();
    json details = line;
    for (const char* name : {"latency_start_us", "latency_end_us", "boot_id"}) details.erase(name);
    ranks.push_back(details);
    if (world > 1 && line["rank"] == straggler_rank) continue;
    ++measured;
    measured_lines.push_back(&line);
    seconds += line["back_to_back_s"].get<double>();
    const auto& starts = line["latency_start_us"];
    const auto& ends = line["latency_end_us"];
    for (std::size_t i = 0; i < iterations && i < starts.size() && i < ends.size(); ++i)
      latencies[i] = std::max(latencies[i], ends[i].get<double>() - starts[i].get<double>());
  }
  std::sort(latencies.begin(), latencies.end());
  const auto [skew, after_last_start] = split_latency(measured_lines, iterations);
  const double time_s = measured > 0 && iterations > 0 ? seconds / measured / static_cast<double>(iterations) : 0.0;
  const auto bytes = first["bytes"].get<std::uint64_t>();
  const double algbw = time_s > 0 ? static_cast<double>(bytes) / time_s / 1e9 : 0.0;
  json dpa = {{"mode", first["mode"]},
              {"payload", first["payload"]},
              {"threads", first["threads"]},
              {"window", first["window"]}};
  dpa.update(counters);
  for (const char* name : {"switches", "switch_rx_packets", "switch_tx_packets", "switch_busy_ns", "switch_handed_off",
                           "switch_back_to_back_rx_packets", "switch_back_to_back_tx_packets", "switch_lcores"}) {
    if (first.contains(name)) dpa[name] = first[name];
  }
  dpa["ranks"] = ranks;
  return {{"backend", "dpa"},
          {"bytes", bytes},
          {"elements", first["elements"]},
          {"dtype", dtype},
          {"device", "cpu"},
          {"ranks", world},
          {"iterations", iterations},
          {"warmup", first["warmup"]},
          {"time_us", time_s * 1e6},
          {"algbw", algbw},
          {"busbw", world > 0 ? algbw * 2 * (world - 1) / world : 0.0},
          {"p50_us", percentile(latencies, 50)},
          {"p99_us", percentile(latencies, 99)},
          {"barrier_skew_us", skew},
          {"after_last_start_us", after_last_start},
          {"wrong", wrong},
          {"checked", checked},
          {"dpa", dpa}};
}

json host_info() {
  char hostname[256] = {};
  ::gethostname(hostname, sizeof hostname - 1);
  utsname system{};
  ::uname(&system);
  std::string cpu_model;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; cpu_model.empty() && std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      cpu_model = line.substr(line.find(':') + 2);
    }
  }
  return {{"hostname", hostname},
          {"platform", fmt::format("{}-{}-{}", system.sysname, system.release, system.machine)},
          {"cpus", std::thread::hardware_concurrency()},
          {"cpu_model", cpu_model.empty() ? json(nullptr) : json(cpu_model)}};
}

json dpa_environment() {
  json variables = json::object();
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const std::size_t equals = text.find('=');
    if (text.rfind("DPA_", 0) == 0 && equals != std::string::npos)
      variables[text.substr(0, equals)] = text.substr(equals + 1);
  }
  return variables;
}

void print_table(const json& report) {
  const json& config = report["config"];
  std::printf("# dpa-bench: %d ranks, cpu, %s, seed %llu; every result verified\n", config["ranks"].get<int>(),
              config["dtype"].get<std::string>().c_str(),
              static_cast<unsigned long long>(config["seed"].get<std::uint64_t>()));
  std::printf(
      "# back to back: time per operation (ranks' mean), algbw = bytes / time, busbw = algbw * 2(n-1)/n; "
      "after a barrier: the slowest rank's time of each operation%s\n",
      config["straggler_rank"].get<int>() >= 0 ? " (the straggler left out of both)" : "");
  std::printf("#%9s %11s %-10s %6s %10s %11s %11s %10s %10s %7s %8s %8s %7s %8s\n", "bytes", "elements", "mode",
              "iters", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "p50(us)", "p99(us)", "#wrong", "retrans", "partial",
              "missed", "tx/burst");
  for (const json& row : report["results"]) {
    const json& dpa = row["dpa"];
    const auto bursts = dpa["tx_bursts"].get<std::uint64_t>();
    // Packets per TX burst over all ranks: DPDK only (sockets count no bursts).
    const std::string burst_fill =
        bursts > 0 ? fmt::format("{:.1f}", static_cast<double>(dpa["tx_packets"].get<std::uint64_t>()) /
                                               static_cast<double>(bursts))
                   : "-";
    std::printf(" %9llu %11llu %-10s %6llu %10.1f %11.3f %11.3f %10.1f %10.1f %7llu %8llu %8llu %7llu %8s\n",
                static_cast<unsigned long long>(row["bytes"].get<std::uint64_t>()),
                static_cast<unsigned long long>(row["elements"].get<std::uint64_t>()),
                dpa["mode"].get<std::string>().c_str(),
                static_cast<unsigned long long>(row["iterations"].get<std::uint64_t>()), row["time_us"].get<double>(),
                row["algbw"].get<double>(), row["busbw"].get<double>(), row["p50_us"].get<double>(),
                row["p99_us"].get<double>(), static_cast<unsigned long long>(row["wrong"].get<std::uint64_t>()),
                static_cast<unsigned long long>(dpa["retransmissions"].get<std::uint64_t>()),
                static_cast<unsigned long long>(dpa["blocks_partial"].get<std::uint64_t>()),
                static_cast<unsigned long long>(dpa["blocks_missed"].get<std::uint64_t>()), burst_fill.c_str());
  }
  bool split_shown = false;
  for (const json& row : report["results"]) {
    if (row["barrier_skew_us"].is_null()) continue;
    if (!split_shown) {
      std::printf(
          "# after a barrier, split (ranks on one clock): the barrier's exit skew (last rank's start - first's) "
          "and the operation from the last rank's start to its last result, p50 / p99 (us)\n");
      split_shown = true;
    }
    const json& skew = row["barrier_skew_us"];
    const json& after = row["after_last_start_us"];
    std::printf("# %9llu %-10s skew %.1f / %.1f  after the last start %.1f / %.1f\n",
                static_cast<unsigned long long>(row["bytes"].get<std::uint64_t>()),
                row["dpa"]["mode"].get<std::string>().c_str(), skew["p50_us"].get<double>(),
                skew["p99_us"].get<double>(), after["p50_us"].get<double>(), after["p99_us"].get<double>());
  }
  // --ring-switch: the switch cores' packets over the time they were not idle-polling, each
  // lcore's and all of them over the back-to-back view's wall time, beside the workers' goodput.
  const auto mpps = [](const json& packets, double seconds) {
    return seconds > 0 ? static_cast<double>(packets.get<std::uint64_t>()) / seconds * 1e-6 : 0.0;
  };
  for (const json& row : report["results"]) {
    const json& dpa = row["dpa"];
    if (!dpa.contains("switch_busy_ns") || dpa["switch_busy_ns"].get<std::uint64_t>() == 0) continue;
    const std::string what =
        fmt::format("{:<10} {:>9}", dpa["mode"].get<std::string>(), format_size(row["bytes"].get<std::uint64_t>()));
    const double busy_s = static_cast<double>(dpa["switch_busy_ns"].get<std::uint64_t>()) * 1e-9;
    std::printf("# switch %s: per busy core %.2f Mpps received, %.2f Mpps sent (%.3f s busy)\n", what.c_str(),
                mpps(dpa["switch_rx_packets"], busy_s), mpps(dpa["switch_tx_packets"], busy_s), busy_s);
    if (!dpa.contains("switch_lcores")) continue;
    const json& lcores = dpa["switch_lcores"];
    for (std::size_t i = 0; i < lcores.size(); ++i) {
      const json& lcore = lcores[i];
      const double lcore_busy_s = static_cast<double>(lcore["busy_ns"].get<std::uint64_t>()) * 1e-9;
      std::printf("# switch %s: lcore %zu per busy core %.2f Mpps received, %.2f Mpps sent (%.3f s busy), %llu "
                  "handed off\n",
                  what.c_str(), i, mpps(lcore["rx_packets"], lcore_busy_s), mpps(lcore["tx_packets"], lcore_busy_s),
                  lcore_busy_s, static_cast<unsigned long long>(lcore["handed_off"].get<std::uint64_t>()));
    }
    // One rank: its back-to-back time is the row's time per operation times the operations.
    const double back_to_back_s = row["time_us"].get<double>() * 1e-6 * row["iterations"].get<double>();
    const double goodput_gbit = row["algbw"].get<double>() * 8;
    const int threads = dpa["threads"].get<int>();
    std::printf("# switch %s: %zu lcore(s) together %.2f Mpps received, %.2f Mpps sent back to back, %llu handed "
                "off; workers %.2f Gbit/s (%.2f per thread, %d thread(s))\n",
                what.c_str(), lcores.size(), mpps(dpa["switch_back_to_back_rx_packets"], back_to_back_s),
                mpps(dpa["switch_back_to_back_tx_packets"], back_to_back_s),
                static_cast<unsigned long long>(dpa["switch_handed_off"].get<std::uint64_t>()), goodput_gbit,
                threads > 0 ? goodput_gbit / threads : 0.0, threads);
  }
  std::printf("# wrong elements in all: %llu\n", static_cast<unsigned long long>(report["wrong"].get<std::uint64_t>()));
}

}  // namespace dpa::tools::bench

// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/run_rank.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <optional>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/boot_id.hpp"
#include "dpa/context.hpp"
#include "tools/bench/inputs.hpp"
#include "tools/bench/worker_setup.hpp"

namespace dpa::tools::bench {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
using SwitchLcores = std::vector<dpa::SwitchThreadCounters>;

// The first size's warm-up is at least this many operations (of at most kRunWarmupBytes in all):
// with --warmup's 3 alone the first size measured the start (2-core VM, 2 ranks, 4 KiB back to
// back: 196 us first, 114 us when measured again after 64 KiB), as python -m dpa.bench found.
constexpr std::size_t kRunWarmupOperations = 100;
constexpr std::size_t kRunWarmupBytes = std::size_t{64} << 20;

// --iterations, else about 256 MiB of tensor per view, within 20..500 operations (as dpa.bench).
std::size_t iterations_for(const Settings& s, std::size_t bytes) {
  if (s.iterations) return static_cast<std::size_t>(*s.iterations);
  return std::clamp<std::size_t>((std::size_t{256} << 20) / std::max<std::size_t>(bytes, 1), 20, 500);
}

// The switch server of each worker thread, "host:port" for [t]: which servers served.
json thread_switch_names(const dpa::Context& context) {
  json names = json::array();
  for (const dpa::HostPort& address : context.thread_switches()) names.push_back(address.to_string());
  return names;
}

// The switch's packets (docs/benchmark-tools.md, "JSON schema"): each lcore's over the timed
// operations (`before` to `after`), with the packets it handed to another lcore's inbox, their
// sums, and the sums over the back-to-back view alone (`before` to `back_to_back`), whose wall
// time makes them the rate the switch sustained.
json switch_lcore_counters(const SwitchLcores& before, const SwitchLcores& back_to_back, const SwitchLcores& after) {
  json lcores = json::array();
  std::uint64_t rx = 0;
  std::uint64_t tx = 0;
  std::uint64_t busy = 0;
  std::uint64_t handed_off = 0;
  std::uint64_t back_to_back_rx = 0;
  std::uint64_t back_to_back_tx = 0;
  for (std::size_t i = 0; i < after.size(); ++i) {
    const dpa::SwitchCounters& now = after[i].counters;
    const dpa::SwitchCounters& then = before[i].counters;
    const json lcore = {{"rx_packets", now.rx_packets - then.rx_packets},
                        {"tx_packets", now.tx_packets - then.tx_packets},
                        {"busy_ns", now.busy_ns - then.busy_ns},
                        {"handed_off", after[i].transport.rx_dispatched - before[i].transport.rx_dispatched}};
    rx += lcore["rx_packets"].get<std::uint64_t>();
    tx += lcore["tx_packets"].get<std::uint64_t>();
    busy += lcore["busy_ns"].get<std::uint64_t>();
    handed_off += lcore["handed_off"].get<std::uint64_t>();
    back_to_back_rx += back_to_back[i].counters.rx_packets - then.rx_packets;
    back_to_back_tx += back_to_back[i].counters.tx_packets - then.tx_packets;
    lcores.push_back(lcore);
  }
  return {{"switch_rx_packets", rx},
          {"switch_tx_packets", tx},
          {"switch_busy_ns", busy},
          {"switch_handed_off", handed_off},
          {"switch_back_to_back_rx_packets", back_to_back_rx},
          {"switch_back_to_back_tx_packets", back_to_back_tx},
          {"switch_lcores", lcores}};
}

// What every size of the rank shares: its sessions (sizes of fewer elements than the wide
// session's payload go to the small-packet session, when the sizing has one), the barrier that
// lines the ranks up and the straggler's delay.
class Rank {
 public:
  Rank(const Settings& s, const dpa::Config& rank_config)
      : settings(s), config(rank_config), context(rank_config), small(small_config(s, rank_config)) {
    if (small) small_context.emplace(*small, context.submit_order());
    barrier_options_.k = rank_config.world_size;  // a full-N allreduce of one value
    barrier_options_.preemptive = false;
  }

  void barrier() { context.allreduce(&token_, &token_, 1, dpa::DataType::float32, barrier_options_); }

  void straggle() const {
    if (config.rank == settings.straggler_rank && settings.straggler_delay_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(settings.straggler_delay_ms));
    }
  }

  const Settings& settings;
  const dpa::Config& config;
  dpa::Context context;
  const std::optional<dpa::Config> small;
  std::optional<dpa::Context> small_context;

 private:
  dpa::AllreduceOptions barrier_options_;
  float token_ = 1;
};

// One size on one rank: inputs filled ahead into a pool before each round's timed region (one
// buffer per operation), every result checked, the totals and timings of the views.
class SizeRun {
 public:
  SizeRun(Rank& rank, std::size_t size_index, std::size_t pool_bytes)
      : rank_(rank),
        s_(rank.settings),
        size_index_(size_index),
        count_(size_bytes(s_.sizes[size_index]) / 4),
        iterations_(iterations_for(s_, count_ * 4)),
        warmup_(std::max(static_cast<std::size_t>(s_.warmup),
                         size_index == 0 ? std::min(kRunWarmupOperations, kRunWarmupBytes / (count_ * 4)) : 0)),
        small_(rank.small_context && count_ < rank.context.payload()),
        session_(small_ ? *rank.small_context : rank.context),
        used_(small_ ? *rank.small : rank.config),
        is_float_(s_.dtype == "float32"),
        type_(is_float_ ? dpa::DataType::float32 : dpa::DataType::int32),
        per_round_(std::clamp<std::size_t>(pool_bytes / (count_ * 4), 1, std::max(iterations_, warmup_))),
        pool_(per_round_, std::vector<float>(count_)),
        contributors_(per_round_, std::vector<std::uint64_t>((count_ + session_.payload() - 1) / session_.payload())),
        keys_(static_cast<std::size_t>(rank.config.world_size)),
        corrupt_next_(s_.inject_wrong && rank.config.rank == rank.config.world_size - 1),
        // K = N: a block is right only with every rank in it, whatever the library's bitmap says.
        required_contributors_(s_.mode == "full" ? all_ranks(rank.config.world_size) : 0) {}

  // The warm-up, the back-to-back view and the latency view; returns the size's JSON line.
  json measure(const dpa::SoftwareSwitch* sw) {
    rounds(View::warmup, warmup_, false);
    const dpa::TransportCounters before = rank_.context.transport_counters();
    const SwitchLcores switch_before = sw != nullptr ? sw->thread_counters() : SwitchLcores{};
    const double back_to_back_s = rounds(View::back_to_back, iterations_, false);
    const SwitchLcores switch_back_to_back = sw != nullptr ? sw->thread_counters() : SwitchLcores{};
    rounds(View::latency, iterations_, true);
    // The timed operations' packets through this rank's queues (DPDK: and the TX bursts that
    // carried them, so tx_packets / tx_bursts is how full a burst left).
    json result = line(back_to_back_s, rank_.context.transport_counters().since(before));
    if (sw != nullptr) {
      // The switch publishes its counters once per received batch: the last batch of the timed
      // operations may be missing, a few dozen packets of hundreds of thousands.
      result.update(switch_lcore_counters(switch_before, switch_back_to_back, sw->thread_counters()));
    }
    return result;
  }

  [[nodiscard]] std::size_t iterations() const { return iterations_; }
  [[nodiscard]] std::size_t wrong() const { return wrong_; }

 private:
  // Operations first .. first + n - 1 of `view`: filled, run (back to back after one barrier, or
  // each after its own), then checked. Returns the seconds of a back-to-back round.
  double round(View view, std::size_t first, std::size_t n, bool each_after_barrier) {
    const int me = rank_.config.rank;
    for (std::size_t j = 0; j < n; ++j) {
      fill_input(pool_[j].data(), count_, is_float_, input_key(s_.seed, size_index_, view, first + j, me));
    }
    std::vector<dpa::AllreduceOptions> options(n);
    for (std::size_t j = 0; j < n; ++j) options[j].block_contributors = contributors_[j].data();
    const bool timed = view != View::warmup;
    double seconds = 0;
    if (!each_after_barrier) rank_.barrier();
    const auto round_start = Clock::now();
    for (std::size_t j = 0; j < n; ++j) {
      if (each_after_barrier) rank_.barrier();
      rank_.straggle();
      const auto start = Clock::now();
      const dpa::OpStats stats = session_.allreduce(pool_[j].data(), pool_[j].data(), count_, type_, options[j]);
      if (each_after_barrier) {
        latency_start_us_.push_back(monotonic_us(start));
        latency_end_us_.push_back(monotonic_us(Clock::now()));
      }
      if (timed) totals_ += stats;
    }
    if (!each_after_barrier) seconds = std::chrono::duration<double>(Clock::now() - round_start).count();
    for (std::size_t j = 0; j < n; ++j) check(view, first + j, pool_[j], contributors_[j], timed);
    return seconds;
  }

  // Operation `operation` of `view`: its result against the sum of its contributors' inputs.
  void check(View view, std::size_t operation, std::vector<float>& result, const std::vector<std::uint64_t>& blocks,
             bool timed) {
    if (timed && corrupt_next_) {
      corrupt(result.data(), count_, is_float_);
      corrupt_next_ = false;
    }
    for (int r = 0; r < rank_.config.world_size; ++r) {
      keys_[static_cast<std::size_t>(r)] = input_key(s_.seed, size_index_, view, operation, r);
    }
    wrong_ += count_wrong(result.data(), count_, is_float_, rank_.config.rank, keys_, session_.payload(),
                          blocks.data(), required_contributors_);
    checked_ += count_;
  }

  double rounds(View view, std::size_t operations, bool each_after_barrier) {
    double seconds = 0;
    for (std::size_t first = 0; first < operations; first += per_round_) {
      seconds += round(view, first, std::min(per_round_, operations - first), each_after_barrier);
    }
    return seconds;
  }

  // The latency view's starts and ends on CLOCK_MONOTONIC (steady_clock), which the ranks of one
  // kernel share: the report takes each operation's time from them, and splits it into the
  // barrier's skew and the rest.
  static double monotonic_us(Clock::time_point when) {
    return std::chrono::duration<double, std::micro>(when.time_since_epoch()).count();
  }

  json line(double back_to_back_s, const dpa::TransportCounters& io) const {
    return {{"rank", rank_.config.rank},
            {"mode", s_.mode},
            {"threads", used_.threads},
            {"switches", thread_switch_names(session_)},
            {"window", used_.window},
            {"timeout_ms", rank_.config.timeout.count()},
            {"bytes", count_ * 4},
            {"payload", session_.payload()},
            {"elements", count_},
            {"iterations", iterations_},
            {"warmup", warmup_},
            {"back_to_back_s", back_to_back_s},
            {"latency_start_us", latency_start_us_},
            {"latency_end_us", latency_end_us_},
            {"boot_id", dpa::detail::boot_id().value_or("")},  // ranks of one kernel share CLOCK_MONOTONIC
            {"retransmissions", totals_.retransmissions},
            {"blocks", totals_.blocks},
            {"partial", totals_.blocks_partial},
            {"missed", totals_.blocks_missed},
            {"rx_packets", io.rx_packets},
            {"tx_packets", io.tx_packets},
            {"tx_bursts", io.tx_bursts},
            {"tx_errors", io.tx_errors},
            {"rx_dropped", io.rx_dropped},
            {"rx_dispatched", io.rx_dispatched},
            {"wrong", wrong_},
            {"checked", checked_}};
  }

  Rank& rank_;
  const Settings& s_;
  const std::size_t size_index_;
  const std::size_t count_;
  const std::size_t iterations_;
  const std::size_t warmup_;
  const bool small_;
  dpa::Context& session_;
  const dpa::Config& used_;
  const bool is_float_;
  const dpa::DataType type_;
  const std::size_t per_round_;
  std::vector<std::vector<float>> pool_;
  std::vector<std::vector<std::uint64_t>> contributors_;
  std::vector<std::uint64_t> keys_;
  bool corrupt_next_;
  const std::uint64_t required_contributors_;
  std::size_t wrong_ = 0;
  std::size_t checked_ = 0;
  dpa::OpStats totals_;
  std::vector<double> latency_start_us_;
  std::vector<double> latency_end_us_;
};

}  // namespace

int run_rank(const Settings& s, const dpa::Config& config, std::ostream& out, const dpa::SoftwareSwitch* sw) {
  Rank rank(s, config);
  const std::size_t pool_bytes = parse_size(s.pool_bytes);
  int status = 0;
  for (std::size_t size_index = 0; size_index < s.sizes.size(); ++size_index) {
    SizeRun size(rank, size_index, pool_bytes);
    const auto size_started = Clock::now();
    out << size.measure(sw).dump() << std::endl;
    if (config.rank == 0) {
      std::cerr << fmt::format("dpa-bench: {} {}: {} operations per view, {} wrong on rank 0, {:.1f} s\n", s.mode,
                               s.sizes[size_index], size.iterations(), size.wrong(),
                               std::chrono::duration<double>(Clock::now() - size_started).count());
    }
    if (size.wrong() > 0) {
      std::cerr << "dpa-bench: rank " << config.rank << ": " << size.wrong() << " wrong elements at "
                << s.sizes[size_index] << "\n";
      status = 1;
    }
  }
  return status;
}

int run_worker(const Settings& s) { return run_rank(s, worker_config(s), std::cout, nullptr); }

}  // namespace dpa::tools::bench

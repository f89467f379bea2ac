// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
// dpa-test-worker: one rank of an integration test. Runs allreduces on inputs that every rank
// can recompute for every other rank, checks each block against the contributors the switch
// reported, prints one JSON line of statistics per operation, and exits non-zero on a mismatch.
#include <CLI/CLI.hpp>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "dpa/context.hpp"
#include "protocol/auth.hpp"
#include "quant/quant.hpp"

namespace {

struct Options {
  dpa::Config config;
  std::size_t count = 1000;
  std::string dtype = "int32";
  std::string op = "sum";
  int iterations = 1;
  int straggler_rank = -1;
  int straggler_delay_ms = 0;
  bool in_place = false;
  std::vector<std::string> expect_error;  // every one must occur in the error
  bool recover = false;  // after the expected error, a matched operation must succeed
  int count_override_rank = -1;
  std::size_t count_override = 0;
  int dtype_override_rank = -1;  // this rank reduces the other data type
};

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t seed_of(int rank, int iteration, std::size_t i) {
  return mix((static_cast<std::uint64_t>(rank) << 48) ^ (static_cast<std::uint64_t>(iteration) << 32) ^ i);
}

std::int32_t int_input(int rank, int iteration, std::size_t i) {
  return static_cast<std::int32_t>(seed_of(rank, iteration, i) % 2000001) - 1000000;
}

// Floats whose block maxima agree across ranks (element 0 of every block is +-1), so that a
// rank skipping forward never quantises beyond the negotiated exponent.
float float_input(int rank, int iteration, std::size_t i, std::size_t payload) {
  if (i % payload == 0) return (i / payload) % 2 == 0 ? 1.0f : -1.0f;
  const double unit = static_cast<double>(seed_of(rank, iteration, i) % 2000001) / 1000000.0 - 1.0;
  return static_cast<float>(unit * 0.999);
}

int ceil_log2(int n) { return n <= 1 ? 0 : std::bit_width(static_cast<unsigned>(n - 1)); }

template <typename T, typename Input>
int verify(const Options& o, std::size_t count, std::uint32_t payload, int iteration,
           const std::vector<T>& mine, const std::vector<T>& out,
           const std::vector<std::uint64_t>& contributors, Input input) {
  const int world = o.config.world_size;
  int errors = 0;
  for (std::size_t block = 0; block * payload < count; ++block) {
    const std::uint64_t bitmap = contributors[block];
    const std::size_t begin = block * payload;
    const std::size_t end = std::min<std::size_t>(count, begin + payload);
    const int n = std::popcount(bitmap);
    // Block exponent over the contributors (an upper bound of the negotiated one).
    std::int8_t exponent = dpa::quant::block_exponent(nullptr, 0);
    if constexpr (std::is_same_v<T, float>) {
      for (int r = 0; r < world; ++r) {
        if (((bitmap >> r) & 1) == 0) continue;
        std::vector<float> values;
        for (std::size_t i = begin; i < end; ++i) values.push_back(input(r, iteration, i));
        exponent = std::max(exponent, dpa::quant::block_exponent(values.data(), values.size()));
      }
    }
    for (std::size_t i = begin; i < end; ++i) {
      if (bitmap == 0) {  // missed: the rank keeps its own input
        if (out[i] != mine[i]) ++errors;
        continue;
      }
      double exact = 0;
      std::int64_t exact_int = 0;
      for (int r = 0; r < world; ++r) {
        if (((bitmap >> r) & 1) == 0) continue;
        exact += static_cast<double>(input(r, iteration, i));
        exact_int += static_cast<std::int64_t>(input(r, iteration, i));
      }
      if constexpr (std::is_same_v<T, float>) {
        // docs/protocol.md §10.4: A + 2^-23 (|exact| + A), A = N 2^(e+h-32).
        const double absolute = world * std::ldexp(1.0, exponent + ceil_log2(world) - 32);
        double bound = absolute + std::ldexp(std::abs(exact) + absolute, -23);
        if (o.op == "avg") {
          exact /= n;
          bound /= n;
        }
        if (!(std::abs(static_cast<double>(out[i]) - exact) <= bound)) {
          if (errors < 5) {
            std::cerr << "rank " << o.config.rank << " element " << i << ": got " << out[i]
                      << " expected " << exact << " bound " << bound << "\n";
          }
          ++errors;
        }
      } else {
        auto expected = static_cast<std::int32_t>(exact_int);
        if (o.op == "avg") expected = static_cast<std::int32_t>(exact_int / n);
        if (out[i] != expected) {
          if (errors < 5) {
            std::cerr << "rank " << o.config.rank << " element " << i << ": got " << out[i]
                      << " expected " << expected << " (bitmap " << bitmap << ")\n";
          }
          ++errors;
        }
      }
    }
  }
  return errors;
}

template <typename T, typename Input>
int run(dpa::Context& context, const Options& o, Input input) {
  const int rank = o.config.rank;
  const std::size_t count = rank == o.count_override_rank ? o.count_override : o.count;
  const std::uint32_t payload = context.payload();
  int failures = 0;
  for (int iteration = 0; iteration < o.iterations; ++iteration) {
    std::vector<T> mine(count);
    for (std::size_t i = 0; i < count; ++i) mine[i] = input(rank, iteration, i);
    std::vector<T> out = o.in_place ? mine : std::vector<T>(count, T{});
    std::vector<std::uint64_t> contributors((count + payload - 1) / payload, ~std::uint64_t{0});
    if (rank == o.straggler_rank) {
      std::this_thread::sleep_for(std::chrono::milliseconds(o.straggler_delay_ms));
    }
    dpa::AllreduceOptions options;
    options.op = o.op == "avg" ? dpa::ReduceOp::avg : dpa::ReduceOp::sum;
    options.block_contributors = contributors.data();
    const T* in = o.in_place ? out.data() : mine.data();
    const dpa::OpStats stats =
        context.allreduce(in, out.data(), count,
                          std::is_same_v<T, float> ? dpa::DataType::float32 : dpa::DataType::int32,
                          options);
    const int errors = verify<T>(o, count, payload, iteration, mine, out, contributors, input);
    failures += errors;
    nlohmann::json line = {{"rank", rank},
                           {"iteration", iteration},
                           {"blocks", stats.blocks},
                           {"full", stats.blocks_full},
                           {"partial", stats.blocks_partial},
                           {"missed", stats.blocks_missed},
                           {"contributed", stats.contributed},
                           {"min_contributors", stats.min_contributors},
                           {"retransmissions", stats.retransmissions},
                           {"syn_probes", stats.syn_probes},
                           {"seconds", stats.seconds},
                           {"errors", errors}};
    for (const dpa::HostPort& server : context.thread_switches()) line["switches"].push_back(server.to_string());
    std::cout << line.dump() << std::endl;
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dpa-test-worker: one verified rank of an integration test"};
  Options o;
  dpa::Config& c = o.config;
  std::int64_t rto_us = c.retransmit_timeout.count();
  std::int64_t timeout_ms = c.timeout.count();
  std::int64_t join_timeout_ms = c.join_timeout.count();
  std::string switch_host = "127.0.0.1";
  std::uint16_t switch_port = 0;
  std::string switch_list;
  auto* port_option = app.add_option("--port", switch_port, "The switch's port (with --host)");
  app.add_option("--host", switch_host);
  app.add_option("--switch", switch_list, "Several switch servers, host:port,host:port (DPA_SWITCH syntax)")
      ->excludes(port_option);
  auto& udp = std::get<dpa::UdpTransportConfig>(c.transport);
  app.add_option("--local-host", udp.bind_host);
  app.add_option("--local-port", udp.bind_port);
  bool hold = false;
  app.add_flag("--hold", hold,
               "After the operations, print \"holding\" and keep the context (idle) until stdin closes, so a "
               "test can stop the switch before the ranks' transports go away");
  std::string transport_config;
  app.add_option("--transport-config", transport_config,
                 "JSON file whose \"udp\" or \"dpdk\" section replaces the transport")
      ->check(CLI::ExistingFile);
  std::string auth_key_file;
  app.add_option("--auth-key-file", auth_key_file, "This rank's authentication key (DPA_AUTH_KEY_FILE)")
      ->check(CLI::ExistingFile);
  app.add_option("--session", c.session);
  app.add_option("--rank", c.rank)->required();
  app.add_option("--world", c.world_size)->required();
  app.add_option("--threads", c.threads);
  app.add_option("--window", c.window);
  app.add_option("--payload", c.payload);
  app.add_option("--k", c.k);
  app.add_flag("--preemptive", c.preemptive);
  app.add_flag("--syn-disable", c.syn_disable);
  app.add_option("--rto-us", rto_us);
  app.add_option("--timeout-ms", timeout_ms);
  app.add_option("--join-timeout-ms", join_timeout_ms);
  app.add_option("--drop", c.faults.drop);
  app.add_option("--duplicate", c.faults.duplicate);
  app.add_option("--reorder", c.faults.reorder);
  app.add_option("--delay", c.faults.delay);
  app.add_option("--seed", c.faults.seed);
  app.add_option("--count", o.count);
  app.add_option("--dtype", o.dtype)->check(CLI::IsMember({"int32", "float32"}));
  app.add_option("--op", o.op)->check(CLI::IsMember({"sum", "avg"}));
  app.add_option("--iterations", o.iterations);
  app.add_option("--straggler-rank", o.straggler_rank);
  app.add_option("--straggler-delay-ms", o.straggler_delay_ms);
  app.add_flag("--in-place", o.in_place);
  app.add_option("--expect-error", o.expect_error,
                 "Succeed only if an error containing this occurs (repeatable: all must occur)");
  app.add_flag("--recover", o.recover,
               "After the expected error, run the operation again with matching counts; it must succeed");
  app.add_option("--count-override-rank", o.count_override_rank);
  app.add_option("--count-override", o.count_override);
  app.add_option("--dtype-override-rank", o.dtype_override_rank);
  CLI11_PARSE(app, argc, argv);
  if (switch_list.empty() && switch_port == 0) {
    std::cerr << "dpa-test-worker: give --port (with --host) or --switch\n";
    return 2;
  }
  c.switches = switch_list.empty() ? std::vector<dpa::HostPort>{{switch_host, switch_port}}
                                   : dpa::parse_host_port_list(switch_list, "--switch ", 4242);
  if (!transport_config.empty()) c.transport = dpa::Config::from_json_file(transport_config).transport;
  if (!auth_key_file.empty()) c.auth_key = dpa::protocol::read_auth_key_file(auth_key_file, "--auth-key-file");
  c.retransmit_timeout = std::chrono::microseconds(rto_us);
  c.max_retransmit_timeout = std::max(c.max_retransmit_timeout, c.retransmit_timeout);
  c.timeout = std::chrono::milliseconds(timeout_ms);
  c.join_timeout = std::chrono::milliseconds(join_timeout_ms);

  const auto matches = [&o](const std::string& message) {
    return !o.expect_error.empty() &&
           std::all_of(o.expect_error.begin(), o.expect_error.end(), [&](const std::string& part) {
             return message.find(part) != std::string::npos;
           });
  };
  try {
    dpa::Context context(c);
    // Destroyed before the context: the ranks stay joined, their engines idle, until released.
    struct HoldUntilEof {
      bool hold;
      ~HoldUntilEof() {
        if (!hold) return;
        std::cout << "holding" << std::endl;
        for (std::string line; std::getline(std::cin, line);) {
        }
      }
    } const holder{hold};
    const auto run_all = [&](const Options& options) {
      const bool other_type = c.rank == options.dtype_override_rank;
      if ((options.dtype == "int32") != other_type) return run<std::int32_t>(context, options, int_input);
      const std::uint32_t payload = context.payload();
      return run<float>(context, options, [payload](int r, int it, std::size_t i) {
        return float_input(r, it, i, payload);
      });
    };
    int failures = 0;
    try {
      failures = run_all(o);
    } catch (const dpa::Error& error) {
      std::cerr << "rank " << c.rank << ": " << error.what() << "\n";
      if (!matches(error.what())) return 2;
      std::cout << nlohmann::json{{"rank", c.rank}, {"error", error.what()}}.dump() << std::endl;
      if (!o.recover) return 0;
      Options matched = o;
      matched.count_override_rank = -1;
      matched.dtype_override_rank = -1;
      return run_all(matched) == 0 ? 0 : 1;
    }
    if (!o.expect_error.empty()) {
      std::cerr << "rank " << c.rank << ": expected an error but none occurred\n";
      return 3;
    }
    return failures == 0 ? 0 : 1;
  } catch (const dpa::Error& error) {
    std::cerr << "rank " << c.rank << ": " << error.what() << "\n";
    if (matches(error.what())) {
      std::cout << nlohmann::json{{"rank", c.rank}, {"error", error.what()}}.dump() << std::endl;
      return 0;
    }
    return 2;
  }
}

// SPDX-License-Identifier: Apache-2.0
// The Prometheus text dpa-switch serves: names, labels, units and the exposition format's rules
// (one HELP and TYPE per metric, before its samples), and the --metrics / switch.metrics address.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dpa/error.hpp"
#include "switch/metrics_text.hpp"

namespace {

using testing::HasSubstr;

struct Exposition {
  std::map<std::string, std::string> types;  // metric -> counter/gauge/summary
  std::map<std::string, double> samples;     // name{labels} -> value
};

// Parses the text, failing the test on any line that breaks the format.
Exposition parse(const std::string& text) {
  static const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) \S.*)");
  static const std::regex type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge))");
  static const std::regex sample(R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-z_]+="[0-9]+"\})? ([0-9.e+-]+))");
  Exposition exposition;
  std::set<std::string> helped;
  std::string current;
  std::istringstream lines(text);
  std::smatch match;
  for (std::string line; std::getline(lines, line);) {
    if (std::regex_match(line, match, help)) {
      EXPECT_TRUE(helped.insert(match[1]).second) << "second HELP: " << line;
      current = match[1];
    } else if (std::regex_match(line, match, type)) {
      EXPECT_EQ(match[1], current) << "TYPE without its HELP: " << line;
      EXPECT_TRUE(exposition.types.emplace(match[1], match[2]).second) << "second TYPE: " << line;
      if (match[2] == "counter") {
        EXPECT_TRUE(std::string(match[1]).ends_with("_total")) << line;
      }
    } else if (std::regex_match(line, match, sample)) {
      EXPECT_EQ(match[1], current) << "sample outside its metric: " << line;
      exposition.samples[std::string(match[1]) + std::string(match[2])] = std::stod(match[3]);
    } else {
      ADD_FAILURE() << "not exposition format: \"" << line << "\"";
    }
  }
  return exposition;
}

TEST(MetricsText, EveryCounterPerThreadAndPerSessionInTheExpositionFormat) {
  std::vector<dpa::SwitchThreadCounters> threads(2);
  threads[0].counters.rx_packets = 5;
  threads[1].counters.rx_packets = 7;
  threads[1].counters.completed_partial = 3;
  threads[0].counters.busy_ns = 1'500'000'000;
  threads[1].transport.idle_ns = 250'000'000;
  threads[1].transport.tx_errors = 2;
  dpa::SessionStatus session;
  session.config.id = 9;
  session.config.world_size = 4;
  session.config.k = 3;
  session.config.payload = 256;
  session.config.pool_size = 128;
  session.generation = 2;
  session.joined = 0b1011;
  session.counters.completed_partial = 3;
  session.counters.rx_packets = 12;
  dpa::SessionStatus unconfigured_k;
  unconfigured_k.config.id = 10;
  unconfigured_k.config.world_size = 2;

  const Exposition e = parse(dpa::sw::metrics_text(threads, {session, unconfigured_k}));
  const std::map<std::string, double> expected{
      {R"(dpa_switch_rx_packets_total{thread="0"})", 5},
      {R"(dpa_switch_rx_packets_total{thread="1"})", 7},
      {R"(dpa_switch_completed_partial_total{thread="1"})", 3},
      {R"(dpa_switch_busy_seconds_total{thread="0"})", 1.5},
      {R"(dpa_switch_transport_idle_seconds_total{thread="1"})", 0.25},
      {R"(dpa_switch_transport_tx_errors_total{thread="1"})", 2},
      {"dpa_switch_sessions", 2},
      {R"(dpa_switch_session_rx_packets_total{session="9"})", 12},
      {R"(dpa_switch_session_completed_partial_total{session="9"})", 3},
      {R"(dpa_switch_session_world_size{session="9"})", 4},
      {R"(dpa_switch_session_fastest_k{session="9"})", 3},
      {R"(dpa_switch_session_fastest_k{session="10"})", 2},  // k 0: K = N
      {R"(dpa_switch_session_payload_values{session="9"})", 256},
      {R"(dpa_switch_session_pool_slots{session="9"})", 128},
      {R"(dpa_switch_session_straggler_timeout_seconds{session="9"})", 0.01},
      {R"(dpa_switch_session_generation{session="9"})", 2},
      {R"(dpa_switch_session_joined_ranks{session="9"})", 3},
      {R"(dpa_switch_session_joined_ranks{session="10"})", 0},
  };
  for (const auto& [name, value] : expected) {
    ASSERT_TRUE(e.samples.contains(name)) << name;
    EXPECT_DOUBLE_EQ(e.samples.at(name), value) << name;
  }
  EXPECT_EQ(e.types.at("dpa_switch_rx_packets_total"), "counter");
  EXPECT_EQ(e.types.at("dpa_switch_session_world_size"), "gauge");
  // 24 switch and 15 transport counters per thread, 12 counters and 7 gauges per session.
  EXPECT_EQ(e.samples.size(), 2 * (24 + 15) + 1 + 2 * (12 + 7));
}

TEST(MetricsText, NoThreadsAndNoSessionsStillDescribeEveryMetric) {
  const Exposition e = parse(dpa::sw::metrics_text({}, {}));
  EXPECT_EQ(e.samples.size(), 1u);  // dpa_switch_sessions 0
  EXPECT_EQ(e.types.size(), 24u + 15u + 1u + 12u + 7u);
}

TEST(MetricsAddress, PortAloneIsLoopbackAndEverythingElseNamesTheSource) {
  EXPECT_EQ(dpa::sw::metrics_address("9464", "--metrics "), (dpa::HostPort{"127.0.0.1", 9464}));
  EXPECT_EQ(dpa::sw::metrics_address("0", "--metrics "), (dpa::HostPort{"127.0.0.1", 0}));
  EXPECT_EQ(dpa::sw::metrics_address("0.0.0.0:9100", "--metrics "), (dpa::HostPort{"0.0.0.0", 9100}));
  for (const char* bad : {"", "localhost", "70000", "10.0.0.1:", "10.0.0.1:http", ":9464"}) {
    try {
      dpa::sw::metrics_address(bad, "switch.metrics: ");
      ADD_FAILURE() << "accepted \"" << bad << "\"";
    } catch (const dpa::ConfigError& error) {
      EXPECT_THAT(error.what(),
                  HasSubstr(std::string("switch.metrics: \"") + bad + "\": expected host:port or a port"));
    }
  }
}

}  // namespace

// SPDX-License-Identifier: Apache-2.0
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "dpa/config.hpp"
#include "dpa/env.hpp"
#include "dpa/error.hpp"
#include "dpa/switch.hpp"
#include "dpa/types.hpp"
#include "protocol/wire.hpp"

namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

const std::string kSourceDir = DPA_SOURCE_DIR;

// The message of the ConfigError that `action` throws; a test failure if it throws none.
std::string config_error(const std::function<void()>& action) {
  try {
    action();
  } catch (const dpa::ConfigError& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected a dpa::ConfigError";
  return {};
}

// A file in the test temp directory, removed again when the test ends.
class TempFile {
 public:
  TempFile(const std::string& name, const std::string& content)
      : path_(::testing::TempDir() + "dpa_config_test_" + std::to_string(::getpid()) + "_" + name) {
    std::ofstream(path_) << content;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

dpa::Config worker_from_json(const std::string& content) {
  const TempFile file("worker.json", content);
  return dpa::Config::from_json_file(file.path());
}

std::string worker_json_error(const std::string& content) {
  const TempFile file("worker.json", content);
  return config_error([&] { dpa::Config::from_json_file(file.path()); });
}

dpa::SwitchConfig switch_from_json(const std::string& content) {
  const TempFile file("switch.json", content);
  return dpa::SwitchConfig::from_json_file(file.path());
}

std::string switch_json_error(const std::string& content) {
  const TempFile file("switch.json", content);
  return config_error([&] { dpa::SwitchConfig::from_json_file(file.path()); });
}

// ---- Worker config: JSON ------------------------------------------------------------------

TEST(WorkerJson, ReadsEveryKey) {
  const dpa::Config config = worker_from_json(R"({
    "rank": 2, "world_size": 8, "switch": "10.0.0.9:5000", "session": 7, "threads": 4,
    "window": 64, "payload": 256, "udp": {"bind_host": "10.0.0.2", "bind_port": 6000},
    "retransmit_timeout_us": 500, "max_retransmit_timeout_us": 8000, "timeout_ms": 3000,
    "join_timeout_ms": 4000, "busy_poll_us": 25, "k": 6, "preemptive": true, "syn_disable": true,
    "faults": {"drop": 0.1, "duplicate": 0.2, "reorder": 0.3, "delay": 0.4,
               "delay_time_us": 750, "seed": 99}
  })");
  EXPECT_EQ(config.rank, 2);
  EXPECT_EQ(config.world_size, 8);
  EXPECT_EQ(config.switches, (std::vector<dpa::HostPort>{{"10.0.0.9", 5000}}));
  EXPECT_EQ(config.session, 7u);
  EXPECT_EQ(config.threads, 4);
  EXPECT_EQ(config.window, 64);
  EXPECT_EQ(config.payload, 256u);
  EXPECT_EQ(std::get<dpa::UdpTransportConfig>(config.transport).bind_host, "10.0.0.2");
  EXPECT_EQ(std::get<dpa::UdpTransportConfig>(config.transport).bind_port, 6000);
  EXPECT_EQ(config.retransmit_timeout, 500us);
  EXPECT_EQ(config.max_retransmit_timeout, 8000us);
  EXPECT_EQ(config.timeout, 3000ms);
  EXPECT_EQ(config.join_timeout, 4000ms);
  EXPECT_EQ(config.busy_poll, 25us);
  EXPECT_EQ(config.k, 6);
  EXPECT_TRUE(config.preemptive);
  EXPECT_TRUE(config.syn_disable);
  EXPECT_DOUBLE_EQ(config.faults.drop, 0.1);
  EXPECT_DOUBLE_EQ(config.faults.duplicate, 0.2);
  EXPECT_DOUBLE_EQ(config.faults.reorder, 0.3);
  EXPECT_DOUBLE_EQ(config.faults.delay, 0.4);
  EXPECT_EQ(config.faults.delay_time, 750us);
  EXPECT_EQ(config.faults.seed, 99u);
  EXPECT_NO_THROW(config.validate());
}

TEST(WorkerJson, EmptyObjectKeepsDefaults) {
  const dpa::Config config = worker_from_json("{}");
  const dpa::Config defaults;
  EXPECT_EQ(config.rank, defaults.rank);
  EXPECT_EQ(config.world_size, defaults.world_size);
  EXPECT_EQ(config.switches, defaults.switches);
  EXPECT_EQ(config.window, defaults.window);
  EXPECT_EQ(config.retransmit_timeout, defaults.retransmit_timeout);
  EXPECT_FALSE(config.faults.enabled());
}

TEST(WorkerJson, SwitchWithoutPortUsesDefaultPort) {
  const dpa::Config config = worker_from_json(R"({"switch": "switch.local"})");
  EXPECT_EQ(config.switches, (std::vector<dpa::HostPort>{{"switch.local", dpa::protocol::kDefaultPort}}));
}

TEST(WorkerJson, FloatsAcceptIntegers) {
  EXPECT_DOUBLE_EQ(worker_from_json(R"({"faults": {"drop": 1}})").faults.drop, 1.0);
}

TEST(WorkerJson, UnknownKeyNamesKeyAndFile) {
  const TempFile file("unknown.json", R"({"rank": 0, "wrold_size": 4})");
  const std::string message = config_error([&] { dpa::Config::from_json_file(file.path()); });
  EXPECT_THAT(message, AllOf(HasSubstr(file.path()), HasSubstr("wrold_size: unknown key")));
}

TEST(WorkerJson, UnknownFaultKeyNamesNestedKey) {
  EXPECT_THAT(worker_json_error(R"({"faults": {"dorp": 0.1}})"), HasSubstr("faults.dorp: unknown key"));
}

TEST(WorkerJson, WrongTypeNamesKeyAndExpectedType) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {R"({"rank": "1"})", "rank: expected an integer, got string"},
      {R"({"threads": 1.5})", "threads: expected an integer, got number"},
      {R"({"session": true})", "session: expected a non-negative integer, got boolean"},
      {R"({"switch": 5})", "switch: expected a string, got number"},
      {R"({"udp": {"bind_host": null}})", "udp.bind_host: expected a string, got null"},
      {R"({"dpdk": {"vdevs": "net_ring0"}})", "dpdk.vdevs: expected an array, got string"},
      {R"({"dpdk": {"neighbours": [{"ip": 1}]}})", "dpdk.neighbours[0].ip: expected a string, got number"},
      {R"({"dpdk": {"no_huge": 1}})", "dpdk.no_huge: expected a boolean, got number"},
      {R"({"preemptive": 1})", "preemptive: expected a boolean, got number"},
      {R"({"syn_disable": "yes"})", "syn_disable: expected a boolean, got string"},
      {R"({"timeout_ms": "10"})", "timeout_ms: expected an integer, got string"},
      {R"({"faults": []})", "faults: expected an object, got array"},
      {R"({"faults": {"drop": "0.1"}})", "faults.drop: expected a number, got string"},
      {R"({"faults": {"seed": -1}})", "faults.seed: -1 is out of range"},
  };
  for (const auto& [content, expected] : cases) {
    EXPECT_THAT(worker_json_error(content), HasSubstr(expected)) << content;
  }
}

TEST(WorkerJson, IntegerMustFitTheField) {
  EXPECT_THAT(worker_json_error(R"({"udp": {"bind_port": 70000}})"),
              HasSubstr("udp.bind_port: 70000 is out of range [0, 65535]"));
  EXPECT_THAT(worker_json_error(R"({"dpdk": {"local_port": 70000}})"),
              HasSubstr("dpdk.local_port: 70000 is out of range [0, 65535]"));
  EXPECT_THAT(worker_json_error(R"({"session": -1})"), HasSubstr("session: -1 is out of range"));
  EXPECT_THAT(worker_json_error(R"({"window": 4294967296})"), HasSubstr("window: 4294967296 is out of range"));
}

TEST(WorkerJson, MalformedSwitchAddress) {
  EXPECT_THAT(worker_json_error(R"({"switch": "host:http"})"), HasSubstr("switch: \"host:http\""));
  EXPECT_THAT(worker_json_error(R"({"switch": "host:65536"})"), HasSubstr("switch: \"host:65536\""));
}

TEST(WorkerJson, MissingFileNamesPath) {
  const std::string path = ::testing::TempDir() + "dpa_config_test_does_not_exist.json";
  EXPECT_THAT(config_error([&] { dpa::Config::from_json_file(path); }),
              AllOf(HasSubstr(path), HasSubstr("cannot open")));
}

TEST(WorkerJson, ParseErrorNamesPathAndParserMessage) {
  const TempFile file("broken.json", R"({"rank": 1,,})");
  EXPECT_THAT(config_error([&] { dpa::Config::from_json_file(file.path()); }),
              AllOf(HasSubstr(file.path()), HasSubstr("invalid JSON"), HasSubstr("parse error")));
}

TEST(WorkerJson, TopLevelMustBeObject) {
  EXPECT_THAT(worker_json_error("[1, 2]"), HasSubstr("expected a JSON object, got array"));
}

// ---- Worker config: validate --------------------------------------------------------------

struct InvalidCase {
  std::string expected;  // part of the message
  std::function<void(dpa::Config&)> change;
};

TEST(WorkerValidate, DefaultsAndBoundariesAreValid) {
  EXPECT_NO_THROW(dpa::Config{}.validate());

  dpa::Config config;
  config.world_size = dpa::protocol::kMaxWorld;
  config.rank = dpa::protocol::kMaxWorld - 1;
  config.k = dpa::protocol::kMaxWorld;
  config.threads = dpa::protocol::kMaxThreads;
  config.window = 4096;
  config.payload = dpa::protocol::kMaxPayload;
  config.max_retransmit_timeout = config.retransmit_timeout;
  std::get<dpa::UdpTransportConfig>(config.transport).bind_port = static_cast<std::uint16_t>(65536 - config.threads);
  config.faults.drop = 1.0;
  config.faults.delay = 0.0;
  EXPECT_NO_THROW(config.validate());
}

TEST(WorkerValidate, EachInvalidSettingIsNamed) {
  const std::vector<InvalidCase> cases{
      {"world_size 0 out of range [1, 64] (DPA_WORLD_SIZE)", [](dpa::Config& c) { c.world_size = 0; }},
      {"world_size 65 out of range [1, 64] (DPA_WORLD_SIZE)", [](dpa::Config& c) { c.world_size = 65; }},
      {"rank 4 out of range for world_size 4 (DPA_RANK, DPA_WORLD_SIZE)",
       [](dpa::Config& c) { c.world_size = 4; c.rank = 4; }},
      {"rank -1 out of range for world_size 1", [](dpa::Config& c) { c.rank = -1; }},
      {"switch: host is empty (DPA_SWITCH)", [](dpa::Config& c) { c.switches.front().host.clear(); }},
      {"switch: port must not be 0 (DPA_SWITCH)", [](dpa::Config& c) { c.switches.front().port = 0; }},
      {"session 0 out of range [1, 4294967295] (DPA_SESSION)", [](dpa::Config& c) { c.session = 0; }},
      {"threads 0 out of range [1, 64] (DPA_THREADS)", [](dpa::Config& c) { c.threads = 0; }},
      {"threads 65 out of range [1, 64]", [](dpa::Config& c) { c.threads = 65; }},
      {"window 0 out of range [1, 4096] (DPA_WINDOW)", [](dpa::Config& c) { c.window = 0; }},
      {"window -1 out of range [1, 4096] (DPA_WINDOW)", [](dpa::Config& c) { c.window = -1; }},
      {"window 4097 out of range [1, 4096]", [](dpa::Config& c) { c.window = 4097; }},
      {"payload 16321 out of range: 0 (the session's) or [1, 16320] (DPA_PAYLOAD)",
       [](dpa::Config& c) { c.payload = dpa::protocol::kMaxPayload + 1; }},
      {"retransmit_timeout_us 0 out of range [1, 60000000] (DPA_RTO_US)",
       [](dpa::Config& c) { c.retransmit_timeout = 0us; }},
      {"max_retransmit_timeout_us 60000001 out of range [1, 60000000] (DPA_MAX_RTO_US)",
       [](dpa::Config& c) { c.max_retransmit_timeout = 60000001us; }},
      {"max_retransmit_timeout_us 1000 is below retransmit_timeout_us 2000 (DPA_MAX_RTO_US, DPA_RTO_US)",
       [](dpa::Config& c) { c.max_retransmit_timeout = 1000us; }},
      {"timeout_ms 0 out of range [1, 86400000] (DPA_TIMEOUT_MS)", [](dpa::Config& c) { c.timeout = 0ms; }},
      {"join_timeout_ms -5 out of range [1, 86400000] (DPA_JOIN_TIMEOUT_MS)",
       [](dpa::Config& c) { c.join_timeout = -5ms; }},
      {"busy_poll_us 1000001 out of range [0, 1000000] (DPA_BUSY_POLL_US)",
       [](dpa::Config& c) { c.busy_poll = 1000001us; }},
      {"k 5 out of range [0, world_size 4] (DPA_K)", [](dpa::Config& c) { c.world_size = 4; c.k = 5; }},
      {"k -1 out of range", [](dpa::Config& c) { c.k = -1; }},
      {"faults.drop 1.5 out of range [0, 1] (DPA_FAULT_DROP)", [](dpa::Config& c) { c.faults.drop = 1.5; }},
      {"faults.duplicate -0.1 out of range [0, 1] (DPA_FAULT_DUPLICATE)",
       [](dpa::Config& c) { c.faults.duplicate = -0.1; }},
      {"faults.reorder nan out of range [0, 1] (DPA_FAULT_REORDER)",
       [](dpa::Config& c) { c.faults.reorder = std::numeric_limits<double>::quiet_NaN(); }},
      {"faults.delay 2 out of range [0, 1] (DPA_FAULT_DELAY)", [](dpa::Config& c) { c.faults.delay = 2.0; }},
      {"faults.delay_time_us -1 out of range [0, 10000000] (DPA_FAULT_DELAY_US)",
       [](dpa::Config& c) { c.faults.delay_time = -1us; }},
      {"udp.bind_port 65535 + threads 2 - 1 exceeds 65535 (DPA_LOCAL_PORT, DPA_THREADS)",
       [](dpa::Config& c) { std::get<dpa::UdpTransportConfig>(c.transport).bind_port = 65535; c.threads = 2; }},
      {"udp.batch: 0 outside 1..1024", [](dpa::Config& c) { std::get<dpa::UdpTransportConfig>(c.transport).batch = 0; }},
      {"dpdk.local_ip: required", [](dpa::Config& c) { c.transport = dpa::DpdkTransportConfig{}; }},
      {"dpdk.local_ip: \"10.0.0\" is not an IPv4 address",
       [](dpa::Config& c) {
         dpa::DpdkTransportConfig dpdk;
         dpdk.local_ip = "10.0.0";
         c.transport = dpdk;
       }},
      {"dpdk.neighbours: mac \"02:00\" is not aa:bb:cc:dd:ee:ff",
       [](dpa::Config& c) {
         dpa::DpdkTransportConfig dpdk;
         dpdk.local_ip = "10.0.0.1";
         dpdk.neighbours = {{"10.0.0.2", "02:00"}};
         c.transport = dpdk;
       }},
      {"dpdk.mbufs: 10 is too few for burst 32",
       [](dpa::Config& c) {
         dpa::DpdkTransportConfig dpdk;
         dpdk.local_ip = "10.0.0.1";
         dpdk.mbufs = 10;
         c.transport = dpdk;
       }},
      {"dpdk.local_port 65535 + threads 2 - 1 exceeds 65535",
       [](dpa::Config& c) {
         dpa::DpdkTransportConfig dpdk;
         dpdk.local_ip = "10.0.0.1";
         dpdk.local_port = 65535;
         c.transport = dpdk;
         c.threads = 2;
       }},
  };
  for (const InvalidCase& invalid : cases) {
    dpa::Config config;
    invalid.change(config);
    EXPECT_THAT(config_error([&] { config.validate(); }), HasSubstr(invalid.expected));
  }
}

// ---- Worker config: environment -----------------------------------------------------------

// Clears every variable the configuration reads and restores the caller's values afterwards,
// so that the tests neither see nor leak environment settings.
class EnvTest : public ::testing::Test {
 protected:
  static constexpr const char* kVariables[] = {
      "DPA_CONFIG",      "DPA_RANK",         "RANK",           "DPA_WORLD_SIZE",      "WORLD_SIZE",
      "DPA_SWITCH",      "DPA_SESSION",      "DPA_THREADS",    "DPA_WINDOW",          "DPA_PAYLOAD",
      "DPA_LOCAL_HOST",  "DPA_LOCAL_PORT",   "DPA_RTO_US",     "DPA_MAX_RTO_US",      "DPA_TIMEOUT_MS",
      "DPA_JOIN_TIMEOUT_MS", "DPA_BUSY_POLL_US", "DPA_K",        "DPA_PREEMPTIVE", "DPA_SYN_DISABLE",     "DPA_FAULT_DROP",
      "DPA_FAULT_DUPLICATE", "DPA_FAULT_REORDER", "DPA_FAULT_DELAY", "DPA_FAULT_DELAY_US", "DPA_FAULT_SEED",
      "DPA_LOG",         "DPA_SIMD",         "DPA_TEST_FLAG",    "DPA_TRANSPORT",
      "DPA_DPDK_MONITOR", "DPA_DPDK_MONITOR_INTERVAL_US", "DPA_DPDK_MONITOR_OUTPUT", "DPA_SHM_FABRIC", "DPA_SHM_DIR",
      "LOCAL_RANK",
  };

  void SetUp() override {
    for (const char* name : kVariables) {
      if (const char* value = std::getenv(name)) saved_[name] = value;
      ::unsetenv(name);
    }
  }

  void TearDown() override {
    for (const char* name : kVariables) {
      if (const auto saved = saved_.find(name); saved != saved_.end()) {
        ::setenv(name, saved->second.c_str(), 1);
      } else {
        ::unsetenv(name);
      }
    }
  }

  static void set(const char* name, const char* value) { ::setenv(name, value, 1); }

 private:
  std::map<std::string, std::string> saved_;
};

TEST_F(EnvTest, NothingSetGivesDefaults) {
  const dpa::Config config = dpa::Config::from_env();
  const dpa::Config defaults;
  EXPECT_EQ(config.rank, defaults.rank);
  EXPECT_EQ(config.world_size, defaults.world_size);
  EXPECT_EQ(config.switches, defaults.switches);
  EXPECT_EQ(config.timeout, defaults.timeout);
  EXPECT_EQ(config.preemptive, defaults.preemptive);
}

TEST_F(EnvTest, ReadsEveryVariable) {
  set("DPA_RANK", "3");
  set("DPA_WORLD_SIZE", "6");
  set("DPA_SWITCH", "10.1.1.1:4300");
  set("DPA_SESSION", "12");
  set("DPA_THREADS", "2");
  set("DPA_WINDOW", "48");
  set("DPA_PAYLOAD", "512");
  set("DPA_LOCAL_HOST", "10.1.1.5");
  set("DPA_LOCAL_PORT", "7000");
  set("DPA_RTO_US", "300");
  set("DPA_MAX_RTO_US", "9000");
  set("DPA_TIMEOUT_MS", "1500");
  set("DPA_JOIN_TIMEOUT_MS", "2500");
  set("DPA_BUSY_POLL_US", "40");
  set("DPA_K", "5");
  set("DPA_PREEMPTIVE", "yes");
  set("DPA_SYN_DISABLE", "ON");
  set("DPA_FAULT_DROP", "0.05");
  set("DPA_FAULT_DUPLICATE", "0.01");
  set("DPA_FAULT_REORDER", "1e-3");
  set("DPA_FAULT_DELAY", "0");
  set("DPA_FAULT_DELAY_US", "123");
  set("DPA_FAULT_SEED", "18446744073709551615");

  const dpa::Config config = dpa::Config::from_env();
  EXPECT_EQ(config.rank, 3);
  EXPECT_EQ(config.world_size, 6);
  EXPECT_EQ(config.switches, (std::vector<dpa::HostPort>{{"10.1.1.1", 4300}}));
  EXPECT_EQ(config.session, 12u);
  EXPECT_EQ(config.threads, 2);
  EXPECT_EQ(config.window, 48);
  EXPECT_EQ(config.payload, 512u);
  EXPECT_EQ(std::get<dpa::UdpTransportConfig>(config.transport).bind_host, "10.1.1.5");
  EXPECT_EQ(std::get<dpa::UdpTransportConfig>(config.transport).bind_port, 7000);
  EXPECT_EQ(config.retransmit_timeout, 300us);
  EXPECT_EQ(config.max_retransmit_timeout, 9000us);
  EXPECT_EQ(config.timeout, 1500ms);
  EXPECT_EQ(config.join_timeout, 2500ms);
  EXPECT_EQ(config.busy_poll, 40us);
  EXPECT_EQ(config.k, 5);
  EXPECT_TRUE(config.preemptive);
  EXPECT_TRUE(config.syn_disable);
  EXPECT_DOUBLE_EQ(config.faults.drop, 0.05);
  EXPECT_DOUBLE_EQ(config.faults.duplicate, 0.01);
  EXPECT_DOUBLE_EQ(config.faults.reorder, 0.001);
  EXPECT_DOUBLE_EQ(config.faults.delay, 0.0);
  EXPECT_EQ(config.faults.delay_time, 123us);
  EXPECT_EQ(config.faults.seed, std::numeric_limits<std::uint64_t>::max());
  EXPECT_NO_THROW(config.validate());
}

TEST_F(EnvTest, SwitchWithoutPortUsesDefaultPort) {
  set("DPA_SWITCH", "tor-switch");
  const dpa::Config config = dpa::Config::from_env();
  EXPECT_EQ(config.switches, (std::vector<dpa::HostPort>{{"tor-switch", dpa::protocol::kDefaultPort}}));
}

// Several switch servers: thread t talks to entry t mod S.
TEST_F(EnvTest, SwitchListNamesEveryServerInOrder) {
  set("DPA_SWITCH", "hostA:4242,hostB,10.0.0.3:5000");
  set("DPA_THREADS", "4");
  const dpa::Config config = dpa::Config::from_env();
  const std::vector<dpa::HostPort> expected{
      {"hostA", 4242}, {"hostB", dpa::protocol::kDefaultPort}, {"10.0.0.3", 5000}};
  EXPECT_EQ(config.switches, expected);
  EXPECT_EQ(config.switch_of_thread(0), expected[0]);
  EXPECT_EQ(config.switch_of_thread(2), expected[2]);
  EXPECT_EQ(config.switch_of_thread(3), expected[0]);
  EXPECT_NO_THROW(config.validate());
}

TEST_F(EnvTest, SwitchListRejectsEmptyEntriesDuplicatesAndBadAddresses) {
  const std::vector<std::pair<const char*, const char*>> cases{
      {"hostA:4242,,hostB", "DPA_SWITCH=\"hostA:4242,,hostB\": entry 2 of the list is empty"},
      {"hostA:4242,", "DPA_SWITCH=\"hostA:4242,\": entry 2 of the list is empty"},
      {",hostA", "DPA_SWITCH=\",hostA\": entry 1 of the list is empty"},
      {"hostA,hostA:4242", "DPA_SWITCH=\"hostA,hostA:4242\": hostA:4242 is listed twice (entries 1 and 2)"},
      {"hostA:4242,hostB:http", "DPA_SWITCH=\"hostB:http\": expected host or host:port with a port in [1, 65535]"},
      {"hostA:4242,hostB:0", "DPA_SWITCH=\"hostB:0\": expected host or host:port with a port in [1, 65535]"},
  };
  for (const auto& [value, expected] : cases) {
    set("DPA_SWITCH", value);
    EXPECT_THAT(config_error([] { dpa::Config::from_env(); }), HasSubstr(expected)) << value;
  }
}

TEST(WorkerConfig, FewerThreadsThanSwitchServersIsAnErrorNamingBoth) {
  dpa::Config config;
  config.switches = {{"hostA", 4242}, {"hostB", 4242}, {"hostC", 4242}};
  config.threads = 2;
  const std::string error = config_error([&] { config.validate(); });
  EXPECT_THAT(error, HasSubstr("threads 2 is fewer than the 3 switch servers"));
  EXPECT_THAT(error, HasSubstr("DPA_THREADS"));
  EXPECT_THAT(error, HasSubstr("DPA_SWITCH"));
  config.threads = 3;
  EXPECT_NO_THROW(config.validate());
  config.switches.push_back({"hostA", 4242});
  config.threads = 4;
  EXPECT_THAT(config_error([&] { config.validate(); }),
              HasSubstr("switch (DPA_SWITCH): hostA:4242 is listed twice (entries 1 and 4)"));
  config.switches.clear();
  EXPECT_THAT(config_error([&] { config.validate(); }), HasSubstr("switch (DPA_SWITCH): no address given"));
}

TEST(WorkerJson, SwitchTakesAListOrAnArray) {
  const std::vector<dpa::HostPort> expected{{"10.0.0.1", 4242}, {"10.0.0.2", 4243}};
  EXPECT_EQ(worker_from_json(R"({"threads": 2, "switch": "10.0.0.1,10.0.0.2:4243"})").switches, expected);
  EXPECT_EQ(worker_from_json(R"({"threads": 2, "switch": ["10.0.0.1", "10.0.0.2:4243"]})").switches, expected);
  EXPECT_THAT(worker_json_error(R"({"switch": ["10.0.0.1", 7]})"), HasSubstr("switch[1]: expected a string"));
  EXPECT_THAT(worker_json_error(R"({"switch": ["10.0.0.1", "10.0.0.1:4242"]})"),
              HasSubstr("switch: 10.0.0.1:4242 is listed twice"));
  EXPECT_THAT(worker_json_error(R"({"switch": []})"), HasSubstr("switch: no address given"));
}

TEST_F(EnvTest, TorchrunVariablesAreTheFallback) {
  set("RANK", "5");
  set("WORLD_SIZE", "8");
  dpa::Config config = dpa::Config::from_env();
  EXPECT_EQ(config.rank, 5);
  EXPECT_EQ(config.world_size, 8);

  set("DPA_RANK", "1");
  set("DPA_WORLD_SIZE", "2");
  config = dpa::Config::from_env();
  EXPECT_EQ(config.rank, 1);
  EXPECT_EQ(config.world_size, 2);
}

TEST_F(EnvTest, MalformedTorchrunValueNamesItsVariable) {
  set("RANK", "first");
  EXPECT_THAT(config_error([] { dpa::Config::from_env(); }), HasSubstr("RANK=\"first\": expected an integer"));
}

TEST_F(EnvTest, VariablesOverrideTheConfigFile) {
  const TempFile file("env.json", R"({"rank": 1, "world_size": 4, "window": 8})");
  set("DPA_CONFIG", file.path().c_str());
  set("DPA_WINDOW", "16");
  const dpa::Config config = dpa::Config::from_env();
  EXPECT_EQ(config.rank, 1);
  EXPECT_EQ(config.world_size, 4);
  EXPECT_EQ(config.window, 16);
}

// One DPA_CONFIG for every rank under torchrun: {rank} and {local_rank} in its path and values.
TEST_F(EnvTest, ConfigPathAndValuesTakeTheRank) {
  const TempFile file("rank3-local1.json", R"({"world_size": 4, "switch": "10.0.0.{local_rank}:4242",
      "dpdk": {"local_ip": "10.1.0.{rank}", "file_prefix": "dpa{local_rank}", "vdevs": ["net_memif{rank}"]}})");
  const std::string pattern = std::string(file.path()).replace(file.path().find("rank3-local1"), 12, "rank{rank}-local{local_rank}");
  set("DPA_CONFIG", pattern.c_str());
  set("RANK", "3");
  set("LOCAL_RANK", "1");
  const dpa::Config config = dpa::Config::from_env();
  EXPECT_EQ(config.rank, 3);
  EXPECT_EQ(config.switches.front().host, "10.0.0.1");
  const auto& dpdk = std::get<dpa::DpdkTransportConfig>(config.transport);
  EXPECT_EQ(dpdk.local_ip, "10.1.0.3");
  EXPECT_EQ(dpdk.file_prefix, "dpa1");
  EXPECT_EQ(dpdk.vdevs, std::vector<std::string>{"net_memif3"});

  set("DPA_RANK", "2");  // wins over RANK, as for the rank itself
  const TempFile second("rank2-local1.json", R"({"world_size": 4, "dpdk": {"local_ip": "10.1.0.{rank}"}})");
  EXPECT_EQ(std::get<dpa::DpdkTransportConfig>(dpa::Config::from_env().transport).local_ip, "10.1.0.2");
}

TEST_F(EnvTest, ConfigPlaceholderWithoutItsVariableIsNamed) {
  const TempFile file("placeholder.json", R"({"dpdk": {"file_prefix": "dpa{local_rank}"}})");
  set("DPA_CONFIG", file.path().c_str());
  EXPECT_THAT(config_error([] { dpa::Config::from_env(); }),
              HasSubstr(file.path() + ": dpdk.file_prefix uses {local_rank}, but LOCAL_RANK is not set"));
  set("DPA_CONFIG", (file.path() + "{rank}").c_str());
  EXPECT_THAT(config_error([] { dpa::Config::from_env(); }), HasSubstr("uses {rank}, but DPA_RANK or RANK is not set"));
}

TEST_F(EnvTest, MissingConfigFileIsAnError) {
  const std::string path = ::testing::TempDir() + "dpa_config_test_missing_env.json";
  set("DPA_CONFIG", path.c_str());
  EXPECT_THAT(config_error([] { dpa::Config::from_env(); }), HasSubstr(path));
}

TEST_F(EnvTest, MalformedIntegers) {
  const std::vector<std::pair<std::pair<const char*, const char*>, std::string>> cases{
      {{"DPA_WINDOW", "abc"}, "DPA_WINDOW=\"abc\": expected an integer"},
      {{"DPA_WINDOW", "12x"}, "DPA_WINDOW=\"12x\": expected an integer"},
      {{"DPA_THREADS", " 2"}, "DPA_THREADS=\" 2\": expected an integer"},
      {{"DPA_K", "1.0"}, "DPA_K=\"1.0\": expected an integer"},
      {{"DPA_SESSION", "-1"}, "DPA_SESSION=\"-1\": expected an integer in [1, 4294967295]"},
      {{"DPA_LOCAL_PORT", "70000"}, "DPA_LOCAL_PORT=\"70000\": expected an integer in [0, 65535]"},
      {{"DPA_WORLD_SIZE", "99999999999"}, "DPA_WORLD_SIZE=\"99999999999\": expected an integer in ["},
      {{"DPA_RTO_US", "soon"}, "DPA_RTO_US=\"soon\": expected an integer"},
      {{"DPA_FAULT_SEED", "0x10"}, "DPA_FAULT_SEED=\"0x10\": expected a non-negative integer"},
      {{"DPA_FAULT_DROP", "often"}, "DPA_FAULT_DROP=\"often\": expected a number"},
      {{"DPA_FAULT_DELAY", "0.5s"}, "DPA_FAULT_DELAY=\"0.5s\": expected a number"},
      {{"DPA_SWITCH", "host:port"}, "DPA_SWITCH=\"host:port\": expected host or host:port"},
  };
  for (const auto& [variable, expected] : cases) {
    set(variable.first, variable.second);
    EXPECT_THAT(config_error([] { dpa::Config::from_env(); }), HasSubstr(expected));
    ::unsetenv(variable.first);
  }
}

// Every variable from_env() reads, with a wrong value of each kind it can have: the error names
// the variable, the value and what it accepts. (DPA_LOCAL_HOST takes any name, DPA_CONFIG any
// path: an unusable one fails where it is used, naming it.)
TEST_F(EnvTest, EveryVariableRejectsBadValuesNamingItself) {
  struct BadValue {
    const char* variable;
    const char* value;
    const char* expected;
  };
  const std::vector<BadValue> cases{
      {"DPA_RANK", "-1", "an integer in [0, 63]"},
      {"DPA_RANK", "64", "an integer in [0, 63]"},
      {"DPA_RANK", "one", "an integer in [0, 63]"},
      {"RANK", "64", "an integer in [0, 63]"},
      {"DPA_WORLD_SIZE", "0", "an integer in [1, 64]"},
      {"DPA_WORLD_SIZE", "65", "an integer in [1, 64]"},
      {"WORLD_SIZE", "0", "an integer in [1, 64]"},
      {"DPA_SWITCH", "tor:port", "host or host:port with a port in [1, 65535]"},
      {"DPA_SWITCH", ":4242", "host or host:port with a port in [1, 65535]"},
      {"DPA_SWITCH", "tor:0", "host or host:port with a port in [1, 65535]"},
      {"DPA_SWITCH", "tor:70000", "host or host:port with a port in [1, 65535]"},
      {"DPA_SESSION", "0", "an integer in [1, 4294967295]"},
      {"DPA_SESSION", "4294967296", "an integer in [1, 4294967295]"},
      {"DPA_THREADS", "0", "an integer in [1, 64]"},
      {"DPA_THREADS", "65", "an integer in [1, 64]"},
      {"DPA_WINDOW", "-1", "an integer in [1, 4096]"},
      {"DPA_WINDOW", "0", "an integer in [1, 4096]"},
      {"DPA_WINDOW", "4097", "an integer in [1, 4096]"},
      {"DPA_PAYLOAD", "-1", "an integer in [0, 16320]"},
      {"DPA_PAYLOAD", "16321", "an integer in [0, 16320]"},
      {"DPA_LOCAL_PORT", "-1", "an integer in [0, 65535]"},
      {"DPA_LOCAL_PORT", "65536", "an integer in [0, 65535]"},
      {"DPA_RTO_US", "0", "an integer in [1, 60000000]"},
      {"DPA_RTO_US", "60000001", "an integer in [1, 60000000]"},
      {"DPA_MAX_RTO_US", "0", "an integer in [1, 60000000]"},
      {"DPA_MAX_RTO_US", "9e9", "an integer in [1, 60000000]"},
      {"DPA_TIMEOUT_MS", "0", "an integer in [1, 86400000]"},
      {"DPA_TIMEOUT_MS", "-5", "an integer in [1, 86400000]"},
      {"DPA_TIMEOUT_MS", "86400001", "an integer in [1, 86400000]"},
      {"DPA_JOIN_TIMEOUT_MS", "0", "an integer in [1, 86400000]"},
      {"DPA_JOIN_TIMEOUT_MS", "1s", "an integer in [1, 86400000]"},
      {"DPA_BUSY_POLL_US", "-1", "an integer in [0, 1000000]"},
      {"DPA_BUSY_POLL_US", "1000001", "an integer in [0, 1000000]"},
      {"DPA_K", "-1", "an integer in [0, 64]"},
      {"DPA_K", "65", "an integer in [0, 64]"},
      {"DPA_PREEMPTIVE", "maybe", "a boolean (1/0, on/off, true/false, yes/no)"},
      {"DPA_SYN_DISABLE", "2", "a boolean (1/0, on/off, true/false, yes/no)"},
      {"DPA_FAULT_DROP", "1.5", "a number in [0, 1]"},
      {"DPA_FAULT_DROP", "-0.1", "a number in [0, 1]"},
      {"DPA_FAULT_DROP", "nan", "a number in [0, 1]"},
      {"DPA_FAULT_DUPLICATE", "2", "a number in [0, 1]"},
      {"DPA_FAULT_REORDER", "inf", "a number in [0, 1]"},
      {"DPA_FAULT_DELAY", "half", "a number in [0, 1]"},
      {"DPA_FAULT_DELAY_US", "-1", "an integer in [0, 10000000]"},
      {"DPA_FAULT_DELAY_US", "10000001", "an integer in [0, 10000000]"},
      {"DPA_FAULT_SEED", "-1", "a non-negative integer"},
      {"DPA_FAULT_SEED", "18446744073709551616", "an integer in [0, 18446744073709551615]"},
      {"DPA_LOG", "loud", "one of trace debug info warn warning err error critical off"},
      {"DPA_SIMD", "sse", "one of auto avx512 avx2 scalar"},
  };
  for (const BadValue& bad : cases) {
    set(bad.variable, bad.value);
    EXPECT_THAT(config_error([] { dpa::Config::from_env(); }),
                HasSubstr(std::string(bad.variable) + "=\"" + bad.value + "\": expected " + bad.expected));
    ::unsetenv(bad.variable);
  }
}

// The ends of every range are accepted.
TEST_F(EnvTest, EveryVariableAcceptsItsRangeEnds) {
  const std::vector<std::pair<const char*, std::vector<const char*>>> cases{
      {"DPA_RANK", {"0", "63"}},          {"DPA_WORLD_SIZE", {"1", "64"}},
      {"DPA_SWITCH", {"tor:1", "tor:65535"}}, {"DPA_SESSION", {"1", "4294967295"}},
      {"DPA_THREADS", {"1", "64"}},       {"DPA_WINDOW", {"1", "4096"}},
      {"DPA_PAYLOAD", {"0", "16320"}},    {"DPA_LOCAL_PORT", {"0", "65535"}},
      {"DPA_RTO_US", {"1", "60000000"}},  {"DPA_MAX_RTO_US", {"1", "60000000"}},
      {"DPA_TIMEOUT_MS", {"1", "86400000"}}, {"DPA_JOIN_TIMEOUT_MS", {"1", "86400000"}},
      {"DPA_BUSY_POLL_US", {"0", "1000000"}}, {"DPA_K", {"0", "64"}},
      {"DPA_FAULT_DROP", {"0", "1"}},     {"DPA_FAULT_DUPLICATE", {"0", "1.0"}},
      {"DPA_FAULT_REORDER", {"0", "1"}},  {"DPA_FAULT_DELAY", {"0", "1"}},
      {"DPA_FAULT_DELAY_US", {"0", "10000000"}}, {"DPA_FAULT_SEED", {"0", "18446744073709551615"}},
      {"DPA_LOG", {"trace", "off"}},      {"DPA_SIMD", {"auto", "scalar"}},
  };
  for (const auto& [variable, values] : cases) {
    for (const char* value : values) {
      set(variable, value);
      EXPECT_NO_THROW(dpa::Config::from_env()) << variable << "=" << value;
    }
    ::unsetenv(variable);
  }
}

// Settings that depend on each other are checked together, naming every variable involved.
TEST_F(EnvTest, InconsistentVariablesAreNamedTogether) {
  set("DPA_RANK", "4");
  set("DPA_WORLD_SIZE", "4");
  EXPECT_THAT(config_error([] { dpa::Config::from_env().validate(); }),
              HasSubstr("rank 4 out of range for world_size 4 (DPA_RANK, DPA_WORLD_SIZE)"));
  set("DPA_RANK", "0");
  set("DPA_K", "5");
  EXPECT_THAT(config_error([] { dpa::Config::from_env().validate(); }),
              HasSubstr("k 5 out of range [0, world_size 4] (DPA_K)"));
  ::unsetenv("DPA_K");
  set("DPA_RTO_US", "5000");
  set("DPA_MAX_RTO_US", "4000");
  EXPECT_THAT(config_error([] { dpa::Config::from_env().validate(); }),
              HasSubstr("max_retransmit_timeout_us 4000 is below retransmit_timeout_us 5000 (DPA_MAX_RTO_US, DPA_RTO_US)"));
}

TEST_F(EnvTest, BooleanSpellings) {
  for (const char* yes : {"1", "on", "ON", "true", "True", "yes", "YES"}) {
    set("DPA_PREEMPTIVE", yes);
    EXPECT_TRUE(dpa::Config::from_env().preemptive) << yes;
  }
  for (const char* no : {"0", "off", "Off", "false", "FALSE", "no", "No"}) {
    set("DPA_PREEMPTIVE", no);
    EXPECT_FALSE(dpa::Config::from_env().preemptive) << no;
  }
  set("DPA_PREEMPTIVE", "maybe");
  EXPECT_THAT(config_error([] { dpa::Config::from_env(); }),
              HasSubstr("DPA_PREEMPTIVE=\"maybe\": expected a boolean"));
}

TEST_F(EnvTest, EnvHelpers) {
  EXPECT_EQ(dpa::env_string("DPA_TEST_FLAG"), std::nullopt);
  EXPECT_TRUE(dpa::env_flag("DPA_TEST_FLAG", true));
  EXPECT_FALSE(dpa::env_flag("DPA_TEST_FLAG", false));

  set("DPA_TEST_FLAG", "");  // empty counts as unset
  EXPECT_EQ(dpa::env_string("DPA_TEST_FLAG"), std::nullopt);
  EXPECT_TRUE(dpa::env_flag("DPA_TEST_FLAG", true));

  set("DPA_TEST_FLAG", "off");
  EXPECT_EQ(dpa::env_string("DPA_TEST_FLAG"), "off");
  EXPECT_FALSE(dpa::env_flag("DPA_TEST_FLAG", true));

  set("DPA_TEST_FLAG", "2");
  EXPECT_THROW(dpa::env_flag("DPA_TEST_FLAG", true), dpa::ConfigError);
}

TEST_F(EnvTest, EnvInteger) {
  EXPECT_EQ(dpa::env_integer("DPA_TEST_FLAG", 1, 10), std::nullopt);
  set("DPA_TEST_FLAG", "10");
  EXPECT_EQ(dpa::env_integer("DPA_TEST_FLAG", 1, 10), 10);
  set("DPA_TEST_FLAG", "-3");
  EXPECT_EQ(dpa::env_integer("DPA_TEST_FLAG", -5, 0), -3);
  for (const char* bad : {"11", "0", "4k", " 4", "0x4", "99999999999999999999"}) {
    set("DPA_TEST_FLAG", bad);
    EXPECT_THAT(config_error([] { (void)dpa::env_integer("DPA_TEST_FLAG", 1, 10); }),
                HasSubstr("DPA_TEST_FLAG=\"" + std::string(bad) + "\": expected an integer in [1, 10]"))
        << bad;
  }
}

TEST(ConfigPoolSlots, TwoSlotsPerWindowEntryOfEveryThread) {
  dpa::Config config;
  config.threads = 4;
  config.window = 64;
  EXPECT_EQ(config.pool_slots(), 512u);
  config.threads = 64;
  config.window = 4096;
  EXPECT_EQ(config.pool_slots(), 524288u);
}

// ---- Switch config ------------------------------------------------------------------------

TEST(SwitchJson, ShippedConfigsParseAndValidate) {
  const dpa::SwitchConfig switch_config =
      dpa::SwitchConfig::from_json_file(kSourceDir + "/configs/softswitch.json");
  EXPECT_NO_THROW(switch_config.validate());
  const auto& udp = std::get<dpa::UdpTransportConfig>(switch_config.transport);
  EXPECT_EQ(udp.bind_host, "127.0.0.1");
  EXPECT_EQ(udp.bind_port, 4242);
  EXPECT_EQ(udp.batch, 64u);
  EXPECT_EQ(udp.buffers, 128u);
  EXPECT_EQ(udp.socket_buffer_bytes, 33554432);
  EXPECT_EQ(switch_config.threads, 1);
  ASSERT_EQ(switch_config.sessions.size(), 1u);
  const dpa::SessionConfig& session = switch_config.sessions[0];
  EXPECT_EQ(session.id, 1u);
  EXPECT_EQ(session.world_size, 4);
  EXPECT_EQ(session.k, 0);
  EXPECT_EQ(session.payload, 2048u);
  EXPECT_EQ(session.pool_base, 0u);
  EXPECT_EQ(session.pool_size, 4096u);
  EXPECT_EQ(session.straggler_timeout, 10000us);
  ASSERT_EQ(session.workers.size(), 1u);
  EXPECT_EQ(session.workers[0].host, "127.0.0.1");
  EXPECT_EQ(session.workers[0].port, 0);

  const dpa::Config worker = dpa::Config::from_json_file(kSourceDir + "/configs/worker.json");
  EXPECT_NO_THROW(worker.validate());
  EXPECT_EQ(worker.rank, 0);
  EXPECT_EQ(worker.world_size, 4);
  EXPECT_EQ(worker.switches, (std::vector<dpa::HostPort>{{"127.0.0.1", 4242}}));
  EXPECT_EQ(worker.session, 1u);
  EXPECT_EQ(worker.window, 32);
  EXPECT_EQ(worker.payload, 0u);
  EXPECT_EQ(worker.retransmit_timeout, 2000us);
  EXPECT_EQ(worker.timeout, 10000ms);
}

TEST(SwitchJson, ReadsEveryKey) {
  const dpa::SwitchConfig config = switch_from_json(R"({
    "switch": {"threads": 4, "max_sessions": 9, "max_memory_mb": 300, "busy_poll_us": 5,
               "udp": {"bind_host": "0.0.0.0", "bind_port": 0, "max_payload": 9000, "batch": 32, "buffers": 100,
                       "socket_buffer_bytes": 1048576}},
    "sessions": [
      {"id": 3, "world_size": 2, "k": 1, "payload": 256, "pool_base": 100, "pool_size": 64,
       "straggler_timeout_us": 500, "workers": ["10.0.0.1:5000", "10.0.0.2"]},
      {"id": 4}
    ]
  })");
  EXPECT_NO_THROW(config.validate());
  const auto& udp = std::get<dpa::UdpTransportConfig>(config.transport);
  EXPECT_EQ(udp.bind_host, "0.0.0.0");
  EXPECT_EQ(udp.bind_port, 0);
  EXPECT_EQ(udp.max_payload, 9000u);
  EXPECT_EQ(udp.batch, 32u);
  EXPECT_EQ(udp.buffers, 100u);
  EXPECT_EQ(udp.socket_buffer_bytes, 1048576);
  EXPECT_EQ(config.threads, 4);
  EXPECT_EQ(config.busy_poll, 5us);
  EXPECT_EQ(config.max_sessions, 9u);
  EXPECT_EQ(config.max_memory_mb, 300u);
  ASSERT_EQ(config.sessions.size(), 2u);
  const dpa::SessionConfig& first = config.sessions[0];
  EXPECT_EQ(first.id, 3u);
  EXPECT_EQ(first.world_size, 2);
  EXPECT_EQ(first.k, 1);
  EXPECT_EQ(first.payload, 256u);
  EXPECT_EQ(first.pool_base, 100u);
  EXPECT_EQ(first.pool_size, 64u);
  EXPECT_EQ(first.straggler_timeout, 500us);
  ASSERT_EQ(first.workers.size(), 2u);
  EXPECT_EQ(first.workers[0].host, "10.0.0.1");
  EXPECT_EQ(first.workers[0].port, 5000);
  EXPECT_EQ(first.workers[1].host, "10.0.0.2");
  EXPECT_EQ(first.workers[1].port, 0);
  EXPECT_EQ(config.sessions[1].id, 4u);
  EXPECT_EQ(config.sessions[1].pool_size, dpa::SessionConfig{}.pool_size);
}

TEST(SwitchJson, UdpKeysLeftOutKeepTheSwitchDefaults) {
  const dpa::SwitchConfig config = switch_from_json(R"({"switch": {"udp": {"bind_port": 5000}}})");
  const auto& udp = std::get<dpa::UdpTransportConfig>(config.transport);
  const dpa::UdpTransportConfig defaults = dpa::SwitchConfig::udp_defaults();
  EXPECT_EQ(udp.bind_port, 5000);
  EXPECT_EQ(udp.bind_host, defaults.bind_host);
  EXPECT_EQ(udp.socket_buffer_bytes, defaults.socket_buffer_bytes);
  EXPECT_EQ(udp.buffers, defaults.buffers);
  // A config without a "switch" section runs on the same defaults.
  const dpa::SwitchConfig bare = switch_from_json(R"({"sessions": []})");
  EXPECT_EQ(std::get<dpa::UdpTransportConfig>(bare.transport).bind_port, 4242);
}

TEST(SwitchJson, KeysOfEarlierVersionsNameWhereTheyMoved) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {R"({"switch": {"host": "0.0.0.0"}})", "switch.host: moved to switch.udp.bind_host"},
      {R"({"switch": {"port": 4242}})", "switch.port: moved to switch.udp.bind_port"},
      {R"({"switch": {"batch": 64}})", "switch.batch: moved to switch.udp.batch"},
      {R"({"switch": {"socket_buffer_bytes": 1}})", "switch.socket_buffer_bytes: moved to switch.udp.socket_buffer_bytes"},
  };
  for (const auto& [content, expected] : cases) {
    EXPECT_THAT(switch_json_error(content), HasSubstr(expected)) << content;
  }
}

TEST(SwitchJson, OneTransportSection) {
  EXPECT_THAT(switch_json_error(R"({"switch": {"udp": {}, "dpdk": {}}})"),
              HasSubstr("switch: udp, dpdk: give one transport section, not several"));
}

TEST(SwitchJson, UnknownKeysAreNamed) {
  EXPECT_THAT(switch_json_error(R"({"sessions": [{"id": 1}, {"id": 2, "wrold_size": 4}]})"),
              HasSubstr("sessions[1].wrold_size: unknown key"));
  EXPECT_THAT(switch_json_error(R"({"switch": {"hots": "x"}})"), HasSubstr("switch.hots: unknown key"));
  const TempFile file("switch_unknown.json", R"({"sesions": []})");
  EXPECT_THAT(config_error([&] { dpa::SwitchConfig::from_json_file(file.path()); }),
              AllOf(HasSubstr(file.path()), HasSubstr("sesions: unknown key")));
}

TEST(SwitchJson, WrongTypesAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {R"({"switch": []})", "switch: expected an object, got array"},
      {R"({"sessions": {}})", "sessions: expected an array, got object"},
      {R"({"sessions": [3]})", "sessions[0]: expected an object, got number"},
      {R"({"switch": {"udp": {"bind_port": 70000}}})", "switch.udp.bind_port: 70000 is out of range [0, 65535]"},
      {R"({"switch": {"udp": {"bind_host": 1}}})", "switch.udp.bind_host: expected a string, got number"},
      {R"({"switch": {"udp": {"batch": -1}}})", "switch.udp.batch: -1 is out of range"},
      {R"({"switch": {"udp": []}})", "switch.udp: expected an object, got array"},
      {R"({"switch": {"max_memory_mb": -1}})", "switch.max_memory_mb: -1 is out of range"},
      {R"({"switch": {"max_sessions": 4294967296}})", "switch.max_sessions: 4294967296 is out of range"},
      {R"({"sessions": [{"id": "1"}]})", "sessions[0].id: expected an integer, got string"},
      {R"({"sessions": [{"straggler_timeout_us": 1.5}]})", "sessions[0].straggler_timeout_us: expected an integer"},
      {R"({"sessions": [{"workers": "10.0.0.1"}]})", "sessions[0].workers: expected an array, got string"},
      {R"({"sessions": [{"workers": ["10.0.0.1", 7]}]})", "sessions[0].workers[1]: expected a string, got number"},
      {R"({"sessions": [{"workers": ["10.0.0.1:x"]}]})", "sessions[0].workers[0]: \"10.0.0.1:x\""},
  };
  for (const auto& [content, expected] : cases) {
    EXPECT_THAT(switch_json_error(content), HasSubstr(expected)) << content;
  }
}

TEST(SwitchJson, MissingOrBrokenFile) {
  const std::string path = ::testing::TempDir() + "dpa_config_test_no_switch.json";
  EXPECT_THAT(config_error([&] { dpa::SwitchConfig::from_json_file(path); }),
              AllOf(HasSubstr(path), HasSubstr("cannot open")));
  const TempFile file("switch_broken.json", R"({"switch": )");
  EXPECT_THAT(config_error([&] { dpa::SwitchConfig::from_json_file(file.path()); }),
              AllOf(HasSubstr(file.path()), HasSubstr("invalid JSON")));
}

dpa::SessionConfig valid_session() {
  dpa::SessionConfig session;
  session.id = 7;
  session.world_size = 4;
  return session;
}

TEST(SessionValidate, BoundariesAreValid) {
  dpa::SessionConfig session = valid_session();
  session.k = 4;
  session.payload = dpa::protocol::kMaxPayload;
  session.pool_size = 2;
  session.pool_base = std::numeric_limits<std::uint32_t>::max() - 1;  // last pair of slots
  session.workers = {{"10.0.0.1", 0}, {"10.0.0.2", 1}, {"10.0.0.3", 2}, {"10.0.0.4", 3}};
  EXPECT_NO_THROW(session.validate());
  session.workers = {{"127.0.0.1", 0}};
  EXPECT_NO_THROW(session.validate());
}

TEST(SessionValidate, EachInvalidSettingIsNamed) {
  const std::vector<std::pair<std::string, std::function<void(dpa::SessionConfig&)>>> cases{
      {"session id must not be 0", [](dpa::SessionConfig& s) { s.id = 0; }},
      {"session 7: world_size 0 out of range [1, 64]", [](dpa::SessionConfig& s) { s.world_size = 0; }},
      {"session 7: world_size 65", [](dpa::SessionConfig& s) { s.world_size = 65; }},
      {"session 7: k 5 out of range [0, world_size 4]", [](dpa::SessionConfig& s) { s.k = 5; }},
      {"session 7: k -1", [](dpa::SessionConfig& s) { s.k = -1; }},
      {"session 7: payload 0 out of range", [](dpa::SessionConfig& s) { s.payload = 0; }},
      {"session 7: payload 16321", [](dpa::SessionConfig& s) { s.payload = dpa::protocol::kMaxPayload + 1; }},
      {"session 7: pool_size 0", [](dpa::SessionConfig& s) { s.pool_size = 0; }},
      {"session 7: pool_size 7 must be even", [](dpa::SessionConfig& s) { s.pool_size = 7; }},
      {"session 7: pool_base 4294967294 + pool_size 4 exceeds 2^32",
       [](dpa::SessionConfig& s) { s.pool_base = 4294967294u; s.pool_size = 4; }},
      {"session 7: straggler_timeout_us 0 out of range [1, 3600000000]",
       [](dpa::SessionConfig& s) { s.straggler_timeout = std::chrono::microseconds{0}; }},
      {"session 7: workers lists 2 addresses; expected 0, 1 or world_size 4",
       [](dpa::SessionConfig& s) { s.workers = {{"10.0.0.1", 0}, {"10.0.0.2", 0}}; }},
      {"session 7: workers[0]: \"node1\" is not an IPv4 address",
       [](dpa::SessionConfig& s) { s.workers = {{"node1", 0}}; }},
  };
  for (const auto& [expected, change] : cases) {
    dpa::SessionConfig session = valid_session();
    change(session);
    EXPECT_THAT(config_error([&] { session.validate(); }), HasSubstr(expected));
  }
}

dpa::UdpTransportConfig& udp_of(dpa::SwitchConfig& config) {
  return std::get<dpa::UdpTransportConfig>(config.transport);
}

TEST(SwitchValidate, EachInvalidSettingIsNamed) {
  const std::vector<std::pair<std::string, std::function<void(dpa::SwitchConfig&)>>> cases{
      {"switch.udp.bind_host: must not be empty", [](dpa::SwitchConfig& c) { udp_of(c).bind_host.clear(); }},
      {"switch.threads 0 out of range [1, 64]", [](dpa::SwitchConfig& c) { c.threads = 0; }},
      {"switch.threads 65", [](dpa::SwitchConfig& c) { c.threads = 65; }},
      {"switch.udp.bind_port 65535 + threads 2 - 1 exceeds 65535",
       [](dpa::SwitchConfig& c) { udp_of(c).bind_port = 65535; c.threads = 2; }},
      {"switch.udp.batch: 0 outside 1..1024", [](dpa::SwitchConfig& c) { udp_of(c).batch = 0; }},
      {"switch.udp.batch: 1025", [](dpa::SwitchConfig& c) { udp_of(c).batch = 1025; }},
      {"switch.udp.socket_buffer_bytes: must not be negative",
       [](dpa::SwitchConfig& c) { udp_of(c).socket_buffer_bytes = -1; }},
      {"switch.dpdk.local_port 65535 + threads 2 - 1 exceeds 65535",
       [](dpa::SwitchConfig& c) {
         dpa::DpdkTransportConfig dpdk;
         dpdk.local_ip = "10.0.0.1";
         dpdk.local_port = 65535;
         c.transport = dpdk;
         c.threads = 2;
       }},
      {"session id 7 appears twice", [](dpa::SwitchConfig& c) { c.sessions.push_back(valid_session()); }},
      {"session 7: k 9", [](dpa::SwitchConfig& c) { c.sessions[0].k = 9; }},
      {"switch.max_sessions 0 out of range [1, 65536]", [](dpa::SwitchConfig& c) { c.max_sessions = 0; }},
      {"switch.max_sessions 65537", [](dpa::SwitchConfig& c) { c.max_sessions = 65537; }},
      {"switch.max_memory_mb 0 out of range [1, 1048576]", [](dpa::SwitchConfig& c) { c.max_memory_mb = 0; }},
      {"switch.max_memory_mb 1048577", [](dpa::SwitchConfig& c) { c.max_memory_mb = 1048577; }},
      {"session 8: the switch already holds max_sessions 1 sessions",
       [](dpa::SwitchConfig& c) {
         c.max_sessions = 1;
         c.sessions.push_back(valid_session());
         c.sessions.back().id = 8;
       }},
      // The issue's request that aborted dpa-switch: 2^31 slots of 16320 values.
      {"session 7: pool_size 2147483648 x payload 16320 needs",
       [](dpa::SwitchConfig& c) {
         c.sessions[0].pool_size = 2147483648u;
         c.sessions[0].payload = 16320;
       }},
      // Each session fits alone, not both together.
      {"session 8: pool_size 4096 x payload 2048 needs 33 MiB of slot memory, but only 15 MiB of max_memory_mb 48 "
       "are free (lower pool_size or payload, or raise max_memory_mb)",
       [](dpa::SwitchConfig& c) {
         c.max_memory_mb = 48;
         c.sessions[0].pool_size = 4096;
         c.sessions[0].payload = 2048;
         c.sessions.push_back(c.sessions[0]);
         c.sessions.back().id = 8;
       }},
  };
  for (const auto& [expected, change] : cases) {
    dpa::SwitchConfig config;
    config.sessions.push_back(valid_session());
    EXPECT_NO_THROW(config.validate());
    change(config);
    EXPECT_THAT(config_error([&] { config.validate(); }), HasSubstr(expected));
  }
}

// ---- Counters and stats -------------------------------------------------------------------

TEST(SwitchCounters, AddAndPrint) {
  dpa::SwitchCounters total;
  total.rx_packets = 5;
  total.dropped_not_joined = 1;
  dpa::SwitchCounters more;
  more.rx_packets = 7;
  more.tx_packets = 3;
  more.dropped_not_joined = 2;
  total += more;
  EXPECT_EQ(total.rx_packets, 12u);
  EXPECT_EQ(total.tx_packets, 3u);
  EXPECT_EQ(total.dropped_not_joined, 3u);
  EXPECT_EQ(total.aggregated, 0u);

  std::istringstream lines(total.to_string());
  std::vector<std::string> names;
  std::map<std::string, std::uint64_t> values;
  std::string name;
  std::uint64_t value = 0;
  while (lines >> name >> value) {
    names.push_back(name);
    values[name] = value;
  }
  EXPECT_EQ(names.size(), 24u);  // joins_contended, joins_rate_limited and dropped_bad_tag included
  EXPECT_EQ(names.front(), "rx_packets");
  EXPECT_EQ(names.back(), "busy_ns");
  EXPECT_EQ(values["rx_packets"], 12u);
  EXPECT_EQ(values["tx_packets"], 3u);
  EXPECT_EQ(values["completed_partial"], 0u);
  EXPECT_EQ(values["dropped_not_joined"], 3u);
  EXPECT_THAT(total.to_string(), HasSubstr("rx_packets 12\ntx_packets 3\n"));
}

TEST(Types, Names) {
  EXPECT_EQ(dpa::to_string(dpa::DataType::int32), "int32");
  EXPECT_EQ(dpa::to_string(dpa::DataType::float32), "float32");
  EXPECT_EQ(dpa::to_string(dpa::ReduceOp::sum), "sum");
  EXPECT_EQ(dpa::to_string(dpa::ReduceOp::avg), "avg");
}

TEST(OpStats, AddSumsCountersAndMergesRanges) {
  dpa::OpStats total;
  total.blocks = 10;
  total.blocks_full = 8;
  total.blocks_partial = 1;
  total.blocks_missed = 1;
  total.contributed = 9;
  total.retransmissions = 2;
  total.min_contributors = 3;
  total.seconds = 0.5;
  total.missed = {{20, 30}, {0, 10}};

  dpa::OpStats part;
  part.blocks = 5;
  part.blocks_full = 5;
  part.blocks_non_finite = 1;
  part.blocks_out_of_range = 1;
  part.contributed = 5;
  part.timeouts = 4;
  part.syn_probes = 6;
  part.min_contributors = 2;
  part.seconds = 0.25;
  part.missed = {{50, 60}, {10, 15}, {25, 40}, {70, 70}};

  total += part;
  EXPECT_EQ(total.blocks, 15u);
  EXPECT_EQ(total.blocks_full, 13u);
  EXPECT_EQ(total.blocks_partial, 1u);
  EXPECT_EQ(total.blocks_missed, 1u);
  EXPECT_EQ(total.blocks_non_finite, 1u);
  EXPECT_EQ(total.blocks_out_of_range, 1u);
  EXPECT_EQ(total.contributed, 14u);
  EXPECT_EQ(total.retransmissions, 2u);
  EXPECT_EQ(total.timeouts, 4u);
  EXPECT_EQ(total.syn_probes, 6u);
  EXPECT_EQ(total.min_contributors, 2u);
  EXPECT_DOUBLE_EQ(total.seconds, 0.5);
  const std::vector<dpa::ElementRange> merged{{0, 15}, {20, 40}, {50, 60}};
  EXPECT_EQ(total.missed, merged);
}

TEST(OpStats, MinContributorsIgnoresZero) {
  dpa::OpStats total;
  dpa::OpStats part;
  part.min_contributors = 4;
  total += part;
  EXPECT_EQ(total.min_contributors, 4u);
  total += dpa::OpStats{};
  EXPECT_EQ(total.min_contributors, 4u);
  part.min_contributors = 7;
  total += part;
  EXPECT_EQ(total.min_contributors, 4u);
}

}  // namespace

// ---- Transport sections ----------------------------------------------------------------------

TEST(WorkerJson, ReadsEveryDpdkKey) {
  const dpa::Config config = worker_from_json(R"({
    "dpdk": {"cores": "2-3", "allow": ["0000:3b:00.0"], "vdevs": ["net_memif0,role=client"],
             "file_prefix": "w0", "no_huge": true, "memory_mb": 512, "eal_args": ["--no-pci"],
             "ports": ["0000:3b:00.0"], "local_ip": "10.0.0.2", "local_port": 6000,
             "neighbours": [{"ip": "10.0.0.1", "mac": "02:00:00:00:00:01"}], "mtu": 9000,
             "rx_descriptors": 2048, "tx_descriptors": 512, "mbufs": 16383, "burst": 64,
             "tx_flush_us": 50, "flow_steering": false, "checksum_offload": false,
             "monitor": true, "monitor_interval_us": 1000, "monitor_output": "/tmp/x.csv"}
  })");
  const auto& dpdk = std::get<dpa::DpdkTransportConfig>(config.transport);
  EXPECT_EQ(dpdk.cores, "2-3");
  EXPECT_EQ(dpdk.allow, std::vector<std::string>{"0000:3b:00.0"});
  EXPECT_EQ(dpdk.vdevs, std::vector<std::string>{"net_memif0,role=client"});
  EXPECT_EQ(dpdk.file_prefix, "w0");
  EXPECT_TRUE(dpdk.no_huge);
  EXPECT_EQ(dpdk.memory_mb, 512u);
  EXPECT_EQ(dpdk.eal_args, std::vector<std::string>{"--no-pci"});
  EXPECT_EQ(dpdk.ports, std::vector<std::string>{"0000:3b:00.0"});
  EXPECT_EQ(dpdk.local_ip, "10.0.0.2");
  EXPECT_EQ(dpdk.local_port, 6000);
  ASSERT_EQ(dpdk.neighbours.size(), 1u);
  EXPECT_EQ(dpdk.neighbours[0].ip, "10.0.0.1");
  EXPECT_EQ(dpdk.neighbours[0].mac, "02:00:00:00:00:01");
  EXPECT_EQ(dpdk.mtu, 9000u);
  EXPECT_EQ(dpdk.rx_descriptors, 2048);
  EXPECT_EQ(dpdk.tx_descriptors, 512);
  EXPECT_EQ(dpdk.mbufs, 16383u);
  EXPECT_EQ(dpdk.burst, 64);
  EXPECT_EQ(dpdk.tx_flush, 50us);
  EXPECT_FALSE(dpdk.flow_steering);
  EXPECT_FALSE(dpdk.checksum_offload);
  EXPECT_TRUE(dpdk.monitor);
  EXPECT_EQ(dpdk.monitor_interval, 1000us);
  EXPECT_EQ(dpdk.monitor_output, "/tmp/x.csv");
  EXPECT_NO_THROW(config.validate());
}

TEST(WorkerJson, OneTransportSectionOnly) {
  EXPECT_THAT(worker_json_error(R"({"udp": {}, "dpdk": {}})"), HasSubstr("give one transport section, not several"));
  EXPECT_THAT(worker_json_error(R"({"dpdk": {"cores": "0", "lcores": "0"}})"), HasSubstr("dpdk.lcores: unknown key"));
}

TEST_F(EnvTest, TransportVariablesSelectAndFillTheSection) {
  set("DPA_TRANSPORT", "dpdk");
  set("DPA_DPDK_MONITOR", "1");
  set("DPA_DPDK_MONITOR_INTERVAL_US", "250");
  set("DPA_DPDK_MONITOR_OUTPUT", "/tmp/rates.csv");
  const dpa::Config config = dpa::Config::from_env();
  const auto& dpdk = std::get<dpa::DpdkTransportConfig>(config.transport);
  EXPECT_TRUE(dpdk.monitor);
  EXPECT_EQ(dpdk.monitor_interval, 250us);
  EXPECT_EQ(dpdk.monitor_output, "/tmp/rates.csv");
  set("DPA_LOCAL_PORT", "7000");
  EXPECT_THAT(config_error([] { dpa::Config::from_env(); }), HasSubstr("DPA_LOCAL_PORT applies to the udp transport"));
  set("DPA_TRANSPORT", "rdma");
  EXPECT_THAT(config_error([] { dpa::Config::from_env(); }), HasSubstr("DPA_TRANSPORT=\"rdma\": expected udp, dpdk or shm"));
}

TEST_F(EnvTest, SharedMemoryTransportFromTheVariables) {
  set("DPA_TRANSPORT", "shm");
  set("DPA_SHM_FABRIC", "job7");
  set("DPA_SHM_DIR", "/run/dpa");
  set("DPA_LOCAL_PORT", "6000");
  const dpa::Config config = dpa::Config::from_env();
  const auto& shm = std::get<dpa::ShmTransportConfig>(config.transport);
  EXPECT_EQ(shm.fabric, "job7");
  EXPECT_EQ(shm.directory, "/run/dpa");
  EXPECT_EQ(shm.base_port, 6000);
  set("DPA_SHM_FABRIC", "a/b");
  EXPECT_THAT(config_error([] { dpa::Config::from_env().validate(); }), HasSubstr("shm.fabric: \"a/b\" is not"));
  set("DPA_SHM_FABRIC", "job7");
  set("DPA_LOCAL_HOST", "10.0.0.1");
  EXPECT_THAT(config_error([] { dpa::Config::from_env(); }), HasSubstr("DPA_LOCAL_HOST applies to the udp transport"));
  ::unsetenv("DPA_LOCAL_HOST");
  set("DPA_TRANSPORT", "udp");
  EXPECT_THAT(config_error([] { dpa::Config::from_env(); }), HasSubstr("DPA_SHM_FABRIC applies to the shm transport"));
}

TEST(WorkerJson, SharedMemorySectionIsReadAndChecked) {
  const dpa::Config config =
      worker_from_json(R"({"shm": {"fabric": "f1", "base_port": 7000, "buffers": 64, "ring": 1024}})");
  const auto& shm = std::get<dpa::ShmTransportConfig>(config.transport);
  EXPECT_EQ(shm.fabric, "f1");
  EXPECT_EQ(shm.base_port, 7000);
  EXPECT_EQ(shm.buffers, 64u);
  EXPECT_EQ(shm.ring, 1024u);
  EXPECT_THAT(config_error([] { worker_from_json(R"({"shm": {"ring": 1000}})").validate(); }), HasSubstr("shm.ring: 1000 is not a power of two"));
  EXPECT_THAT(config_error([] { worker_from_json(R"({"shm": {"buffers": 8}})").validate(); }), HasSubstr("shm.buffers: 8 outside 16..65536"));
  EXPECT_THAT(config_error([] { worker_from_json(R"({"shm": {"max_payload": 10000000}})").validate(); }), HasSubstr("shm.max_payload"));
  EXPECT_THAT(worker_json_error(R"({"shm": {}, "udp": {}})"), HasSubstr("udp, shm: give one transport section"));
  EXPECT_THAT(config_error([] { switch_from_json(R"({"switch": {"threads": 4, "shm": {"base_port": 65534}}})").validate(); }),
              HasSubstr("switch.shm.base_port 65534 + threads 4 - 1 exceeds 65535"));
}

TEST(WorkerJson, TransportTooSmallForAJoinIsRefusedOnEitherSide) {
  // 219 bytes: one short of a sealed JOIN reply listing 64 ports, which would never arrive whole.
  EXPECT_THAT(config_error([] { worker_from_json(R"({"udp": {"max_payload": 219}})").validate(); }),
              HasSubstr("udp.max_payload 219: below 220 bytes, the largest control packet"));
  EXPECT_THAT(config_error([] { switch_from_json(R"({"switch": {"shm": {"max_payload": 100}}})").validate(); }),
              HasSubstr("switch.shm.max_payload 100: below 220 bytes"));
  EXPECT_NO_THROW(worker_from_json(R"({"udp": {"max_payload": 220}})").validate());
}

TEST_F(EnvTest, DpdkMonitorWithUdpIsAnError) {
  set("DPA_DPDK_MONITOR", "1");
  EXPECT_THAT(config_error([] { dpa::Config::from_env(); }), HasSubstr("DPA_DPDK_MONITOR applies to the dpdk transport"));
}

TEST(SwitchJson, ShippedDpdkConfigsParseAndValidate) {
  const dpa::Config worker = dpa::Config::from_json_file(kSourceDir + "/configs/worker-dpdk.json");
  EXPECT_NO_THROW(worker.validate());
  const auto& dpdk = std::get<dpa::DpdkTransportConfig>(worker.transport);
  EXPECT_EQ(dpdk.local_ip, "10.0.0.1");
  EXPECT_EQ(dpdk.allow, std::vector<std::string>{"0000:3b:00.0"});
  ASSERT_EQ(dpdk.neighbours.size(), 1u);

  const dpa::SwitchConfig switch_config = dpa::SwitchConfig::from_json_file(kSourceDir + "/configs/switch-dpdk.json");
  EXPECT_NO_THROW(switch_config.validate());
  ASSERT_TRUE(std::holds_alternative<dpa::DpdkTransportConfig>(switch_config.transport));
  EXPECT_EQ(std::get<dpa::DpdkTransportConfig>(switch_config.transport).local_ip, "10.0.0.100");
  EXPECT_EQ(std::get<dpa::DpdkTransportConfig>(switch_config.transport).local_port, 4242);
  EXPECT_EQ(switch_config.threads, 2);
}

TEST(SwitchJson, DpdkSectionErrorsNameTheKey) {
  EXPECT_THAT(config_error([] { switch_from_json(R"({"switch": {"dpdk": {"local_ip": "10.0.0.1", "burst": 0}}})").validate(); }),
              HasSubstr("switch.dpdk.burst: 0 outside 1..512"));
  EXPECT_THAT(switch_json_error(R"({"switch": {"dpdk": {"mtu": "big"}}})"),
              HasSubstr("switch.dpdk.mtu: expected a non-negative integer, got string"));
}

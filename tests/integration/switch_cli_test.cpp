// SPDX-License-Identifier: Apache-2.0
// dpa-switch's start-up errors: a clear message naming the flag or key, a non-zero exit code,
// never an abort (an abort would exit with 128 + SIGABRT).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tools/process.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using testing::HasSubstr;
using namespace std::chrono_literals;

struct StartUpCase {
  std::vector<std::string> arguments;
  std::string expected;
};

// A config file for one test, removed at its end.
class ConfigFile {
 public:
  ConfigFile(const std::string& name, const std::string& content)
      : path_(::testing::TempDir() + "dpa_switch_cli_" + name) {
    std::ofstream(path_) << content;
  }
  ~ConfigFile() { std::filesystem::remove(path_); }
  ConfigFile(const ConfigFile&) = delete;
  ConfigFile& operator=(const ConfigFile&) = delete;
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(SwitchCli, StartUpErrorsNameTheSettingAndExitNonZero) {
  const std::string switch_path = std::string(DPA_BINARY_DIR) + "/src/tools/dpa-switch";
  // A config of an earlier version (UDP settings directly in "switch"), and a DPDK one: every
  // case below also passes --port 0, which is a UDP setting.
  const ConfigFile old_keys("old_keys.json", R"({"switch": {"host": "0.0.0.0", "port": 4242}})");
  const ConfigFile on_dpdk("on_dpdk.json", R"({"switch": {"dpdk": {"local_ip": "10.0.0.1"}}})");
  const std::vector<StartUpCase> cases{
      // From the issue: this session needs 267583488 MiB and aborted with std::bad_alloc.
      {{"--world-size", "2", "--pool-size", "4294967294", "--payload", "16320"},
       "dpa-switch: invalid switch config: session 1: pool_size 4294967294 x payload 16320 needs"},
      {{"--world-size", "2", "--max-memory-mb", "0"}, "switch.max_memory_mb 0 out of range [1, 1048576]"},
      {{"--world-size", "2", "--max-sessions", "0"}, "switch.max_sessions 0 out of range [1, 65536]"},
      {{"--world-size", "2", "--workers", "10.0.0.1:http"}, "--workers \"10.0.0.1:http\": expected host or host:port with a port in [0, 65535]"},
      {{"--control-port", "0", "--control-idle-timeout-ms", "-1"}, "--control-idle-timeout-ms -1 out of range"},
      {{"--control-port", "0", "--control-max-clients", "0"}, "--control-max-clients 0 out of range"},
      {{"--config", "/nonexistent/softswitch.json"}, "/nonexistent/softswitch.json"},
      {{"--config", old_keys.path()}, "switch.host: moved to switch.udp.bind_host"},
      {{"--config", on_dpdk.path()}, "--port: applies to the udp transport"},
      {{"--transport", "dpdk"}, "--transport dpdk: the switch config (--config) has no \"dpdk\" section"},
      {{"--transport", "shm", "--world-size", "2", "--host", "0.0.0.0"}, "--host: applies to the udp transport"},
      {{"--world-size", "2", "--shm-fabric", "f"}, "--shm-fabric: applies to --transport shm"},
      {{"--transport", "shm", "--world-size", "2", "--shm-fabric", "a/b"}, "switch.shm.fabric: \"a/b\" is not"},
  };
  for (const StartUpCase& c : cases) {
    std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", switch_path, "--port", "0"};
    argv.insert(argv.end(), c.arguments.begin(), c.arguments.end());
    dpa::tools::Process process(argv);
    const auto code = process.wait_until(Clock::now() + 20s);
    ASSERT_TRUE(code.has_value()) << c.expected << ": dpa-switch still runs";
    EXPECT_EQ(*code, 2) << process.output();
    EXPECT_THAT(process.output(), HasSubstr(c.expected));
  }
}

// A failure of the machine, not of the command line, exits 1: here the UDP port is taken.
TEST(SwitchCli, ARuntimeFailureExitsOne) {
  const std::string switch_path = std::string(DPA_BINARY_DIR) + "/src/tools/dpa-switch";
  const int taken = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(taken, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(taken, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  socklen_t length = sizeof address;
  ASSERT_EQ(getsockname(taken, reinterpret_cast<sockaddr*>(&address), &length), 0);
  dpa::tools::Process process({"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", switch_path, "--host", "127.0.0.1",
                               "--port", std::to_string(ntohs(address.sin_port)), "--world-size", "2"});
  const auto code = process.wait_until(Clock::now() + 20s);
  close(taken);
  ASSERT_TRUE(code.has_value()) << "dpa-switch still runs";
  EXPECT_EQ(*code, 1) << process.output();
  EXPECT_THAT(process.output(), HasSubstr("cannot bind UDP 127.0.0.1:"));
}

// dpa-switch on shared memory serves dpa-bench workers of another process group, checked.
TEST(SwitchCli, SharedMemorySwitchServesWorkersOfOtherProcesses) {
  const std::string switch_path = std::string(DPA_BINARY_DIR) + "/src/tools/dpa-switch";
  const std::string bench_path = std::string(DPA_BINARY_DIR) + "/src/tools/dpa-bench";
  const std::string fabric = "cli-test-" + std::to_string(getpid());
  const std::string port_file = ::testing::TempDir() + "dpa_switch_cli_port_" + std::to_string(getpid());
  std::filesystem::remove(port_file);
  dpa::tools::Process sw({switch_path, "--transport", "shm", "--shm-fabric", fabric, "--port", "0", "--port-file",
                          port_file, "--world-size", "2"});
  const auto deadline = Clock::now() + 20s;
  std::string port;
  while (port.empty() && Clock::now() < deadline && !sw.wait_until(Clock::now() + 10ms).has_value()) {
    std::ifstream(port_file) >> port;
  }
  std::filesystem::remove(port_file);
  ASSERT_FALSE(port.empty()) << "dpa-switch wrote no port: " << sw.output();
  dpa::tools::Process bench({"/bin/sh", "-c", "DPA_TRANSPORT=shm DPA_SHM_FABRIC=" + fabric + " exec \"$0\" \"$@\" 2>&1",
                             bench_path, "-n", "2", "--switch", "127.0.0.1:" + port, "--sizes", "4KiB,256KiB",
                             "--iterations", "3", "--warmup", "1", "--timeout-ms", "20000"});
  const auto code = bench.wait_until(Clock::now() + 90s);
  ASSERT_TRUE(code.has_value()) << "dpa-bench still runs";
  EXPECT_EQ(*code, 0) << bench.output();
  EXPECT_THAT(bench.output(), HasSubstr("262144"));
}

}  // namespace

// SPDX-License-Identifier: Apache-2.0
// dpa-switch's operator surfaces against a running switch: the Prometheus endpoint scraped
// before, during and after a dpa-bench job (values that match the job, never going back, nothing
// changed by other methods), dpa-switch-ctl's requests, errors and exit codes, and who may use the
// control channel: its owner over the Unix socket, not another user (uid 65534), over TCP only
// with the secret.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#ifdef DPA_HAVE_METRICS_HTTP
#include <httplib.h>
#endif

#include "../scratch_directory.hpp"
#include "tools/process.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using testing::AllOf;
using testing::HasSubstr;
using namespace std::chrono_literals;

const std::string kTools = std::string(DPA_BINARY_DIR) + "/src/tools/";

// dpa-switch (one session of 2 ranks by flags) plus `arguments` must refuse to start: status 2
// and `expected` in what it printed.
// Exit status 2 for a wrong flag or key, 1 for what the machine refuses (an address not its own).
void expect_refused_at_start(const std::vector<std::string>& arguments, const std::string& expected,
                             int exit_code = 2) {
  std::vector<std::string> argv{"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", kTools + "dpa-switch", "--port", "0",
                                "--world-size", "2"};
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  dpa::tools::Process process(argv);
  const auto code = process.wait_until(Clock::now() + 20s);
  ASSERT_TRUE(code.has_value()) << expected << ": dpa-switch still runs";
  EXPECT_EQ(*code, exit_code) << process.output();
  EXPECT_THAT(process.output(), HasSubstr(expected));
}

// dpa-switch on ephemeral ports with the given flags, stopped (SIGTERM, then killed by Process)
// at the end.
class RunningSwitch {
 public:
  explicit RunningSwitch(std::vector<std::string> extra) : process_(arguments(std::move(extra))) {
    const auto deadline = Clock::now() + 20s;
    while (Clock::now() < deadline && !process_.wait_until(Clock::now() + 10ms).has_value() &&
           process_.output().find("listening on") == std::string::npos) {
    }
    port_ = find("listening on [0-9.]+:([0-9]+)");
    control_port_ = find("control channel on [0-9.]+:([0-9]+)");
    control_socket_ = find("control channel on (unix:[^\n]+)");
    metrics_port_ = find("metrics on http://[0-9.]+:([0-9]+)/metrics");
  }
  ~RunningSwitch() { stop(); }
  RunningSwitch(const RunningSwitch&) = delete;
  RunningSwitch& operator=(const RunningSwitch&) = delete;

  // Exit code after SIGTERM (nothing if it had to be killed).
  std::optional<int> stop() {
    if (!stopped_) process_.signal(SIGTERM);
    stopped_ = true;
    return process_.wait_until(Clock::now() + 20s);
  }

  [[nodiscard]] const std::string& output() const { return process_.output(); }
  [[nodiscard]] const std::string& port() const { return port_; }
  [[nodiscard]] const std::string& control_port() const { return control_port_; }
  [[nodiscard]] const std::string& control_socket() const { return control_socket_; }  // "unix:PATH"
  [[nodiscard]] const std::string& metrics_port() const { return metrics_port_; }

 private:
  static std::vector<std::string> arguments(std::vector<std::string> extra) {
    std::vector<std::string> argv{kTools + "dpa-switch", "--port", "0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }
  [[nodiscard]] std::string find(const char* pattern) const {
    std::smatch match;
    return std::regex_search(process_.output(), match, std::regex(pattern)) ? match[1].str() : std::string();
  }

  dpa::tools::Process process_;
  bool stopped_ = false;
  std::string port_;
  std::string control_port_;
  std::string control_socket_;
  std::string metrics_port_;
};

struct CtlRun {
  int code = -1;
  std::string output;  // stdout and stderr
};

// dpa-switch-ctl with `arguments`, run through `wrapper` (e.g. env or setpriv and its arguments).
CtlRun run_ctl(const std::vector<std::string>& arguments, const std::vector<std::string>& wrapper = {}) {
  std::vector<std::string> argv{"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1"};
  argv.insert(argv.end(), wrapper.begin(), wrapper.end());
  argv.push_back(kTools + "dpa-switch-ctl");
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  dpa::tools::Process process(argv);
  const auto code = process.wait_until(Clock::now() + 30s);
  return {code.value_or(-1), process.output()};
}

TEST(SwitchCtl, ListsAddsAndRemovesSessionsWithExitCodes) {
  const dpa::test::ScratchDirectory scratch;
  const std::string socket_path = (scratch.path() / "control.sock").string();
  RunningSwitch sw({"--world-size", "2", "--control", socket_path});
  ASSERT_EQ(sw.control_socket(), "unix:" + socket_path) << sw.output();
  const std::string control = sw.control_socket();

  CtlRun listed = run_ctl({"--control", control, "sessions"});
  EXPECT_EQ(listed.code, 0) << listed.output;
  EXPECT_THAT(listed.output, testing::ContainsRegex(R"( 1 +2 +2 +1024 +\[0, 4096\) +0 +0/2 )"));

  CtlRun added = run_ctl({"add-session", "--control", control, "--id", "7", "--world-size", "3", "--pool-base", "4096",
                       "--pool-size", "64", "--payload", "256"});
  EXPECT_EQ(added.code, 0) << added.output;
  EXPECT_THAT(added.output, HasSubstr("session 7 added"));

  // --json: the reply's content; a path without "unix:" is a socket too.
  listed = run_ctl({"--json", "-c", socket_path, "sessions"});
  ASSERT_EQ(listed.code, 0) << listed.output;
  const nlohmann::json sessions = nlohmann::json::parse(listed.output).at("sessions");
  ASSERT_EQ(sessions.size(), 2u) << listed.output;
  EXPECT_EQ(sessions[1].at("id"), 7);
  EXPECT_EQ(sessions[1].at("world_size"), 3);
  EXPECT_EQ(sessions[1].at("payload"), 256);
  EXPECT_EQ(sessions[1].at("pool_size"), 64);
  EXPECT_EQ(sessions[1].at("generation"), 0);
  EXPECT_EQ(sessions[1].at("counters").at("rx_packets"), 0);

  // A pool that overlaps another session's is refused, naming both sessions.
  CtlRun overlapping = run_ctl({"-c", control, "add-session", "--id", "8", "--world-size", "2", "--pool-base",
                                "4100", "--pool-size", "64"});
  EXPECT_EQ(overlapping.code, 1) << overlapping.output;
  EXPECT_THAT(overlapping.output,
              HasSubstr("add-session: session 8's slots [4100, 4164) overlap session 7's slots [4096, 4160)"));
  overlapping = run_ctl({"-c", control, "add-session", "--id", "8", "--world-size", "2"});  // default pool [0, 4096)
  EXPECT_EQ(overlapping.code, 1) << overlapping.output;
  EXPECT_THAT(overlapping.output, HasSubstr("overlap session 1's slots [0, 4096)"));

  CtlRun duplicate = run_ctl({"-c", control, "add-session", "--from-json", R"({"id": 7, "world_size": 2})"});
  EXPECT_EQ(duplicate.code, 1) << duplicate.output;
  EXPECT_THAT(duplicate.output, HasSubstr("dpa-switch refused add_session: session 7 already exists"));

  CtlRun removed = run_ctl({"-c", control, "remove-session", "7"});
  EXPECT_EQ(removed.code, 0) << removed.output;
  CtlRun unknown = run_ctl({"-c", control, "remove-session", "7"});
  EXPECT_EQ(unknown.code, 1) << unknown.output;
  EXPECT_THAT(unknown.output, HasSubstr("unknown session 7"));

  CtlRun counters = run_ctl({"-c", control, "counters"});
  EXPECT_EQ(counters.code, 0) << counters.output;
  EXPECT_THAT(counters.output, HasSubstr("rx_packets 0\n"));

  CtlRun clock = run_ctl({"-c", control, "set-clock", "5"});  // this switch runs on the steady clock
  EXPECT_EQ(clock.code, 1) << clock.output;
  EXPECT_THAT(clock.output, HasSubstr("manual_clock"));

  // Usage errors exit 2, whatever CLI11's own code for them.
  for (const std::vector<std::string>& usage :
       {std::vector<std::string>{"-c", control}, {"-c", control, "bogus"}, {"-c", control, "remove-session", "x"},
        {"-c", control, "add-session", "--world-size", "2"}, {"-c", "10.0.0.1:http", "sessions"},
        {"-c", control, "add-session", "--from-json", "{"}}) {
    const CtlRun run = run_ctl(usage);
    EXPECT_EQ(run.code, 2) << usage.back() << ": " << run.output;
  }
  const CtlRun no_address = run_ctl({"sessions"});
  EXPECT_EQ(no_address.code, 2) << no_address.output;
  EXPECT_THAT(no_address.output, HasSubstr("DPA_SWITCH_CONTROL"));
  const CtlRun version = run_ctl({"--version"});
  EXPECT_EQ(version.code, 0);
  EXPECT_THAT(version.output, testing::StartsWith("dpa-switch-ctl "));
  EXPECT_EQ(run_ctl({"--help"}).code, 0);
  EXPECT_EQ(sw.stop(), 0) << sw.output();

  // Nobody listening any more: a runtime failure.
  const CtlRun refused = run_ctl({"-c", control, "sessions"});
  EXPECT_EQ(refused.code, 1) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("cannot connect to " + control));
}

// dpa-switch-ctl run as uid 65534, with no supplementary groups.
const std::vector<std::string> kAsNobody{"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"};

// Authenticated sessions (protocol.md §6.6) by flag and by add-session: the key file is read by
// the switch, the session lists as authenticated, and an unreadable key file is refused by name.
TEST(SwitchCtl, AuthKeyFileAuthenticatesAFlagSessionAndAnAddedOne) {
  const dpa::test::ScratchDirectory scratch;
  const std::string key_file = (scratch.path() / "session.key").string();
  std::ofstream(key_file) << std::string(64, 'c') << "\n";
  const std::string socket_path = (scratch.path() / "control.sock").string();
  RunningSwitch sw({"--world-size", "2", "--auth-key-file", key_file, "--control", socket_path});
  ASSERT_EQ(sw.control_socket(), "unix:" + socket_path) << sw.output();
  const std::string control = sw.control_socket();

  const CtlRun added = run_ctl({"-c", control, "add-session", "--id", "7", "--world-size", "2", "--pool-base", "4096",
                                "--pool-size", "64", "--auth-key-file", key_file, "--auth-data"});
  EXPECT_EQ(added.code, 0) << added.output;
  const CtlRun plain = run_ctl({"-c", control, "add-session", "--id", "8", "--world-size", "2", "--pool-base", "8192",
                                "--pool-size", "64"});
  EXPECT_EQ(plain.code, 0) << plain.output;
  const CtlRun listed = run_ctl({"--json", "-c", control, "sessions"});
  ASSERT_EQ(listed.code, 0) << listed.output;
  const nlohmann::json sessions = nlohmann::json::parse(listed.output).at("sessions");
  ASSERT_EQ(sessions.size(), 3u) << listed.output;
  EXPECT_EQ(sessions[0].at("authenticated"), true);
  EXPECT_EQ(sessions[1].at("authenticated"), true);
  EXPECT_EQ(sessions[2].at("authenticated"), false);
  EXPECT_EQ(sessions[0].at("auth_data"), false) << "a key authenticates admission; data only with --auth-data";
  EXPECT_EQ(sessions[1].at("auth_data"), true);

  const CtlRun missing = run_ctl({"-c", control, "add-session", "--id", "9", "--world-size", "2", "--pool-base",
                                  "12288", "--pool-size", "64", "--auth-key-file", "/nonexistent/session.key"});
  EXPECT_EQ(missing.code, 1) << missing.output;
  EXPECT_THAT(missing.output, AllOf(HasSubstr("auth_key_file"), HasSubstr("/nonexistent/session.key")));

  dpa::tools::Process without_session({"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", kTools + "dpa-switch", "--port", "0",
                                       "--auth-key-file", key_file, "--control",
                                       (scratch.path() / "other.sock").string()});
  EXPECT_EQ(without_session.wait_until(Clock::now() + 30s), 2) << without_session.output();
  EXPECT_THAT(without_session.output(), HasSubstr("--auth-key-file, --auth-data: apply to the session given by flags"));
}

TEST(SwitchCtl, AnotherUserCannotRemoveTheOwnersSession) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run dpa-switch-ctl as uid 65534 (setpriv)";
  if (const CtlRun probe = run_ctl({"--version"}, kAsNobody); probe.code != 0) {
    GTEST_SKIP() << "uid 65534 cannot run " << kTools << "dpa-switch-ctl here: " << probe.output;
  }
  const dpa::test::ScratchDirectory scratch;
  const std::string control = (scratch.path() / "control.sock").string();
  RunningSwitch sw({"--world-size", "2", "--control", control});
  ASSERT_FALSE(sw.control_socket().empty()) << sw.output();

  for (const std::vector<std::string>& request :
       {std::vector<std::string>{"-c", control, "remove-session", "1"},
        {"-c", control, "add-session", "--id", "9", "--world-size", "2", "--pool-base", "4096", "--pool-size", "64"},
        {"-c", control, "sessions"}}) {
    const CtlRun refused = run_ctl(request, kAsNobody);
    EXPECT_EQ(refused.code, 1) << request[2] << ": " << refused.output;
    EXPECT_THAT(refused.output, HasSubstr("cannot connect to unix:" + control + ": Permission denied"));
    EXPECT_THAT(refused.output, HasSubstr("only the switch's user may open its control socket"));
  }
  const CtlRun listed = run_ctl({"--json", "-c", control, "sessions"});
  ASSERT_EQ(listed.code, 0) << listed.output;
  const nlohmann::json sessions = nlohmann::json::parse(listed.output).at("sessions");
  ASSERT_EQ(sessions.size(), 1u) << listed.output;
  EXPECT_EQ(sessions[0].at("id"), 1);
  const CtlRun removed = run_ctl({"-c", control, "remove-session", "1"});
  EXPECT_EQ(removed.code, 0) << removed.output;
  EXPECT_EQ(sw.stop(), 0) << sw.output();
  EXPECT_FALSE(std::filesystem::exists(control)) << "the socket outlived the switch";
}

// A secret file of `mode` in `directory`.
std::string write_secret(const std::filesystem::path& directory, const std::string& name, const std::string& secret,
                         std::filesystem::perms mode) {
  const std::filesystem::path path = directory / name;
  std::ofstream(path) << secret << "\n";
  std::filesystem::permissions(path, mode);
  return path.string();
}

TEST(SwitchCtl, OverTcpOnlyTheSecretAddsOrRemoves) {
  const dpa::test::ScratchDirectory scratch;
  const auto owner_only = std::filesystem::perms::owner_read | std::filesystem::perms::owner_write;
  const std::string secret = write_secret(scratch.path(), "secret", "tcp-control-secret-of-this-test", owner_only);
  const std::string wrong = write_secret(scratch.path(), "wrong", "tcp-control-secret-of-another-one", owner_only);
  const std::string readable = write_secret(scratch.path(), "readable", "tcp-control-secret-of-this-test",
                                            owner_only | std::filesystem::perms::group_read |
                                                std::filesystem::perms::others_read);

  // Refused at start: TCP open to anyone, a secret others can read.
  for (const auto& [arguments, expected] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--control-port", "0"}, "give --control-secret-file FILE"},
           {{"--control-port", "0", "--control-secret-file", readable},
            "--control-secret-file " + readable + ": mode 0644 lets its group or others read the secret"},
           {{"--control-secret-file", secret}, "--control-secret-file: give --control PATH or --control-port"}}) {
    expect_refused_at_start(arguments, expected);
  }

  RunningSwitch sw({"--world-size", "2", "--control-port", "0", "--control-secret-file", secret});
  ASSERT_FALSE(sw.control_port().empty()) << sw.output();
  const std::string control = "127.0.0.1:" + sw.control_port();
  const CtlRun anonymous = run_ctl({"-c", control, "remove-session", "1"});
  EXPECT_EQ(anonymous.code, 1) << anonymous.output;
  EXPECT_THAT(anonymous.output, HasSubstr("remove_session needs an authenticated connection"));
  const CtlRun guessed = run_ctl({"-c", control, "--secret-file", wrong, "remove-session", "1"});
  EXPECT_EQ(guessed.code, 1) << guessed.output;
  EXPECT_THAT(guessed.output, HasSubstr("dpa-switch refused the secret: auth: wrong secret"));
  // A port alone means 127.0.0.1; the secret file may come from the environment.
  const CtlRun listed = run_ctl({"-c", sw.control_port(), "sessions"}, {"/usr/bin/env",
                                                                        "DPA_SWITCH_CONTROL_SECRET_FILE=" + secret});
  EXPECT_EQ(listed.code, 0) << listed.output;
  EXPECT_THAT(listed.output, testing::ContainsRegex(R"( 1 +2 +2 +1024 )"));
  const CtlRun removed = run_ctl({"-c", control, "--secret-file", secret, "remove-session", "1"});
  EXPECT_EQ(removed.code, 0) << removed.output;
  const CtlRun counters = run_ctl({"-c", control, "--secret-file", secret, "counters"});
  EXPECT_EQ(counters.code, 0) << counters.output;
  EXPECT_THAT(counters.output, HasSubstr("control_channel.authentications_failed 1\n"));
  EXPECT_THAT(counters.output, HasSubstr("control_channel.requests_refused 1\n"));
  EXPECT_EQ(sw.stop(), 0) << sw.output();
}

TEST(SwitchCtl, ReadOnlyOpenServesCountersNotChanges) {
  RunningSwitch sw({"--world-size", "2", "--control-port", "0", "--control-read-only-open"});
  ASSERT_FALSE(sw.control_port().empty()) << sw.output();
  const std::string control = "127.0.0.1:" + sw.control_port();
  const CtlRun counters = run_ctl({"-c", control, "counters"});
  EXPECT_EQ(counters.code, 0) << counters.output;
  EXPECT_THAT(counters.output, HasSubstr("rx_packets 0\n"));
  const CtlRun removed = run_ctl({"-c", control, "remove-session", "1"});
  EXPECT_EQ(removed.code, 1) << removed.output;
  EXPECT_THAT(removed.output, HasSubstr("may make only the read-only requests"));
  const CtlRun listed = run_ctl({"-c", control, "sessions"});
  EXPECT_THAT(listed.output, testing::ContainsRegex(R"( 1 +2 +2 +1024 )"));
  EXPECT_EQ(sw.stop(), 0) << sw.output();
}

#ifdef DPA_HAVE_METRICS_HTTP

// A file for one test, removed at its end.
struct TemporaryFile {
  TemporaryFile(const std::string& name, const std::string& content)
      : path(::testing::TempDir() + "dpa_switch_tools_" + std::to_string(getpid()) + "_" + name) {
    std::ofstream(path) << content;
  }
  ~TemporaryFile() { std::filesystem::remove(path); }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  const std::string path;
};

// name{labels} -> value of a scrape.
std::map<std::string, double> parse_samples(const std::string& text) {
  std::map<std::string, double> samples;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto space = line.rfind(' ');
    samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return samples;
}

TEST(SwitchMetrics, ScrapesMatchAJobAndNeverGoBack) {
  RunningSwitch sw({"--world-size", "2", "--metrics", "127.0.0.1:0"});
  ASSERT_FALSE(sw.metrics_port().empty()) << sw.output();
  httplib::Client client("127.0.0.1", std::stoi(sw.metrics_port()));
  client.set_read_timeout(10, 0);
  const auto scrape = [&client] {
    const auto response = client.Get("/metrics");
    EXPECT_TRUE(response) << "no reply from /metrics";
    if (!response) return std::map<std::string, double>{};
    EXPECT_EQ(response->status, 200);
    EXPECT_THAT(response->get_header_value("Content-Type"), HasSubstr("text/plain; version=0.0.4"));
    return parse_samples(response->body);
  };

  const std::map<std::string, double> before = scrape();
  EXPECT_EQ(before.at(R"(dpa_switch_rx_packets_total{thread="0"})"), 0);
  EXPECT_EQ(before.at(R"(dpa_switch_session_world_size{session="1"})"), 2);
  EXPECT_EQ(before.at("dpa_switch_sessions"), 1);

  dpa::tools::Process bench({"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", kTools + "dpa-bench", "-n", "2", "--switch",
                             "127.0.0.1:" + sw.port(), "--sizes", "4KiB,1MiB", "--iterations", "20", "--warmup", "1",
                             "--timeout-ms", "20000"});
  // Scrapes while the job runs: every counter only grows.
  std::vector<std::map<std::string, double>> scrapes{before};
  std::optional<int> bench_code;
  for (const auto deadline = Clock::now() + 120s; !bench_code && Clock::now() < deadline;) {
    scrapes.push_back(scrape());
    bench_code = bench.wait_until(Clock::now() + 20ms);
  }
  ASSERT_EQ(bench_code, 0) << bench.output();
  scrapes.push_back(scrape());
  for (std::size_t i = 1; i < scrapes.size(); ++i) {
    for (const auto& [name, value] : scrapes[i - 1]) {
      if (name.find("_total") != std::string::npos) {
        EXPECT_GE(scrapes[i].at(name), value) << name << " went back";
      }
    }
  }

  const std::map<std::string, double>& after = scrapes.back();
  const auto session = [&after](const char* counter) {
    return after.at(std::string("dpa_switch_session_") + counter + R"(_total{session="1"})");
  };
  const auto thread = [&after](const char* counter) {
    return after.at(std::string("dpa_switch_") + counter + R"(_total{thread="0"})");
  };
  EXPECT_GT(thread("rx_packets"), 0);
  EXPECT_GT(thread("tx_packets"), 0);
  EXPECT_GT(session("completed_full"), 0);
  EXPECT_EQ(session("completed_partial"), 0);  // K = N: every round waits for both ranks
  // Both ranks contribute once to every round; one session, so it has every round of the thread.
  EXPECT_EQ(session("aggregated"), 2 * session("completed_full"));
  EXPECT_EQ(session("completed_full"), thread("completed_full"));
  EXPECT_EQ(session("aggregated"), thread("aggregated"));
  EXPECT_EQ(session("joins"), thread("joins"));
  EXPECT_EQ(session("rx_packets"), thread("rx_packets"));  // no packet for another session
  EXPECT_EQ(after.at(R"(dpa_switch_session_joined_ranks{session="1"})"), 2);
  EXPECT_GE(after.at(R"(dpa_switch_session_generation{session="1"})"), 1);
  EXPECT_EQ(after.at(R"(dpa_switch_transport_rx_packets_total{thread="0"})"), thread("rx_packets"));

  // Read-only, one path (-1: no reply at all).
  const auto status = [](const httplib::Result& result) { return result ? result->status : -1; };
  EXPECT_EQ(status(client.Get("/")), 404);
  EXPECT_EQ(status(client.Get("/metrics/x")), 404);
  const auto posted = client.Post("/metrics", "x", "text/plain");
  EXPECT_EQ(status(posted), 405);
  EXPECT_EQ(posted ? posted->get_header_value("Allow") : "", "GET, HEAD");
  EXPECT_EQ(status(client.Delete("/metrics")), 405);
  EXPECT_EQ(status(client.Put("/metrics", R"({"op":"remove_session","id":1})", "application/json")), 405);
  EXPECT_EQ(status(client.Post("/control", R"({"op":"remove_session","id":1})", "application/json")), 404);
  EXPECT_EQ(status(client.Head("/metrics")), 200);
  // None of that changed the switch: the session is still there, its counters where they were.
  const std::map<std::string, double> unchanged = scrape();
  EXPECT_EQ(unchanged.at("dpa_switch_sessions"), 1);
  EXPECT_EQ(unchanged.at(R"(dpa_switch_session_world_size{session="1"})"), 2);
  EXPECT_EQ(unchanged.at(R"(dpa_switch_rx_packets_total{thread="0"})"), thread("rx_packets"));
  EXPECT_EQ(sw.stop(), 0) << sw.output();
}

TEST(SwitchMetrics, AddressErrorsNameTheFlagOrKey) {
  const TemporaryFile config_file("metrics.json", R"({"switch": {"metrics": "nowhere", "udp": {"bind_port": 0}}})");
  const std::string& config = config_file.path;
  for (const auto& [arguments, expected] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--config", config}, "switch.metrics: \"nowhere\": expected host:port or a port"},
           {{"--metrics", "localhost"}, "--metrics \"localhost\": expected host:port or a port"},
           {{"--metrics", "example:1"}, "metrics host \"example\" is not an IPv4 address"}}) {
    expect_refused_at_start(arguments, expected);
  }
  // Well formed, but not an address of this host: a runtime failure.
  expect_refused_at_start({"--metrics", "10.255.255.1:0"}, "cannot serve metrics on 10.255.255.1:0", 1);
}

#else

TEST(SwitchMetrics, WithoutHttplibTheFlagSaysSo) {
  dpa::tools::Process process({"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", kTools + "dpa-switch", "--port", "0",
                               "--world-size", "2", "--metrics", "0"});
  const auto code = process.wait_until(Clock::now() + 20s);
  ASSERT_TRUE(code.has_value()) << "dpa-switch still runs";
  EXPECT_EQ(*code, 2) << process.output();
  EXPECT_THAT(process.output(), HasSubstr("built without cpp-httplib"));
}

#endif

}  // namespace

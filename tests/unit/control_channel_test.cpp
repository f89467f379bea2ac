// The switch's control channel against clients that are slow, idle, hostile or many: every
// request gets a reply, no client delays another, and the switch and its sessions survive.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dpa/error.hpp"
#include "dpa/switch.hpp"
#include "switch/control_channel.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
using testing::HasSubstr;
using namespace std::chrono_literals;

// A TCP client of the control channel; every read gives up after 5 s.
class Client {
 public:
  explicit Client(std::uint16_t port) : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    timeval timeout{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  }
  ~Client() { close(fd_); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  void send_text(const std::string& text) const {
    EXPECT_EQ(send(fd_, text.data(), text.size(), MSG_NOSIGNAL), static_cast<ssize_t>(text.size()));
  }

  // The next reply line; nothing when the connection closed or 5 s passed without one.
  std::optional<json> read_reply() {
    while (pending_.find('\n') == std::string::npos) {
      char buffer[4096];
      const ssize_t received = recv(fd_, buffer, sizeof buffer, 0);
      if (received <= 0) return std::nullopt;
      pending_.append(buffer, static_cast<std::size_t>(received));
    }
    const auto newline = pending_.find('\n');
    json reply = json::parse(pending_.substr(0, newline));
    pending_.erase(0, newline + 1);
    return reply;
  }

  json request(const std::string& line) {
    send_text(line + "\n");
    auto reply = read_reply();
    if (!reply) {
      ADD_FAILURE() << "no reply to " << line;
      return json{};
    }
    return *reply;
  }

  void finish_sending() const { shutdown(fd_, SHUT_WR); }

  // True when the server closed the connection (within 5 s).
  bool closed_by_server() const {
    char byte = 0;
    return recv(fd_, &byte, 1, 0) == 0;
  }

 private:
  int fd_;
  std::string pending_;
};

class ControlChannelTest : public testing::Test {
 protected:
  static dpa::SwitchConfig switch_config(std::uint64_t max_memory_mb) {
    dpa::SwitchConfig config;
    std::get<dpa::UdpTransportConfig>(config.transport).bind_port = 0;
    config.max_memory_mb = max_memory_mb;
    return config;
  }

  void start(const dpa::sw::ControlChannelOptions& options, std::uint64_t max_memory_mb = 64) {
    switch_ = std::make_unique<dpa::SoftwareSwitch>(switch_config(max_memory_mb));
    control_ = std::make_unique<dpa::sw::ControlChannel>(*switch_, "127.0.0.1", 0, options);
  }

  [[nodiscard]] std::uint16_t port() const { return control_->port(); }

  std::unique_ptr<dpa::SoftwareSwitch> switch_;
  std::unique_ptr<dpa::sw::ControlChannel> control_;
};

constexpr const char* kAddSessionFive =
    R"({"op":"add_session","session":{"id":5,"world_size":2,"payload":256,"pool_size":256}})";

TEST_F(ControlChannelTest, TwoClientsAreServedAtOnce) {
  start({});
  Client first(port());
  Client second(port());
  // Each has a request outstanding before either reads; the second is answered first.
  first.send_text(kAddSessionFive + std::string("\n"));
  second.send_text(R"({"op":"counters"})" "\n");
  const auto second_reply = second.read_reply();
  ASSERT_TRUE(second_reply.has_value());
  EXPECT_EQ((*second_reply)["ok"], true);
  const auto first_reply = first.read_reply();
  ASSERT_TRUE(first_reply.has_value());
  EXPECT_EQ((*first_reply)["ok"], true);
  EXPECT_EQ(second.request(R"({"op":"sessions"})")["sessions"], json::array({5}));
}

TEST_F(ControlChannelTest, AClientThatStopsSendingGetsEveryReplyThenEndOfStream) {
  start({});
  Client client(port());
  client.send_text(kAddSessionFive + std::string("\n") + R"({"op":"sessions"})" "\n");
  client.finish_sending();
  const auto added = client.read_reply();
  const auto listed = client.read_reply();
  ASSERT_TRUE(added.has_value() && listed.has_value());
  EXPECT_EQ((*added)["ok"], true);
  EXPECT_EQ((*listed)["sessions"], json::array({5}));
  EXPECT_TRUE(client.closed_by_server());
}

TEST_F(ControlChannelTest, AnIdleClientDoesNotBlockAnother) {
  dpa::sw::ControlChannelOptions options;
  options.idle_timeout = 60s;  // far beyond the test's timeout: the idle client stays connected
  start(options);
  Client idle(port());
  idle.send_text(R"({"op":"sess)");  // half a request, then silence
  Client busy(port());
  const auto start_time = Clock::now();
  for (int i = 0; i < 20; ++i) EXPECT_EQ(busy.request(R"({"op":"sessions"})")["ok"], true);
  EXPECT_LT(Clock::now() - start_time, 5s);
}

TEST_F(ControlChannelTest, AnIdleClientIsToldAndDisconnected) {
  dpa::sw::ControlChannelOptions options;
  options.idle_timeout = 200ms;
  start(options);
  const auto start_time = Clock::now();  // before the connection, which the idle time counts from
  Client idle(port());
  const auto notice = idle.read_reply();
  ASSERT_TRUE(notice.has_value());
  EXPECT_GE(Clock::now() - start_time, 200ms);
  EXPECT_EQ((*notice)["ok"], false);
  EXPECT_THAT((*notice)["error"].get<std::string>(), HasSubstr("no request for 200 ms; closing"));
  EXPECT_TRUE(idle.closed_by_server());
  Client next(port());
  EXPECT_EQ(next.request(R"({"op":"sessions"})")["ok"], true);
}

TEST_F(ControlChannelTest, OverLongRequestsAreRefusedAndTheirConnectionClosed) {
  dpa::sw::ControlChannelOptions options;
  options.max_request_bytes = 1024;
  start(options);
  {
    Client whole_line(port());
    const auto reply = whole_line.request(std::string(2000, ' ') + R"({"op":"sessions"})");
    EXPECT_THAT(reply["error"].get<std::string>(), HasSubstr("request of 2017 bytes is longer than the limit of 1024"));
    EXPECT_TRUE(whole_line.closed_by_server());
  }
  {
    Client endless(port());
    endless.send_text(std::string(8192, 'x'));  // never a newline
    const auto reply = endless.read_reply();
    ASSERT_TRUE(reply.has_value());
    EXPECT_THAT((*reply)["error"].get<std::string>(), HasSubstr("request longer than the limit of 1024 bytes"));
    EXPECT_TRUE(endless.closed_by_server());
  }
  Client next(port());
  EXPECT_EQ(next.request(kAddSessionFive)["ok"], true);
}

TEST_F(ControlChannelTest, MalformedRequestsGetErrorsAndTheConnectionKeepsServing) {
  start({});
  Client client(port());
  const std::vector<std::pair<std::string, std::string>> cases{
      {R"({"op": )", "invalid request"},
      {R"(not json)", "invalid request"},
      {R"([1, 2])", "a request is a JSON object with a string \"op\""},
      {R"({"op": 7})", "a request is a JSON object with a string \"op\""},
      {R"({"op": "reboot"})", "unknown op \"reboot\""},
      {R"({"op": "add_session"})", "add_session needs \"session\""},
      {R"({"op": "add_session", "session": 3})", "session: expected an object"},
      {R"({"op": "add_session", "session": {"id": 6, "wrold_size": 2}})", "session.wrold_size: unknown key"},
      {R"({"op": "remove_session", "id": -1})", "remove_session needs a numeric \"id\""},
      {R"({"op": "remove_session", "id": 4294967301})", "remove_session needs a numeric \"id\""},
      {R"({"op": "remove_session", "id": 5})", "unknown session 5"},
  };
  for (const auto& [request, expected] : cases) {
    const json reply = client.request(request);
    EXPECT_EQ(reply["ok"], false) << request;
    EXPECT_THAT(reply["error"].get<std::string>(), HasSubstr(expected)) << request;
  }
  EXPECT_EQ(client.request(R"({"op":"sessions"})")["sessions"], json::array());
}

TEST_F(ControlChannelTest, SessionsBeyondTheLimitsAreRefusedAndTheTableIsUnchanged) {
  start({}, /*max_memory_mb=*/64);
  Client client(port());
  ASSERT_EQ(client.request(kAddSessionFive)["ok"], true);
  // The request from the issue that aborted dpa-switch with std::bad_alloc.
  const json huge = client.request(
      R"({"op":"add_session","session":{"id":6,"world_size":2,"payload":16320,"pool_size":2147483648}})");
  EXPECT_EQ(huge["ok"], false);
  EXPECT_THAT(huge["error"].get<std::string>(),
              HasSubstr("session 6: pool_size 2147483648 x payload 16320 needs"));
  EXPECT_THAT(huge["error"].get<std::string>(), HasSubstr("of max_memory_mb 64 are free"));
  EXPECT_EQ(client.request(R"({"op":"sessions"})")["sessions"], json::array({5}));
  EXPECT_EQ(client.request(R"({"op":"counters"})")["ok"], true);
}

TEST_F(ControlChannelTest, SessionStatusDescribesEachSessionAndCounters) {
  start({});
  Client client(port());
  ASSERT_EQ(client.request(kAddSessionFive)["ok"], true);
  ASSERT_EQ(client.request(R"({"op":"add_session","session":{"id":9,"world_size":3,"k":2,"pool_base":256}})")["ok"],
            true);
  const json reply = client.request(R"({"op":"session_status"})");
  ASSERT_EQ(reply["ok"], true) << reply;
  const json& sessions = reply["sessions"];
  ASSERT_EQ(sessions.size(), 2u) << reply;
  EXPECT_EQ(sessions[0]["id"], 5);
  EXPECT_EQ(sessions[0]["k"], 2);  // k 0: K = N
  EXPECT_EQ(sessions[0]["payload"], 256);
  EXPECT_EQ(sessions[1]["id"], 9);
  EXPECT_EQ(sessions[1]["world_size"], 3);
  EXPECT_EQ(sessions[1]["k"], 2);
  EXPECT_EQ(sessions[1]["pool_base"], 256);
  EXPECT_EQ(sessions[1]["generation"], 0);
  EXPECT_EQ(sessions[1]["joined"], json::array());
  EXPECT_EQ(sessions[1]["counters"].size(), 12u);
  EXPECT_EQ(sessions[1]["counters"]["completed_full"], 0);
  // Every switch counter, by name.
  const json counters = client.request(R"({"op":"counters"})")["counters"];
  EXPECT_EQ(counters.size(), 23u);
  EXPECT_EQ(counters["busy_ns"], 0);
}

TEST_F(ControlChannelTest, RemovingASessionReturnsItsMemoryToTheBudget) {
  start({}, /*max_memory_mb=*/64);
  Client client(port());
  // 40 MiB of slots: one fits the 64 MiB budget, two do not.
  const std::string add_big =
      R"({"op":"add_session","session":{"id":7,"world_size":2,"payload":2560,"pool_size":4096}})";
  const std::string add_other =
      R"({"op":"add_session","session":{"id":8,"world_size":2,"payload":2560,"pool_size":4096}})";
  for (int round = 0; round < 5; ++round) {
    ASSERT_EQ(client.request(add_big)["ok"], true) << "round " << round;
    EXPECT_THAT(client.request(add_other)["error"].get<std::string>(), HasSubstr("max_memory_mb 64"));
    ASSERT_EQ(client.request(R"({"op":"remove_session","id":7})")["ok"], true);
  }
  EXPECT_EQ(client.request(R"({"op":"sessions"})")["sessions"], json::array());
}

TEST_F(ControlChannelTest, ClientsBeyondTheLimitAreToldSo) {
  dpa::sw::ControlChannelOptions options;
  options.max_clients = 2;
  start(options);
  Client first(port());
  Client second(port());
  EXPECT_EQ(first.request(R"({"op":"sessions"})")["ok"], true);
  EXPECT_EQ(second.request(R"({"op":"sessions"})")["ok"], true);
  Client third(port());
  const auto refusal = third.read_reply();
  ASSERT_TRUE(refusal.has_value());
  EXPECT_THAT((*refusal)["error"].get<std::string>(), HasSubstr("serves at most 2 clients at once"));
  EXPECT_TRUE(third.closed_by_server());
  EXPECT_EQ(first.request(R"({"op":"sessions"})")["ok"], true);
}

TEST(ControlChannelOptions, InvalidSettingsNameTheirFlag) {
  const std::vector<std::pair<std::string, std::function<void(dpa::sw::ControlChannelOptions&)>>> cases{
      {"--control-idle-timeout-ms 0 out of range [1, 86400000]",
       [](dpa::sw::ControlChannelOptions& o) { o.idle_timeout = 0ms; }},
      {"--control-max-clients 0 out of range [1, 1024]", [](dpa::sw::ControlChannelOptions& o) { o.max_clients = 0; }},
      {"--control-max-request-bytes 10 out of range [64, 16777216]",
       [](dpa::sw::ControlChannelOptions& o) { o.max_request_bytes = 10; }},
  };
  for (const auto& [expected, change] : cases) {
    dpa::sw::ControlChannelOptions options;
    EXPECT_NO_THROW(options.validate());
    change(options);
    try {
      options.validate();
      ADD_FAILURE() << "no error for " << expected;
    } catch (const dpa::ConfigError& error) {
      EXPECT_THAT(error.what(), HasSubstr(expected));
    }
  }
}

}  // namespace

// SPDX-License-Identifier: Apache-2.0
// The switch's control channel against clients that are slow, idle, hostile or many: every
// request gets a reply, no client delays another, and the switch and its sessions survive. And who
// may do what: the switch's user over its Unix socket, another user (uid 65534) not at all or
// read-only, TCP clients only with the secret.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../captured_log.hpp"
#include "../scratch_directory.hpp"
#include "dpa/error.hpp"
#include "dpa/switch.hpp"
#include "switch/control_channel.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
using testing::HasSubstr;
using namespace std::chrono_literals;

// A client of the control channel over TCP or its Unix socket; every read gives up after 5 s.
class Client {
 public:
  explicit Client(std::uint16_t port) : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    set_timeout();
  }
  explicit Client(const std::filesystem::path& socket_path) : fd_(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    socket_path.string().copy(address.sun_path, sizeof address.sun_path - 1);
    EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address), 0) << std::strerror(errno);
    set_timeout();
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

  void set_timeout() const {
    timeval timeout{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  }

  // True when the server closed the connection (within 5 s).
  bool closed_by_server() const {
    char byte = 0;
    return recv(fd_, &byte, 1, 0) == 0;
  }

 private:
  int fd_;
  std::string pending_;
};

using dpa::test::ScratchDirectory;

dpa::SwitchConfig switch_config(std::uint64_t max_memory_mb = 64) {
  dpa::SwitchConfig config;
  std::get<dpa::UdpTransportConfig>(config.transport).bind_port = 0;
  config.max_memory_mb = max_memory_mb;
  return config;
}

// The control channel on a Unix socket in a scratch directory, as the switch's user.
class ControlChannelTest : public testing::Test {
 protected:
  void start(const dpa::sw::ControlChannelOptions& options, std::uint64_t max_memory_mb = 64) {
    switch_ = std::make_unique<dpa::SoftwareSwitch>(switch_config(max_memory_mb));
    control_ = std::make_unique<dpa::sw::ControlChannel>(*switch_, socket_path(), options);
  }

  [[nodiscard]] std::filesystem::path socket_path() const { return scratch_.path() / "control.sock"; }

  ScratchDirectory scratch_;
  std::unique_ptr<dpa::SoftwareSwitch> switch_;
  std::unique_ptr<dpa::sw::ControlChannel> control_;
};

constexpr const char* kAddSessionFive =
    R"({"op":"add_session","session":{"id":5,"world_size":2,"payload":256,"pool_size":256}})";

TEST_F(ControlChannelTest, TwoClientsAreServedAtOnce) {
  start({});
  Client first(socket_path());
  Client second(socket_path());
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
  Client client(socket_path());
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
  Client idle(socket_path());
  idle.send_text(R"({"op":"sess)");  // half a request, then silence
  Client busy(socket_path());
  const auto start_time = Clock::now();
  for (int i = 0; i < 20; ++i) EXPECT_EQ(busy.request(R"({"op":"sessions"})")["ok"], true);
  EXPECT_LT(Clock::now() - start_time, 5s);
}

TEST_F(ControlChannelTest, AnIdleClientIsToldAndDisconnected) {
  dpa::sw::ControlChannelOptions options;
  options.idle_timeout = 200ms;
  start(options);
  const auto start_time = Clock::now();  // before the connection, which the idle time counts from
  Client idle(socket_path());
  const auto notice = idle.read_reply();
  ASSERT_TRUE(notice.has_value());
  EXPECT_GE(Clock::now() - start_time, 200ms);
  EXPECT_EQ((*notice)["ok"], false);
  EXPECT_THAT((*notice)["error"].get<std::string>(), HasSubstr("no request for 200 ms; closing"));
  EXPECT_TRUE(idle.closed_by_server());
  Client next(socket_path());
  EXPECT_EQ(next.request(R"({"op":"sessions"})")["ok"], true);
}

TEST_F(ControlChannelTest, OverLongRequestsAreRefusedAndTheirConnectionClosed) {
  dpa::sw::ControlChannelOptions options;
  options.max_request_bytes = 1024;
  start(options);
  {
    Client whole_line(socket_path());
    const auto reply = whole_line.request(std::string(2000, ' ') + R"({"op":"sessions"})");
    EXPECT_THAT(reply["error"].get<std::string>(), HasSubstr("request of 2017 bytes is longer than the limit of 1024"));
    EXPECT_TRUE(whole_line.closed_by_server());
  }
  {
    Client endless(socket_path());
    endless.send_text(std::string(8192, 'x'));  // never a newline
    const auto reply = endless.read_reply();
    ASSERT_TRUE(reply.has_value());
    EXPECT_THAT((*reply)["error"].get<std::string>(), HasSubstr("request longer than the limit of 1024 bytes"));
    EXPECT_TRUE(endless.closed_by_server());
  }
  Client next(socket_path());
  EXPECT_EQ(next.request(kAddSessionFive)["ok"], true);
}

TEST_F(ControlChannelTest, MalformedRequestsGetErrorsAndTheConnectionKeepsServing) {
  start({});
  Client client(socket_path());
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
  Client client(socket_path());
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
  Client client(socket_path());
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
  EXPECT_EQ(counters.size(), 24u);
  EXPECT_EQ(counters["busy_ns"], 0);
}

TEST_F(ControlChannelTest, RemovingASessionReturnsItsMemoryToTheBudget) {
  start({}, /*max_memory_mb=*/64);
  Client client(socket_path());
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
  Client first(socket_path());
  Client second(socket_path());
  EXPECT_EQ(first.request(R"({"op":"sessions"})")["ok"], true);
  EXPECT_EQ(second.request(R"({"op":"sessions"})")["ok"], true);
  Client third(socket_path());
  const auto refusal = third.read_reply();
  ASSERT_TRUE(refusal.has_value());
  EXPECT_THAT((*refusal)["error"].get<std::string>(), HasSubstr("serves at most 2 clients at once"));
  EXPECT_TRUE(third.closed_by_server());
  EXPECT_EQ(first.request(R"({"op":"sessions"})")["ok"], true);
}

// ---- who may use the channel ------------------------------------------------------------------

constexpr uid_t kNobody = 65534;

// What a process of uid 65534 got from the control socket at `path`: the errno of its connect
// (0: it connected) and, if it connected, the reply line to `request` (empty: none in 5 s).
struct OtherUserAttempt {
  int connect_errno = -1;
  std::string reply;
};

OtherUserAttempt attempt_as_nobody(const std::filesystem::path& path, const std::string& request) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  path.string().copy(address.sun_path, sizeof address.sun_path - 1);
  const std::string line = request + "\n";
  int results[2];
  if (pipe2(results, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return {};
  }
  const pid_t child = fork();
  if (child == 0) {
    // Only system calls from here on: the parent has other threads.
    close(results[0]);
    alarm(10);  // whatever happens, the child ends
    if (setgroups(0, nullptr) != 0 || setresgid(kNobody, kNobody, kNobody) != 0 ||
        setresuid(kNobody, kNobody, kNobody) != 0) {
      _exit(3);
    }
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int error = connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0 ? 0 : errno;
    if (write(results[1], &error, sizeof error) != sizeof error) _exit(4);
    if (error != 0) _exit(0);
    const timeval timeout{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    if (send(fd, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) _exit(5);
    char reply[4096];
    ssize_t received = 0;
    while ((received = recv(fd, reply, sizeof reply, 0)) > 0) {
      if (write(results[1], reply, static_cast<std::size_t>(received)) != received) _exit(6);
      if (std::memchr(reply, '\n', static_cast<std::size_t>(received)) != nullptr) break;
    }
    _exit(0);
  }
  close(results[1]);
  OtherUserAttempt attempt;
  std::string output;
  char buffer[4096];
  for (ssize_t n = 0; (n = read(results[0], buffer, sizeof buffer)) > 0;) output.append(buffer, static_cast<std::size_t>(n));
  close(results[0]);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the uid 65534 child failed, status " << status;
  if (output.size() >= sizeof attempt.connect_errno) {
    std::memcpy(&attempt.connect_errno, output.data(), sizeof attempt.connect_errno);
    attempt.reply = output.substr(sizeof attempt.connect_errno);
  }
  return attempt;
}

#define SKIP_UNLESS_ROOT()                                                                          \
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a client as uid 65534 (setresuid)"

// Restores the umask a test changed.
struct UmaskScope {
  mode_t saved;
  explicit UmaskScope(mode_t mask) : saved(umask(mask)) {}
  ~UmaskScope() { umask(saved); }
};

TEST_F(ControlChannelTest, TheSocketIsTheOwnersAloneWhateverTheUmaskAndGoesAtExit) {
  {
    const UmaskScope permissive(0);
    start({});
  }
  struct stat status {};
  ASSERT_EQ(lstat(socket_path().c_str(), &status), 0);
  EXPECT_TRUE(S_ISSOCK(status.st_mode));
  EXPECT_EQ(status.st_mode & 07777, 0600u);
  EXPECT_EQ(status.st_uid, geteuid());
  EXPECT_EQ(control_->where(), "unix:" + socket_path().string());
  control_.reset();
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(socket_path())));
  // No staging directory left behind either.
  EXPECT_TRUE(std::filesystem::is_empty(scratch_.path()));

  dpa::sw::ControlChannelOptions open;
  open.read_only_open = true;
  start(open);
  ASSERT_EQ(lstat(socket_path().c_str(), &status), 0);
  EXPECT_EQ(status.st_mode & 07777, 0666u);
}

TEST_F(ControlChannelTest, TheOwnerAddsAndRemovesSessionsAnotherUserCannotConnect) {
  SKIP_UNLESS_ROOT();
  start({});
  Client owner(socket_path());
  ASSERT_EQ(owner.request(kAddSessionFive)["ok"], true);
  const OtherUserAttempt attempt = attempt_as_nobody(socket_path(), R"({"op":"remove_session","id":5})");
  EXPECT_EQ(attempt.connect_errno, EACCES) << std::strerror(attempt.connect_errno);
  EXPECT_EQ(owner.request(R"({"op":"sessions"})")["sessions"], json::array({5}));
  EXPECT_EQ(owner.request(R"({"op":"remove_session","id":5})")["ok"], true);
  EXPECT_EQ(owner.request(R"({"op":"sessions"})")["sessions"], json::array());
}

TEST_F(ControlChannelTest, AnotherUserPastAWidenedFileModeIsRefusedByItsUid) {
  SKIP_UNLESS_ROOT();
  start({});
  Client owner(socket_path());
  ASSERT_EQ(owner.request(kAddSessionFive)["ok"], true);
  std::filesystem::permissions(socket_path(), std::filesystem::perms(0666));  // an operator's mistake
  const OtherUserAttempt attempt = attempt_as_nobody(socket_path(), R"({"op":"remove_session","id":5})");
  ASSERT_EQ(attempt.connect_errno, 0) << std::strerror(attempt.connect_errno);
  EXPECT_THAT(attempt.reply, HasSubstr(R"("ok":false)"));
  EXPECT_THAT(attempt.reply, HasSubstr("uid 65534"));
  EXPECT_THAT(attempt.reply, HasSubstr("may not use this control channel"));
  EXPECT_EQ(owner.request(R"({"op":"sessions"})")["sessions"], json::array({5}));
  const json control = owner.request(R"({"op":"counters"})")["control_channel"];
  EXPECT_EQ(control["connections_refused"], 1);
  EXPECT_EQ(control["connections"], 2);
}

TEST_F(ControlChannelTest, ReadOnlyOpenLetsAnotherUserReadButNotRemove) {
  SKIP_UNLESS_ROOT();
  dpa::sw::ControlChannelOptions options;
  options.read_only_open = true;
  start(options);
  Client owner(socket_path());
  ASSERT_EQ(owner.request(kAddSessionFive)["ok"], true);
  const OtherUserAttempt read = attempt_as_nobody(socket_path(), R"({"op":"sessions"})");
  ASSERT_EQ(read.connect_errno, 0) << std::strerror(read.connect_errno);
  EXPECT_EQ(json::parse(read.reply)["sessions"], json::array({5})) << read.reply;
  const OtherUserAttempt remove = attempt_as_nobody(socket_path(), R"({"op":"remove_session","id":5})");
  ASSERT_EQ(remove.connect_errno, 0);
  EXPECT_THAT(remove.reply, HasSubstr("remove_session: this connection may make only the read-only requests"));
  EXPECT_EQ(owner.request(R"({"op":"sessions"})")["sessions"], json::array({5}));
  EXPECT_EQ(owner.request(R"({"op":"counters"})")["control_channel"]["requests_refused"], 1);
}

TEST(ControlListener, AStaleSocketIsReplacedAndAnythingElseIsLeftAlone) {
  const ScratchDirectory scratch;
  const std::filesystem::path path = scratch.path() / "control.sock";
  dpa::SoftwareSwitch sw(switch_config());

  std::ofstream(path) << "the operator's file\n";
  try {
    dpa::sw::ControlChannel channel(sw, path);
    ADD_FAILURE() << "a regular file was replaced";
  } catch (const dpa::Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("refusing to replace it, it exists and is not a socket"));
  }
  std::string content;
  std::getline(std::ifstream(path), content);
  EXPECT_EQ(content, "the operator's file");
  std::filesystem::remove(path);

  {
    // A socket whose process is gone: bound, never listened on, closed.
    const int stale = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    path.string().copy(address.sun_path, sizeof address.sun_path - 1);
    ASSERT_EQ(bind(stale, reinterpret_cast<sockaddr*>(&address), sizeof address), 0) << std::strerror(errno);
    close(stale);
  }
  dpa::sw::ControlChannel first(sw, path);
  Client client(path);
  EXPECT_EQ(client.request(R"({"op":"sessions"})")["ok"], true);
  try {
    dpa::sw::ControlChannel second(sw, path);
    ADD_FAILURE() << "a live control socket was replaced";
  } catch (const dpa::Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("another process serves on it"));
  }
  EXPECT_EQ(client.request(R"({"op":"sessions"})")["ok"], true);
}

// The control channel over TCP on loopback, with the options of a test.
class TcpControlChannelTest : public testing::Test {
 protected:
  static constexpr const char* kSecret = "0123456789abcdef-the-secret";

  void start(const dpa::sw::ControlChannelOptions& options) {
    control_ = std::make_unique<dpa::sw::ControlChannel>(switch_, dpa::HostPort{"127.0.0.1", 0}, options);
  }
  [[nodiscard]] std::uint16_t port() const { return control_->port(); }

  dpa::SoftwareSwitch switch_{switch_config()};
  std::unique_ptr<dpa::sw::ControlChannel> control_;
};

TEST_F(TcpControlChannelTest, NeedsASecretOrReadOnlyOpen) {
  try {
    start({});
    ADD_FAILURE() << "a TCP control channel open to anyone started";
  } catch (const dpa::ConfigError& error) {
    EXPECT_THAT(error.what(), HasSubstr("--control-secret-file FILE"));
    EXPECT_THAT(error.what(), HasSubstr("--control-read-only-open"));
    EXPECT_THAT(error.what(), HasSubstr("--control PATH"));
  }
}

TEST_F(TcpControlChannelTest, OnlyTheSecretUnlocksRequests) {
  dpa::sw::ControlChannelOptions options;
  options.secret = kSecret;
  start(options);
  switch_.add_session(dpa::SessionConfig::from_json(R"({"id": 5, "world_size": 2, "pool_size": 256})", "session"));
  {
    Client stranger(port());
    for (const char* request : {R"({"op":"remove_session","id":5})", R"({"op":"counters"})"}) {
      const json reply = stranger.request(request);
      EXPECT_EQ(reply["ok"], false) << request;
      EXPECT_THAT(reply["error"].get<std::string>(), HasSubstr("needs an authenticated connection")) << request;
    }
    const json wrong = stranger.request(R"({"op":"auth","secret":"0123456789abcdef-not-it"})");
    EXPECT_EQ(wrong["ok"], false);
    EXPECT_THAT(wrong["error"].get<std::string>(), HasSubstr("auth: wrong secret; closing"));
    EXPECT_TRUE(stranger.closed_by_server());
  }
  EXPECT_EQ(switch_.session_ids(), std::vector<std::uint32_t>{5});
  Client trusted(port());
  EXPECT_EQ(trusted.request(json{{"op", "auth"}, {"secret", kSecret}}.dump())["ok"], true);
  EXPECT_EQ(trusted.request(R"({"op":"remove_session","id":5})")["ok"], true);
  EXPECT_EQ(trusted.request(kAddSessionFive)["ok"], true);
  const json control = trusted.request(R"({"op":"counters"})")["control_channel"];
  EXPECT_EQ(control["requests_refused"], 2);
  EXPECT_EQ(control["authentications_failed"], 1);
}

TEST(ControlChannelLog, NeverHoldsTheSecret) {
  std::string logged;
  {
    const dpa::test::CapturedLog log(spdlog::level::info);
    {
      dpa::SoftwareSwitch sw(switch_config());
      dpa::sw::ControlChannelOptions options;
      options.secret = "0123456789abcdef-the-secret";
      dpa::sw::ControlChannel channel(sw, dpa::HostPort{"127.0.0.1", 0}, options);
      Client trusted(channel.port());
      EXPECT_EQ(trusted.request(R"({"op":"auth","secret":"0123456789abcdef-the-secret"})")["ok"], true);
      Client guessing(channel.port());
      EXPECT_EQ(guessing.request(R"({"op":"auth","secret":"0123456789abcdef-a-guess"})")["ok"], false);
    }
    logged = log.text();
  }
  EXPECT_THAT(logged, HasSubstr(R"json({"op":"auth","secret":"(hidden)"} -> {"ok":true})json"));
  EXPECT_THAT(logged, HasSubstr("wrong secret"));
  EXPECT_THAT(logged, testing::Not(HasSubstr("the-secret")));
  EXPECT_THAT(logged, testing::Not(HasSubstr("a-guess")));
}

TEST_F(TcpControlChannelTest, ReadOnlyOpenServesCountersButNotRemoveSession) {
  dpa::sw::ControlChannelOptions options;
  options.read_only_open = true;
  start(options);
  switch_.add_session(dpa::SessionConfig::from_json(R"({"id": 5, "world_size": 2, "pool_size": 256})", "session"));
  Client monitor(port());
  EXPECT_EQ(monitor.request(R"({"op":"counters"})")["ok"], true);
  EXPECT_EQ(monitor.request(R"({"op":"session_status"})")["sessions"][0]["id"], 5);
  for (const char* request : {R"({"op":"remove_session","id":5})", kAddSessionFive, R"({"op":"set_clock","ticks":1})",
                              R"({"op":"auth","secret":"0123456789abcdef"})"}) {
    EXPECT_EQ(monitor.request(request)["ok"], false) << request;
  }
  EXPECT_EQ(switch_.session_ids(), std::vector<std::uint32_t>{5});
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

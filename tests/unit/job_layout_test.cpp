// SPDX-License-Identifier: Apache-2.0
// Where a job's ranks run and how that sizes it (dpa/job_layout.hpp, dpa/job_sizing.hpp): the
// rule of docs/multi-host.md, table by table.
#include <cstdlib>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../captured_log.hpp"
#include "dpa/error.hpp"
#include "dpa/job_layout.hpp"
#include "dpa/job_sizing.hpp"

using dpa::RankPlacement;

namespace {

RankPlacement placement(const std::string& host, std::uint32_t max_payload, const std::string& transport = "udp") {
  dpa::RankPlacement rank;
  rank.host_key = "boot=b net=1:" + host + " shm=2:" + host;
  rank.hostname = "host-" + host;
  rank.address = "10.0.0." + host;
  rank.transport = transport;
  rank.max_payload = max_payload;
  return rank;
}

// The variables JobSizing reads, unset for the test and restored after it.
class JobSizingTest : public ::testing::Test {
 protected:
  static constexpr const char* kVariables[] = {"DPA_THREADS",    "DPA_WINDOW",         "DPA_PAYLOAD",
                                               "DPA_BUSY_POLL_US", "DPA_SWITCH_THREADS", "DPA_SWITCH_BUFFER_BYTES",
                                               "DPA_SMALL_BUSY_POLL_US", "DPA_SWITCH_BUSY_POLL_US", "DPA_TRANSPORT",  "DPA_LOCAL_HOST",     "DPA_LOCAL_PORT",
                                               "DPA_SHM_DIR"};
  void SetUp() override {
    for (const char* name : kVariables) {
      if (const char* value = std::getenv(name)) saved_.emplace_back(name, value);
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    for (const char* name : kVariables) ::unsetenv(name);
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }

  // 16 cores, roomy buffers and shared memory.
  static dpa::HostResources host() {
    dpa::HostResources resources;
    resources.cores = 16;
    resources.shm_free_bytes = std::uint64_t{1} << 34;
    resources.worker_receive_buffer = 16 << 20;
    resources.switch_receive_buffer = 32 << 20;
    resources.switch_buffer_request = 32 << 20;
    return resources;
  }

 private:
  std::vector<std::pair<std::string, std::string>> saved_;
};

}  // namespace

TEST(JobLayout, PayloadForMtuLeavesRoomForTheHeaders) {
  EXPECT_EQ(dpa::payload_for_mtu(1500), 356u);  // 1500 - 20 (IPv4) - 8 (UDP) - 48 (dpa) = 4 x 356
  EXPECT_EQ(dpa::payload_for_mtu(9000), 2231u);
  EXPECT_EQ(dpa::payload_for_mtu(1280), 301u);
  EXPECT_EQ(dpa::payload_for_mtu(40), 1u);
}

// An authenticated session's packets end with an 8-byte tag (protocol.md §6.6): two values fewer,
// so that header, values and tag still fit the MTU.
TEST(JobLayout, PayloadForMtuLeavesRoomForTheTagWhenAuthenticated) {
  for (const std::uint32_t mtu : {1500u, 9000u, 1280u, 1503u}) {
    SCOPED_TRACE("MTU " + std::to_string(mtu));
    const std::uint32_t payload = dpa::payload_for_mtu(mtu, true);
    EXPECT_LE(20 + 8 + 48 + 4 * payload + dpa::kAuthTagBytes, mtu);
    EXPECT_GT(20 + 8 + 48 + 4 * (payload + 1) + dpa::kAuthTagBytes, mtu);  // the largest that fits
  }
  EXPECT_EQ(dpa::payload_for_mtu(1500, true), 349u);  // 1500 - 20 - 8 - 48 - 28 = 4 x 349
  EXPECT_EQ(dpa::payload_for_mtu(40, true), 1u);
  const dpa::Config config;
  EXPECT_EQ(RankPlacement::probe(config, "", "/dev/shm", true).max_payload, 349u);  // no route known: MTU 1500
}

TEST(JobLayout, RanksOfOtherHostsAndTheSmallestPath) {
  const dpa::JobLayout layout = dpa::JobLayout::of(
      {placement("1", 200), placement("1", 200), placement("2", 356), placement("2", 356), placement("3", 301)});
  EXPECT_EQ(layout.world_size, 5);
  EXPECT_EQ(layout.ranks_per_host, 2);
  EXPECT_EQ(layout.remote_ranks, (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(layout.max_payload, 301u);
  EXPECT_TRUE(layout.spans_hosts());

  const dpa::JobLayout one_host = dpa::JobLayout::of({placement("1", 356), placement("1", 356)});
  EXPECT_FALSE(one_host.spans_hosts());
  EXPECT_FALSE(one_host.over_network());
  EXPECT_EQ(one_host.ranks_per_host, 2);
  EXPECT_EQ(one_host.max_payload, 0u);  // loopback to the switch
}

TEST(JobLayout, PlacementTravelsAsText) {
  const RankPlacement sent = placement("7", 356, "dpdk");
  const RankPlacement received = RankPlacement::from_text(sent.to_text());
  EXPECT_EQ(received.host_key, sent.host_key);
  EXPECT_EQ(received.hostname, sent.hostname);
  EXPECT_EQ(received.address, sent.address);
  EXPECT_EQ(received.transport, "dpdk");
  EXPECT_EQ(received.max_payload, 356u);
  EXPECT_TRUE(received.same_host(sent));
  EXPECT_THROW(RankPlacement::from_text("boot=b net=1:1"), dpa::Error);
}

TEST(JobLayout, ThisProcessIsOnItsOwnHost) {
  const dpa::Config config;
  const RankPlacement here = RankPlacement::probe(config, "127.0.0.1", "/dev/shm");
  EXPECT_TRUE(here.same_host(RankPlacement::probe(config, "", "/dev/shm")));
  // Another shared-memory directory is another host for the embedded switch's shm transport.
  EXPECT_FALSE(here.same_host(RankPlacement::probe(config, "", "/")));
  EXPECT_EQ(here.address, "127.0.0.1");
  EXPECT_EQ(here.max_payload, dpa::payload_for_mtu(dpa::route_to("127.0.0.1", "test").mtu));
  EXPECT_EQ(RankPlacement::probe(config, "", "/dev/shm").max_payload, 356u);  // no route known: MTU 1500
  EXPECT_TRUE(dpa::is_loopback("127.0.1.1"));
  EXPECT_FALSE(dpa::is_loopback("10.0.0.1"));
  EXPECT_EQ(dpa::interface_mtu("0.0.0.0"), 0u);
  EXPECT_GT(dpa::interface_mtu("127.0.0.1"), 0u);
}

TEST_F(JobSizingTest, OneHostKeepsLoopbackSizing) {
  const dpa::JobSizing single = dpa::JobSizing::for_job(4, host(), dpa::Config{});
  const dpa::JobSizing laid_out =
      dpa::JobSizing::for_job(dpa::JobLayout::of({placement("1", 356), placement("1", 356), placement("1", 356),
                                                  placement("1", 356)}),
                              host(), dpa::Config{});
  for (const dpa::JobSizing& sizing : {single, laid_out}) {
    EXPECT_EQ(sizing.payload, 16000u);
    EXPECT_EQ(sizing.small_payload, 1024u);
    EXPECT_EQ(sizing.threads, 4);
    EXPECT_NE(sizing.shm_fabric, 0u);
  }
}

// What the library logs while `body` runs, at warn and above.
template <typename Body>
std::string logged_by(Body body) {
  const dpa::test::CapturedLog log(spdlog::level::warn);
  body();
  return log.text();
}

// configuration.md §8: a rank's small queue holds packets of the small payload (4 KiB), not the
// wide one's, and the room asked for counts it so.
TEST_F(JobSizingTest, SharedMemoryRoomCountsTheSmallQueueAtItsPayload) {
  const dpa::JobSizing sizing = dpa::JobSizing::for_job(4, host(), dpa::Config{});
  ASSERT_NE(sizing.shm_fabric, 0u);
  ASSERT_GT(sizing.small_payload, 0u);
  dpa::JobSizing without_small = sizing;
  without_small.small_payload = 0;
  dpa::JobSizing one_more_thread = without_small;
  ++one_more_thread.threads;
  const std::uint64_t small_queues = sizing.shm_bytes(4) - without_small.shm_bytes(4);
  const std::uint64_t wide_queues = one_more_thread.shm_bytes(4) - without_small.shm_bytes(4);
  EXPECT_GT(small_queues, 0u);
  EXPECT_LT(small_queues * 8, wide_queues);  // 4 KiB against 64 KB packets, the same buffer count
}

// configuration.md §8: shared memory only with twice the job's buffers free; short of that the
// job runs on UDP and says why, with the remedies, unless the user asked for UDP.
TEST_F(JobSizingTest, TooLittleSharedMemoryFallsBackToUdpAndSaysSo) {
  dpa::HostResources small = host();
  small.shm_free_bytes = std::uint64_t{64} << 20;  // a container's default /dev/shm
  dpa::JobSizing sizing;
  const std::string warning = logged_by([&] { sizing = dpa::JobSizing::for_job(4, small, dpa::Config{}); });
  EXPECT_EQ(sizing.shm_fabric, 0u);
  EXPECT_THAT(warning, testing::HasSubstr("MiB free in /dev/shm"));
  EXPECT_THAT(warning, testing::HasSubstr("/dev/shm has 64 MiB: the ranks use UDP on loopback instead"));
  EXPECT_THAT(warning, testing::HasSubstr("--shm-size"));
  EXPECT_THAT(warning, testing::HasSubstr("DPA_TRANSPORT=udp"));

  EXPECT_EQ(logged_by([&] { sizing = dpa::JobSizing::for_job(4, host(), dpa::Config{}); }), "");
  EXPECT_NE(sizing.shm_fabric, 0u);
  ::setenv("DPA_TRANSPORT", "udp", 1);
  EXPECT_EQ(logged_by([&] { sizing = dpa::JobSizing::for_job(4, small, dpa::Config{}); }), "");
  EXPECT_EQ(sizing.shm_fabric, 0u);
}

// configuration.md §8: engine threads are the host's share of cores per rank rounded up (at most
// 4); switch threads at least as many, and half the cores (at most 8) with up to 4 ranks on the
// host, a quarter (at most 4) with more.
TEST_F(JobSizingTest, ThreadsFollowRanksPerHostAndCores) {
  struct Case {
    int ranks, cores, threads, switch_threads;
  };
  for (const Case c : {Case{2, 16, 4, 8}, Case{4, 16, 4, 8}, Case{5, 16, 4, 4}, Case{8, 16, 2, 4}, Case{12, 16, 2, 4},
                       Case{16, 16, 1, 4}, Case{32, 16, 1, 4}, Case{4, 32, 4, 8}, Case{4, 8, 2, 4}, Case{2, 2, 1, 1},
                       Case{3, 2, 1, 1}, Case{4, 2, 1, 1}, Case{1, 2, 2, 2}, Case{6, 8, 2, 2}}) {
    SCOPED_TRACE(std::to_string(c.ranks) + " ranks on " + std::to_string(c.cores) + " cores");
    dpa::HostResources resources = host();
    resources.cores = c.cores;
    const dpa::JobSizing sizing = dpa::JobSizing::for_job(c.ranks, resources, dpa::Config{});
    EXPECT_EQ(sizing.threads, c.threads);
    EXPECT_EQ(sizing.switch_threads, c.switch_threads);
  }
}

TEST_F(JobSizingTest, AcrossHostsUdpPacketsFitEveryPath) {
  const dpa::JobLayout layout = dpa::JobLayout::of({placement("1", 16365), placement("1", 16365),
                                                    placement("2", 356), placement("2", 356)});
  const dpa::JobSizing sizing = dpa::JobSizing::for_job(layout, host(), dpa::Config{});
  EXPECT_EQ(sizing.payload, 356u);
  EXPECT_EQ(sizing.small_payload, 0u);  // one session: the small one's packets would be larger
  EXPECT_EQ(sizing.shm_fabric, 0u);     // UDP: the switch serves one transport
  EXPECT_EQ(sizing.threads, 4);         // 16 cores for the 2 ranks of a host, at most 4
  EXPECT_EQ(sizing.window, 64);
}

TEST_F(JobSizingTest, SwitchOnTheNetworkOnOneHostUsesUdpToo) {
  dpa::JobLayout layout = dpa::JobLayout::single_host(2);
  layout.switch_on_network = true;
  layout.max_payload = 2231;
  const dpa::JobSizing sizing = dpa::JobSizing::for_job(layout, host(), dpa::Config{});
  EXPECT_EQ(sizing.payload, 2231u);
  EXPECT_EQ(sizing.small_payload, 1024u);
  EXPECT_EQ(sizing.shm_fabric, 0u);
}

// configuration.md §8: the small session spins where each rank and the switch keep a spare core,
// and only its callers and switch thread 0 do unless every thread has one.
TEST_F(JobSizingTest, SpinningFollowsSpareCores) {
  using std::chrono::microseconds;
  dpa::HostResources resources = host();
  resources.cores = 16;
  dpa::JobSizing sizing = dpa::JobSizing::for_job(4, resources, dpa::Config{});
  EXPECT_EQ(sizing.small_busy_poll, microseconds(1000));
  EXPECT_EQ(sizing.busy_poll, microseconds(0));
  dpa::Config wide;
  const dpa::SwitchConfig spinning_zero = sizing.switch_config(wide, sizing.small_config(wide), microseconds(10000));
  EXPECT_EQ(spinning_zero.busy_poll, microseconds(1000));
  EXPECT_EQ(spinning_zero.busy_poll_threads, 1);

  resources.cores = 8;  // 4 ranks and the switch: fewer than two cores each
  EXPECT_EQ(dpa::JobSizing::for_job(4, resources, dpa::Config{}).small_busy_poll, microseconds(0));

  ::setenv("DPA_SMALL_BUSY_POLL_US", "700", 1);
  sizing = dpa::JobSizing::for_job(4, resources, dpa::Config{});
  EXPECT_EQ(sizing.small_busy_poll, microseconds(700));
  EXPECT_EQ(sizing.busy_poll, microseconds(0));
  EXPECT_EQ(sizing.small_config(wide).busy_poll, microseconds(700));
  ::setenv("DPA_SMALL_BUSY_POLL_US", "-1", 1);
  EXPECT_THROW(dpa::JobSizing::for_job(4, resources, dpa::Config{}), dpa::ConfigError);
}

// DPA_SWITCH_BUSY_POLL_US: every thread of the embedded switch spins, whatever the sessions do.
TEST_F(JobSizingTest, SwitchSpinVariableSpinsEverySwitchThread) {
  using std::chrono::microseconds;
  dpa::HostResources resources = host();
  resources.cores = 16;
  ::setenv("DPA_SWITCH_BUSY_POLL_US", "300", 1);
  const dpa::JobSizing sizing = dpa::JobSizing::for_job(4, resources, dpa::Config{});
  EXPECT_EQ(sizing.switch_busy_poll, microseconds(300));
  EXPECT_EQ(sizing.busy_poll, microseconds(0));  // the engines keep theirs
  EXPECT_EQ(dpa::JobSizing::from_text(sizing.to_text()).switch_busy_poll, microseconds(300));
  dpa::Config wide;
  const dpa::SwitchConfig spinning = sizing.switch_config(wide, sizing.small_config(wide), microseconds(10000));
  EXPECT_EQ(spinning.busy_poll, microseconds(1000));  // the small session's spin is longer
  EXPECT_EQ(spinning.busy_poll_threads, 0);
  ::setenv("DPA_SWITCH_BUSY_POLL_US", "2000", 1);
  EXPECT_EQ(dpa::JobSizing::for_job(4, resources, dpa::Config{}).switch_config(wide, std::nullopt, microseconds(10000)).busy_poll,
            microseconds(2000));
  ::setenv("DPA_SWITCH_BUSY_POLL_US", "1000001", 1);
  EXPECT_THROW(dpa::JobSizing::for_job(4, resources, dpa::Config{}), dpa::ConfigError);
}

// configuration.md §8: each switch thread's shared-memory queue holds results of the slots that
// thread owns (protocol.md §7.1), not of the whole pool.
TEST_F(JobSizingTest, SwitchBuffersCountTheSlotsEachSwitchThreadOwns) {
  dpa::HostResources resources = host();
  resources.cores = 16;
  const dpa::JobSizing sizing = dpa::JobSizing::for_job(4, resources, dpa::Config{});
  ASSERT_NE(sizing.shm_fabric, 0u);
  ASSERT_EQ(sizing.threads, 4);
  ASSERT_EQ(sizing.switch_threads, 8);
  ASSERT_EQ(sizing.window, 8);
  ASSERT_EQ(sizing.small_window, 16);
  // Switch thread i owns entries of worker thread i mod 4 (2 of its 8 switch threads each: 4
  // entries) and 2 of the small session's 16: 12 slots, not the pool's 2 * (4 * 8 + 16) = 96.
  EXPECT_EQ(sizing.switch_shm_buffers, 2 * 12 + 64);
  dpa::Config wide;
  sizing.configure_wide(wide);
  const dpa::SwitchConfig embedded = sizing.switch_config(wide, sizing.small_config(wide), std::chrono::microseconds(10000));
  EXPECT_EQ(std::get<dpa::ShmTransportConfig>(embedded.transport).buffers, 2u * 12 + 64);
  // One switch thread owns every slot.
  ::setenv("DPA_SWITCH_THREADS", "1", 1);
  EXPECT_EQ(dpa::JobSizing::for_job(4, resources, dpa::Config{}).switch_shm_buffers, 2 * 96 + 64);
}

TEST_F(JobSizingTest, PayloadVariableStillWins) {
  ::setenv("DPA_PAYLOAD", "1024", 1);
  dpa::Config from_env;
  from_env.payload = 1024;
  const dpa::JobLayout layout = dpa::JobLayout::of({placement("1", 356), placement("2", 356)});
  EXPECT_EQ(dpa::JobSizing::for_job(layout, host(), from_env).payload, 1024u);
}

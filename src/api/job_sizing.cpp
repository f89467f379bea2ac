// SPDX-License-Identifier: Apache-2.0
#include "dpa/job_sizing.hpp"

#include <sched.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <initializer_list>
#include <map>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "common/logging.hpp"
#include "dpa/env.hpp"
#include "dpa/error.hpp"
#include "protocol/wire.hpp"

namespace dpa {
namespace {

constexpr int kWorkerBufferRequest = 16 << 20;  // what libdpa asks for per worker socket
constexpr std::uint32_t kHeaderBytes = 48;       // protocol 2's header; protocol 1's is smaller
// On loopback a datagram may carry up to 64 KB: libdpa's largest payload fits.
constexpr std::uint32_t kLoopbackPayload = 16000;
// A 4 KiB tensor in one packet with nothing to pad: measured on one rank's round trip through the
// embedded switch, 6.3 us at 2048 values, 5.1 at 1024 (docs/benchmarks.md).
constexpr std::uint32_t kSmallPayload = 1024;
constexpr int kMaxThreads = 4;                    // measured: gains stop there on loopback
// The embedded switch carries every rank's traffic: with few ranks per host it takes up to half
// the cores (4 ranks on 16 cores, 64 MiB: S = 8 beat S = 4 by 1.2-1.3x); with more ranks their
// engine threads take the cores and a quarter is what was measured (8 and 12 ranks, S = 4).
constexpr int kMaxSwitchThreads = 8;
constexpr int kFewRanksPerHost = 4;
constexpr std::int64_t kInFlightPerThread = 512 << 10;  // bytes: covers loopback's round trip
// The kernel charges a datagram's buffer (its truesize) against the receive buffer, not just its
// bytes; twice the datagram is a safe bound on loopback.
constexpr std::int64_t kTruesizeFactor = 2;
// Covers a loopback round trip through the switch, so a spinning thread rarely sleeps mid-op.
constexpr std::chrono::microseconds kSpin{50};
// The small session's: covers the gap between one small operation and the next (a barrier, a
// step's other buckets), so switch thread 0 is still awake when the ranks send together. With 50
// us it had gone to sleep, and its wake-up stood in every rank's path: 4 KiB p99 136-215 us
// against 88-112 with 1000 (H200 host, 4 ranks, 5 alternating pairs; docs/benchmarks.md).
constexpr std::chrono::microseconds kSmallSpin{1000};

// A container's /dev/shm is often 64 MiB: the job then runs on UDP, slower from about 1 MiB
// (docs/configuration.md §8), and says so once, with the remedies.
void warn_shared_memory_declined(std::uint64_t free_bytes, std::uint64_t job_bytes) {
  constexpr double kMiB = 1 << 20;
  const std::string directory = env_string("DPA_SHM_DIR").value_or(ShmTransportConfig{}.directory);
  detail::log().warn(
      "sizing: shared memory between the ranks and the embedded switch needs {:.0f} MiB free in {} (twice its "
      "{:.0f} MiB of buffers), and {} has {:.0f} MiB: the ranks use UDP on loopback instead, slower from about "
      "1 MiB per operation. Give it room (docker run --shm-size=1g, or a larger tmpfs in DPA_SHM_DIR), or set "
      "DPA_TRANSPORT=udp to choose UDP",
      2 * static_cast<double>(job_bytes) / kMiB, directory, static_cast<double>(job_bytes) / kMiB, directory,
      static_cast<double>(free_bytes) / kMiB);
}

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// What a UDP socket's receive buffer becomes for `requested` bytes: forced where the process may
// (CAP_NET_ADMIN), else capped by net.core.rmem_max, as libdpa's transport does.
int effective_receive_buffer(int requested) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return 0;
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &requested, sizeof(requested)) != 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &requested, sizeof(requested));
  }
  int actual = 0;
  socklen_t length = sizeof(actual);
  ::getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &actual, &length);
  ::close(fd);
  return actual;
}

std::int64_t charged_bytes(std::uint32_t payload) {
  return kTruesizeFactor * (kHeaderBytes + 4 * static_cast<std::int64_t>(payload));
}

bool is_set(const char* name) { return env_string(name).has_value(); }

// Bytes of one shared-memory queue: its inbox and `buffers` buffers of `payload` values (the
// segment layout of libdpa's shm transport, rounded up).
std::uint64_t shm_queue_bytes(int buffers, std::uint32_t payload) {
  const std::uint64_t kInbox = std::uint64_t{ShmTransportConfig{}.ring} * 16 + 8192;
  return kInbox + static_cast<std::uint64_t>(buffers) * (64 + kHeaderBytes + kAuthTagBytes + 4 * std::uint64_t{payload} + 63) / 64 * 64;
}

// A switch thread's shared-memory queue holds one result per slot it owns until every rank has
// read it, twice over, and 64 more (JOIN acks, errors, its stash of a burst). It owns the slots
// of the window entries protocol.md §7.1 maps to it, two per entry, over every session (threads,
// window); counted per thread, not over the whole pool, which each of S threads would otherwise
// reserve in full.
int switch_thread_buffers(int switch_threads, std::initializer_list<std::pair<int, int>> sessions) {
  const auto count = static_cast<std::uint32_t>(std::max(1, switch_threads));
  std::vector<int> slots(count, 0);
  for (const auto& [threads, window] : sessions) {
    for (int t = 0; t < threads; ++t) {
      for (int e = 0; e < window; ++e) {
        slots[protocol::SlotLayout::switch_thread(static_cast<std::uint32_t>(t), static_cast<std::uint32_t>(e),
                                                  static_cast<std::uint32_t>(threads), count)] += 2;
      }
    }
  }
  return std::clamp(2 * std::ranges::max(slots) + 64, 16, 65536);
}

std::uint64_t free_bytes(const std::string& directory) {
  struct statvfs status {};
  if (statvfs(directory.c_str(), &status) != 0) return 0;
  return static_cast<std::uint64_t>(status.f_bavail) * status.f_frsize;
}

// Sockets were asked for (or another transport): no shared memory for the embedded switch.
bool sockets_requested() {
  const auto transport = env_string("DPA_TRANSPORT");
  if (transport) return *transport != "shm";
  return is_set("DPA_LOCAL_HOST") || is_set("DPA_LOCAL_PORT");
}

std::uint64_t new_fabric_id() {
  std::random_device entropy;
  const std::uint64_t id = (std::uint64_t{entropy()} << 32 | entropy()) & ((std::uint64_t{1} << 53) - 1);
  return std::max<std::uint64_t>(id, 1);
}

}  // namespace

HostResources HostResources::probe(int switch_buffer_request) {
  HostResources host;
  host.cores = available_cores();
  host.shm_free_bytes = free_bytes(env_string("DPA_SHM_DIR").value_or(ShmTransportConfig{}.directory));
  host.worker_receive_buffer = effective_receive_buffer(kWorkerBufferRequest);
  host.switch_buffer_request = switch_buffer_request;
  host.switch_receive_buffer = effective_receive_buffer(switch_buffer_request);
  return host;
}

JobSizing JobSizing::for_job(int world_size, const HostResources& host, const Config& from_env,
                             std::optional<bool> shared_memory) {
  return for_job(JobLayout::single_host(world_size), host, from_env, shared_memory);
}

JobSizing JobSizing::for_job(const JobLayout& layout, const HostResources& host, const Config& from_env,
                             std::optional<bool> shared_memory) {
  JobSizing sizing;
  // Every rank sends to the switch; the ranks of one host share its cores (rank 0's are the
  // ones known here, and the switch runs there too): each gets its share for engine threads,
  // rounded up (engine threads sleep while they wait, and measured on 16 cores with 12 ranks, 2
  // threads each moved 1.7x what 1 did), and the switch as many threads as a rank has, or more:
  // half the cores with up to 4 ranks here, a quarter with more (12 ranks: 4 switch threads beat
  // 2 by 1.1x).
  const int ranks = std::max(1, layout.world_size);
  const int ranks_here = std::clamp(layout.ranks_per_host, 1, ranks);
  sizing.threads = std::clamp((host.cores + ranks_here - 1) / ranks_here, 1, kMaxThreads);
  sizing.switch_threads = ranks_here <= kFewRanksPerHost
                              ? std::clamp(host.cores / 2, sizing.threads, kMaxSwitchThreads)
                              : std::clamp(host.cores / 4, sizing.threads, kMaxThreads);
  // Across hosts a packet must cross every rank's path unfragmented (a lost fragment loses the
  // whole datagram, and a Tofino never reassembles).
  sizing.payload = layout.over_network() && layout.max_payload != 0 ? std::min(kLoopbackPayload, layout.max_payload)
                                                                    : kLoopbackPayload;
  sizing.small_payload = kSmallPayload;
  // Shared memory reaches the ranks of one host, and the switch serves one transport.
  if (layout.over_network()) shared_memory = false;
  sizing.apply_overrides(from_env);
  if (sizing.payload <= sizing.small_payload) sizing.small_payload = 0;

  // Window: enough bytes in flight per thread for loopback's round trip; on sockets no more than
  // the receive buffers hold when everything in flight arrives at once (a worker socket receives
  // its own `window` results, a switch socket the requests of every worker thread mapped to it).
  // Shared-memory inboxes hold thousands of packets, far more than any window here.
  const std::int64_t packet = charged_bytes(sizing.payload);
  std::int64_t window = std::max<std::int64_t>(2, kInFlightPerThread / (packet / kTruesizeFactor));
  const std::int64_t shm_window = std::clamp<std::int64_t>(window, 1, 64);
  if (!is_set("DPA_WINDOW")) {
    const int threads_per_switch_thread =
        (sizing.threads + sizing.switch_threads - 1) / sizing.switch_threads;
    window = std::min(window, host.worker_receive_buffer / packet);
    window = std::min(window, host.switch_receive_buffer / (packet * ranks * threads_per_switch_thread));
    sizing.window = static_cast<int>(std::clamp<std::int64_t>(window, 1, 64));
  }
  if (shared_memory.value_or(!sockets_requested())) {
    JobSizing shared = sizing;
    if (!is_set("DPA_WINDOW")) shared.window = static_cast<int>(shm_window);
    // A rank's queue holds each window entry's packet and probe, and as many again in flight.
    shared.shm_buffers = 4 * std::max(shared.window, shared.small_window) + 32;
    shared.switch_shm_buffers = switch_thread_buffers(
        shared.switch_threads, {{shared.threads, shared.window}, {shared.small_payload > 0 ? 1 : 0, shared.small_window}});
    // Use it only with room to spare: a full tmpfs fails a segment at creation, with the sizes.
    // A caller that has chosen shared memory gets its sizing whatever the room.
    if (shared_memory.has_value() || host.shm_free_bytes >= 2 * shared.shm_bytes(ranks)) {
      sizing = shared;
      sizing.shm_fabric = new_fabric_id();
    } else {
      warn_shared_memory_declined(host.shm_free_bytes, shared.shm_bytes(ranks));
    }
  }
  if (!is_set("DPA_SWITCH_BUFFER_BYTES")) sizing.switch_buffer_bytes = host.switch_buffer_request;
  // Spinning pays only where every engine and switch thread still has a core of its own, with
  // room to spare; the small session's waiting callers and switch thread 0 need far fewer.
  if (!is_set("DPA_BUSY_POLL_US")) {
    if (host.cores >= 2 * (ranks_here * (sizing.threads + 1) + sizing.switch_threads)) {
      sizing.busy_poll = kSpin;
    }
    if (host.cores >= 2 * (ranks_here + 1) && !is_set("DPA_SMALL_BUSY_POLL_US")) sizing.small_busy_poll = kSmallSpin;
  }
  return sizing;
}

std::uint64_t JobSizing::shm_bytes(int ranks) const {
  // A rank's wide queues carry packets of the payload, its small queue (small_config) the small
  // payload's; the switch's queues the larger of the two.
  const std::uint64_t rank_bytes =
      static_cast<std::uint64_t>(threads) * shm_queue_bytes(shm_buffers, payload) +
      (small_payload > 0 ? shm_queue_bytes(shm_buffers, std::max<std::uint32_t>(small_payload, 1024)) : 0);  // 4096 B at least
  return static_cast<std::uint64_t>(ranks) * rank_bytes +
         static_cast<std::uint64_t>(switch_threads) * shm_queue_bytes(switch_shm_buffers, std::max(payload, small_payload));
}

void JobSizing::apply_overrides(const Config& from_env) {
  // Config::from_env() has read and checked the worker's variables.
  if (is_set("DPA_THREADS")) threads = from_env.threads;
  if (is_set("DPA_WINDOW")) window = from_env.window;
  // DPA_PAYLOAD=0 means the session's payload, which is the one sized here.
  if (from_env.payload != 0 && is_set("DPA_PAYLOAD")) {
    // One payload for everything: the user chose it.
    payload = from_env.payload;
    small_payload = 0;
  }
  if (is_set("DPA_BUSY_POLL_US")) busy_poll = small_busy_poll = from_env.busy_poll;
  // The small session's alone: its waiting callers and the switch thread that serves it.
  if (const auto value = env_integer("DPA_SMALL_BUSY_POLL_US", 0, 1'000'000)) {
    small_busy_poll = std::chrono::microseconds(*value);
  }
  // The embedded switch's own.
  if (const auto value = env_integer("DPA_SWITCH_THREADS", 1, 64)) switch_threads = static_cast<int>(*value);
  if (const auto value = env_integer("DPA_SWITCH_BUSY_POLL_US", 0, 1'000'000)) {
    switch_busy_poll = std::chrono::microseconds(*value);
  }
  if (const auto value = env_integer("DPA_SWITCH_BUFFER_BYTES", 4096, std::int64_t{1} << 30)) {
    switch_buffer_bytes = static_cast<int>(*value);
  }
}

// Plain string building, no iostreams: a toolchain that links libstdc++ statically into the
// extension (seen on the GPU host's /opt/gcc) crashed in its private copy's stream locale.
std::string JobSizing::to_text() const {
  return "threads=" + std::to_string(threads) + " window=" + std::to_string(window) +
         " payload=" + std::to_string(payload) + " small_payload=" + std::to_string(small_payload) +
         " small_window=" + std::to_string(small_window) +
         " switch_threads=" + std::to_string(switch_threads) +
         " switch_buffer_bytes=" + std::to_string(switch_buffer_bytes) +
         " busy_poll_us=" + std::to_string(busy_poll.count()) +
         " small_busy_poll_us=" + std::to_string(small_busy_poll.count()) +
         " switch_busy_poll_us=" + std::to_string(switch_busy_poll.count()) +
         " shm_fabric=" + std::to_string(shm_fabric) + " shm_buffers=" + std::to_string(shm_buffers) +
         " switch_shm_buffers=" + std::to_string(switch_shm_buffers);
}

JobSizing JobSizing::from_text(const std::string& text) {
  std::map<std::string, long long> fields;
  for (std::size_t begin = 0; begin < text.size();) {
    const std::size_t end = std::min(text.find(' ', begin), text.size());
    const std::string field = text.substr(begin, end - begin);
    begin = end + 1;
    if (field.empty()) continue;
    const auto equals = field.find('=');
    if (equals == std::string::npos) throw Error("dpa: malformed job sizing from rank 0: " + text);
    fields[field.substr(0, equals)] = std::stoll(field.substr(equals + 1));
  }
  const auto get = [&](const char* name) {
    const auto found = fields.find(name);
    if (found == fields.end()) throw Error("dpa: job sizing from rank 0 lacks " + std::string(name));
    return found->second;
  };
  JobSizing sizing;
  sizing.threads = static_cast<int>(get("threads"));
  sizing.window = static_cast<int>(get("window"));
  sizing.payload = static_cast<std::uint32_t>(get("payload"));
  sizing.small_payload = static_cast<std::uint32_t>(get("small_payload"));
  sizing.small_window = static_cast<int>(get("small_window"));
  sizing.switch_threads = static_cast<int>(get("switch_threads"));
  sizing.switch_buffer_bytes = static_cast<int>(get("switch_buffer_bytes"));
  sizing.busy_poll = std::chrono::microseconds(get("busy_poll_us"));
  sizing.small_busy_poll = std::chrono::microseconds(get("small_busy_poll_us"));
  sizing.switch_busy_poll = std::chrono::microseconds(get("switch_busy_poll_us"));
  sizing.shm_fabric = static_cast<std::uint64_t>(get("shm_fabric"));
  sizing.shm_buffers = static_cast<int>(get("shm_buffers"));
  sizing.switch_shm_buffers = static_cast<int>(get("switch_shm_buffers"));
  return sizing;
}

void JobSizing::configure_wide(Config& config) const {
  config.threads = threads;
  config.window = window;
  config.payload = payload;
  config.busy_poll = busy_poll;
  if (shm_fabric != 0 && !std::holds_alternative<ShmTransportConfig>(config.transport)) {
    ShmTransportConfig shm;
    shm.fabric = "job-" + std::to_string(shm_fabric);
    if (const auto directory = env_string("DPA_SHM_DIR")) shm.directory = *directory;
    config.transport = shm;
  }
  if (auto* shm = std::get_if<ShmTransportConfig>(&config.transport)) {
    if (shm_buffers > 0) shm->buffers = static_cast<std::uint32_t>(shm_buffers);
    shm->max_payload = std::max<std::uint32_t>(4096, kHeaderBytes + kAuthTagBytes + 4 * payload);
  }
}

Config JobSizing::small_config(const Config& wide) const {
  Config small = wide;
  small.session = wide.session + 1;
  small.threads = 1;
  // One thread talks to one server: the first of several (Config::switch_of_thread).
  small.switches = {wide.switches.front()};
  small.window = small_window;
  small.payload = small_payload;
  small.busy_poll = small_busy_poll;
  // The small context's queues take the ports after the wide one's.
  if (auto* udp = std::get_if<UdpTransportConfig>(&small.transport); udp != nullptr && udp->bind_port != 0) {
    udp->bind_port = static_cast<std::uint16_t>(udp->bind_port + wide.threads);
  } else if (auto* dpdk = std::get_if<DpdkTransportConfig>(&small.transport)) {
    dpdk->local_port = static_cast<std::uint16_t>(dpdk->local_port + wide.threads);
  } else if (auto* shm = std::get_if<ShmTransportConfig>(&small.transport)) {
    if (shm->base_port != 0) shm->base_port = static_cast<std::uint16_t>(shm->base_port + wide.threads);
    shm->max_payload = std::max<std::uint32_t>(4096, kHeaderBytes + kAuthTagBytes + 4 * small_payload);
  }
  return small;
}

namespace {

SessionConfig session_for(const Config& worker, std::uint32_t pool_base, std::chrono::microseconds straggler_timeout) {
  SessionConfig session;
  session.id = worker.session;
  session.world_size = worker.world_size;
  session.k = worker.k;
  session.payload = worker.payload;
  session.pool_base = pool_base;
  session.pool_size = worker.pool_slots();
  session.straggler_timeout = straggler_timeout;
  // The ranks' own liveness setting: their keepalives go at a fifth of it (docs/protocol.md §6.7).
  session.liveness_timeout = worker.liveness_timeout;
  return session;
}

}  // namespace

SwitchConfig JobSizing::switch_config(const Config& wide, const std::optional<Config>& small,
                                      std::chrono::microseconds straggler_timeout) const {
  SwitchConfig config;
  config.sessions.push_back(session_for(wide, 0, straggler_timeout));
  if (small) config.sessions.push_back(session_for(*small, config.sessions.back().pool_size, straggler_timeout));
  if (const auto* shm = std::get_if<ShmTransportConfig>(&wide.transport)) {
    ShmTransportConfig shared = *shm;
    shared.base_port = 0;
    shared.buffers = static_cast<std::uint32_t>(switch_thread_buffers(
        switch_threads, {{wide.threads, wide.window}, {small ? small->threads : 0, small ? small->window : 0}}));
    if (small) shared.max_payload = std::max(shared.max_payload, std::get<ShmTransportConfig>(small->transport).max_payload);
    config.transport = shared;
  } else {
    auto& udp = std::get<UdpTransportConfig>(config.transport);
    udp.bind_host = "127.0.0.1";
    udp.bind_port = 0;
    udp.socket_buffer_bytes = switch_buffer_bytes;
  }
  config.threads = switch_threads;
  // Every thread spins when the wide session does; otherwise only thread 0, which owns the small
  // session's entry 0, where a one-block operation goes (the entries of a wider small operation
  // take turns over every switch thread, protocol.md §7.1, and wake the sleeping ones).
  config.busy_poll = std::max(wide.busy_poll, small ? small->busy_poll : wide.busy_poll);
  config.busy_poll_threads = wide.busy_poll > std::chrono::microseconds(0) ? 0 : 1;
  if (switch_busy_poll > std::chrono::microseconds(0)) {
    config.busy_poll = std::max(config.busy_poll, switch_busy_poll);
    config.busy_poll_threads = 0;
  }
  return config;
}

}  // namespace dpa

// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/worker_setup.hpp"

#include <algorithm>
#include <chrono>
#include <string>

#include "dpa/env.hpp"
#include "dpa/error.hpp"
#include "dpa/host_port.hpp"
#include "protocol/auth.hpp"
#include "protocol/wire.hpp"

namespace dpa::tools::bench {

namespace {

// The transport section of --transport-config for `rank`: "{rank}" in its strings becomes the
// rank, so one file serves every local rank (its own memif socket, file prefix, address, core).
dpa::TransportConfig rank_transport(const Settings& s, int rank) {
  dpa::TransportConfig transport = dpa::Config::from_json_file(s.transport_config).transport;
  const auto for_rank = [rank](std::string& text) {
    for (std::size_t at; (at = text.find("{rank}")) != std::string::npos;) text.replace(at, 6, std::to_string(rank));
  };
  if (auto* dpdk = std::get_if<dpa::DpdkTransportConfig>(&transport)) {
    for (auto* list : {&dpdk->vdevs, &dpdk->ports, &dpdk->eal_args, &dpdk->allow}) {
      for (std::string& text : *list) for_rank(text);
    }
    for_rank(dpdk->file_prefix);
    for_rank(dpdk->local_ip);
    for_rank(dpdk->cores);
  } else if (auto* udp = std::get_if<dpa::UdpTransportConfig>(&transport)) {
    for_rank(udp->bind_host);
  }
  if (s.transport != section_of(transport)) {
    throw dpa::ConfigError("--transport " + s.transport + ": " + s.transport_config + " has no \"" + s.transport +
                           "\" section");
  }
  return transport;
}

// --transport shm without --transport-config: the run's fabric, packets of the payload, buffers
// for the window (each entry's packet and probe, as many again in flight) unless configured.
dpa::ShmTransportConfig shm_transport(const Settings& s, const dpa::Config& config) {
  dpa::ShmTransportConfig shm;
  const auto* given = std::get_if<dpa::ShmTransportConfig>(&config.transport);
  if (given != nullptr) shm = *given;
  if (!s.shm_fabric.empty()) shm.fabric = s.shm_fabric;
  const std::uint32_t payload = config.payload != 0 ? config.payload : kDefaultPayload;
  // Room for the MAC trailer of an authenticated session (--auth) after the payload.
  shm.max_payload = std::max<std::uint32_t>(
      64, static_cast<std::uint32_t>(dpa::protocol::kHeaderSize + dpa::protocol::kMaxTrailerSize) + 4 * payload);
  if (given == nullptr) shm.buffers = static_cast<std::uint32_t>(std::clamp(4 * config.window + 32, 16, 65536));
  return shm;
}

}  // namespace

dpa::Config worker_config(const Settings& s) {
  dpa::Config config = dpa::Config::from_env();
  if (s.ranks) config.world_size = *s.ranks;
  if (s.rank) config.rank = *s.rank;
  if (s.switch_address) {
    config.switches = dpa::parse_host_port_list(*s.switch_address, "--switch ", config.switches.front().port);
  }
  if (!s.sizing.empty()) dpa::JobSizing::from_text(s.sizing).configure_wide(config);
  if (s.threads) config.threads = *s.threads;
  if (s.window) config.window = *s.window;
  if (s.rto_us) {
    config.retransmit_timeout = std::chrono::microseconds(*s.rto_us);
    config.max_retransmit_timeout = std::max(config.retransmit_timeout, config.max_retransmit_timeout);
  }
  if (s.busy_poll_us) config.busy_poll = std::chrono::microseconds(*s.busy_poll_us);
  if (s.timeout_ms) config.timeout = std::chrono::milliseconds(*s.timeout_ms);
  if (s.join_timeout_ms) config.join_timeout = std::chrono::milliseconds(*s.join_timeout_ms);
  if (s.payload) config.payload = *s.payload;
  if (!s.auth_key_file.empty()) config.auth_key = dpa::protocol::read_auth_key_file(s.auth_key_file, "--auth-key-file");
  if (s.mode == "full") {
    config.k = 0;
  } else if (s.k) {
    config.k = *s.k;
  } else if (config.k == 0) {
    config.k = std::max(1, config.world_size - 1);
  }
  config.preemptive = s.mode == "preemptive";
  if (!s.transport_config.empty()) {
    config.transport = rank_transport(s, config.rank);
  } else if (s.transport == "shm") {
    config.transport = shm_transport(s, config);
  }
  config.validate();
  return config;
}

std::optional<dpa::Config> small_config(const Settings& s, const dpa::Config& wide) {
  if (s.sizing.empty()) return std::nullopt;
  const dpa::JobSizing sizing = dpa::JobSizing::from_text(s.sizing);
  if (sizing.small_payload == 0) return std::nullopt;
  dpa::Config small = sizing.small_config(wide);
  small.validate();
  return small;
}

dpa::JobSizing launcher_sizing(const Settings& s, int ranks) {
  dpa::Config from_env = dpa::Config::from_env();
  from_env.world_size = ranks;
  dpa::JobSizing sizing =
      dpa::JobSizing::for_job(ranks, dpa::HostResources::probe(32 << 20), from_env, s.transport == "shm");
  if (s.threads) sizing.threads = *s.threads;
  if (s.window) sizing.window = *s.window;
  if (s.payload) {
    sizing.payload = *s.payload;  // one payload for every size, as with DPA_PAYLOAD
    sizing.small_payload = 0;
  }
  if (s.switch_threads) sizing.switch_threads = *s.switch_threads;
  if (s.busy_poll_us) sizing.busy_poll = sizing.small_busy_poll = std::chrono::microseconds(*s.busy_poll_us);
  sizing.shm_fabric = 0;
  if (s.ring_switch) {
    sizing.small_payload = 0;  // one session: the ring pair has one port each
    sizing.switch_threads = s.ring_switch_threads.value_or(1);
  }
  return sizing;
}

int launcher_ranks(const Settings& s, const dpa::Config& from_env) {
  if (s.ranks) return *s.ranks;
  const bool configured = dpa::env_string("DPA_WORLD_SIZE") || dpa::env_string("WORLD_SIZE") ||
                          dpa::env_string("DPA_CONFIG");
  return configured ? from_env.world_size : kDefaultRanks;
}

}  // namespace dpa::tools::bench

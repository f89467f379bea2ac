// SPDX-License-Identifier: Apache-2.0
#include "job/job_sizing.hpp"

#include <algorithm>
#include <map>
#include <vector>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "dpa/env.hpp"
#include "dpa/error.hpp"
#include "job/store_text.hpp"

namespace dpa::torch_backend {
namespace {

constexpr const char* kSizingKey = "dpa/sizing";
constexpr const char* kPlacementKey = "dpa/host/";  // + rank
constexpr const char* kErrorPrefix = "error: ";

// The host every rank reached the store at (a TCPStore's, under the prefixes torch adds), else
// torchrun's MASTER_ADDR; empty for a store with no host (a file).
std::string store_host(c10d::Store& store) {
  c10d::Store* current = &store;
  while (auto* prefixed = dynamic_cast<c10d::PrefixStore*>(current)) current = prefixed->getUnderlyingStore().get();
  if (const auto* tcp = dynamic_cast<c10d::TCPStore*>(current)) return tcp->getHost();
  return env_string("MASTER_ADDR").value_or("");
}

std::string shm_directory() { return env_string("DPA_SHM_DIR").value_or(ShmTransportConfig{}.directory); }

// Rank 0's address on its route to the store's host; where that route stays on this host
// (loopback, as for a hostname that /etc/hosts maps to 127.0.1.1), its address on the route to a
// rank of another host. Empty when neither is known.
std::string routed_address(const JobLayout& layout, const std::vector<RankPlacement>& placements,
                           const std::string& toward) {
  std::string routed = toward.empty() ? "" : route_to(toward, "the c10d store's host").local_address;
  if (!routed.empty() && !is_loopback(routed)) return routed;
  for (const int rank : layout.remote_ranks) {
    const std::string& remote = placements[rank].address;
    if (remote.empty() || is_loopback(remote)) continue;
    const std::string local = route_to(remote, "rank " + std::to_string(rank) + "'s address").local_address;
    if (!is_loopback(local)) return local;
  }
  return routed;
}

// Where rank 0's switch listens when it is on the network, and the address the ranks are given.
struct SwitchAddress {
  HostPort bind;
  std::string published;
};

SwitchAddress choose_switch_address(const JobLayout& layout, const std::vector<RankPlacement>& placements,
                                    const std::string& toward) {
  const auto requested = env_string("DPA_SWITCH_BIND");
  SwitchAddress address;
  if (requested) address.bind = parse_host_port(*requested, "DPA_SWITCH_BIND=", 0, 0);
  const bool wildcard = requested && address.bind.host == "0.0.0.0";
  if (!requested || wildcard) {
    std::string routed = routed_address(layout, placements, toward);
    if (routed.empty() && !layout.spans_hosts()) routed = "127.0.0.1";  // 0.0.0.0 for ranks of this host
    if (routed.empty()) {
      throw ConfigError("the job spans hosts (on other hosts than rank 0's: " +
                        describe_ranks(layout.remote_ranks, placements) + "), and rank 0 knows no address of its host that they "
                        "reach (no TCP store host, no MASTER_ADDR): set DPA_SWITCH_BIND to one");
    }
    if (!requested) address.bind.host = routed;
    address.published = routed;
  } else {
    address.bind.host = resolve_ipv4(address.bind.host, "DPA_SWITCH_BIND");
    address.published = address.bind.host;
  }
  if (layout.spans_hosts() && is_loopback(address.published)) {
    throw ConfigError("the job spans hosts (on other hosts than rank 0's: " +
                      describe_ranks(layout.remote_ranks, placements) + "), but the switch address rank 0 found, " +
                      address.published + (requested ? " (DPA_SWITCH_BIND)" : " (its route to the store's host " + toward + ")") +
                      ", is a loopback address they cannot reach: set DPA_SWITCH_BIND to an address of rank 0's "
                      "host that the other hosts reach");
  }
  return address;
}

// Rank 0: the job's layout and sizing from every rank's placement.
AgreedJob lay_out_job(const std::vector<RankPlacement>& placements, const Config& from_env,
                      const std::string& toward, AuthRequest auth) {
  AgreedJob job;
  job.placements = placements;
  job.authenticate = auth == AuthRequest::embedded || auth == AuthRequest::embedded_data;
  job.authenticate_data = auth == AuthRequest::embedded_data;
  const bool tagged_data = job.authenticate_data;
  JobLayout layout = JobLayout::of(placements);
  if (layout.spans_hosts() || env_string("DPA_SWITCH_BIND")) {
    layout.switch_on_network = true;
    std::vector<int> on_shm;
    for (std::size_t r = 0; r < placements.size(); ++r) {
      if (placements[r].transport == "shm") on_shm.push_back(static_cast<int>(r));
    }
    if (!on_shm.empty()) {
      throw ConfigError("the shm transport (DPA_TRANSPORT=shm or a \"shm\" section in DPA_CONFIG) of " +
                        describe_ranks(on_shm, placements) + " cannot reach the embedded switch, which listens on UDP: " +
                        (layout.spans_hosts() ? "the job spans hosts (on other hosts than rank 0's: " +
                                                    describe_ranks(layout.remote_ranks, {}) + ")"
                                              : std::string("DPA_SWITCH_BIND is set")) +
                        "; unset DPA_TRANSPORT or choose udp or dpdk");
    }
    const SwitchAddress address = choose_switch_address(layout, placements, toward);
    job.switch_bind = address.bind;
    job.switch_published_host = address.published;
    // Replies leave rank 0's host by the interface the switch listens on.
    const std::uint32_t mtu = interface_mtu(address.published);
    if (mtu != 0) {
      const std::uint32_t limit = payload_for_mtu(mtu, tagged_data);
      layout.max_payload = layout.max_payload == 0 ? limit : std::min(layout.max_payload, limit);
    }
  }
  job.sizing = JobSizing::for_job(layout, HostResources::probe(32 << 20), from_env);
  return job;
}

// Rank 0: every rank's placement. The ranks arrive together (each has just built its Gloo group,
// which waits for all), so one missing for the join timeout is not coming.
std::vector<RankPlacement> read_placements(c10d::Store& store, const Config& from_env) {
  std::vector<std::string> keys;
  for (int r = 0; r < from_env.world_size; ++r) keys.push_back(kPlacementKey + std::to_string(r));
  try {
    store.wait(keys, from_env.join_timeout);
  } catch (const std::exception&) {
    std::vector<int> missing;
    for (int r = 0; r < from_env.world_size; ++r) {
      if (!store.check({keys[r]})) missing.push_back(r);
    }
    throw Error(describe_ranks(missing, {}) + " never reached the dpa set-up within the join timeout of " +
                std::to_string(from_env.join_timeout.count()) + " ms (DPA_JOIN_TIMEOUT_MS)");
  }
  std::vector<RankPlacement> placements;
  for (const std::string& key : keys) placements.push_back(RankPlacement::from_text(read_text(store, key)));
  return placements;
}

}  // namespace

std::string describe_ranks(const std::vector<int>& ranks, const std::vector<RankPlacement>& placements) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const int rank = ranks[i];
    text += (i == 0 ? "" : ", ") + std::to_string(rank);
    if (placements.empty()) continue;
    const bool host_changes = i + 1 == ranks.size() || placements[ranks[i + 1]].host_key != placements[rank].host_key;
    if (host_changes) text += " (host " + placements[rank].hostname + ")";
  }
  return text;
}

AgreedJob agree_job(c10d::Store& store, const Config& from_env, AuthRequest auth,
                    std::chrono::milliseconds timeout) {
  const std::string toward = store_host(store);
  // The request first: rank 0 reads it once it has every rank's placement.
  publish_auth_request(store, from_env.rank, auth);
  write_text(store, kPlacementKey + std::to_string(from_env.rank),
             RankPlacement::probe(from_env, toward, shm_directory(), auth == AuthRequest::embedded_data).to_text());
  if (from_env.rank != 0) {
    store.wait({kSizingKey}, timeout);
    const std::string text = read_text(store, kSizingKey);
    if (text.starts_with(kErrorPrefix)) {
      throw ConfigError("rank " + std::to_string(from_env.rank) + ": rank 0 cannot set up the job: " +
                        text.substr(std::string(kErrorPrefix).size()));
    }
    AgreedJob job;
    job.authenticate = auth == AuthRequest::embedded || auth == AuthRequest::embedded_data;
    job.authenticate_data = auth == AuthRequest::embedded_data;
    job.sizing = JobSizing::from_text(text);
    job.sizing.apply_overrides(from_env);
    if (job.sizing.payload <= job.sizing.small_payload) job.sizing.small_payload = 0;
    return job;
  }
  try {
    const std::vector<RankPlacement> placements = read_placements(store, from_env);
    AgreedJob job =
        lay_out_job(placements, from_env, toward, check_auth_requests(store, from_env.world_size, placements));
    write_text(store, kSizingKey, job.sizing.to_text());
    return job;
  } catch (const std::exception& error) {
    // Every rank waits for the sizing: it gets the reason instead.
    write_text(store, kSizingKey, kErrorPrefix + std::string(error.what()));
    throw;
  }
}

}  // namespace dpa::torch_backend

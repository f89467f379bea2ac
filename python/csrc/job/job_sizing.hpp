// SPDX-License-Identifier: Apache-2.0
// How the ranks of a torch process group agree on their job (dpa/job_layout.hpp,
// dpa/job_sizing.hpp): every rank publishes in the store where it runs; rank 0 lays the job out
// (which ranks share its host), chooses where its embedded switch listens, sizes the job and
// publishes the sizing, or the reason it cannot, which every rank then raises.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "dpa/config.hpp"
#include "dpa/host_port.hpp"
#include "dpa/job_layout.hpp"
#include "dpa/job_sizing.hpp"
#include "job/job_auth.hpp"

namespace dpa::torch_backend {

struct AgreedJob {
  JobSizing sizing;
  // Rank 0 only. Where the embedded switch listens on UDP when the job spans hosts (or
  // DPA_SWITCH_BIND asks): the bind address and port (0: a free one), and the address the other
  // ranks are given (the bind address, or for 0.0.0.0 the one that routes to the store's host).
  // Unset: the single-host default (shared memory, or loopback).
  std::optional<HostPort> switch_bind;
  std::string switch_published_host;
  std::vector<RankPlacement> placements;  // rank 0 only: every rank's, for messages
  // Rank 0's switch authenticates admission with a key it hands out (DPA_AUTH=join or data), and
  // with authenticate_data (DPA_AUTH=data) every packet, whose payload then leaves room for the tag.
  bool authenticate = false;
  bool authenticate_data = false;
};

// Every rank calls this with its Config::from_env() (its rank and world size set) and its
// auth_request(); a rank whose request differs from the others' fails on every rank.
AgreedJob agree_job(c10d::Store& store, const Config& from_env, AuthRequest auth,
                    std::chrono::milliseconds timeout);

// `ranks` as "rank 2 (host b)" or "ranks 2, 3 (host b), 5 (host c)": with the host each runs on
// where `placements` has one per rank (empty: the numbers alone).
std::string describe_ranks(const std::vector<int>& ranks, const std::vector<RankPlacement>& placements);

}  // namespace dpa::torch_backend

// SPDX-License-Identifier: Apache-2.0
// Authentication on the embedded switch (DPA_AUTH, docs/protocol.md §6.6): by default (join) rank
// 0 makes a random session key, gives it to its switch's sessions, and hands every rank only its
// own rank key through the c10d store (key dpa/auth/<rank>), so the job's admission (JOIN, LEAVE,
// KEEPALIVE) is authenticated; DPA_AUTH=data authenticates every packet, DPA_AUTH=off none.
// Whoever reaches the store can read every rank's key, so this protects against on-path forgers
// and other tenants who do not reach the store, not against the store's readers (docs/security.md).
// With a configured switch each rank reads its key from DPA_AUTH_KEY_FILE instead, or has none.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "dpa/auth_key.hpp"
#include "dpa/config.hpp"
#include "dpa/job_layout.hpp"

namespace dpa::torch_backend {

// What a rank's environment asks for.
enum class AuthRequest {
  none,           // DPA_AUTH=off, or a configured switch and no DPA_AUTH_KEY_FILE: a keyless job
  embedded,       // the default: the embedded switch's keys authenticate admission
  embedded_data,  // DPA_AUTH=data: the embedded switch's keys authenticate every packet
  key_file,       // DPA_AUTH_KEY_FILE: a rank key for a configured switch
};

// This rank's request: DPA_AUTH and whether `from_env` holds a key (DPA_AUTH_KEY_FILE). Throws
// ConfigError for DPA_AUTH=off together with DPA_AUTH_KEY_FILE (rank 0 refuses a key file with
// the embedded switch, naming every rank that has one).
AuthRequest auth_request(const Config& from_env);

// Every rank publishes its request before rank 0 lays the job out; rank 0 then checks that the
// ranks agree and that none brings a key file to the embedded switch, and throws ConfigError
// naming the ranks and variables otherwise. Returns the job's request (rank 0's, which all share).
void publish_auth_request(c10d::Store& store, int rank, AuthRequest request);
AuthRequest check_auth_requests(c10d::Store& store, int world_size, const std::vector<RankPlacement>& placements);

// Rank 0: writes rank r's key of `session_key` to dpa/auth/<r> for every other rank.
void hand_out_rank_keys(c10d::Store& store, const AuthKey& session_key, int world_size);
// Every other rank: its key from dpa/auth/<rank>, published before the switch address.
AuthKey receive_rank_key(c10d::Store& store, int rank, std::chrono::milliseconds timeout);

}  // namespace dpa::torch_backend

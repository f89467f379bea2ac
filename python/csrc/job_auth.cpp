// SPDX-License-Identifier: Apache-2.0
#include "job_auth.hpp"

#include <algorithm>

#include "dpa/env.hpp"
#include "dpa/error.hpp"
#include "job_sizing.hpp"
#include "store_text.hpp"
#include "torch_settings.hpp"

namespace dpa::torch_backend {
namespace {

constexpr const char* kRequestKey = "dpa/auth-request/";  // + rank: "none", "embedded", "key_file"
constexpr const char* kRankKeyKey = "dpa/auth/";           // + rank: 64 hexadecimal digits

std::string to_text(AuthRequest request) {
  switch (request) {
    case AuthRequest::none: return "none";
    case AuthRequest::embedded: return "embedded";
    case AuthRequest::key_file: return "key_file";
  }
  return "none";
}

}  // namespace

AuthRequest auth_request(const Config& from_env) {
  const bool embedded = env_flag("DPA_AUTH", false);
  if (!embedded) return from_env.auth_key ? AuthRequest::key_file : AuthRequest::none;
  const std::string who = "rank " + std::to_string(from_env.rank) + ": ";
  if (switch_configured()) {
    throw ConfigError(who + "DPA_AUTH=1 asks the embedded switch for keys, but DPA_SWITCH or DPA_CONFIG names "
                      "a switch: give each rank its key in DPA_AUTH_KEY_FILE (dpa-switch-ctl rank-key) instead");
  }
  if (from_env.auth_key) {
    throw ConfigError(who + "DPA_AUTH=1 and DPA_AUTH_KEY_FILE are both set: the embedded switch hands out its own "
                      "keys (DPA_AUTH=1); DPA_AUTH_KEY_FILE is for a configured switch (DPA_SWITCH)");
  }
  return AuthRequest::embedded;
}

void publish_auth_request(c10d::Store& store, int rank, AuthRequest request) {
  write_text(store, kRequestKey + std::to_string(rank), to_text(request));
}

bool check_auth_requests(c10d::Store& store, int world_size, const std::vector<RankPlacement>& placements) {
  // Each rank published its request before its placement, which rank 0 has read.
  std::vector<int> embedded, key_file;
  for (int r = 0; r < world_size; ++r) {
    const std::string request = read_text(store, kRequestKey + std::to_string(r));
    if (request == to_text(AuthRequest::embedded)) embedded.push_back(r);
    if (request == to_text(AuthRequest::key_file)) key_file.push_back(r);
  }
  if (!key_file.empty()) {
    throw ConfigError(describe_ranks(key_file, placements) +
                      " set DPA_AUTH_KEY_FILE, a rank key for a configured switch (DPA_SWITCH); the embedded "
                      "switch makes its own keys: unset DPA_AUTH_KEY_FILE and set DPA_AUTH=1 on every rank");
  }
  if (!embedded.empty() && static_cast<int>(embedded.size()) != world_size) {
    std::vector<int> without;
    for (int r = 0; r < world_size; ++r) {
      if (std::find(embedded.begin(), embedded.end(), r) == embedded.end()) without.push_back(r);
    }
    throw ConfigError("DPA_AUTH=1 is set on " + describe_ranks(embedded, placements) + " but not on " +
                      describe_ranks(without, placements) + ": set it on every rank or on none");
  }
  return !embedded.empty();
}

void hand_out_rank_keys(c10d::Store& store, const AuthKey& session_key, int world_size) {
  for (int r = 1; r < world_size; ++r) {
    write_text(store, kRankKeyKey + std::to_string(r),
               auth_key_to_hex(derive_rank_key(session_key, static_cast<std::uint32_t>(r))));
  }
}

AuthKey receive_rank_key(c10d::Store& store, int rank, std::chrono::milliseconds timeout) {
  const std::string key = kRankKeyKey + std::to_string(rank);
  try {
    store.wait({key}, timeout);
  } catch (const std::exception& error) {
    throw Error("rank " + std::to_string(rank) + " found no authentication key from rank 0 in the store (" +
                error.what() + ")");
  }
  return parse_auth_key(read_text(store, key), "the key rank 0 published in the store (" + key + ")");
}

}  // namespace dpa::torch_backend

// SPDX-License-Identifier: Apache-2.0
#include "job/job_auth.hpp"

#include <algorithm>

#include "dpa/error.hpp"
#include "job/job_sizing.hpp"
#include "job/store_text.hpp"
#include "job/torch_settings.hpp"

namespace dpa::torch_backend {
namespace {

constexpr const char* kRequestKey = "dpa/auth-request/";  // + rank: "none", "embedded", "key_file"
constexpr const char* kRankKeyKey = "dpa/auth/";           // + rank: 64 hexadecimal digits

std::string to_text(AuthRequest request) {
  switch (request) {
    case AuthRequest::none: return "none";
    case AuthRequest::embedded: return "embedded";
    case AuthRequest::embedded_data: return "embedded_data";
    case AuthRequest::key_file: return "key_file";
  }
  return "none";
}

std::string describe(AuthRequest request) {
  switch (request) {
    case AuthRequest::none: return "DPA_AUTH=off";
    case AuthRequest::embedded: return "DPA_AUTH=join (the default)";
    case AuthRequest::embedded_data: return "DPA_AUTH=data";
    case AuthRequest::key_file: return "DPA_AUTH_KEY_FILE";
  }
  return "";
}

}  // namespace

AuthRequest auth_request(const Config& from_env) {
  const AuthMode mode = auth_mode_from_env();
  const std::string who = "rank " + std::to_string(from_env.rank) + ": ";
  if (mode == AuthMode::off && from_env.auth_key) {
    throw ConfigError(who + "DPA_AUTH=off asks for a keyless job, but DPA_AUTH_KEY_FILE gives this rank a key: "
                      "unset one of them");
  }
  if (switch_configured()) return from_env.auth_key ? AuthRequest::key_file : AuthRequest::none;
  if (mode == AuthMode::off) return AuthRequest::none;
  // A key file with the embedded switch is refused by rank 0 (check_auth_requests), naming every such rank.
  if (from_env.auth_key) return AuthRequest::key_file;
  return mode == AuthMode::data ? AuthRequest::embedded_data : AuthRequest::embedded;
}

void publish_auth_request(c10d::Store& store, int rank, AuthRequest request) {
  write_text(store, kRequestKey + std::to_string(rank), to_text(request));
}

AuthRequest check_auth_requests(c10d::Store& store, int world_size, const std::vector<RankPlacement>& placements) {
  // Each rank published its request before its placement, which rank 0 has read.
  std::vector<AuthRequest> requests;
  std::vector<int> key_file;
  for (int r = 0; r < world_size; ++r) {
    const std::string text = read_text(store, kRequestKey + std::to_string(r));
    AuthRequest request = AuthRequest::none;
    for (AuthRequest known : {AuthRequest::embedded, AuthRequest::embedded_data, AuthRequest::key_file}) {
      if (text == to_text(known)) request = known;
    }
    if (request == AuthRequest::key_file) key_file.push_back(r);
    requests.push_back(request);
  }
  if (!key_file.empty()) {
    throw ConfigError(describe_ranks(key_file, placements) +
                      " set DPA_AUTH_KEY_FILE, a rank key for a configured switch (DPA_SWITCH); the embedded "
                      "switch makes its own keys: unset DPA_AUTH_KEY_FILE");
  }
  // The first setting that differs from rank 0's, and every rank that has it.
  const auto first = std::find_if(requests.begin(), requests.end(), [&](AuthRequest r) { return r != requests[0]; });
  if (first != requests.end()) {
    std::vector<int> differ;
    for (int r = 0; r < world_size; ++r) {
      if (requests[static_cast<std::size_t>(r)] == *first) differ.push_back(r);
    }
    throw ConfigError(describe(requests[0]) + " on rank 0, but " + describe(*first) + " on " +
                      describe_ranks(differ, placements) + ": set DPA_AUTH alike on every rank");
  }
  return requests[0];
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

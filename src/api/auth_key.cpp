// SPDX-License-Identifier: Apache-2.0
#include "dpa/auth_key.hpp"

#include <mutex>
#include <optional>

#include "common/env.hpp"
#include "dpa/env.hpp"
#include "common/logging.hpp"
#include "protocol/auth.hpp"

namespace dpa {

AuthKey random_auth_key() { return protocol::random_auth_key(); }

AuthKey derive_rank_key(const AuthKey& session_key, std::uint32_t rank) {
  return protocol::derive_rank_key(session_key, rank);
}

std::string auth_key_to_hex(const AuthKey& key) { return protocol::to_hex(key); }

AuthKey parse_auth_key(std::string_view hex, const std::string& what) { return protocol::parse_auth_key(hex, what); }

AuthMode parse_auth_mode(std::string_view text) {
  if (text == "off" || text == "0") return AuthMode::off;
  if (text == "join") return AuthMode::join;
  if (text == "data" || text == "1") return AuthMode::data;
  detail::fail_env("DPA_AUTH", std::string(text), "off, join (the default) or data");
}

AuthMode auth_mode_from_env() {
  const std::optional<std::string> text = env_string("DPA_AUTH");
  if (text) return parse_auth_mode(*text);
  if (protocol::auth_available()) return AuthMode::join;
  // A build without libsodium cannot authenticate: keyless, said once. Asking for join or data
  // by name fails instead, naming what is missing.
  static std::once_flag warned;
  std::call_once(warned, [] {
    detail::log().warn("DPA_AUTH: this build of dpa has no libsodium, so its jobs run without authenticated "
                       "admission (DPA_AUTH=off); install libsodium-dev and rebuild for the default, join");
  });
  return AuthMode::off;
}

}  // namespace dpa

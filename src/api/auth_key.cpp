// SPDX-License-Identifier: Apache-2.0
#include "dpa/auth_key.hpp"

#include "protocol/auth.hpp"

namespace dpa {

AuthKey random_auth_key() { return protocol::random_auth_key(); }

AuthKey derive_rank_key(const AuthKey& session_key, std::uint32_t rank) {
  return protocol::derive_rank_key(session_key, rank);
}

std::string auth_key_to_hex(const AuthKey& key) { return protocol::to_hex(key); }

AuthKey parse_auth_key(std::string_view hex, const std::string& what) { return protocol::parse_auth_key(hex, what); }

}  // namespace dpa

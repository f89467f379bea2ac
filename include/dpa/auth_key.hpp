// SPDX-License-Identifier: Apache-2.0
// Keys of authenticated sessions (docs/protocol.md §6.6), for programs that hand them out
// themselves (the PyTorch backend's embedded switch): a session key for the switch, and rank r's
// key derived from it, which is all rank r needs. Without libsodium in this build each function
// throws dpa::Error saying so.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace dpa {

using AuthKey = std::array<std::uint8_t, 32>;  // SessionConfig::auth_key, Config::auth_key

// A fresh random session key (libsodium's randombytes).
[[nodiscard]] AuthKey random_auth_key();
// Rank r's key of the session key (what dpa-switch-ctl rank-key prints).
[[nodiscard]] AuthKey derive_rank_key(const AuthKey& session_key, std::uint32_t rank);
// 64 hexadecimal digits, the form of a key file; parse_auth_key reads it back and throws
// ConfigError naming `what` if the text is not one.
[[nodiscard]] std::string auth_key_to_hex(const AuthKey& key);
[[nodiscard]] AuthKey parse_auth_key(std::string_view hex, const std::string& what);

// What a job authenticates (DPA_AUTH, docs/configuration.md): nothing (a keyless job), its
// admission (JOIN, LEAVE, KEEPALIVE and their replies; the default), or every packet.
enum class AuthMode { off, join, data };
// "off" (or "0"), "join", "data" (or "1", its meaning before admission was authenticated by
// default); anything else is a ConfigError naming DPA_AUTH and the values.
[[nodiscard]] AuthMode parse_auth_mode(std::string_view text);
// DPA_AUTH, or AuthMode::join where it is unset.
[[nodiscard]] AuthMode auth_mode_from_env();

}  // namespace dpa

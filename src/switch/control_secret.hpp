// SPDX-License-Identifier: Apache-2.0
// The shared secret of a TCP control channel: read from a file only its owner can read (as ssh
// treats a private key), and compared in constant time, so the reply's timing does not tell an
// attacker how much of a guess was right.
#pragma once

#include <string>
#include <string_view>

namespace dpa::sw {

// Secrets shorter than this are refused: guessing one over the network must be hopeless.
inline constexpr std::size_t kMinControlSecretBytes = 16;

// The secret in `path`, less one trailing newline. Throws ConfigError naming `flag` and the file
// when it cannot be read, is not a regular file, can be read by its group or others (mode & 077),
// or holds fewer than kMinControlSecretBytes bytes.
std::string read_control_secret(const std::string& path, std::string_view flag);

// True when both are equal; the time taken depends only on their lengths.
bool secrets_equal(std::string_view expected, std::string_view offered);

}  // namespace dpa::sw

// SPDX-License-Identifier: Apache-2.0
#include "switch/control_secret.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "common/unique_fd.hpp"
#include "dpa/error.hpp"

namespace dpa::sw {

namespace {

constexpr std::size_t kMaxControlSecretBytes = 4096;

}  // namespace

std::string read_control_secret(const std::string& path, std::string_view flag) {
  const auto fail = [&](const std::string& problem) {
    return ConfigError(fmt::format("{} {}: {}", flag, path, problem));
  };
  const dpa::detail::UniqueFd file(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (file.get() < 0) throw fail(fmt::format("cannot open: {}", std::strerror(errno)));
  struct stat status {};
  if (fstat(file.get(), &status) != 0) throw fail(fmt::format("cannot stat: {}", std::strerror(errno)));
  if (!S_ISREG(status.st_mode)) throw fail("not a regular file");
  const unsigned mode = status.st_mode & 07777u;
  if ((mode & 077u) != 0) {
    throw fail(fmt::format("mode {:04o} lets its group or others read the secret; chmod 600 {}", mode, path));
  }
  std::string secret(kMaxControlSecretBytes + 1, '\0');
  std::size_t length = 0;
  for (;;) {
    const ssize_t n = read(file.get(), secret.data() + length, secret.size() - length);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw fail(fmt::format("cannot read: {}", std::strerror(errno)));
    if (n == 0) break;
    length += static_cast<std::size_t>(n);
    if (length > kMaxControlSecretBytes) throw fail(fmt::format("longer than {} bytes", kMaxControlSecretBytes));
  }
  secret.resize(length);
  if (!secret.empty() && secret.back() == '\n') secret.pop_back();
  if (secret.size() < kMinControlSecretBytes) {
    throw fail(fmt::format("the secret has {} bytes, fewer than {} (e.g. head -c 32 /dev/urandom | base64 > {})",
                           secret.size(), kMinControlSecretBytes, path));
  }
  if (secret.find('\n') != std::string::npos) throw fail("the secret is one line; this file has several");
  return secret;
}

bool secrets_equal(std::string_view expected, std::string_view offered) {
  // Every byte of the longer one is looked at, whatever differs first.
  const std::size_t length = std::max(expected.size(), offered.size());
  unsigned difference = expected.size() == offered.size() ? 0u : 1u;
  for (std::size_t i = 0; i < length; ++i) {
    const auto a = static_cast<unsigned char>(i < expected.size() ? expected[i] : 0);
    const auto b = static_cast<unsigned char>(i < offered.size() ? offered[i] : 0);
    difference |= static_cast<unsigned>(a ^ b);
  }
  return difference == 0;
}

}  // namespace dpa::sw

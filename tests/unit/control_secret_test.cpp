// SPDX-License-Identifier: Apache-2.0
// The control channel's secret file: refused unless only its owner can read it and it holds a
// secret worth the name; compared whole.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "dpa/error.hpp"
#include "switch/control_secret.hpp"

namespace {

using testing::HasSubstr;

// A secret file for one test, removed at its end.
struct SecretFile {
  SecretFile(const std::string& content, mode_t mode)
      : path(::testing::TempDir() + "dpa_control_secret_" + std::to_string(getpid())) {
    std::ofstream(path) << content;
    chmod(path.c_str(), mode);
  }
  ~SecretFile() { std::filesystem::remove(path); }
  SecretFile(const SecretFile&) = delete;
  SecretFile& operator=(const SecretFile&) = delete;
  const std::string path;
};

std::string read_error(const std::string& path) {
  try {
    dpa::sw::read_control_secret(path, "--control-secret-file");
  } catch (const dpa::ConfigError& error) {
    return error.what();
  }
  return "no error";
}

TEST(ControlSecret, ReadsTheSecretWithoutItsNewline) {
  const SecretFile file("correct-horse-battery-staple\n", 0600);
  EXPECT_EQ(dpa::sw::read_control_secret(file.path, "--control-secret-file"), "correct-horse-battery-staple");
  chmod(file.path.c_str(), 0400);
  EXPECT_EQ(dpa::sw::read_control_secret(file.path, "--control-secret-file"), "correct-horse-battery-staple");
}

TEST(ControlSecret, AFileOthersCanReadIsRefusedNamingItsMode) {
  for (const mode_t mode : {0644, 0640, 0604, 0660}) {
    const SecretFile file("correct-horse-battery-staple\n", mode);
    const std::string error = read_error(file.path);
    EXPECT_THAT(error, HasSubstr("--control-secret-file " + file.path));
    EXPECT_THAT(error, HasSubstr(fmt::format("mode {:04o} lets its group or others read the secret", mode)));
    EXPECT_THAT(error, HasSubstr("chmod 600"));
  }
}

TEST(ControlSecret, WeakOrMissingSecretsAreRefused) {
  {
    const SecretFile file("short\n", 0600);
    EXPECT_THAT(read_error(file.path), HasSubstr("the secret has 5 bytes, fewer than 16"));
  }
  {
    const SecretFile file("first-line-of-two\nsecond-line-of-two\n", 0600);
    EXPECT_THAT(read_error(file.path), HasSubstr("the secret is one line"));
  }
  EXPECT_THAT(read_error("/nonexistent/secret"), HasSubstr("--control-secret-file /nonexistent/secret: cannot open"));
  EXPECT_THAT(read_error("/dev/null"), HasSubstr("not a regular file"));
}

TEST(ControlSecret, OnlyTheWholeSecretIsEqual) {
  using dpa::sw::secrets_equal;
  EXPECT_TRUE(secrets_equal("0123456789abcdef", "0123456789abcdef"));
  EXPECT_FALSE(secrets_equal("0123456789abcdef", "0123456789abcdeF"));
  EXPECT_FALSE(secrets_equal("0123456789abcdef", "0123456789abcde"));
  EXPECT_FALSE(secrets_equal("0123456789abcdef", "0123456789abcdef0"));
  EXPECT_FALSE(secrets_equal("0123456789abcdef", ""));
  EXPECT_FALSE(secrets_equal("0123456789abcdef", std::string("0123456789abcdef\0", 17)));
}

}  // namespace

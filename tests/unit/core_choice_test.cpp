// SPDX-License-Identifier: Apache-2.0
// The rule that picks the cores of busy-polling threads (transport/core_choice.hpp), as a table,
// and the host-wide claims it runs against: two claimants through one directory never share a core.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "../scratch_directory.hpp"
#include "transport/core_choice.hpp"

namespace {

using dpa::transport::choose_cores;
using dpa::transport::CoreChoice;
using dpa::transport::CoreClaims;
using testing::ElementsAreArray;
using testing::HasSubstr;
using testing::IsEmpty;

struct Case {
  const char* name;
  std::vector<int> allowed;    // the process's CPUs (taskset, cgroup)
  std::size_t threads;
  std::set<int> held;          // cores other processes hold
  std::vector<int> expected;   // empty: floating
  const char* warning;         // part of the warning, or "" for none
};

const Case kCases[] = {
    {"one thread takes the lowest CPU", {0, 1, 2, 3}, 1, {}, {0}, ""},
    {"threads take the lowest CPUs in order", {0, 1, 2, 3}, 3, {}, {0, 1, 2}, ""},
    {"a taskset restriction is respected", {4, 6, 7}, 2, {}, {4, 6}, ""},
    {"another process's cores are skipped (second local rank)", {0, 1, 2, 3}, 2, {0, 1}, {2, 3}, ""},
    {"holes left by other processes are filled", {0, 1, 2, 3}, 2, {1}, {0, 2}, ""},
    {"exactly enough cores", {0, 1}, 2, {}, {0, 1}, ""},
    {"more threads than CPUs float", {0, 1}, 4, {}, {}, "4 busy-polling thread(s) but only 2 free core(s) among the 2"},
    {"too few free cores float", {0, 1, 2, 3}, 2, {0, 1, 2}, {}, "only 1 free core(s) among the 4 this process may use (0-3"},
    {"every core held: float", {0, 1}, 1, {0, 1}, {}, "only 0 free core(s)"},
    {"no thread, nothing to pin", {0, 1}, 0, {}, {}, ""},
};

TEST(CoreChoiceTest, Table) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    std::set<int> taken;
    const CoreChoice choice = choose_cores(
        c.allowed, c.threads,
        [&](int cpu) {
          if (c.held.contains(cpu)) return false;
          taken.insert(cpu);
          return true;
        },
        [&](int cpu) { taken.erase(cpu); });
    EXPECT_THAT(choice.cores, ElementsAreArray(c.expected));
    if (std::string(c.warning).empty()) {
      EXPECT_THAT(choice.warning, IsEmpty());
    } else {
      EXPECT_THAT(choice.warning, HasSubstr(c.warning));
    }
    // Floating threads keep no claim; pinned ones hold exactly their cores.
    EXPECT_EQ(taken, std::set<int>(choice.cores.begin(), choice.cores.end()));
  }
}

TEST(CoreChoiceTest, CpuListIsLinuxSyntax) {
  EXPECT_EQ(dpa::transport::cpu_list(std::vector<int>{0, 1, 2, 3, 6, 8, 9}), "0-3,6,8-9");
  EXPECT_EQ(dpa::transport::cpu_list(std::vector<int>{5}), "5");
  EXPECT_EQ(dpa::transport::cpu_list(std::vector<int>{}), "");
}

TEST(CoreChoiceTest, AllowedCpusAreThisThreadsAffinity) {
  const std::vector<int> cpus = dpa::transport::allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  EXPECT_TRUE(std::is_sorted(cpus.begin(), cpus.end()));
}

// Two claimants through one directory (as two processes would be: flock locks belong to the
// open file, so one process shows it): the second gets the cores the first does not hold, and
// a core given back or left by a claimant that ends is free again.
TEST(CoreClaimsTest, ClaimantsNeverShareACore) {
  const dpa::test::ScratchDirectory directory;
  auto first = std::make_unique<CoreClaims>(directory.path().string());
  CoreClaims second(directory.path().string());
  EXPECT_TRUE(first->take(0));
  EXPECT_TRUE(first->take(0));  // held already
  EXPECT_TRUE(first->take(1));
  EXPECT_FALSE(second.take(0));
  EXPECT_FALSE(second.take(1));
  EXPECT_TRUE(second.take(2));
  first->release(1);
  EXPECT_TRUE(second.take(1));
  first.reset();
  EXPECT_TRUE(second.take(0));
  EXPECT_TRUE(std::filesystem::exists(directory.path() / "dpa-core-0.lock"));
}

TEST(CoreClaimsTest, TheRuleOverClaimsGivesDisjointCores) {
  const dpa::test::ScratchDirectory directory;
  CoreClaims rank0(directory.path().string());
  CoreClaims rank1(directory.path().string());
  const std::vector<int> allowed = {0, 1, 2, 3};
  const auto choose = [&](CoreClaims& claims, std::size_t threads) {
    return choose_cores(
        allowed, threads, [&](int cpu) { return claims.take(cpu); }, [&](int cpu) { claims.release(cpu); });
  };
  EXPECT_THAT(choose(rank0, 2).cores, ElementsAreArray({0, 1}));
  EXPECT_THAT(choose(rank1, 2).cores, ElementsAreArray({2, 3}));
  CoreClaims rank2(directory.path().string());
  const CoreChoice third = choose(rank2, 1);
  EXPECT_THAT(third.cores, IsEmpty());
  EXPECT_THAT(third.warning, HasSubstr("only 0 free core(s) among the 4"));
}

TEST(CoreClaimsTest, AnUnusableDirectoryCountsEveryCoreAsFree) {
  CoreClaims claims("/nonexistent/dpa-core-claims");
  EXPECT_TRUE(claims.take(0));
  EXPECT_TRUE(claims.take(1));
}

}  // namespace

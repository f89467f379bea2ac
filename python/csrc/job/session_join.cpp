// SPDX-License-Identifier: Apache-2.0
#include "job/session_join.hpp"

#include <string>

#include "dpa/error.hpp"
#include "dpa/host_port.hpp"
#include "job/job_sizing.hpp"
#include "job/store_text.hpp"

namespace dpa::torch_backend {
namespace {

constexpr const char* kOutcomeKey = "dpa/joined/";  // + rank: "ok" or "failed <error>"
constexpr const char* kVerdictKey = "dpa/join-verdict";
constexpr const char* kOk = "ok";
constexpr const char* kFailed = "failed ";
// Beyond the join timeout: for the ranks to report, and for rank 0's verdict to reach them.
constexpr std::chrono::milliseconds kReportGrace{5000};

// Rank 0: how every rank fared, in one message ("ok" if all joined).
std::string verdict(c10d::Store& store, const Config& config, const SoftwareSwitch* embedded,
                    const std::vector<RankPlacement>& placements, std::chrono::milliseconds wait) {
  std::vector<std::string> keys;
  for (int r = 0; r < config.world_size; ++r) keys.push_back(kOutcomeKey + std::to_string(r));
  try {
    store.wait(keys, wait);
  } catch (const std::exception&) {
    // Some rank never reported: named below.
  }
  std::vector<int> failed, silent;
  std::string first_failure;
  for (int r = 0; r < config.world_size; ++r) {
    if (!store.check({keys[r]})) {
      silent.push_back(r);
      continue;
    }
    const std::string outcome = read_text(store, keys[r]);
    if (outcome == kOk) continue;
    failed.push_back(r);
    if (first_failure.empty()) first_failure = outcome.substr(std::string(kFailed).size());
  }
  if (failed.empty() && silent.empty()) return kOk;

  const std::string address = to_string(config.switches);
  std::string text = "the ranks could not join session " + std::to_string(config.session) + " at " + address +
                     " within the join timeout of " + std::to_string(config.join_timeout.count()) +
                     " ms (DPA_JOIN_TIMEOUT_MS): ";
  if (embedded != nullptr) {
    const std::uint64_t heard = embedded->joins_heard(config.session);
    std::vector<int> unheard;
    for (int r = 0; r < config.world_size; ++r) {
      if (((heard >> r) & 1) == 0 && std::find(silent.begin(), silent.end(), r) == silent.end()) unheard.push_back(r);
    }
    if (!unheard.empty()) {
      text += "the switch never heard from " + describe_ranks(unheard, placements) +
              ": they cannot reach " + address +
              " (check the route and any firewall from their host to rank 0's; DPA_SWITCH_BIND sets the address "
              "the embedded switch listens on); ";
    } else if (!failed.empty()) {
      text += "the switch heard every rank, but its replies did not reach " + describe_ranks(failed, placements) + " (a firewall on their host?); ";
    }
  } else if (!failed.empty()) {
    text += describe_ranks(failed, placements) + " failed; ";
  }
  if (!silent.empty()) {
    text += describe_ranks(silent, placements) + " reported nothing within " +
            std::to_string(wait.count()) + " ms (exited, or stuck before joining); ";
  }
  if (!first_failure.empty()) text += "first failure: " + first_failure;
  return text;
}

}  // namespace

void join_together(c10d::Store& store, const Config& config, const SoftwareSwitch* embedded,
                   const std::vector<RankPlacement>& placements, const std::function<void()>& join) {
  // Every rank's join ends within the join timeout of its start, and the ranks start together
  // (they all waited for rank 0's switch address or sizing).
  const auto reports_due = config.join_timeout + kReportGrace;
  std::string own_failure;
  try {
    join();
  } catch (const std::exception& error) {
    own_failure = error.what();
  }
  write_text(store, kOutcomeKey + std::to_string(config.rank), own_failure.empty() ? kOk : kFailed + own_failure);
  std::string result;
  if (config.rank == 0) {
    result = verdict(store, config, embedded, placements, reports_due);
    write_text(store, kVerdictKey, result);
  } else {
    try {
      store.wait({kVerdictKey}, reports_due + kReportGrace);
      result = read_text(store, kVerdictKey);
    } catch (const std::exception& error) {
      if (!own_failure.empty()) throw Error(own_failure);
      throw Error("rank " + std::to_string(config.rank) + " joined, but rank 0 told nothing of the other ranks' joins (" +
                  error.what() + ")");
    }
  }
  if (result != kOk) throw Error("rank " + std::to_string(config.rank) + ": " + result);
}

}  // namespace dpa::torch_backend

// SPDX-License-Identifier: Apache-2.0
// Joining the job's sessions as one job: every rank runs its joins and publishes in the store how
// they went; rank 0, which holds the embedded switch and so knows whose JOINs arrived, publishes
// the verdict, and every rank raises the same error naming the ranks that failed, the address
// they tried, and why: a rank that cannot reach the switch stalls every rank's join, and without
// this each would report only its own timeout.
#pragma once

#include <functional>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "dpa/config.hpp"
#include "dpa/job_layout.hpp"
#include "dpa/switch.hpp"

namespace dpa::torch_backend {

// Runs `join` (this rank's joins of the sessions of `config`) and returns once every rank has
// joined; throws dpa::Error on every rank, within about config.join_timeout, if any did not.
// `embedded`: the switch rank 0 runs (null elsewhere, or with a configured switch);
// `placements`: every rank's (rank 0; empty with a configured switch).
void join_together(c10d::Store& store, const Config& config, const SoftwareSwitch* embedded,
                   const std::vector<RankPlacement>& placements, const std::function<void()>& join);

}  // namespace dpa::torch_backend

// SPDX-License-Identifier: Apache-2.0
// dpa-bench's start-up: the worker config of a rank (flags over DPA_* variables over DPA_CONFIG) and
// the sizing of a run whose switch the launcher starts.
#pragma once

#include <optional>

#include "dpa/config.hpp"
#include "dpa/job_sizing.hpp"
#include "tools/bench/settings.hpp"

namespace dpa::tools::bench {

// The worker config: DPA_CONFIG and the DPA_* variables, then the flags given, then the mode,
// which decides K and preemption. Validated.
dpa::Config worker_config(const Settings& s);

// The small-packet session's worker config beside `wide`, when the sizing has one.
std::optional<dpa::Config> small_config(const Settings& s, const dpa::Config& wide);

// The sizing of a run whose switch this launcher starts: the host's and the DPA_* variables'
// (docs/configuration.md §8), then the flags given. The transport stays dpa-bench's own choice.
dpa::JobSizing launcher_sizing(const Settings& s, int ranks);

// The launcher's ranks: --ranks, else DPA_WORLD_SIZE / WORLD_SIZE (or DPA_CONFIG), else 2.
int launcher_ranks(const Settings& s, const dpa::Config& from_env);

}  // namespace dpa::tools::bench

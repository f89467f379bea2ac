// SPDX-License-Identifier: Apache-2.0
// Where the ranks find their switch. With DPA_SWITCH or DPA_CONFIG the configured switch is used.
// Otherwise rank 0 starts a dpa::SoftwareSwitch inside its own process (an ephemeral port) and
// publishes its address in the process group's store, where the other ranks read it: on one host
// over shared memory or 127.0.0.1; across hosts on UDP at an address of rank 0's host that the
// others reach (job_sizing.hpp, docs/multi-host.md).
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "dpa/config.hpp"
#include "dpa/switch.hpp"
#include "job/job_sizing.hpp"

namespace dpa::torch_backend {

// Starts the embedded switch on rank 0 with the job's sessions (the wide one of `config` and,
// if given, the small one) where `job` says, and points `config` and `small` at it. Returns the
// switch on the rank that runs it. If job.authenticate, the sessions get a fresh key, and
// `config` and `small` this rank's key of it (job_auth.hpp). A rank 0 that cannot start it tells every rank why. Only for
// jobs with no configured switch (switch_configured() false).
std::unique_ptr<SoftwareSwitch> place_switch(Config& config, std::optional<Config>& small,
                                             const AgreedJob& job, c10d::Store& store,
                                             std::chrono::milliseconds timeout);

// Waits until every rank has called this (or `timeout` passed): the embedding rank keeps its
// switch up until the others are done with it.
void wait_for_all_ranks_closed(c10d::Store& store, const Config& config, bool embeds_switch);

}  // namespace dpa::torch_backend

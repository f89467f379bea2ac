// How the ranks of a torch process group agree on the job's sizing (dpa/job_sizing.hpp): rank 0
// sizes the job and publishes it in the store, the others read it.
#pragma once

#include <chrono>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "dpa/config.hpp"
#include "dpa/job_sizing.hpp"

namespace dpa::torch_backend {

// Rank 0 sizes the job and publishes it; the others read it. Each then applies its overrides.
// `from_env` is this rank's Config::from_env() with its rank and world size.
JobSizing agree_job_sizing(c10d::Store& store, const Config& from_env,
                           std::chrono::milliseconds timeout);

}  // namespace dpa::torch_backend

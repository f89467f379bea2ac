// SPDX-License-Identifier: Apache-2.0
// The one place where torch 1.13 and torch 2.x differ for this backend.
//
// torch 1.13 dispatches collectives to a c10d::ProcessGroup subclass that the plugin's creator
// returns. torch 2.x wraps per-device c10d::Backend objects in a ProcessGroup of its own, so the
// plugin subclasses c10d::Backend instead. The collective signatures are the same in both.
#pragma once

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace dpa::torch_backend {

#if TORCH_VERSION_MAJOR >= 2
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

}  // namespace dpa::torch_backend

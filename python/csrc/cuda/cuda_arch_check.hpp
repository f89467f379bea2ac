// SPDX-License-Identifier: Apache-2.0
// Whether the CUDA kernels of this build run on a tensor's GPU. Checked before the first
// operation on each GPU, so that a GPU the build does not cover fails with an error naming the
// GPU, its compute capability and the architectures built, not with "no kernel image is
// available" from inside an operation.
#pragma once

#include <string_view>

#include <ATen/ATen.h>

namespace dpa::torch_backend {

// The kernels' CMAKE_CUDA_ARCHITECTURES, comma separated ("75-real,80-real,...,120"); empty in
// builds without the kernels.
std::string_view built_cuda_architectures();

// Whether code built for `architectures` (CMake's entries, comma separated) runs on a GPU of
// compute capability major.minor. Machine code ("-real", or a plain entry) runs on the same major
// at a minor at least its own ("90a", architecture-specific, on 9.0 only); PTX ("-virtual", or a
// plain entry) on any capability at least its own. CMake's keywords (all, native) count as covering.
bool cuda_architectures_cover(std::string_view architectures, int major, int minor);

// Throws, naming `rank`, when `tensor` would go through the CUDA kernels on a GPU they do not
// cover; checks each GPU once.
void require_cuda_kernels_for(const at::Tensor& tensor, int rank);

}  // namespace dpa::torch_backend

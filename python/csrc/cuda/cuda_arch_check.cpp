// SPDX-License-Identifier: Apache-2.0
#include "cuda/cuda_arch_check.hpp"

#include <array>
#include <atomic>
#include <charconv>
#include <string>

#include <c10/util/Exception.h>

#ifdef DPA_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>

#include "cuda/cuda_blocks.hpp"
#endif

namespace dpa::torch_backend {
namespace {

struct Architecture {
  int number = 0;           // 90 for "90a-real"
  bool specific = false;    // the "a" suffix: this exact capability only
  bool machine_code = true;
  bool ptx = true;
  bool keyword = false;     // all, all-major, native
};

Architecture parse_entry(std::string_view entry) {
  Architecture architecture;
  const auto [end, error] = std::from_chars(entry.data(), entry.data() + entry.size(), architecture.number);
  if (error != std::errc() || end == entry.data()) {
    architecture.keyword = true;
    return architecture;
  }
  std::string_view suffix(end, static_cast<std::size_t>(entry.data() + entry.size() - end));
  if (!suffix.empty() && (suffix.front() == 'a' || suffix.front() == 'f')) {
    architecture.specific = suffix.front() == 'a';
    suffix.remove_prefix(1);
  }
  if (suffix == "-real") architecture.ptx = false;
  if (suffix == "-virtual") architecture.machine_code = false;
  return architecture;
}

bool covers(const Architecture& architecture, int major, int minor) {
  if (architecture.keyword) return true;
  const int capability = major * 10 + minor;
  if (architecture.specific) return architecture.number == capability;
  if (architecture.machine_code && architecture.number / 10 == major && architecture.number % 10 <= minor) {
    return true;
  }
  return architecture.ptx && architecture.number <= capability;
}

}  // namespace

std::string_view built_cuda_architectures() {
#ifdef DPA_CUDA_ARCHITECTURES
  return DPA_CUDA_ARCHITECTURES;
#else
  return {};
#endif
}

bool cuda_architectures_cover(std::string_view architectures, int major, int minor) {
  while (!architectures.empty()) {
    const std::size_t comma = architectures.find(',');
    const std::string_view entry = architectures.substr(0, comma);
    if (!entry.empty() && covers(parse_entry(entry), major, minor)) return true;
    if (comma == std::string_view::npos) break;
    architectures.remove_prefix(comma + 1);
  }
  return false;
}

void require_cuda_kernels_for([[maybe_unused]] const at::Tensor& tensor, [[maybe_unused]] int rank) {
#ifdef DPA_WITH_CUDA
  if (!CudaBlocks::applies(tensor)) return;
  // One flag per GPU: after the first check an operation pays one atomic load.
  static std::array<std::atomic<bool>, 256> checked{};
  const auto index = static_cast<std::size_t>(tensor.device().index());
  if (index < checked.size() && checked[index].load(std::memory_order_acquire)) return;
  const cudaDeviceProp* properties = at::cuda::getDeviceProperties(tensor.device().index());
  TORCH_CHECK(cuda_architectures_cover(built_cuda_architectures(), properties->major, properties->minor),
              "dpa: rank ", rank, ": GPU ", index, " (", properties->name, ", compute capability ",
              properties->major, ".", properties->minor, ") is not covered by the CUDA kernels dpa._C was built ",
              "for (CMAKE_CUDA_ARCHITECTURES ", std::string(built_cuda_architectures()),
              "). Rebuild for it (pip install ./python with a torch whose torch.cuda.get_arch_list() has sm_",
              properties->major, properties->minor, ", or TORCH_CUDA_ARCH_LIST=", properties->major, ".",
              properties->minor, " pip install ./python, or cmake -DCMAKE_CUDA_ARCHITECTURES=", properties->major,
              properties->minor, "), or set DPA_TORCH_CUDA_BLOCKS=host to quantise CUDA tensors on the host");
  if (index < checked.size()) checked[index].store(true, std::memory_order_release);
#endif
}

}  // namespace dpa::torch_backend

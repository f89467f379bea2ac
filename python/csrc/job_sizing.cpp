#include "job_sizing.hpp"

#include <vector>

namespace dpa::torch_backend {
namespace {

constexpr const char* kSizingKey = "dpa/sizing";

}  // namespace

JobSizing agree_job_sizing(c10d::Store& store, const Config& from_env,
                           std::chrono::milliseconds timeout) {
  if (from_env.rank == 0) {
    const JobSizing sizing =
        JobSizing::for_job(from_env.world_size, HostResources::probe(32 << 20), from_env);
    const std::string text = sizing.to_text();
    store.set(kSizingKey, std::vector<std::uint8_t>(text.begin(), text.end()));
    return sizing;
  }
  store.wait({kSizingKey}, timeout);
  const std::vector<std::uint8_t> bytes = store.get(kSizingKey);
  JobSizing sizing = JobSizing::from_text(std::string(bytes.begin(), bytes.end()));
  sizing.apply_overrides(from_env);
  if (sizing.payload <= sizing.small_payload) sizing.small_payload = 0;
  return sizing;
}

}  // namespace dpa::torch_backend

#include "embedded_switch.hpp"

#include <algorithm>
#include <thread>

#include "dpa/error.hpp"
#include "dpa/host_port.hpp"
#include "torch_settings.hpp"

namespace dpa::torch_backend {
namespace {

constexpr const char* kSwitchKey = "dpa/switch";
constexpr const char* kClosedKey = "dpa/closed";

std::string read_key(c10d::Store& store, const std::string& key,
                     std::chrono::milliseconds timeout) {
  store.wait({key}, timeout);
  const std::vector<std::uint8_t> bytes = store.get(key);
  return {bytes.begin(), bytes.end()};
}

std::unique_ptr<SoftwareSwitch> start_switch(const Config& wide, const std::optional<Config>& small,
                                             const JobSizing& sizing) {
  wide.validate();  // the sessions below are sized from threads and window
  if (small) small->validate();
  const SwitchConfig switch_config =
      sizing.switch_config(wide, small, EmbeddedSwitchSettings::from_env().straggler_timeout);
  try {
    switch_config.validate();
  } catch (const ConfigError& error) {
    throw ConfigError(std::string("the embedded switch's sessions (pool_size = 2 x DPA_THREADS x "
                                  "DPA_WINDOW, payload DPA_PAYLOAD) do not fit: ") +
                      error.what());
  }
  return std::make_unique<SoftwareSwitch>(switch_config);
}

}  // namespace

std::unique_ptr<SoftwareSwitch> place_switch(Config& config, std::optional<Config>& small,
                                             const JobSizing& sizing, c10d::Store& store,
                                             std::chrono::milliseconds timeout) {
  std::unique_ptr<SoftwareSwitch> embedded;
  if (config.rank == 0) {
    embedded = start_switch(config, small, sizing);
    config.switch_host = "127.0.0.1";
    config.switch_port = embedded->port();
    if (small) {
      small->switch_host = config.switch_host;
      small->switch_port = config.switch_port;
    }
    const std::string address = HostPort{config.switch_host, config.switch_port}.to_string();
    store.set(kSwitchKey, std::vector<std::uint8_t>(address.begin(), address.end()));
    return embedded;
  }
  std::string address;
  try {
    address = read_key(store, kSwitchKey, timeout);
  } catch (const std::exception& e) {
    throw Error("rank " + std::to_string(config.rank) +
                " found no switch address from rank 0 in the store (" + e.what() +
                "); rank 0 starts the embedded switch unless DPA_SWITCH is set");
  }
  const HostPort published =
      parse_host_port(address, "the switch address rank 0 published in the store, ", 0);
  config.switch_host = published.host;
  config.switch_port = published.port;
  if (small) {
    small->switch_host = config.switch_host;
    small->switch_port = config.switch_port;
  }
  return nullptr;
}

void wait_for_all_ranks_closed(c10d::Store& store, const Config& config, bool embeds_switch) {
  // The store may already be gone (a rank that exited hosted it): then nobody is waiting.
  try {
    std::int64_t closed = store.add(kClosedKey, 1);
    if (!embeds_switch) return;
    const auto deadline = std::chrono::steady_clock::now() + config.timeout;
    while (closed < config.world_size && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      closed = store.add(kClosedKey, 0);
    }
  } catch (const std::exception&) {
  }
}

}  // namespace dpa::torch_backend

// SPDX-License-Identifier: Apache-2.0
#include "job/embedded_switch.hpp"

#include <algorithm>
#include <thread>

#include "dpa/error.hpp"
#include "dpa/host_port.hpp"
#include "job/torch_settings.hpp"

namespace dpa::torch_backend {
namespace {

constexpr const char* kSwitchKey = "dpa/switch";
constexpr const char* kClosedKey = "dpa/closed";
constexpr const char* kErrorPrefix = "error: ";

std::string read_key(c10d::Store& store, const std::string& key,
                     std::chrono::milliseconds timeout) {
  store.wait({key}, timeout);
  const std::vector<std::uint8_t> bytes = store.get(key);
  return {bytes.begin(), bytes.end()};
}

std::unique_ptr<SoftwareSwitch> start_switch(const Config& wide, const std::optional<Config>& small,
                                             const AgreedJob& job, const std::optional<AuthKey>& session_key) {
  wide.validate();  // the sessions below are sized from threads and window
  if (small) small->validate();
  SwitchConfig switch_config =
      job.sizing.switch_config(wide, small, EmbeddedSwitchSettings::from_env().straggler_timeout);
  if (job.switch_bind) {
    // Where the other hosts reach it (job_sizing.hpp); sized for UDP already.
    auto& udp = std::get<UdpTransportConfig>(switch_config.transport);
    udp.bind_host = job.switch_bind->host;
    udp.bind_port = job.switch_bind->port;
  }
  // One key for the job's sessions: each tag covers the session id, so no packet passes in the other.
  for (SessionConfig& session : switch_config.sessions) {
    session.auth_key = session_key;
    session.auth_data = session_key.has_value() && job.authenticate_data;
  }
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
                                             const AgreedJob& job, c10d::Store& store,
                                             std::chrono::milliseconds timeout) {
  const auto use_rank_key = [&](const AuthKey& rank_key) {
    config.auth_key = rank_key;
    if (small) small->auth_key = rank_key;
  };
  const auto point_at = [&](const HostPort& address) {
    config.switches = {address};
    if (small) small->switches = {address};
  };
  if (config.rank == 0) {
    std::unique_ptr<SoftwareSwitch> embedded;
    try {
      std::optional<AuthKey> session_key;
      if (job.authenticate) {
        session_key = random_auth_key();
        use_rank_key(derive_rank_key(*session_key, 0));
      }
      embedded = start_switch(config, small, job, session_key);
      // Before the address, which the other ranks wait for.
      if (session_key) hand_out_rank_keys(store, *session_key, config.world_size);
    } catch (const std::exception& error) {
      // The other ranks wait for the address: they get the reason instead.
      const std::string text = kErrorPrefix + std::string(error.what());
      store.set(kSwitchKey, std::vector<std::uint8_t>(text.begin(), text.end()));
      throw;
    }
    point_at({job.switch_bind ? job.switch_published_host : "127.0.0.1", embedded->port()});
    const std::string address = config.switches.front().to_string();
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
  if (address.starts_with(kErrorPrefix)) {
    throw Error("rank " + std::to_string(config.rank) + ": rank 0 could not start the embedded switch: " +
                address.substr(std::string(kErrorPrefix).size()));
  }
  point_at(parse_host_port(address, "the switch address rank 0 published in the store, ", 0));
  if (job.authenticate) use_rank_key(receive_rank_key(store, config.rank, timeout));
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

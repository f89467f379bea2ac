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

SessionConfig session_for(const Config& config, std::uint32_t pool_base,
                          std::chrono::microseconds straggler_timeout) {
  SessionConfig session;
  session.id = config.session;
  session.world_size = config.world_size;
  session.k = config.k;
  session.payload = config.payload;
  session.pool_base = pool_base;
  session.pool_size = config.pool_slots();
  session.straggler_timeout = straggler_timeout;
  return session;
}

std::unique_ptr<SoftwareSwitch> start_switch(const Config& wide, const std::optional<Config>& small,
                                             const JobSizing& sizing) {
  wide.validate();  // the sessions below are sized from threads and window
  if (small) small->validate();
  const EmbeddedSwitchSettings settings = EmbeddedSwitchSettings::from_env();
  SwitchConfig switch_config;
  if (const auto* shm = std::get_if<ShmTransportConfig>(&wide.transport)) {
    // The ranks' fabric, a free port of it, room for one result per slot until every rank read it.
    ShmTransportConfig shared = *shm;
    shared.base_port = 0;
    if (sizing.switch_shm_buffers > 0) shared.buffers = static_cast<std::uint32_t>(sizing.switch_shm_buffers);
    switch_config.transport = shared;
  } else {
    auto& udp = std::get<UdpTransportConfig>(switch_config.transport);
    udp.bind_host = "127.0.0.1";
    udp.bind_port = 0;
    udp.socket_buffer_bytes = sizing.switch_buffer_bytes;
  }
  switch_config.threads = sizing.switch_threads;
  // Every thread spins when the wide session does; otherwise only thread 0, which serves the
  // small session (its one engine thread talks to the switch's first port).
  switch_config.busy_poll = std::max(sizing.busy_poll, small ? sizing.small_busy_poll : sizing.busy_poll);
  switch_config.busy_poll_threads = sizing.busy_poll > std::chrono::microseconds(0) ? 0 : 1;
  switch_config.sessions.push_back(session_for(wide, 0, settings.straggler_timeout));
  if (small) {
    switch_config.sessions.push_back(
        session_for(*small, switch_config.sessions.back().pool_size, settings.straggler_timeout));
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

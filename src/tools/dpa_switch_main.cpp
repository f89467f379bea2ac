// SPDX-License-Identifier: Apache-2.0
// dpa-switch: the software switch as a program. Sessions come from a JSON config and/or flags.
// main() parses the flags (tools/switch/options: Options), merges them with the config file
// (resolve: StartUp) and hands over to serve(), which runs until SIGINT or SIGTERM.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "switch/control_channel.hpp"
#ifdef DPA_HAVE_METRICS_HTTP
#include "switch/metrics_http.hpp"
#endif
#include "dpa/error.hpp"
#include "dpa/host_port.hpp"
#include "dpa/switch.hpp"
#include "tools/command_line.hpp"
#include "tools/switch/options.hpp"

namespace {

using dpa::tools::switch_tool::Options;
using dpa::tools::switch_tool::StartUp;

std::string listening_address(const dpa::SwitchConfig& config) {
  if (const auto* udp = std::get_if<dpa::UdpTransportConfig>(&config.transport)) return udp->bind_host;
  if (const auto* shm = std::get_if<dpa::ShmTransportConfig>(&config.transport)) {
    return "shm fabric " + shm->fabric + " (" + shm->directory + "), 127.0.0.1";
  }
  return std::get<dpa::DpdkTransportConfig>(config.transport).local_ip;
}

void print_counters(const dpa::SwitchCounters& counters) {
  std::cout << counters.to_string();
  if (counters.busy_ns > 0) {
    const double busy_s = static_cast<double>(counters.busy_ns) * 1e-9;
    std::cout << fmt::format("per busy core: {:.2f} Mpps received, {:.2f} Mpps sent ({:.3f} s busy)\n",
                             static_cast<double>(counters.rx_packets) / busy_s * 1e-6,
                             static_cast<double>(counters.tx_packets) / busy_s * 1e-6, busy_s);
  }
  std::cout << std::flush;
}

// Runs the switch, its control channels and its metrics endpoint until SIGINT or SIGTERM.
int serve(const StartUp& start, const Options& o) {
  // Block the stop signals before any thread starts, then wait for one on this thread.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  dpa::SoftwareSwitch sw(start.config);
  if (!o.port_file.empty()) {
    const std::string temporary = o.port_file + ".tmp";
    std::ofstream(temporary) << sw.port() << "\n";
    std::rename(temporary.c_str(), o.port_file.c_str());
  }
  std::vector<std::unique_ptr<dpa::sw::ControlChannel>> control;
  if (!o.control_socket.empty()) {
    control.push_back(
        std::make_unique<dpa::sw::ControlChannel>(sw, std::filesystem::path(o.control_socket), start.control));
  }
  if (o.control_port >= 0) {
    control.push_back(std::make_unique<dpa::sw::ControlChannel>(
        sw, dpa::HostPort{o.control_host, static_cast<std::uint16_t>(o.control_port)}, start.control));
  }
  for (const auto& channel : control) {
    std::cout << "dpa-switch control channel on " << channel->where() << "\n";
  }
#ifdef DPA_HAVE_METRICS_HTTP
  std::unique_ptr<dpa::sw::MetricsServer> metrics_server;
  if (start.metrics_at) {
    metrics_server = std::make_unique<dpa::sw::MetricsServer>(sw, start.metrics_at->host, start.metrics_at->port);
    std::cout << "dpa-switch metrics on http://" << start.metrics_at->host << ":" << metrics_server->port()
              << "/metrics\n";
  }
#endif
  std::cout << "dpa-switch listening on " << listening_address(start.config) << ":" << sw.port() << std::endl;
  int received = 0;
  sigwait(&stop_signals, &received);
#ifdef DPA_HAVE_METRICS_HTTP
  metrics_server.reset();
#endif
  control.clear();
  sw.stop();
  std::cout << "dpa-switch stopping (signal " << received << ")\n";
  print_counters(sw.counters());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dpa-switch: software switch for dpa in-network allreduce"};
  Options options;
  dpa::tools::switch_tool::add_options(app, options);
  if (const auto exit_code = dpa::tools::parse_command_line(app, "dpa-switch", argc, argv)) return *exit_code;
  try {
    return serve(dpa::tools::switch_tool::resolve(app, options), options);
  } catch (const dpa::ConfigError& error) {
    // The flags or the config file: a usage error.
    std::cerr << "dpa-switch: " << error.what() << "\n";
    return dpa::tools::kExitUsage;
  } catch (const dpa::Error& error) {
    // The machine: a port taken, a control socket in use, a device that does not start.
    std::cerr << "dpa-switch: " << error.what() << "\n";
    return dpa::tools::kExitRuntimeFailure;
  } catch (const std::exception& error) {
    std::cerr << "dpa-switch: cannot start: " << error.what() << "\n";
    return dpa::tools::kExitRuntimeFailure;
  }
}

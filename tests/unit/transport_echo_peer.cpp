// SPDX-License-Identifier: Apache-2.0
// A DPDK echo peer in a process of its own, for the transport tests over net_memif:
//   transport_echo_peer <memif socket> <file prefix> <queues>
// It is the memif client (10.99.0.2, MAC 02:00:00:00:00:02, UDP 7000 + q) of the test's server
// (10.99.0.1, MAC 02:00:00:00:00:01). SIGTERM stops its polling ("idle" on standard output); it
// then waits for SIGKILL, and exits with its parent.
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <iostream>
#include <string>

#include "transport/factory.hpp"
#include "transport_echo.hpp"

namespace {
std::atomic<bool> stop{false};
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: transport_echo_peer <memif socket> <file prefix> <queues>\n";
    return 2;
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test that started us
  std::signal(SIGTERM, [](int) { stop.store(true); });
  try {
    dpa::DpdkTransportConfig config;
    config.vdevs = {std::string("net_memif0,role=client,socket-abstract=no,mac=02:00:00:00:00:02,socket=") + argv[1]};
    config.file_prefix = argv[2];
    config.no_huge = true;
    config.memory_mb = 256;
    config.eal_args = {"--no-pci", "--log-level=lib.eal:error"};
    config.ports = {"net_memif0"};
    config.local_ip = "10.99.0.2";
    config.local_port = 7000;
    config.mbufs = 2047;
    config.rx_descriptors = 256;  // memif sizes its rings itself
    config.tx_descriptors = 256;
    config.neighbours = {{"10.99.0.1", "02:00:00:00:00:01"}};
    const auto queues = static_cast<std::size_t>(std::stoul(argv[3]));
    auto device = dpa::transport::open_device(config, queues);
    std::vector<std::unique_ptr<dpa::transport::Queue>> opened;
    for (std::size_t q = 0; q < queues; ++q) opened.push_back(device->open_queue(q));
    std::cout << "ready" << std::endl;
    dpa::transport::test::run_echo(opened, stop, std::chrono::microseconds(100));
    // Connected but no longer polling: the test closes its side now (a disconnect unmaps the
    // rings of the side that still polls), then kills this process.
    std::cout << "idle" << std::endl;
    for (;;) pause();
  } catch (const std::exception& error) {
    std::cerr << "transport_echo_peer: " << error.what() << "\n";
    return 1;
  }
  return 0;
}

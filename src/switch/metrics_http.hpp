// SPDX-License-Identifier: Apache-2.0
// dpa-switch's Prometheus endpoint: GET /metrics (metrics_text.hpp) over HTTP, read-only, on a
// thread of its own. Built only where CMake finds cpp-httplib (Debian: libcpp-httplib-dev).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dpa/switch.hpp"

namespace dpa::sw {

class MetricsServer {
 public:
  // Listens on host:port (an IPv4 address; port 0: ephemeral) and serves until destroyed.
  // GET (and HEAD) /metrics answer the counters; other methods on /metrics get 405, other
  // paths 404. Throws ConfigError for a host that is not an IPv4 address, dpa::Error if it
  // cannot listen.
  MetricsServer(const SoftwareSwitch& target, const std::string& host, std::uint16_t port);
  ~MetricsServer();  // stops serving and joins the thread
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  [[nodiscard]] std::uint16_t port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dpa::sw

// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <stdexcept>
#include <string>

namespace dpa {

// Every failure the library reports is a dpa::Error; the subclasses say what kind.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A configuration value is missing, malformed, out of range, or differs between ranks.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// The switch or a peer did not answer within the configured bound.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// The switch rejected a packet or replied with something that breaks the protocol.
class ProtocolError : public Error {
 public:
  using Error::Error;
};

}  // namespace dpa

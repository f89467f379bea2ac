// SPDX-License-Identifier: Apache-2.0
// The compile-time part of a Tofino switch config (configs/<switch>.json): what the P4 program
// is built for. dpa-p4gen validates it and writes it as the program's defines
// (p4/dpa_config.p4); the controller reads the runtime part (ports, sessions) of the same file.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dpa::tools::p4gen {

// A config the generator cannot build a program from; the message names the key.
class ConfigKeyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ProgramConfig {
  int tofino = 1;                // switch.tofino: 1 (TNA) or 2 (T2NA)
  bool model = false;            // switch.model: built for the tofino-model
  std::vector<int> pipes;        // switch.pipes: hardware pipes, workers' pipe first
  std::uint16_t udp_port = 4242;  // switch.udp_port
  int cpu_port = 0;              // switch.cpu_port: dev port JOINs are punted to
  int reducers = 32;             // switch.program.reducers: paired cells per pass (1..32)
  int chunks = 1;                // switch.program.chunks: value passes (1..pipes)
  int slots = 16384;             // switch.program.slots: power of two, 2..16384
  int sessions = 16;             // switch.program.sessions
  int identities = 4096;         // switch.program.identities: member endpoints, all sessions
  int hosts = 256;               // switch.program.hosts
  int l2_entries = 1024;         // switch.program.l2_entries
  int pass_ports = 16;           // switch.program.pass_ports: size of the pass-port value set
  int sender_mgid_base = 0x1000;  // switch.program.sender_mgid_base
  bool straggler_aware = true;   // switch.program.straggler_aware
  bool drop_simulator = false;   // switch.program.drop_simulator

  [[nodiscard]] int payload() const { return 2 * reducers * chunks; }  // P
  [[nodiscard]] int slot_bits() const;
  [[nodiscard]] std::string target() const { return tofino == 1 ? "tofino" : "tofino2"; }
  [[nodiscard]] std::string arch() const { return tofino == 1 ? "tna" : "t2na"; }
};

// Reads and validates the config's "switch" object; throws ConfigKeyError naming the key.
ProgramConfig parse_program_config(const nlohmann::json& config);

// The generated header: one #define per setting, and a comment naming the source.
std::string render_defines(const ProgramConfig& config, const std::string& source);

}  // namespace dpa::tools::p4gen

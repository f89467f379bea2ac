// SPDX-License-Identifier: Apache-2.0
#include "tools/p4gen/program_config.hpp"

#include <algorithm>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace dpa::tools::p4gen {

namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& key, const std::string& why) {
  throw ConfigKeyError(key + ": " + why);
}

const json& object_at(const json& parent, const std::string& name, const std::string& key) {
  if (!parent.contains(name)) fail(key, "missing");
  const json& value = parent.at(name);
  if (!value.is_object()) fail(key, "must be an object");
  return value;
}

int integer(const json& parent, const std::string& name, const std::string& key, int fallback,
            int low, int high) {
  if (!parent.contains(name)) return fallback;
  const json& value = parent.at(name);
  if (!value.is_number_integer()) fail(key, "must be an integer");
  const auto number = value.get<std::int64_t>();
  if (number < low || number > high) {
    fail(key, std::to_string(number) + " is outside " + std::to_string(low) + ".." +
                  std::to_string(high));
  }
  return static_cast<int>(number);
}

int required_integer(const json& parent, const std::string& name, const std::string& key, int low,
                     int high) {
  if (!parent.contains(name)) fail(key, "missing");
  return integer(parent, name, key, 0, low, high);
}

bool boolean(const json& parent, const std::string& name, const std::string& key, bool fallback) {
  if (!parent.contains(name)) return fallback;
  const json& value = parent.at(name);
  if (!value.is_boolean()) fail(key, "must be true or false");
  return value.get<bool>();
}

void reject_unknown(const json& object, const std::set<std::string>& known, const std::string& prefix) {
  for (const auto& item : object.items()) {
    if (!known.contains(item.key())) fail(prefix + item.key(), "unknown key");
  }
}

}  // namespace

int ProgramConfig::slot_bits() const {
  int bits = 0;
  while ((1 << bits) < slots) ++bits;
  return bits;
}

ProgramConfig parse_program_config(const json& config) {
  if (!config.is_object()) fail("(top level)", "must be a JSON object");
  const json& sw = object_at(config, "switch", "switch");
  ProgramConfig result;
  result.tofino = required_integer(sw, "tofino", "switch.tofino", 1, 2);
  result.model = boolean(sw, "model", "switch.model", false);

  if (!sw.contains("pipes")) fail("switch.pipes", "missing");
  const json& pipes = sw.at("pipes");
  if (!pipes.is_array() || pipes.empty() || pipes.size() > 4) {
    fail("switch.pipes", "must list 1 to 4 hardware pipes, the workers' pipe first");
  }
  for (std::size_t i = 0; i < pipes.size(); ++i) {
    const std::string key = "switch.pipes[" + std::to_string(i) + "]";
    if (!pipes[i].is_number_integer()) fail(key, "must be an integer");
    const int pipe = pipes[i].get<int>();
    if (pipe < 0 || pipe > 3) fail(key, std::to_string(pipe) + " is outside 0..3");
    if (std::find(result.pipes.begin(), result.pipes.end(), pipe) != result.pipes.end()) {
      fail(key, "pipe " + std::to_string(pipe) + " is listed twice");
    }
    result.pipes.push_back(pipe);
  }
  result.udp_port = static_cast<std::uint16_t>(integer(sw, "udp_port", "switch.udp_port", 4242, 1, 65535));
  result.cpu_port = required_integer(sw, "cpu_port", "switch.cpu_port", 0, 511);

  const json& program = object_at(sw, "program", "switch.program");
  reject_unknown(program,
                 {"reducers", "chunks", "slots", "sessions", "identities", "hosts", "l2_entries",
                  "pass_ports", "sender_mgid_base", "straggler_aware", "drop_simulator"},
                 "switch.program.");
  result.reducers = integer(program, "reducers", "switch.program.reducers", 32, 1, 32);
  result.chunks = integer(program, "chunks", "switch.program.chunks",
                          static_cast<int>(result.pipes.size()), 1, 4);
  if (result.chunks > static_cast<int>(result.pipes.size())) {
    fail("switch.program.chunks", std::to_string(result.chunks) + " chunks need as many pipes, but "
         "switch.pipes lists " + std::to_string(result.pipes.size()));
  }
  result.slots = integer(program, "slots", "switch.program.slots", 16384, 2, 16384);
  if ((result.slots & (result.slots - 1)) != 0) {
    fail("switch.program.slots", std::to_string(result.slots) + " is not a power of two");
  }
  result.sessions = integer(program, "sessions", "switch.program.sessions", 16, 1, 255);
  result.identities = integer(program, "identities", "switch.program.identities", 4096, 1, 65536);
  result.hosts = integer(program, "hosts", "switch.program.hosts", 256, 1, 65536);
  result.l2_entries = integer(program, "l2_entries", "switch.program.l2_entries", 1024, 1, 65536);
  result.pass_ports = integer(program, "pass_ports", "switch.program.pass_ports", 16, 1, 64);
  result.sender_mgid_base =
      integer(program, "sender_mgid_base", "switch.program.sender_mgid_base", 0x1000, 1, 0xFFFF - 511);
  result.straggler_aware = boolean(program, "straggler_aware", "switch.program.straggler_aware", true);
  result.drop_simulator = boolean(program, "drop_simulator", "switch.program.drop_simulator", false);
  return result;
}

std::string render_defines(const ProgramConfig& c, const std::string& source) {
  std::ostringstream out;
  out << "// Generated by dpa-p4gen from " << source << ". Do not edit: change the config.\n"
      << "#ifndef DPA_CONFIG_P4\n#define DPA_CONFIG_P4\n"
      << "#define DPA_TARGET " << c.tofino << "\n"
      << "#define DPA_MODEL " << (c.model ? 1 : 0) << "\n"
      << "#define DPA_PIPES " << c.pipes.size() << "\n"
      << "#define DPA_CHUNKS " << c.chunks << "\n"
      << "#define DPA_REDUCERS " << c.reducers << "\n"
      << "#define DPA_PAYLOAD " << c.payload() << "\n"
      << "#define DPA_SLOTS " << c.slots << "\n"
      << "#define DPA_SLOT_BITS " << c.slot_bits() << "\n"
      << "#define DPA_SESSIONS " << c.sessions << "\n"
      << "#define DPA_IDENTITIES " << c.identities << "\n"
      << "#define DPA_HOSTS " << c.hosts << "\n"
      << "#define DPA_L2_ENTRIES " << c.l2_entries << "\n"
      << "#define DPA_PASS_PORTS " << c.pass_ports << "\n"
      << "#define DPA_UDP_PORT " << c.udp_port << "\n"
      << "#define DPA_CPU_PORT " << c.cpu_port << "\n"
      << "#define DPA_SENDER_MGID_BASE " << c.sender_mgid_base << "\n"
      << "#define DPA_STRAGGLER_AWARE " << (c.straggler_aware ? 1 : 0) << "\n"
      << "#define DPA_DROP_SIMULATOR " << (c.drop_simulator ? 1 : 0) << "\n"
      << "#endif\n";
  return out.str();
}

}  // namespace dpa::tools::p4gen

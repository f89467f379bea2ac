// SPDX-License-Identifier: Apache-2.0
// dpa-p4gen's config reading: the shipped switch configs, every derived define, and errors that
// name the key.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "tools/p4gen/program_config.hpp"

namespace dpa::tools::p4gen {
namespace {

nlohmann::json load(const std::string& name) {
  std::ifstream in(std::string(DPA_SOURCE_DIR) + "/configs/" + name);
  return nlohmann::json::parse(in);
}

std::string error_of(const nlohmann::json& config) {
  try {
    parse_program_config(config);
  } catch (const ConfigKeyError& error) {
    return error.what();
  }
  return "accepted";
}

TEST(P4gen, NetbergIsTofino1WithTwoChunksOf40Values) {
  const ProgramConfig config = parse_program_config(load("netberg.json"));
  EXPECT_EQ(config.target(), "tofino");
  EXPECT_EQ(config.arch(), "tna");
  EXPECT_EQ(config.pipes, (std::vector<int>{1, 0}));
  EXPECT_EQ(config.payload(), 80);
  EXPECT_EQ(config.slot_bits(), 14);
}

TEST(P4gen, EdgecoreIsTofino2WithFourChunks) {
  const ProgramConfig config = parse_program_config(load("edgecore.json"));
  EXPECT_EQ(config.target(), "tofino2");
  EXPECT_EQ(config.arch(), "t2na");
  EXPECT_EQ(config.payload(), 256);
}

TEST(P4gen, RendersEveryDefineTheProgramReads) {
  const std::string defines = render_defines(parse_program_config(load("tofino-model.json")), "m.json");
  for (const char* line :
       {"#define DPA_TARGET 1\n", "#define DPA_MODEL 1\n", "#define DPA_PIPES 2\n",
        "#define DPA_CHUNKS 2\n", "#define DPA_REDUCERS 20\n", "#define DPA_PAYLOAD 80\n",
        "#define DPA_SLOTS 4096\n", "#define DPA_SLOT_BITS 12\n", "#define DPA_SESSIONS 4\n",
        "#define DPA_IDENTITIES 1024\n", "#define DPA_HOSTS 256\n", "#define DPA_L2_ENTRIES 1024\n",
        "#define DPA_PASS_PORTS 16\n", "#define DPA_UDP_PORT 4242\n", "#define DPA_CPU_PORT 64\n",
        "#define DPA_SENDER_MGID_BASE 4096\n", "#define DPA_STRAGGLER_AWARE 1\n",
        "#define DPA_DROP_SIMULATOR 1\n"}) {
    EXPECT_NE(defines.find(line), std::string::npos) << line;
  }
  EXPECT_NE(defines.find("from m.json"), std::string::npos);
}

TEST(P4gen, ErrorsNameTheKey) {
  const nlohmann::json good = load("netberg.json");
  struct Case {
    std::function<void(nlohmann::json&)> mutate;
    std::string key;
  };
  const std::vector<Case> cases = {
      {[](auto& c) { c.erase("switch"); }, "switch: missing"},
      {[](auto& c) { c["switch"]["tofino"] = 3; }, "switch.tofino: 3 is outside 1..2"},
      {[](auto& c) { c["switch"]["tofino"] = "1"; }, "switch.tofino: must be an integer"},
      {[](auto& c) { c["switch"]["pipes"] = nlohmann::json::array(); }, "switch.pipes: must list"},
      {[](auto& c) { c["switch"]["pipes"] = {1, 1}; }, "switch.pipes[1]: pipe 1 is listed twice"},
      {[](auto& c) { c["switch"]["pipes"] = {4}; }, "switch.pipes[0]: 4 is outside 0..3"},
      {[](auto& c) { c["switch"].erase("cpu_port"); }, "switch.cpu_port: missing"},
      {[](auto& c) { c["switch"]["program"]["chunks"] = 3; }, "switch.program.chunks: 3 chunks need"},
      {[](auto& c) { c["switch"]["program"]["reducers"] = 33; }, "switch.program.reducers: 33 is outside"},
      {[](auto& c) { c["switch"]["program"]["slots"] = 1000; }, "switch.program.slots: 1000 is not a power"},
      {[](auto& c) { c["switch"]["program"]["straggler_aware"] = 1; },
       "switch.program.straggler_aware: must be true or false"},
      {[](auto& c) { c["switch"]["program"]["slot"] = 8; }, "switch.program.slot: unknown key"},
      {[](auto& c) { c["switch"].erase("program"); }, "switch.program: missing"},
  };
  for (const Case& c : cases) {
    nlohmann::json config = good;
    c.mutate(config);
    EXPECT_EQ(error_of(config).rfind(c.key, 0), 0u) << error_of(config) << " / " << c.key;
  }
  EXPECT_EQ(error_of(nlohmann::json::array()).rfind("(top level)", 0), 0u);
}

TEST(P4gen, TheStragglerUnawareBuildIsAFlag) {
  nlohmann::json config = load("netberg.json");
  config["switch"]["program"]["straggler_aware"] = false;
  EXPECT_NE(render_defines(parse_program_config(config), "x").find("#define DPA_STRAGGLER_AWARE 0\n"),
            std::string::npos);
}

}  // namespace
}  // namespace dpa::tools::p4gen

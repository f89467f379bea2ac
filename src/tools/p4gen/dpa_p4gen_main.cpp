// SPDX-License-Identifier: Apache-2.0
// dpa-p4gen: turns configs/<switch>.json into the P4 program's defines (dpa_config.p4), or
// prints one derived setting for the scripts (--print target|arch|payload|model).
#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "tools/p4gen/program_config.hpp"
#include "tools/command_line.hpp"

int main(int argc, char** argv) {
  CLI::App app{"dpa-p4gen: generate the dpa P4 program's defines from a switch config"};
  std::string config_path;
  std::string output_path;
  std::string print;
  app.add_option("config", config_path, "switch config (configs/<switch>.json)")->required();
  app.add_option("-o,--output", output_path, "write dpa_config.p4 here (default: stdout)");
  app.add_option("--print", print, "print one derived setting instead")
      ->check(CLI::IsMember({"target", "arch", "payload", "model"}));
  if (const auto exit_code = dpa::tools::parse_command_line(app, "dpa-p4gen", argc, argv)) return *exit_code;

  namespace p4gen = dpa::tools::p4gen;
  p4gen::ProgramConfig config;
  try {
    std::ifstream in(config_path);
    if (!in) {
      std::cerr << "dpa-p4gen: cannot read " << config_path << "\n";
      return 2;
    }
    config = p4gen::parse_program_config(nlohmann::json::parse(in));
  } catch (const nlohmann::json::parse_error& error) {
    std::cerr << "dpa-p4gen: " << config_path << ": not valid JSON: " << error.what() << "\n";
    return 2;
  } catch (const p4gen::ConfigKeyError& error) {
    std::cerr << "dpa-p4gen: " << config_path << ": " << error.what() << "\n";
    return 2;
  }

  if (print == "target") {
    std::cout << config.target() << "\n";
  } else if (print == "arch") {
    std::cout << config.arch() << "\n";
  } else if (print == "payload") {
    std::cout << config.payload() << "\n";
  } else if (print == "model") {
    std::cout << (config.model ? 1 : 0) << "\n";
  } else if (output_path.empty()) {
    std::cout << p4gen::render_defines(config, config_path);
  } else {
    std::ofstream out(output_path);
    out << p4gen::render_defines(config, config_path);
    if (!out) {
      std::cerr << "dpa-p4gen: cannot write " << output_path << "\n";
      return dpa::tools::kExitRuntimeFailure;
    }
  }
  return 0;
}

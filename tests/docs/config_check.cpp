// SPDX-License-Identifier: Apache-2.0
// Loads a config file through the parser of the program that reads it, so docs_in_step.py can
// check every file under configs/ without starting a switch or a worker: `worker FILE` is what
// DPA_CONFIG gives libdpa (dpa::Config), `switch FILE` what `dpa-switch --config` reads.
#include <iostream>
#include <string_view>

#include "dpa/config.hpp"
#include "dpa/error.hpp"
#include "dpa/switch.hpp"

int main(int argc, char** argv) {
  const std::string_view kind = argc == 3 ? argv[1] : "";
  if (kind != "worker" && kind != "switch") {
    std::cerr << "usage: config_check worker|switch FILE\n";
    return 2;
  }
  const std::string path = argv[2];
  try {
    if (kind == "worker") {
      dpa::Config::from_json_file(path).validate();
    } else {
      dpa::SwitchConfig::from_json_file(path).validate();
    }
  } catch (const dpa::Error& error) {
    std::cerr << error.what() << '\n';  // names the file and the key
    return 1;
  }
  return 0;
}

// SPDX-License-Identifier: Apache-2.0
// Uses only the installed public headers and library.
#include <dpa/config.hpp>
#include <dpa/error.hpp>

#include <iostream>

int main() {
  dpa::Config config;
  config.world_size = 2;
  config.rank = 1;
  try {
    config.validate();
  } catch (const dpa::Error& error) {
    std::cerr << "dpa consumer: " << error.what() << '\n';
    return 1;
  }
  std::cout << "dpa consumer ok\n";
  return 0;
}

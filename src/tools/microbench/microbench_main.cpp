// SPDX-License-Identifier: Apache-2.0
// dpa-microbench: Google Benchmark's main with the conventions of dpa's other tools: --version,
// and exit 2 for an argument Google Benchmark does not know (--help is Google Benchmark's own).
#include <benchmark/benchmark.h>

#include <iostream>
#include <string_view>

#include "dpa/version.hpp"

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--version") {
      std::cout << "dpa-microbench " DPA_VERSION_STRING "\n";
      return 0;
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

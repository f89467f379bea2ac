// SPDX-License-Identifier: Apache-2.0
// The library's logger: spdlog, level from DPA_LOG (error|warn|info|debug|trace, default warn).
#pragma once

#include <spdlog/spdlog.h>

namespace dpa::detail {

// The "dpa" logger, created on first use with the level DPA_LOG asks for.
spdlog::logger& log();

}  // namespace dpa::detail

// SPDX-License-Identifier: Apache-2.0
// The library's log lines at `level` and above while one of these lives: an extra sink on the
// "dpa" logger, taken out (and the level restored) when it goes. Create it before any thread that
// could log starts, and let it go after they have all stopped.
#pragma once

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>

#include <spdlog/sinks/ostream_sink.h>

#include "common/logging.hpp"

namespace dpa::test {

class CapturedLog {
 public:
  explicit CapturedLog(spdlog::level::level_enum level)
      : logger_(dpa::detail::log()),
        sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(lines_)),
        saved_level_(logger_.level()) {
    logger_.set_level(level);
    logger_.sinks().push_back(sink_);
  }
  ~CapturedLog() {
    std::erase(logger_.sinks(), sink_);
    logger_.set_level(saved_level_);
  }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;

  [[nodiscard]] std::string text() const { return lines_.str(); }

 private:
  std::ostringstream lines_;
  spdlog::logger& logger_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  spdlog::level::level_enum saved_level_;
};

}  // namespace dpa::test

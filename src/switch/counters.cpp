// SPDX-License-Identifier: Apache-2.0
#include <string>

#include <fmt/format.h>

#include "dpa/switch.hpp"
#include "switch/counter_fields.hpp"

namespace dpa {

SwitchCounters& SwitchCounters::operator+=(const SwitchCounters& other) {
  for (const auto& field : sw::kSwitchCounterFields) this->*field.member += other.*field.member;
  return *this;
}

std::string SwitchCounters::to_string() const {
  std::string text;
  for (const auto& field : sw::kSwitchCounterFields) text += fmt::format("{} {}\n", field.name, this->*field.member);
  return text;
}

SessionCounters& SessionCounters::operator+=(const SessionCounters& other) {
  for (const auto& field : sw::kSessionCounterFields) this->*field.member += other.*field.member;
  return *this;
}

}  // namespace dpa

// SPDX-License-Identifier: Apache-2.0
// Typed field readers for the JSON config files, shared by the worker config (api/config.cpp) and
// the switch config (switch/switch_config.cpp). Every error is a ConfigError whose message starts
// with `where`, which names the file and the key ("worker.json: faults.drop").
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace dpa::detail {

using json = nlohmann::json;

// Throws ConfigError(message).
[[noreturn]] void fail(std::string message);

template <std::integral T>
std::string integer_range() {
  return fmt::format("[{}, {}]", std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
}

// What "expected ..." calls an integer field: the worker config says "a non-negative integer" for
// unsigned fields, the switch config says "an integer" for every integer field.
enum class IntegerWording { by_signedness, plain };

template <std::integral T>
std::string_view integer_kind(IntegerWording wording = IntegerWording::by_signedness) {
  return std::unsigned_integral<T> && wording == IntegerWording::by_signedness ? "a non-negative integer"
                                                                               : "an integer";
}

template <std::integral T>
T json_integer(const json& value, const std::string& where,
               IntegerWording wording = IntegerWording::by_signedness) {
  // nlohmann keeps non-negative literals as uint64 and negative ones as int64.
  if (value.is_number_unsigned()) {
    if (const auto number = value.get<std::uint64_t>(); std::in_range<T>(number)) {
      return static_cast<T>(number);
    }
  } else if (value.is_number_integer()) {
    if (const auto number = value.get<std::int64_t>(); std::in_range<T>(number)) {
      return static_cast<T>(number);
    }
  } else {
    fail(fmt::format("{}: expected {}, got {}", where, integer_kind<T>(wording), value.type_name()));
  }
  fail(fmt::format("{}: {} is out of range {}", where, value.dump(), integer_range<T>()));
}

void read_json(const json& value, const std::string& where, bool& out);
void read_json(const json& value, const std::string& where, double& out);
void read_json(const json& value, const std::string& where, std::string& out);

// Durations are integers in the unit of the field's type, which the key's suffix spells out.
template <class Rep, class Period>
void read_json(const json& value, const std::string& where, std::chrono::duration<Rep, Period>& out) {
  out = std::chrono::duration<Rep, Period>{json_integer<Rep>(value, where)};
}

void require_object(const json& value, const std::string& where);
void require_array(const json& value, const std::string& where);

// Opens and parses `path` (comments allowed); the root must be an object.
json parse_json_object_file(const std::string& path);

template <class Target>
using FieldReader = std::function<void(const json& value, const std::string& where, Target& target)>;
template <class Target>
using FieldReaders = std::map<std::string_view, FieldReader<Target>, std::less<>>;

// Reads the key into `member`: json_integer for integers, else the read_json overload for its type.
template <IntegerWording wording = IntegerWording::by_signedness, class Target, class Field>
FieldReader<Target> reader_for(Field Target::*member) {
  return [member](const json& value, const std::string& where, Target& target) {
    if constexpr (std::integral<Field> && !std::same_as<Field, bool>) {
      target.*member = json_integer<Field>(value, where, wording);
    } else {
      read_json(value, where, target.*member);
    }
  };
}

// Reads every key of `object`; `key_prefix` is what precedes a key in messages ("file: faults.").
template <class Target>
void read_object(const json& object, const std::string& key_prefix, const FieldReaders<Target>& readers,
                 Target& target) {
  for (const auto& [key, value] : object.items()) {
    const std::string where = key_prefix + key;
    const auto reader = readers.find(key);
    if (reader == readers.end()) fail(where + ": unknown key");
    reader->second(value, where, target);
  }
}

}  // namespace dpa::detail

// SPDX-License-Identifier: Apache-2.0
#include "common/json_fields.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "dpa/error.hpp"

namespace dpa::detail {

void fail(std::string message) { throw ConfigError(std::move(message)); }

void read_json(const json& value, const std::string& where, bool& out) {
  if (!value.is_boolean()) fail(fmt::format("{}: expected a boolean, got {}", where, value.type_name()));
  out = value.get<bool>();
}

void read_json(const json& value, const std::string& where, double& out) {
  if (!value.is_number()) fail(fmt::format("{}: expected a number, got {}", where, value.type_name()));
  out = value.get<double>();
}

void read_json(const json& value, const std::string& where, std::string& out) {
  if (!value.is_string()) fail(fmt::format("{}: expected a string, got {}", where, value.type_name()));
  out = value.get<std::string>();
}

void require_object(const json& value, const std::string& where) {
  if (!value.is_object()) fail(fmt::format("{}: expected an object, got {}", where, value.type_name()));
}

void require_array(const json& value, const std::string& where) {
  if (!value.is_array()) fail(fmt::format("{}: expected an array, got {}", where, value.type_name()));
}

json parse_json_object_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  json root;
  try {
    root = json::parse(in, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::parse_error& error) {
    fail(fmt::format("{}: invalid JSON: {}", path, error.what()));
  }
  if (!root.is_object()) fail(fmt::format("{}: expected a JSON object, got {}", path, root.type_name()));
  return root;
}

}  // namespace dpa::detail

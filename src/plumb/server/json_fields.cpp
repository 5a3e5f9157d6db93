#include "plumb/server/json_fields.h"

#include <fmt/format.h>

#include <cmath>

#include "plumb/server/api_error.h"

namespace plumb::server {

void bad_field(const std::string& name, const std::string& what) { throw ApiError(400, fmt::format("'{}' {}", name, what), name); }

const Json* field(const Json& object, const char* name) {
  auto it = object.find(name);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

std::optional<bool> get_bool(const Json& object, const char* name) {
  const Json* v = field(object, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad_field(name, "must be a boolean");
  return v->get<bool>();
}

std::optional<std::int64_t> get_int(const Json& object, const char* name, std::int64_t lo, std::int64_t hi) {
  const Json* v = field(object, name);
  if (!v) return std::nullopt;
  std::int64_t value = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      bad_field(name, fmt::format("must be in [{}, {}]", lo, hi));
    value = v->get<std::int64_t>();
  } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() && std::abs(v->get<double>()) < 9e18) {
    value = static_cast<std::int64_t>(v->get<double>());  // 5.0 is an integer to JSON clients
  } else {
    bad_field(name, "must be an integer");
  }
  if (value < lo || value > hi) bad_field(name, fmt::format("must be in [{}, {}], got {}", lo, hi, value));
  return value;
}

std::optional<double> get_number(const Json& object, const char* name, double lo, double hi) {
  const Json* v = field(object, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad_field(name, "must be a number");
  double value = v->get<double>();
  if (!(value >= lo && value <= hi)) bad_field(name, fmt::format("must be in [{}, {}], got {}", lo, hi, value));
  return value;
}

std::optional<std::string> get_string(const Json& object, const char* name) {
  const Json* v = field(object, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad_field(name, "must be a string");
  return v->get<std::string>();
}

Json parse_body(const std::string& body) {
  Json json;
  try {
    json = Json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    // parse_error, and out_of_range for a number beyond double (1e999): both the client's.
    throw ApiError(400, fmt::format("the request body is not valid JSON: {}", e.what()));
  }
  if (!json.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return json;
}

}  // namespace plumb::server

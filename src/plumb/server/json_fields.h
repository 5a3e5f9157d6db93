#pragma once
// Typed reads of optional request fields: a missing or null field gives std::nullopt, a field of
// the wrong type or out of range throws ApiError(400) naming the field (OpenAI's "param").
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace plumb::server {

using Json = nlohmann::ordered_json;

const Json* field(const Json& object, const char* name);
std::optional<bool> get_bool(const Json& object, const char* name);
std::optional<std::int64_t> get_int(const Json& object, const char* name, std::int64_t lo, std::int64_t hi);
std::optional<double> get_number(const Json& object, const char* name, double lo, double hi);
std::optional<std::string> get_string(const Json& object, const char* name);
[[noreturn]] void bad_field(const std::string& name, const std::string& what);

// The request body as a JSON object (400 otherwise).
Json parse_body(const std::string& body);

}  // namespace plumb::server

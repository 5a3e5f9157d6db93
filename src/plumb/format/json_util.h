#pragma once
// JSON helpers for strict, one-line error reporting on untrusted files (safetensors headers,
// index files). nlohmann::json alone silently keeps the last of two equal keys, which would let a
// second header entry shadow a tensor; parse_json_strict rejects that.
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace plumb {

// Parses `text`; throws plumb::Error "<label>: invalid JSON: <nlohmann's message with position>"
// or "<label>: duplicate key 'k'".
nlohmann::json parse_json_strict(std::string_view text, const std::string& label);

// A short, single-line description of a value for error messages: scalars and flat arrays are
// dumped (truncated), anything else is named by type. Never recurses into nested values.
std::string json_brief(const nlohmann::json& v);

// `s` in single quotes with control characters escaped, so names taken from files cannot break
// the one-line error format.
std::string quote(std::string_view s);

}  // namespace plumb

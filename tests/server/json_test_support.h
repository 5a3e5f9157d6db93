#pragma once
// Shared by the response_format tests: an independent JSON-Schema validator for the subset, a
// random schema generator, the token tables of the tiny-kjv and DeepSeek-V4-Flash tokenizers,
// and a constrained generation loop that drives a JsonConstraint the way the engine does.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../tokenizer/test_tokenizers.h"
#include "plumb/server/json_constraint.h"
#include "server_fixture.h"

namespace plumb::test {

using Json = nlohmann::ordered_json;

inline std::string printable(const std::string& text) { return Json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

// JSON-Schema validation for the subset, written independently of the matcher.
inline bool valid(const Json& v, const Json& s) {
  if (s.contains("enum")) return std::find(s["enum"].begin(), s["enum"].end(), v) != s["enum"].end();
  if (s.contains("type")) {
    std::vector<std::string> types;
    if (s["type"].is_array()) for (const auto& t : s["type"]) types.push_back(t);
    else types.push_back(s["type"]);
    bool ok = false;
    for (const std::string& t : types)
      ok = ok || (t == "object" && v.is_object()) || (t == "array" && v.is_array()) || (t == "string" && v.is_string()) ||
           (t == "number" && v.is_number()) || (t == "integer" && v.is_number_integer()) || (t == "boolean" && v.is_boolean()) ||
           (t == "null" && v.is_null());
    if (!ok) return false;
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (const auto& r : s["required"])
        if (!v.contains(r.get<std::string>())) return false;
    if (s.contains("properties"))
      for (const auto& [k, sub] : s["properties"].items())
        if (v.contains(k) && !valid(v[k], sub)) return false;
  }
  if (v.is_array() && s.contains("items"))
    for (const auto& item : v)
      if (!valid(item, s["items"])) return false;
  return true;
}

// Schemas written out, one per feature the subset has, plus their mixes.
inline std::vector<Json> fixed_schemas() {
  return {
      Json::parse(R"({"type": "object"})"),
      Json::parse(R"({"type": "object", "properties": {"verse": {"type": "string"}}, "required": ["verse"]})"),
      Json::parse(R"({"type": "object", "properties": {
          "name": {"type": "string"}, "age": {"type": "integer"}, "score": {"type": "number"},
          "color": {"enum": ["red", "green", 3, null, "a\"b\\c", "\u00e9t\u00e9"]}, "ok": {"type": "boolean"},
          "tags": {"type": "array", "items": {"type": "string"}},
          "inner": {"type": "object", "properties": {"x": {"type": ["integer", "null"]}, "xy": {"type": "string"}}, "required": ["xy", "x"]}},
        "required": ["name", "inner", "color"]})"),
      Json::parse(R"({"type": "array", "items": {"type": "object", "properties": {"a": {"type": "boolean"}, "ab": {"type": "null"}}, "required": ["ab"]}})"),
      Json::parse(R"({"type": "array", "items": {"type": "array", "items": {"type": ["number", "string"]}}})"),
      Json::parse(R"({"enum": ["long choice", "short", 12, 1]})"),
      Json::parse(R"({"type": "string"})"),
      Json::parse(R"({"type": "object", "properties": {"l\u00e4nge": {"type": "object", "properties": {"deep": {"type": "object",
          "properties": {"deeper": {"type": "array", "items": {"type": "string"}}}, "required": ["deeper"]}}, "required": ["deep"]}},
        "required": ["l\u00e4nge"]})"),
  };
}

// A random schema: types, properties (names that prefix one another, non-ASCII ones), required
// subsets, enums of mixed values, arrays and nesting up to `depth`.
inline Json random_schema(std::mt19937_64& rng, int depth = 3) {
  static const char* const kNames[] = {"a", "ab", "abc", "name", "n\u00e4me", "x", "value", "tags", "\u65e5\u672c"};
  static const char* const kTypes[] = {"string", "integer", "number", "boolean", "null"};
  const int kind = static_cast<int>(rng() % (depth > 0 ? 7 : 4));
  if (kind == 0) return {{"type", kTypes[rng() % 5]}};
  if (kind == 1) {
    Json values = Json::array();
    for (int k = 1 + static_cast<int>(rng() % 4); k > 0; --k) {
      const int v = static_cast<int>(rng() % 5);
      values.push_back(v == 0 ? Json("w\u00f6rd") : v == 1 ? Json(static_cast<int>(rng() % 100)) : v == 2 ? Json(nullptr)
                       : v == 3 ? Json("q\"uo\\te") : Json::array({1, "x"}));
    }
    return {{"enum", values}};
  }
  if (kind == 2) return {{"type", Json::array({kTypes[rng() % 5], kTypes[rng() % 5]})}};
  if (kind == 3) return {{"type", "string"}};
  if (kind == 4) return {{"type", "array"}, {"items", random_schema(rng, depth - 1)}};
  Json schema = {{"type", "object"}};
  if (kind == 5) return schema;  // any keys
  Json props = Json::object(), required = Json::array();
  for (const char* name : kNames)
    if (rng() % 3 == 0) {
      props[name] = random_schema(rng, depth - 1);
      if (rng() % 2 == 0) required.push_back(name);
    }
  schema["properties"] = props;
  schema["required"] = required;
  return schema;
}

inline const server::TokenTable& tiny_table() {
  static const server::TokenTable t(tiny_kjv_tokenizer());
  return t;
}

inline const server::TokenTable& v4_table() {
  static const server::TokenTable t(deepseek_v4());
  return t;
}

inline std::shared_ptr<const server::TokenTable> shared(const server::TokenTable& t) {
  return std::shared_ptr<const server::TokenTable>(&t, [](const server::TokenTable*) {});  // static: never freed
}

inline std::vector<runtime::TokenId> allowed_ids(server::JsonConstraint& c, std::size_t vocab, std::int64_t remaining) {
  std::unique_ptr<bool[]> allowed(new bool[vocab]);  // std::vector<bool> has no span
  std::fill_n(allowed.get(), vocab, true);
  c.mask({allowed.get(), vocab}, remaining);
  std::vector<runtime::TokenId> ids;
  for (std::size_t id = 0; id < vocab; ++id)
    if (allowed[id]) ids.push_back(static_cast<runtime::TokenId>(id));
  return ids;
}

struct Generated {
  std::string text;
  std::vector<runtime::TokenId> tokens;
  bool done = false;
};

// Generates like the engine with up to `max_tokens` tokens: a random allowed token each step.
// `stubborn` draws prefer tokens with no closing byte, as a model that rambles on inside a
// string would: the budget, not luck, has to close the value.
inline Generated generate(server::JsonConstraint& c, const server::TokenTable& t, std::int64_t max_tokens, std::mt19937_64& rng,
                          bool stubborn) {
  Generated g;
  for (std::int64_t n = 0; n < max_tokens && !c.done(); ++n) {
    const auto ids = allowed_ids(c, t.bytes.size(), max_tokens - n);
    EXPECT_FALSE(ids.empty()) << "no token allowed after " << printable(g.text);
    if (ids.empty()) break;
    std::vector<runtime::TokenId> rambling;
    if (stubborn)
      for (runtime::TokenId id : ids)
        if (t.bytes[id].find_first_of("\"}]") == std::string::npos) rambling.push_back(id);
    const auto& pool = rambling.empty() || rng() % 8 == 0 ? ids : rambling;
    const runtime::TokenId id = pool[rng() % pool.size()];
    c.accept(id);
    g.tokens.push_back(id);
    g.text += t.bytes[id];
  }
  g.done = c.done();
  return g;
}

}  // namespace plumb::test

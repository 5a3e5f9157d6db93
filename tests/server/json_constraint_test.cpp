// response_format enforcement on the tiny-kjv tokenizer's real token strings: sequences sampled
// at random from what the constraint allows always parse as JSON and match the schema (checked
// by an independent validator below), and the constraint masks what must not come next.
#include <gtest/gtest.h>

#include <random>

#include "plumb/server/api_error.h"
#include "plumb/server/json_constraint.h"
#include "server_fixture.h"

namespace plumb::test {
namespace {

using Json = nlohmann::ordered_json;

// JSON-Schema validation for the subset, written independently of the matcher.
bool valid(const Json& v, const Json& s) {
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

std::shared_ptr<const server::TokenTable> table() {
  static auto t = std::make_shared<const server::TokenTable>(tiny_kjv_tokenizer());
  return t;
}

// Samples up to `limit` tokens from the allowed set; half the draws prefer tokens that close
// something, so that most runs finish. Returns the text and whether the constraint was done.
std::pair<std::string, bool> sample(const Json& schema, std::mt19937_64& rng, int limit = 400) {
  server::JsonConstraint c(server::JsonMatcher(schema, 48), table(), false);
  std::string text;
  const std::size_t vocab = tiny_kjv_tokenizer().id_limit();
  std::unique_ptr<bool[]> allowed(new bool[vocab]);  // std::vector<bool> has no span
  for (int step = 0; step < limit && !c.done(); ++step) {
    std::fill_n(allowed.get(), vocab, true);
    c.mask({allowed.get(), vocab});
    std::vector<runtime::TokenId> ids, closing;
    for (std::size_t id = 0; id < vocab; ++id)
      if (allowed[id]) {
        ids.push_back(static_cast<runtime::TokenId>(id));
        if (table()->bytes[id].find_first_of("\"}]0123456789el") != std::string::npos) closing.push_back(static_cast<runtime::TokenId>(id));
      }
    EXPECT_FALSE(ids.empty()) << "no token allowed after: " << Json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (ids.empty()) break;
    const auto& pool = (rng() % 2 == 0 && !closing.empty()) ? closing : ids;
    runtime::TokenId id = pool[rng() % pool.size()];
    c.accept(id);
    text += table()->bytes[id];
  }
  return {text, c.done()};
}

void expect_samples_valid(const Json& schema, int runs = 60) {
  std::mt19937_64 rng(1234);
  int finished = 0;
  for (int run = 0; run < runs; ++run) {
    auto [text, done] = sample(schema, rng);
    if (!done) continue;
    ++finished;
    Json value;
    ASSERT_NO_THROW(value = Json::parse(text)) << Json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    EXPECT_TRUE(valid(value, schema)) << Json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  EXPECT_GE(finished, runs * 3 / 4) << schema.dump();  // the validity check really ran
}

TEST(JsonConstraint, AnyObject) { expect_samples_valid(Json::parse(R"({"type": "object"})"), 40); }

TEST(JsonConstraint, PropertiesRequiredEnumAndNesting) {
  expect_samples_valid(Json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer"}, "score": {"type": "number"},
      "color": {"enum": ["red", "green", 3, null]}, "ok": {"type": "boolean"},
      "tags": {"type": "array", "items": {"type": "string"}},
      "inner": {"type": "object", "properties": {"x": {"type": ["integer", "null"]}}, "required": ["x"]}},
    "required": ["name", "inner", "color"]})"));
}

TEST(JsonConstraint, ArrayOfObjects) {
  expect_samples_valid(Json::parse(R"({"type": "array", "items": {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]}})"));
}

TEST(JsonConstraint, MasksWhatCannotComeNext) {
  Json schema = Json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})");
  server::JsonMatcher m(schema);
  auto feed = [&](const std::string& s) {
    for (char c : s)
      if (!m.feed(static_cast<unsigned char>(c))) return false;
    return true;
  };
  EXPECT_FALSE(server::JsonMatcher(schema).feed('['));
  ASSERT_TRUE(feed("{"));
  EXPECT_FALSE(server::JsonMatcher(m).feed('}'));  // "a" is required
  EXPECT_FALSE(server::JsonMatcher(m).feed('x'));
  ASSERT_TRUE(feed("\"a\": 1"));
  EXPECT_FALSE(server::JsonMatcher(m).feed('.'));  // an integer
  EXPECT_FALSE(server::JsonMatcher(m).feed(','));  // no property left
  EXPECT_FALSE(m.complete());
  ASSERT_TRUE(feed("2}"));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(server::JsonMatcher(m).feed('x'));
}

TEST(JsonConstraint, ThinkingModeLeavesTheReasoningFree) {
  server::JsonConstraint c(server::JsonMatcher(Json::parse(R"({"type": "object"})")), table(), true);
  const std::size_t vocab = table()->bytes.size();
  std::unique_ptr<bool[]> a(new bool[vocab]);
  std::fill_n(a.get(), vocab, true);
  c.mask({a.get(), vocab});
  EXPECT_EQ(std::count(a.get(), a.get() + vocab, true), static_cast<long>(vocab));  // reasoning: anything
  c.accept(*tiny_kjv_tokenizer().token_to_id("</think>"));
  c.mask({a.get(), vocab});
  EXPECT_FALSE(a[*tiny_kjv_tokenizer().token_to_id("<think>")]);  // special tokens are never JSON
  EXPECT_TRUE(a[*tiny_kjv_tokenizer().token_to_id("{")]);
  EXPECT_FALSE(c.done());
}

TEST(JsonConstraint, SchemasOutsideTheSubsetAre400) {
  EXPECT_THROW(server::JsonMatcher(Json::parse(R"({"anyOf": [{"type": "string"}]})")), server::ApiError);
  EXPECT_THROW(server::JsonMatcher(Json::parse(R"({"type": "object", "required": ["missing"]})")), server::ApiError);
  EXPECT_THROW(server::JsonMatcher(Json::parse(R"({"type": "tuple"})")), server::ApiError);
}

}  // namespace
}  // namespace plumb::test

// JsonMatcher on its own: the bytes it takes and refuses (strict UTF-8, surrogate pairs, escapes
// at the string limit, nesting), and its shortest completion: hand-written expectations, and on
// random byte walks over random schemas: the completion is always accepted, ends the value in
// JSON that parses (nlohmann's strict reader) and matches the schema, its size is
// completion_size(), and after any prefix of it the completion is the rest.
#include <gtest/gtest.h>

#include "json_test_support.h"
#include "plumb/server/api_error.h"
#include "plumb/server/json_matcher.h"

namespace plumb::test {
namespace {

bool feed(server::JsonMatcher& m, const std::string& bytes) {
  for (char c : bytes)
    if (!m.feed(static_cast<unsigned char>(c))) return false;
  return true;
}

// Whether `bytes` is accepted from the start (on a fresh matcher of `schema`).
bool accepts(const Json& schema, const std::string& bytes, std::size_t max_string_bytes = 4096) {
  server::JsonMatcher m(schema, max_string_bytes);
  return feed(m, bytes);
}

// The completion after `prefix`.
std::string completion_after(const Json& schema, const std::string& prefix) {
  server::JsonMatcher m(schema);
  EXPECT_TRUE(feed(m, prefix)) << printable(prefix);
  return m.completion();
}

const Json kString = Json::parse(R"({"type": "string"})");

TEST(JsonMatcher, Utf8IsStrict) {
  EXPECT_TRUE(accepts(kString, "\"\xc3\xa9\xe4\xb8\x80\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\""));
  for (const std::string bad : {"\"\xc0\xaf", "\"\xc1", "\"\xe0\x80", "\"\xe0\x9f", "\"\xed\xa0", "\"\xf0\x80", "\"\xf0\x8f", "\"\xf4\x90",
                                "\"\xf5", "\"\xff", "\"\x80", "\"\xc3\xc3", "\"\xe4\xb8\""})
    EXPECT_FALSE(accepts(kString, bad)) << printable(bad);
  EXPECT_TRUE(accepts(kString, "\"\xed\x9f\xbf\xee\x80\x80\""));  // just below and above the surrogates
}

TEST(JsonMatcher, SurrogatesComeInPairs) {
  EXPECT_TRUE(accepts(kString, R"("\ud83d\ude00\u00e9\uFFFF")"));
  EXPECT_FALSE(accepts(kString, R"("\udc00)"));      // a lone low half
  EXPECT_FALSE(accepts(kString, R"("\ud800")"));     // a high half must be followed by a low one
  EXPECT_FALSE(accepts(kString, R"("\ud800\n)"));
  EXPECT_FALSE(accepts(kString, R"("\ud800\ud800)"));
  EXPECT_FALSE(accepts(kString, R"("\ud800\ue000)"));
  EXPECT_FALSE(accepts(kString, R"("\u12g)"));
}

TEST(JsonMatcher, EscapesAndCharactersFitTheStringLimitWhole) {
  EXPECT_TRUE(accepts(kString, "\"a\\n\"", 3));
  EXPECT_FALSE(accepts(kString, "\"ab\\", 3));        // '\' needs room for its escape
  EXPECT_FALSE(accepts(kString, "\"\\u", 5));         // \u needs 6
  EXPECT_TRUE(accepts(kString, "\"\\u00e9\"", 6));
  EXPECT_FALSE(accepts(kString, "\"\\ud8", 11));      // a high surrogate needs its low half: 12
  EXPECT_TRUE(accepts(kString, "\"\\ud83d\\ude00\"", 12));
  EXPECT_FALSE(accepts(kString, "\"ab\xe4", 4));      // a 3-byte character at 2 of 4
  EXPECT_TRUE(accepts(kString, "\"a\xe4\xb8\x80\"", 4));
  // Property names are bounded by the schema, not by the string limit.
  EXPECT_TRUE(accepts(Json::parse(R"({"properties": {"a long property name": {"type": "null"}}})"), "{\"a long property name\":null}", 4));
}

TEST(JsonMatcher, ContainersNestUpToTheLimitAndScalarsAlwaysFit) {
  const Json any = Json::object();
  EXPECT_TRUE(accepts(any, std::string(32, '[')));
  EXPECT_FALSE(accepts(any, std::string(33, '[')));
  server::JsonMatcher m(any);
  ASSERT_TRUE(feed(m, std::string(30, '[') + "{\"k\":1,\"j\":\"s\",\"n\":[1,"));  // keys and values at the deepest level
  const std::string rest = m.completion();
  EXPECT_TRUE(feed(m, rest));
  EXPECT_TRUE(m.complete());
  Json deep = Json::parse(R"({"type": "string"})");
  for (int i = 0; i < 31; ++i) deep = {{"type", "array"}, {"items", deep}};
  EXPECT_NO_THROW(server::JsonMatcher{deep});
  EXPECT_THROW(server::JsonMatcher(Json{{"type", "array"}, {"items", deep}}), server::ApiError);  // 33 levels
  EXPECT_THROW(server::JsonMatcher(Json::parse(R"({"type": []})")), server::ApiError);
}

TEST(JsonMatcher, ShortestCompletions) {
  const Json ab = Json::parse(R"({"properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {}}, "required": ["b", "a"]})");
  EXPECT_EQ(completion_after(ab, ""), R"({"a":0,"b":""})");
  EXPECT_EQ(completion_after(ab, "{"), R"("a":0,"b":""})");
  EXPECT_EQ(completion_after(ab, R"({"b)"), R"(":"","a":0})");
  EXPECT_EQ(completion_after(ab, R"({"a":12)"), R"(,"b":""})");
  EXPECT_EQ(completion_after(ab, R"({"c":1.)"), R"(0,"a":0,"b":""})");
  EXPECT_EQ(completion_after(ab, R"({"a":1,)"), R"("b":""})");
  EXPECT_EQ(completion_after(ab, R"({"a":1,"b":"x\)"), R"(n"})");
  EXPECT_EQ(completion_after(ab, R"({"a":1,"b":"x", )"), R"("c":0})");  // a comma needs a key: the shortest one left
  EXPECT_EQ(completion_after(ab, R"({"c":)"), R"(0,"a":0,"b":""})");
  EXPECT_EQ(completion_after(kString, R"("\u12)"), "00\"");
  EXPECT_EQ(completion_after(kString, R"("\ud8)"), "00\\udc00\"");
  EXPECT_EQ(completion_after(kString, R"("\ud800\)"), "udc00\"");
  EXPECT_EQ(completion_after(kString, R"("\ud800\ud)"), "c00\"");
  EXPECT_EQ(completion_after(kString, "\"\xe4"), "\x80\x80\"");
  EXPECT_EQ(completion_after(kString, "\"\xe0"), "\xa0\x80\"");
  EXPECT_EQ(completion_after(kString, "\"\xf0"), "\x90\x80\x80\"");
  const Json numbers = Json::parse(R"({"items": {"type": "number"}})");
  EXPECT_EQ(completion_after(numbers, ""), "[]");
  EXPECT_EQ(completion_after(numbers, "[-"), "0]");
  EXPECT_EQ(completion_after(numbers, "[1e+"), "0]");
  EXPECT_EQ(completion_after(numbers, "[1,"), "0]");
  EXPECT_EQ(completion_after(numbers, "[12"), "]");
  const Json choices = Json::parse(R"({"enum": ["long choice", "short", 12, 1, null]})");
  EXPECT_EQ(completion_after(choices, ""), "1");
  EXPECT_EQ(completion_after(choices, "\""), "short\"");
  EXPECT_EQ(completion_after(choices, "n"), "ull");
  server::JsonMatcher one(choices);
  ASSERT_TRUE(feed(one, "1"));
  EXPECT_TRUE(one.complete());  // "1" may end here, or become "12"
  EXPECT_EQ(one.completion(), "");
  const Json free = Json::parse(R"({"type": "object"})");
  EXPECT_EQ(completion_after(free, "{"), "}");
  EXPECT_EQ(completion_after(free, R"({"k)"), R"(":0})");
  EXPECT_EQ(completion_after(free, R"({"k":[1,)"), "0]}");
  EXPECT_EQ(completion_after(free, R"({"k":1,)"), R"("":0})");
  const Json nested = Json::parse(R"({"type": ["null", "object"], "properties": {"n\u00e4me": {"type": ["boolean", "array"]}}, "required": ["n\u00e4me"]})");
  EXPECT_EQ(completion_after(nested, ""), "null");
  EXPECT_EQ(completion_after(nested, "{"), "\"n\xc3\xa4me\":[]}");
  EXPECT_EQ(completion_after(nested, "{\"n\xc3"), "\xa4me\":[]}");
}

// Random walks over the bytes each state takes; at every state the completion is checked.
void check_completions(const Json& schema, std::mt19937_64& rng, std::size_t max_string_bytes) {
  server::JsonMatcher m(schema, max_string_bytes);
  std::string text;
  for (int step = 0; step < 120 && !m.complete(); ++step) {
    const std::string rest = m.completion();
    ASSERT_FALSE(rest.empty()) << printable(text);
    EXPECT_EQ(m.completion_size(), rest.size());
    server::JsonMatcher finished = m;
    ASSERT_TRUE(feed(finished, rest)) << printable(text) << " + " << printable(rest);
    ASSERT_TRUE(finished.complete()) << printable(text + rest);
    Json value;
    ASSERT_NO_THROW(value = Json::parse(text + rest)) << printable(text + rest);
    EXPECT_TRUE(valid(value, schema)) << printable(text + rest) << " against " << schema.dump();
    const std::size_t k = rng() % (rest.size() + 1);
    server::JsonMatcher part = m;
    ASSERT_TRUE(feed(part, rest.substr(0, k)));
    EXPECT_EQ(part.completion(), rest.substr(k)) << printable(text) << " + " << printable(rest.substr(0, k));

    std::vector<unsigned char> next;
    for (int b = 0; b < 256; ++b)
      if (server::JsonMatcher(m).feed(static_cast<unsigned char>(b))) next.push_back(static_cast<unsigned char>(b));
    ASSERT_FALSE(next.empty()) << "dead end after " << printable(text);
    // Mostly bytes that do not close anything, so that walks get deep and long.
    std::vector<unsigned char> opening;
    for (unsigned char b : next)
      if (b != '"' && b != '}' && b != ']') opening.push_back(b);
    const auto& pool = opening.empty() || rng() % 6 == 0 ? next : opening;
    const unsigned char b = pool[rng() % pool.size()];
    ASSERT_TRUE(m.feed(b));
    text += static_cast<char>(b);
  }
}

TEST(JsonMatcher, CompletionsOfRandomStatesAreValidShortestAndConsistent) {
  std::mt19937_64 rng(2024);
  std::vector<Json> schemas = fixed_schemas();
  for (int i = 0; i < 60; ++i) schemas.push_back(random_schema(rng));
  for (const Json& schema : schemas)
    for (int walk = 0; walk < 6; ++walk) {
      check_completions(schema, rng, walk % 2 == 0 ? 6 : 64);
      if (HasFatalFailure()) return;
    }
}

TEST(JsonMatcher, MasksWhatCannotComeNext) {
  Json schema = Json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})");
  server::JsonMatcher m(schema);
  EXPECT_FALSE(server::JsonMatcher(schema).feed('['));
  ASSERT_TRUE(feed(m, "{"));
  EXPECT_FALSE(server::JsonMatcher(m).feed('}'));  // "a" is required
  EXPECT_FALSE(server::JsonMatcher(m).feed('x'));
  ASSERT_TRUE(feed(m, "\"a\": 1"));
  EXPECT_FALSE(server::JsonMatcher(m).feed('.'));  // an integer
  EXPECT_FALSE(server::JsonMatcher(m).feed(','));  // no property left
  EXPECT_FALSE(m.complete());
  ASSERT_TRUE(feed(m, "2}"));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(server::JsonMatcher(m).feed('x'));
}

TEST(JsonMatcher, SchemasOutsideTheSubsetAre400) {
  EXPECT_THROW(server::JsonMatcher(Json::parse(R"({"anyOf": [{"type": "string"}]})")), server::ApiError);
  EXPECT_THROW(server::JsonMatcher(Json::parse(R"({"type": "object", "required": ["missing"]})")), server::ApiError);
  EXPECT_THROW(server::JsonMatcher(Json::parse(R"({"type": "tuple"})")), server::ApiError);
  EXPECT_THROW(server::JsonMatcher(Json::parse(R"({"properties": {"a\u0001": {}}})")), server::ApiError);
}

}  // namespace
}  // namespace plumb::test

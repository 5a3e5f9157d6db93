// response_format enforcement on real token strings (tiny-kjv's 6k vocabulary and
// DeepSeek-V4-Flash's 129k): generations that pick random allowed tokens, mostly ones that do
// not close anything (a model rambling inside a string), end in JSON that parses and matches
// the schema for every max_tokens from the minimum up, by the budget and not by luck; below the
// minimum the output stays a valid prefix. The trie walk gives exactly the mask of a plain
// per-token scan (the oracle, in this file) on random states and budgets.
#include <gtest/gtest.h>

#include <unordered_map>
#include <unordered_set>

#include "json_test_support.h"
#include "../tokenizer/fewest_tokens_oracle.h"

namespace plumb::test {
namespace {

constexpr std::int64_t kUnlimited = 1'000'000;

server::JsonConstraint constraint(const Json& schema, const server::TokenTable& t, bool thinking = false) {
  return server::JsonConstraint(server::JsonMatcher(schema), shared(t), thinking);
}

void expect_valid_json(const Json& schema, const std::string& text) {
  Json value;
  ASSERT_NO_THROW(value = Json::parse(text)) << printable(text);
  EXPECT_TRUE(valid(value, schema)) << printable(text) << " against " << schema.dump();
}

// Every budget from the minimum to `extra` above it, and `longer` ones above that.
void expect_completes_within_every_budget(const Json& schema, const server::TokenTable& t, std::int64_t extra, int runs,
                                          std::mt19937_64& rng, std::vector<std::int64_t> longer = {50, 200}) {
  const auto minimal = static_cast<std::int64_t>(constraint(schema, t).minimal_tokens());
  std::vector<std::int64_t> budgets;
  for (std::int64_t b = minimal; b <= minimal + extra; ++b) budgets.push_back(b);
  for (std::int64_t b : longer) budgets.push_back(minimal + b);
  for (std::int64_t budget : budgets)
    for (int run = 0; run < runs; ++run) {
      server::JsonConstraint c = constraint(schema, t);
      const Generated g = generate(c, t, budget, rng, true);
      ASSERT_TRUE(g.done) << "budget " << budget << " (minimum " << minimal << "): " << printable(g.text) << " for " << schema.dump();
      EXPECT_LE(static_cast<std::int64_t>(g.tokens.size()), budget);
      expect_valid_json(schema, g.text);
    }
}

TEST(JsonConstraint, CompletesWithinEveryBudgetTinyKjv) {
  std::mt19937_64 rng(1234);
  for (const Json& schema : fixed_schemas()) expect_completes_within_every_budget(schema, tiny_table(), 12, 3, rng);
  for (int i = 0; i < 25; ++i) expect_completes_within_every_budget(random_schema(rng), tiny_table(), 6, 1, rng);
}

TEST(JsonConstraint, CompletesWithinEveryBudgetDeepSeekV4) {
  std::mt19937_64 rng(99);
  // Fewer and shorter runs: each step masks 129k ids (and the test scans them again).
  for (const Json& schema : fixed_schemas()) expect_completes_within_every_budget(schema, v4_table(), 3, 1, rng, {20});
  for (int i = 0; i < 4; ++i) expect_completes_within_every_budget(random_schema(rng), v4_table(), 1, 1, rng, {});
}

std::unordered_set<std::string> vocab_set(const server::TokenTable& t) {
  std::unordered_set<std::string> set;
  for (const std::string& b : t.bytes)
    if (!b.empty()) set.insert(b);
  return set;
}

TEST(JsonConstraint, MinimalTokensSpellTheShortestValue) {
  const auto set = vocab_set(tiny_table());
  const Json verse = fixed_schemas()[1];
  EXPECT_EQ(constraint(verse, tiny_table()).minimal_tokens(), brute_fewest(R"({"verse":""})", set));
  EXPECT_EQ(constraint(Json::parse(R"({"type": "integer"})"), tiny_table()).minimal_tokens(), 1u);
}

TEST(JsonConstraint, BelowTheMinimumTheOutputStaysAValidPrefix) {
  std::mt19937_64 rng(5);
  const Json schema = fixed_schemas()[2];
  const auto minimal = static_cast<std::int64_t>(constraint(schema, tiny_table()).minimal_tokens());
  ASSERT_GT(minimal, 3);
  for (std::int64_t budget = 1; budget < minimal; ++budget) {
    server::JsonConstraint c = constraint(schema, tiny_table());
    // Nothing fits: the mask is the matcher's own (and the request ends with "length").
    EXPECT_EQ(allowed_ids(c, tiny_table().bytes.size(), budget), allowed_ids(c, tiny_table().bytes.size(), kUnlimited));
    const Generated g = generate(c, tiny_table(), budget, rng, true);
    EXPECT_EQ(static_cast<std::int64_t>(g.tokens.size()), budget);
    server::JsonMatcher prefix(schema);
    for (char ch : g.text) ASSERT_TRUE(prefix.feed(static_cast<unsigned char>(ch))) << printable(g.text);
  }
}

TEST(JsonConstraint, ThinkingLeavesRoomForTheJson) {
  const server::TokenTable& t = tiny_table();
  const Json schema = fixed_schemas()[1];
  server::JsonConstraint c = constraint(schema, t, true);
  const auto json = static_cast<std::int64_t>(c.minimal_tokens());
  const std::size_t vocab = t.bytes.size();
  const auto free = allowed_ids(c, vocab, json + 2);
  EXPECT_EQ(free.size(), vocab - 1);  // the reasoning: anything but EOS
  EXPECT_EQ(std::count(free.begin(), free.end(), *t.eos), 0);
  EXPECT_EQ(allowed_ids(c, vocab, json + 1), std::vector<runtime::TokenId>{*t.think_end});
  std::mt19937_64 rng(3);
  for (std::int64_t budget = json + 1; budget < json + 12; ++budget) {
    server::JsonConstraint run = constraint(schema, t, true);
    const Generated g = generate(run, t, budget, rng, true);
    ASSERT_TRUE(g.done) << budget;
    const auto end = std::find(g.tokens.begin(), g.tokens.end(), *t.think_end);
    ASSERT_NE(end, g.tokens.end());
    std::string content;
    for (auto it = end + 1; it != g.tokens.end(); ++it) content += t.bytes[*it];
    expect_valid_json(schema, content);
  }
  c.accept(*t.think_end);
  const auto json_start = allowed_ids(c, vocab, kUnlimited);
  EXPECT_EQ(std::count(json_start.begin(), json_start.end(), *tiny_kjv_tokenizer().token_to_id("<think>")), 0);  // special tokens are never JSON
  EXPECT_EQ(std::count(json_start.begin(), json_start.end(), *tiny_kjv_tokenizer().token_to_id("{")), 1);
  EXPECT_FALSE(c.done());
}

// The oracle: every token tried on a copy of the matcher, then the budget from the completion
// of the state it leads to, spelled with a brute-force segmentation; nothing fits -> no budget.
std::vector<bool> scan_mask(const server::JsonMatcher& state, const server::TokenTable& t, std::int64_t remaining,
                            const std::unordered_set<std::string>& vocab, std::unordered_map<std::string, std::size_t>& fewest) {
  std::vector<bool> taken(t.bytes.size()), fits(t.bytes.size());
  bool any_fits = false;
  for (std::size_t id = 0; id < t.bytes.size(); ++id) {
    if (t.bytes[id].empty()) continue;
    server::JsonMatcher trial = state;
    bool ok = true;
    for (char c : t.bytes[id])
      if (!(ok = trial.feed(static_cast<unsigned char>(c)))) break;
    if (!ok) continue;
    taken[id] = true;
    const std::string rest = trial.completion();
    auto it = fewest.find(rest);
    if (it == fewest.end()) it = fewest.emplace(rest, brute_fewest(rest, vocab)).first;
    fits[id] = it->second != TokenTrie::kNone && static_cast<std::int64_t>(it->second) <= remaining - 1;
    any_fits = any_fits || fits[id];
  }
  return any_fits ? fits : taken;
}

void expect_masks_equal_the_scan(const server::TokenTable& t, int schemas, int states, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto vocab = vocab_set(t);
  std::unordered_map<std::string, std::size_t> fewest;
  std::vector<Json> all = fixed_schemas();
  for (int i = 0; i < schemas; ++i) all.push_back(random_schema(rng));
  int compared = 0;
  for (const Json& schema : all) {
    server::JsonConstraint c = constraint(schema, t);
    server::JsonMatcher state(schema);
    for (int step = 0; step < states && !c.done(); ++step) {
      const std::int64_t remaining = rng() % 3 == 0 ? kUnlimited : 1 + static_cast<std::int64_t>(rng() % 30);
      const std::vector<bool> want = scan_mask(state, t, remaining, vocab, fewest);
      const auto got = allowed_ids(c, t.bytes.size(), remaining);
      std::vector<bool> got_mask(t.bytes.size());
      for (runtime::TokenId id : got) got_mask[id] = true;
      ASSERT_EQ(got_mask, want) << "after " << printable(state.completion()) << " is the rest; remaining " << remaining;
      ++compared;
      // Walk on with a random token the matcher takes (no budget), mostly not closing.
      const auto ids = allowed_ids(c, t.bytes.size(), kUnlimited);
      std::vector<runtime::TokenId> opening;
      for (runtime::TokenId id : ids)
        if (t.bytes[id].find_first_of("\"}]") == std::string::npos) opening.push_back(id);
      const auto& pool = opening.empty() || rng() % 4 == 0 ? ids : opening;
      const runtime::TokenId id = pool[rng() % pool.size()];
      c.accept(id);
      for (char ch : t.bytes[id]) state.feed(static_cast<unsigned char>(ch));
    }
  }
  EXPECT_GT(compared, schemas * 2);
}

TEST(JsonConstraint, TrieMaskEqualsTheScanTinyKjv) { expect_masks_equal_the_scan(tiny_table(), 30, 25, 11); }

TEST(JsonConstraint, TrieMaskEqualsTheScanDeepSeekV4) { expect_masks_equal_the_scan(v4_table(), 4, 5, 12); }

}  // namespace
}  // namespace plumb::test

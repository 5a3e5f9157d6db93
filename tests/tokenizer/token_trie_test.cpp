// TokenTrie on random vocabularies (short strings over a small alphabet, so that prefixes are
// shared and duplicates occur) and on DeepSeek-V3's: a full walk meets every id exactly once, at
// the depth of its length, along its own bytes; pruning skips exactly the pruned subtrees; the
// fewest-token segmentation equals a brute-force one over a hash set of the token strings.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <random>
#include <unordered_set>

#include "plumb/tokenizer/token_trie.h"
#include "fewest_tokens_oracle.h"
#include "test_tokenizers.h"

namespace plumb::test {
namespace {

std::vector<std::string> random_vocab(std::mt19937_64& rng, std::size_t n, bool every_byte) {
  std::vector<std::string> v;
  if (every_byte)
    for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
  const char alphabet[] = {'a', 'b', '"', '\x80', '\xff'};
  for (std::size_t i = 0; i < n; ++i) {
    std::string s(rng() % 6, ' ');  // some empty: not in the trie
    for (char& c : s) c = alphabet[rng() % sizeof alphabet];
    v.push_back(s);
  }
  return v;
}

// Records the walk: for every id, the bytes entered on the way to it.
struct Recorder {
  std::string path;
  std::map<std::uint32_t, std::string> seen;
  int visits = 0;
  std::function<bool(const std::string&)> keep = [](const std::string&) { return true; };
  bool enter(std::size_t depth, unsigned char byte) {
    path.resize(depth);
    path += static_cast<char>(byte);
    return keep(path);
  }
  void tokens(std::size_t depth, std::span<const std::uint32_t> ids) {
    EXPECT_EQ(depth, path.size());
    for (std::uint32_t id : ids) {
      EXPECT_TRUE(seen.emplace(id, path).second) << "id " << id << " met twice";
      ++visits;
    }
  }
};

TEST(TokenTrie, WalkMeetsEveryIdOnceAlongItsBytes) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 20; ++round) {
    const auto vocab = random_vocab(rng, 50 + rng() % 400, round % 2 == 0);
    TokenTrie trie(vocab);
    Recorder r;
    trie.walk(r);
    std::size_t expected = 0, longest = 0;
    for (std::uint32_t id = 0; id < vocab.size(); ++id) {
      if (vocab[id].empty()) {
        EXPECT_FALSE(r.seen.count(id));
        continue;
      }
      ++expected;
      longest = std::max(longest, vocab[id].size());
      ASSERT_TRUE(r.seen.count(id)) << id;
      EXPECT_EQ(r.seen[id], vocab[id]);
    }
    EXPECT_EQ(static_cast<std::size_t>(r.visits), expected);
    EXPECT_EQ(trie.max_length(), longest);
    EXPECT_EQ(trie.has_every_byte(), round % 2 == 0);
  }
}

TEST(TokenTrie, PruningSkipsExactlyThePrunedSubtrees) {
  std::mt19937_64 rng(8);
  const auto vocab = random_vocab(rng, 600, false);
  TokenTrie trie(vocab);
  Recorder r;
  r.keep = [](const std::string& p) { return p.find('"') == std::string::npos; };  // no token with a quote
  trie.walk(r);
  for (std::uint32_t id = 0; id < vocab.size(); ++id)
    EXPECT_EQ(r.seen.count(id) == 1, !vocab[id].empty() && vocab[id].find('"') == std::string::npos) << id;
}

TEST(TokenTrie, FewestTokensEqualsBruteForce) {
  std::mt19937_64 rng(9);
  for (int round = 0; round < 10; ++round) {
    const auto vocab = random_vocab(rng, 200, round % 3 == 0);
    TokenTrie trie(vocab);
    std::unordered_set<std::string> set;
    for (const auto& s : vocab)
      if (!s.empty()) set.insert(s);
    for (int t = 0; t < 50; ++t) {
      std::string text;
      for (int k = rng() % 14; k > 0; --k) text += "ab\"\x80\xff"[rng() % 5];
      EXPECT_EQ(trie.fewest_tokens(text), brute_fewest(text, set)) << text;
    }
  }
}

TEST(TokenTrie, DeepSeekV3Vocabulary) {
  const Tokenizer& tok = deepseek_v3();
  std::vector<std::string> bytes(tok.id_limit());
  for (std::uint32_t id = 0; id < bytes.size(); ++id)
    if (tok.has_id(id) && !tok.is_special(id)) bytes[id] = tok.token_bytes(id);
  TokenTrie trie(bytes);
  EXPECT_TRUE(trie.has_every_byte());  // byte-level BPE
  Recorder r;
  trie.walk(r);
  std::size_t expected = 0;
  for (std::uint32_t id = 0; id < bytes.size(); ++id)
    if (!bytes[id].empty()) {
      ++expected;
      ASSERT_EQ(r.seen[id], bytes[id]) << id;
    }
  EXPECT_EQ(static_cast<std::size_t>(r.visits), expected);
  std::unordered_set<std::string> set;
  for (const auto& s : bytes)
    if (!s.empty()) set.insert(s);
  for (const std::string text : {"{\"verse\":\"\"}", "\"]}]}", "\\udc00\"}", "Hello, world", "\xe4\xb8\x80\"}"})
    EXPECT_EQ(trie.fewest_tokens(text), brute_fewest(text, set)) << text;
}

}  // namespace
}  // namespace plumb::test

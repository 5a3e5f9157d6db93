// Added-token matching: leftmost-longest, the raw-then-normalized pass order, and the
// lstrip / rstrip / single_word / special flags, on a synthetic tokenizer with hand-derived ids.
#include <gtest/gtest.h>

#include "plumb/tokenizer/tokenizer.h"
#include "synthetic_tokenizer.h"

namespace plumb {
namespace {

using Ids = std::vector<std::uint32_t>;
using test::added_token;

Tokenizer make_tokenizer() {
  nlohmann::json added = {
      added_token(300, "<mask>", {{"lstrip", true}}),
      added_token(301, "[R]", {{"rstrip", true}}),
      added_token(302, "cat", {{"single_word", true}, {"normalized", true}, {"special", false}}),
      added_token(303, "<a>"),
      added_token(304, "<a>b", {{"normalized", true}, {"special", false}}),
      added_token(305, "ab!"),
      added_token(306, "ab!!"),
      added_token(307, "<plain>", {{"special", false}}),
  };
  return Tokenizer::from_json_text(test::synthetic_tokenizer_json(added).dump(), "", "synthetic");
}

TEST(SyntheticBpe, MergesByRank) {
  Tokenizer t = make_tokenizer();
  EXPECT_EQ(t.encode("hello"), (Ids{259}));
  EXPECT_EQ(t.encode("hello hello"), (Ids{259, 260}));
  EXPECT_EQ(t.encode("hellohello"), (Ids{259, 259}));
  EXPECT_EQ(t.encode("help"), (Ids{256, 'l', 'p'}));
  EXPECT_EQ(t.encode("lll"), (Ids{257, 'l'}));  // leftmost pair first among equal ranks
  EXPECT_EQ(t.encode(""), Ids{});
}

TEST(AddedTokens, LstripSwallowsWhitespaceBefore) {
  Tokenizer t = make_tokenizer();
  EXPECT_EQ(t.encode("hello <mask>"), (Ids{259, 300}));
  EXPECT_EQ(t.encode("hello \t <mask>!"), (Ids{259, 300, '!'}));
  EXPECT_EQ(t.encode("hello<mask> "), (Ids{259, 300, 32}));  // lstrip only, not rstrip
}

TEST(AddedTokens, RstripSwallowsWhitespaceAfter) {
  Tokenizer t = make_tokenizer();
  EXPECT_EQ(t.encode("[R]   hello"), (Ids{301, 259}));
  EXPECT_EQ(t.encode("hello [R]"), (Ids{259, 32, 301}));
  // The whitespace taken by rstrip is not available to the next token's lstrip.
  EXPECT_EQ(t.encode("[R]  <mask>"), (Ids{301, 300}));
}

TEST(AddedTokens, SingleWordOnlyOutsideWords) {
  Tokenizer t = make_tokenizer();
  EXPECT_EQ(t.encode("cat"), (Ids{302}));
  EXPECT_EQ(t.encode("a cat."), (Ids{'a', 32, 302, '.'}));
  EXPECT_EQ(t.encode("concat"), (Ids{'c', 'o', 'n', 'c', 'a', 't'}));
  EXPECT_EQ(t.encode("cat_"), (Ids{'c', 'a', 't', '_'}));  // '_' is a word character
  // "é" (U+00E9) is alphabetic, so "caté" is one word: no match.
  EXPECT_EQ(t.encode("cat\u00e9"), (Ids{'c', 'a', 't', 0xC3, 0xA9}));
}

TEST(AddedTokens, RawTokensAreMatchedBeforeNormalizedOnes) {
  Tokenizer t = make_tokenizer();
  // "<a>b" (normalized) is longer, but "<a>" (not normalized) is matched in the first pass.
  EXPECT_EQ(t.encode("<a>b"), (Ids{303, 'b'}));
}

TEST(AddedTokens, LeftmostLongestMatch) {
  Tokenizer t = make_tokenizer();
  EXPECT_EQ(t.encode("ab!!!"), (Ids{306, '!'}));
  EXPECT_EQ(t.encode("xab!"), (Ids{'x', 305}));
  EXPECT_EQ(t.encode("<mask<mask>>"), (Ids{'<', 'm', 'a', 's', 'k', 300, '>'}));
}

TEST(AddedTokens, SkipSpecialOnDecode) {
  Tokenizer t = make_tokenizer();
  Ids ids = {259, 300, 260, 307};
  EXPECT_EQ(t.decode(ids), "hello<mask> hello<plain>");
  EXPECT_EQ(t.decode(ids, /*skip_special=*/true), "hello hello<plain>");
  EXPECT_TRUE(t.is_special(300));
  EXPECT_FALSE(t.is_special(307));
  EXPECT_FALSE(t.is_special(259));
}

TEST(AddedTokens, TokenToId) {
  Tokenizer t = make_tokenizer();
  EXPECT_EQ(t.token_to_id("<mask>"), 300u);
  EXPECT_EQ(t.token_to_id("Ġhello"), 260u);
  EXPECT_EQ(t.token_to_id("nope"), std::nullopt);
}

}  // namespace
}  // namespace plumb

// A request's output side in the engine (RequestOutput) with scripted logits: the greedy choice
// follows a script. The synthetic tokenizer maps byte b to id b, so scripts spell bytes directly
// and can split multi-byte characters across tokens. What reaches the events is what the
// generating commands print.
#include "plumb/runtime/engine_request.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../tokenizer/synthetic_tokenizer.h"
#include "plumb/tokenizer/utf8.h"
#include "plumb/util/error.h"

namespace plumb::runtime {
namespace {

constexpr std::uint32_t kEos = 300;
constexpr std::size_t kVocab = 301;

const Tokenizer& test_tokenizer() {
  static const Tokenizer t = Tokenizer::from_json_text(
      test::synthetic_tokenizer_json({test::added_token(kEos, "<eos>")}).dump(), "", "synthetic");
  return t;
}

std::vector<std::uint32_t> bytes_of(std::string_view s) { return {s.begin(), s.end()}; }

std::vector<float> one_hot(std::uint32_t id) {
  std::vector<float> logits(kVocab, 0.f);
  logits[id] = 10.f;
  return logits;
}

struct Outcome {
  std::vector<std::uint32_t> tokens;
  std::vector<std::string> chunks;  // non-empty event texts, in order
  std::string text;
  FinishReason finish = FinishReason::kNone;
};

// Feeds the logits that make `script` the greedy choice (repeating its last entry) until the
// request ends.
Outcome run(const std::vector<std::uint32_t>& script, Request r) {
  r.sampling.greedy = true;
  if (r.prompt.empty()) r.prompt = {'>'};
  RequestOutput out(1, r, &test_tokenizer(), kVocab, kEos, r.max_tokens);
  Outcome o;
  for (std::size_t i = 0;; ++i) {
    const Event e = out.next_token(one_hot(script[std::min(i, script.size() - 1)]));
    o.tokens.insert(o.tokens.end(), e.tokens.begin(), e.tokens.end());
    if (!e.text.empty()) o.chunks.push_back(e.text);
    o.text += e.text;
    if (e.final) {
      o.finish = e.finish;
      return o;
    }
  }
}

// The synthetic tokenizer knows bytes 0..255 and <eos> (300), not 256..299: a model whose best
// logit is such an id (a padding row of its head) gets the best id that has text, not an error.
TEST(RequestOutput, IdsTheTokenizerCannotSpellAreNeverSampled) {
  Request r;
  r.prompt = {'>'};
  r.max_tokens = 1;
  r.sampling.greedy = true;
  RequestOutput out(1, r, &test_tokenizer(), kVocab, kEos, 1);
  std::vector<float> logits(kVocab, 0.f);
  logits[270] = 10.f;  // unknown
  logits['a'] = 5.f;
  const Event e = out.next_token(logits);
  ASSERT_EQ(e.tokens.size(), 1u);
  EXPECT_EQ(e.tokens[0], static_cast<std::uint32_t>('a'));
  EXPECT_EQ(e.text, "a");
}

TEST(RequestOutput, StopsAtEosWithoutPrintingIt) {
  const Outcome r = run({'h', 'i', kEos, 'x'}, {});
  EXPECT_EQ(r.text, "hi");
  EXPECT_EQ(r.finish, FinishReason::kStop);
  EXPECT_EQ(r.tokens, (std::vector<std::uint32_t>{'h', 'i', kEos}));
  EXPECT_EQ(r.chunks, (std::vector<std::string>{"h", "i"}));  // streamed token by token
}

TEST(RequestOutput, StopsAtMaxTokens) {
  Request q;
  q.max_tokens = 5;
  const Outcome r = run({'a'}, q);
  EXPECT_EQ(r.text, "aaaaa");
  EXPECT_EQ(r.finish, FinishReason::kLength);
  EXPECT_EQ(r.tokens.size(), 5u);
}

TEST(RequestOutput, StopStringSpanningTokensIsNeverPrinted) {
  Request q;
  q.stop_strings = {"##"};
  const Outcome r = run(bytes_of("ab#c##d"), q);
  EXPECT_EQ(r.text, "ab#c");
  EXPECT_EQ(r.finish, FinishReason::kStop);
  EXPECT_EQ(r.tokens, bytes_of("ab#c##"));
  // "#" is held back until "c" shows it was not the start of "##".
  EXPECT_EQ(r.chunks, (std::vector<std::string>{"a", "b", "#c"}));
}

TEST(RequestOutput, HeldBackTextIsFlushedAtEos) {
  Request q;
  q.stop_strings = {"##"};
  const Outcome r = run({'a', '#', kEos}, q);
  EXPECT_EQ(r.text, "a#");
  EXPECT_EQ(r.finish, FinishReason::kStop);
  EXPECT_EQ(r.tokens.back(), kEos);
}

TEST(RequestOutput, MultiByteCharactersSplitAcrossTokensStreamWhole) {
  // "é" (C3 A9) over two tokens, "😀" (F0 9F 98 80) over four.
  const Outcome r = run({'x', 0xC3, 0xA9, 0xF0, 0x9F, 0x98, 0x80, kEos}, {});
  EXPECT_EQ(r.text, "x\u00e9\U0001F600");
  EXPECT_EQ(r.chunks, (std::vector<std::string>{"x", "\u00e9", "\U0001F600"}));
  for (const std::string& c : r.chunks) EXPECT_TRUE(utf8::is_valid(c)) << c;
}

TEST(RequestOutput, IncompleteCharacterAtTheLimitBecomesReplacementCharacter) {
  Request q;
  q.max_tokens = 3;
  const Outcome r = run({'x', 0xE4, 0xBD}, q);  // the first two bytes of "你"
  EXPECT_EQ(r.text, "x\uFFFD");
  EXPECT_TRUE(utf8::is_valid(r.text));
}

TEST(RequestOutput, RepetitionPenaltySeesThePrompt) {
  // 'x' (in the prompt) at 10 / 4 loses to 'b' at 3.
  Request q;
  q.prompt = bytes_of("xyz");
  q.max_tokens = 1;
  q.sampling.greedy = true;
  q.sampling.repetition_penalty = 4.f;
  RequestOutput out(1, q, &test_tokenizer(), kVocab, kEos, 1);
  std::vector<float> logits(kVocab, 0.f);
  logits['x'] = 10.f;
  logits['b'] = 3.f;
  EXPECT_EQ(out.next_token(logits).tokens, bytes_of("b"));
}

TEST(RequestOutput, NonFiniteLogitsAndWrongSizesAreErrors) {
  Request q;
  q.prompt = {'a'};
  RequestOutput out(1, q, &test_tokenizer(), kVocab, kEos, 4);
  std::vector<float> logits(kVocab, 0.f);
  logits[7] = std::nanf("");
  try {
    out.next_token(logits);
    FAIL() << "no error for a NaN logit";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("logits (a NaN or infinity in the weights?): non-finite value nan at index 7"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(out.next_token(std::vector<float>(kVocab - 1, 0.f)), Error);
}

TEST(RequestOutput, WithoutATokenizerIdsOnly) {
  Request q;
  q.prompt = {'a'};
  RequestOutput out(1, q, nullptr, kVocab, kEos, 2);
  const Event first = out.next_token(one_hot('h'));
  EXPECT_EQ(first.tokens, bytes_of("h"));
  EXPECT_TRUE(first.text.empty());
  const Event last = out.next_token(one_hot('i'));
  EXPECT_TRUE(last.final);
  EXPECT_EQ(last.finish, FinishReason::kLength);
  EXPECT_TRUE(last.text.empty());
  q.stop_strings = {"x"};
  EXPECT_THROW(RequestOutput(1, q, nullptr, kVocab, kEos, 2), Error);
}

TEST(RequestOutput, SeededSamplingIsReproducible) {
  std::vector<float> flat(kVocab, -100.f);  // uniform over the byte tokens
  std::fill(flat.begin(), flat.begin() + 256, 0.f);
  auto tokens = [&](std::uint64_t seed) {
    Request q;
    q.prompt = {'a'};
    q.sampling.seed = seed;
    RequestOutput out(1, q, &test_tokenizer(), kVocab, kEos, 20);
    std::vector<std::uint32_t> t;
    for (bool final = false; !final;) {
      const Event e = out.next_token(flat);
      t.insert(t.end(), e.tokens.begin(), e.tokens.end());
      final = e.final;
    }
    return t;
  };
  const auto first = tokens(7);
  EXPECT_EQ(first, tokens(7));
  EXPECT_EQ(first.size(), 20u);
  EXPECT_NE(first, tokens(8));  // another seed, other draws
}

}  // namespace
}  // namespace plumb::runtime

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

// The engine's vocabulary over the synthetic tokenizer (shared like an engine's: the tests run
// on one thread), and one without a tokenizer.
OutputVocab& test_vocab() {
  static OutputVocab v(&test_tokenizer(), kVocab, kEos);
  return v;
}
OutputVocab& ids_only_vocab() {
  static OutputVocab v(nullptr, kVocab, kEos);
  return v;
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
  RequestOutput out(1, r, test_vocab(), r.max_tokens);
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

// The synthetic tokenizer knows bytes 0..255, its merges and <eos> (300), not 261..299: a model whose best
// logit is such an id (a padding row of its head) gets the best id that has text, not an error.
TEST(RequestOutput, IdsTheTokenizerCannotSpellAreNeverSampled) {
  Request r;
  r.prompt = {'>'};
  r.max_tokens = 1;
  r.sampling.greedy = true;
  RequestOutput out(1, r, test_vocab(), 1);
  std::vector<float> logits(kVocab, 0.f);
  logits[270] = 10.f;  // unknown
  logits['a'] = 5.f;
  const Event e = out.next_token(logits);
  ASSERT_EQ(e.tokens.size(), 1u);
  EXPECT_EQ(e.tokens[0], static_cast<std::uint32_t>('a'));
  EXPECT_EQ(e.text, "a");
}

TEST(RequestOutput, TheVocabularyListsTheIdsWithoutTextOnce) {
  // Bytes 0..255, the merges 256..260 ("he" ... "Ġhello") and <eos> have text; 261..299 none.
  std::vector<std::uint32_t> expected;
  for (std::uint32_t id = 261; id < kEos; ++id) expected.push_back(id);
  EXPECT_EQ(test_vocab().unknown_ids(), expected);
  EXPECT_TRUE(ids_only_vocab().unknown_ids().empty());
  EXPECT_EQ(OutputVocab(&test_tokenizer(), kVocab + 2, kEos).unknown_ids().back(), kVocab + 1);  // padded rows
}

// Allows only ids in [lo, hi).
class IdRange final : public TokenConstraint {
 public:
  IdRange(std::uint32_t lo, std::uint32_t hi) : lo_(lo), hi_(hi) {}
  void mask(std::span<bool> allowed, std::int64_t) override {
    for (std::size_t i = 0; i < allowed.size(); ++i) allowed[i] = allowed[i] && i >= lo_ && i < hi_;
  }
  void accept(TokenId) override {}
  bool done() const override { return false; }

 private:
  std::uint32_t lo_, hi_;
};

// Constrained steps of several requests on one thread reuse that thread's scratch rows: each step
// starts from the whole vocabulary again, so one request's mask never leaks into the next's.
TEST(RequestOutput, ConstrainedRequestsSharingTheScratchSeeOnlyTheirOwnMask) {
  std::vector<float> logits(kVocab, 0.f);
  logits['a'] = 9.f, logits['m'] = 5.f, logits['z'] = 1.f;
  Request narrow, wide;
  narrow.prompt = wide.prompt = {'>'};
  narrow.sampling.greedy = wide.sampling.greedy = true;
  narrow.constraint = std::make_shared<IdRange>('b', 'z' + 1);
  wide.constraint = std::make_shared<IdRange>(0, kVocab);
  RequestOutput first(1, narrow, test_vocab(), 4), second(2, wide, test_vocab(), 4);
  for (int step = 0; step < 3; ++step) {
    EXPECT_EQ(first.next_token(logits).tokens, bytes_of("m")) << step;
    EXPECT_EQ(second.next_token(logits).tokens, bytes_of("a")) << step;
  }
  // The masked copy is the scratch: the caller's logits are untouched.
  EXPECT_EQ(logits['a'], 9.f);
  EXPECT_EQ(logits[270], 0.f);
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
  RequestOutput out(1, q, test_vocab(), 1);
  std::vector<float> logits(kVocab, 0.f);
  logits['x'] = 10.f;
  logits['b'] = 3.f;
  EXPECT_EQ(out.next_token(logits).tokens, bytes_of("b"));
}

TEST(RequestOutput, NonFiniteLogitsAndWrongSizesAreErrors) {
  Request q;
  q.prompt = {'a'};
  RequestOutput out(1, q, test_vocab(), 4);
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
  RequestOutput out(1, q, ids_only_vocab(), 2);
  const Event first = out.next_token(one_hot('h'));
  EXPECT_EQ(first.tokens, bytes_of("h"));
  EXPECT_TRUE(first.text.empty());
  const Event last = out.next_token(one_hot('i'));
  EXPECT_TRUE(last.final);
  EXPECT_EQ(last.finish, FinishReason::kLength);
  EXPECT_TRUE(last.text.empty());
  q.stop_strings = {"x"};
  EXPECT_THROW(RequestOutput(1, q, ids_only_vocab(), 2), Error);
}

TEST(RequestOutput, SeededSamplingIsReproducible) {
  std::vector<float> flat(kVocab, -100.f);  // uniform over the byte tokens
  std::fill(flat.begin(), flat.begin() + 256, 0.f);
  auto tokens = [&](std::uint64_t seed) {
    Request q;
    q.prompt = {'a'};
    q.sampling.seed = seed;
    RequestOutput out(1, q, test_vocab(), 20);
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

// The generation loop with a fake model: a step function whose logits make the greedy choice
// follow a script. The synthetic tokenizer maps byte b to id b, so scripts spell bytes directly
// and can split multi-byte characters across tokens.
#include "plumb/runtime/generate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../tokenizer/synthetic_tokenizer.h"
#include "plumb/tokenizer/utf8.h"
#include "plumb/util/error.h"

namespace plumb {
namespace {

constexpr std::uint32_t kEos = 300;
constexpr std::size_t kVocab = 301;

Tokenizer test_tokenizer() {
  const auto json = test::synthetic_tokenizer_json({test::added_token(kEos, "<eos>")});
  return Tokenizer::from_json_text(json.dump(), "", "synthetic");
}

// A model that predicts `script` one token after another (then repeats its last entry), and
// records what it was fed.
struct ScriptedModel {
  explicit ScriptedModel(std::vector<std::uint32_t> s) : script(std::move(s)) {}
  std::vector<std::uint32_t> script;
  std::vector<std::vector<std::uint32_t>> fed;

  StepFn step() {
    return [this](std::span<const std::uint32_t> tokens) {
      fed.emplace_back(tokens.begin(), tokens.end());
      std::vector<float> logits(kVocab, 0.f);
      logits[script[std::min(fed.size() - 1, script.size() - 1)]] = 10.f;
      return logits;
    };
  }
};

std::vector<std::uint32_t> bytes_of(std::string_view s) { return {s.begin(), s.end()}; }

struct Outcome {
  GenerationResult result;
  std::vector<std::string> chunks;
};

Outcome run(ScriptedModel& model, GenerationOptions options, std::vector<std::uint32_t> prompt = {'>'}) {
  static const Tokenizer tokenizer = test_tokenizer();
  options.sampling.greedy = true;
  if (!options.eos_id) options.eos_id = kEos;
  Outcome r;
  r.result =
      generate(model.step(), tokenizer, prompt, options, [&](std::string_view text) { r.chunks.emplace_back(text); });
  return r;
}

TEST(Generate, StopsAtEosWithoutPrintingIt) {
  ScriptedModel model({'h', 'i', kEos, 'x'});
  const Outcome r = run(model, {});
  EXPECT_EQ(r.result.text, "hi");
  EXPECT_EQ(r.result.reason, StopReason::kEos);
  EXPECT_EQ(r.result.tokens, (std::vector<std::uint32_t>{'h', 'i', kEos}));
  // The prompt once, then each sampled token but the last.
  EXPECT_EQ(model.fed, (std::vector<std::vector<std::uint32_t>>{{'>'}, {'h'}, {'i'}}));
  EXPECT_EQ(r.result.decode_steps, 2);
  EXPECT_EQ(r.chunks, (std::vector<std::string>{"h", "i"}));  // streamed token by token
}

TEST(Generate, StopsAtMaxTokens) {
  ScriptedModel model({'a'});
  GenerationOptions o;
  o.max_new_tokens = 5;
  const Outcome r = run(model, o);
  EXPECT_EQ(r.result.text, "aaaaa");
  EXPECT_EQ(r.result.reason, StopReason::kMaxTokens);
  EXPECT_EQ(model.fed.size(), 5u);  // the fifth token is never fed
  EXPECT_EQ(r.result.decode_steps, 4);
}

TEST(Generate, ZeroMaxTokensRunsNothing) {
  ScriptedModel model({'a'});
  GenerationOptions o;
  o.max_new_tokens = 0;
  const Outcome r = run(model, o);
  EXPECT_TRUE(r.result.tokens.empty());
  EXPECT_TRUE(model.fed.empty());
}

TEST(Generate, StopStringSpanningTokensIsNeverPrinted) {
  ScriptedModel model(bytes_of("ab#c##d"));
  GenerationOptions o;
  o.stop_strings = {"##"};
  const Outcome r = run(model, o);
  EXPECT_EQ(r.result.text, "ab#c");
  EXPECT_EQ(r.result.reason, StopReason::kStopString);
  EXPECT_EQ(r.result.tokens, bytes_of("ab#c##"));
  // "#" is held back until "c" shows it was not the start of "##".
  EXPECT_EQ(r.chunks, (std::vector<std::string>{"a", "b", "#c"}));
}

TEST(Generate, HeldBackTextIsFlushedAtEos) {
  ScriptedModel model({'a', '#', kEos});
  GenerationOptions o;
  o.stop_strings = {"##"};
  const Outcome r = run(model, o);
  EXPECT_EQ(r.result.text, "a#");
  EXPECT_EQ(r.result.reason, StopReason::kEos);
}

TEST(Generate, MultiByteCharactersSplitAcrossTokensStreamWhole) {
  // "é" (C3 A9) over two tokens, "😀" (F0 9F 98 80) over four.
  std::vector<std::uint32_t> script = {'x', 0xC3, 0xA9, 0xF0, 0x9F, 0x98, 0x80, kEos};
  ScriptedModel model(script);
  const Outcome r = run(model, {});
  EXPECT_EQ(r.result.text, "x\u00e9\U0001F600");
  EXPECT_EQ(r.chunks, (std::vector<std::string>{"x", "\u00e9", "\U0001F600"}));
  for (const std::string& c : r.chunks) EXPECT_TRUE(utf8::is_valid(c)) << c;
}

TEST(Generate, IncompleteCharacterAtTheLimitBecomesReplacementCharacter) {
  ScriptedModel model({'x', 0xE4, 0xBD});  // the first two bytes of "你"
  GenerationOptions o;
  o.max_new_tokens = 3;
  const Outcome r = run(model, o);
  EXPECT_EQ(r.result.text, "x\uFFFD");
  EXPECT_TRUE(utf8::is_valid(r.result.text));
}

TEST(Generate, CachedPromptTokensAreNotFedButArePenalized) {
  ScriptedModel model({'a', kEos});
  GenerationOptions o;
  o.cached = 2;
  const Outcome r = run(model, o, bytes_of("xyz"));
  EXPECT_EQ(model.fed.front(), bytes_of("z"));
  EXPECT_EQ(r.result.cached_tokens, 2u);
  EXPECT_NE(stats_line(r.result).find("3 prompt tokens (2 cached), 2 generated (eos)"), std::string::npos)
      << stats_line(r.result);

  // The repetition penalty sees cached tokens: 'x' (cached) at 10 / 4 loses to 'b' at 3.
  GenerationOptions p;
  p.cached = 2;
  p.max_new_tokens = 1;
  p.sampling.repetition_penalty = 4.f;
  p.sampling.greedy = true;
  const StepFn step = [](std::span<const std::uint32_t>) {
    std::vector<float> logits(kVocab, 0.f);
    logits['x'] = 10.f;
    logits['b'] = 3.f;
    return logits;
  };
  const GenerationResult g = generate(step, test_tokenizer(), bytes_of("xyz"), p, [](std::string_view) {});
  EXPECT_EQ(g.tokens, bytes_of("b"));
}

TEST(Generate, RejectsBadInputAndBrokenLogits) {
  ScriptedModel model({'a'});
  EXPECT_THROW(run(model, {}, {}), Error);  // empty prompt
  GenerationOptions o;
  o.cached = 1;
  EXPECT_THROW(run(model, o), Error);  // everything cached: nothing to feed
  o = {};
  o.max_new_tokens = -1;
  EXPECT_THROW(run(model, o), Error);

  const StepFn nan_step = [](std::span<const std::uint32_t>) {
    std::vector<float> logits(kVocab, 0.f);
    logits[7] = std::nanf("");
    return logits;
  };
  try {
    generate(nan_step, test_tokenizer(), bytes_of("a"), {}, [](std::string_view) {});
    FAIL() << "no error for a NaN logit";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("non-finite logit"), std::string::npos) << e.what();
  }
}

TEST(Generate, SeededSamplingIsReproducible) {
  const StepFn flat = [](std::span<const std::uint32_t>) {  // uniform over the byte tokens
    std::vector<float> logits(kVocab, -100.f);
    std::fill(logits.begin(), logits.begin() + 256, 0.f);
    return logits;
  };
  GenerationOptions o;
  o.max_new_tokens = 20;
  o.sampling.seed = 7;
  auto tokens = [&] { return generate(flat, test_tokenizer(), bytes_of("a"), o, [](std::string_view) {}).tokens; };
  const auto first = tokens();
  EXPECT_EQ(first, tokens());
  EXPECT_EQ(first.size(), 20u);
  o.sampling.seed = 8;
  EXPECT_NE(first, tokens());  // another seed, other draws
}

}  // namespace
}  // namespace plumb

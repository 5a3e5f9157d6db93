// Session on the trained tiny V4 model: feeding a sequence in pieces (prefill, then decode steps,
// then a resumed chat turn) gives the logits of one prefill of the whole sequence, so reusing the
// KV state across chat turns changes nothing but speed. Also score_sequences (the perplexity
// batch) and the startup self-check.
#include "plumb/model/session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "plumb/format/npy.h"
#include "plumb/model/model_v4.h"
#include "plumb/util/error.h"

namespace plumb::v4 {
namespace {

namespace fs = std::filesystem;
const fs::path kModel = fs::path(PLUMB_SOURCE_DIR) / "models" / "tiny-kjv";
const fs::path kGolden = fs::path(PLUMB_TEST_DATA) / "golden" / "v4" / "tiny-kjv";

double max_diff(std::span<const float> a, std::span<const float> b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
  return d;
}

class Session : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kModel / "config.json")) FAIL() << kModel << " is missing: it is a committed fixture";
    model_ = ModelV4::load(kModel.string(), {"cpu", 2, Numerics::Reference});
    ids_ = read_token_ids((kGolden / "prompt_150.ids.npy").string());
    vocab_ = static_cast<std::size_t>(model_->config().vocab_size);
  }
  // The logits of position `pos` from one prefill of ids_[0, pos].
  std::vector<float> prefill_row(std::size_t pos) {
    const std::vector<TokenId> prefix(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(pos) + 1);
    const std::vector<float> all = model_->prompt_logits(prefix);
    return {all.end() - static_cast<std::ptrdiff_t>(vocab_), all.end()};
  }

  std::unique_ptr<ModelV4> model_;
  std::vector<TokenId> ids_;  // 150 tokens: past the sliding window (64) and several HCA entries
  std::size_t vocab_ = 0;
};

TEST_F(Session, PiecesGiveTheLogitsOfOnePrefill) {
  plumb::Session s(*model_);
  const std::span<const TokenId> all(ids_);
  s.step(all.first(70));
  for (std::size_t i = 70; i < 80; ++i) s.step(all.subspan(i, 1));  // decode steps past the window
  // A later turn: the session resumes from what it fed and reads only the tail.
  const auto tail = s.resume(all);
  EXPECT_EQ(tail.size(), ids_.size() - 80);
  const std::vector<float> logits = s.step(tail);
  const double d = max_diff(logits, prefill_row(ids_.size() - 1));
  std::printf("session: 70 + 10 x 1 + %zu tokens vs one prefill of %zu: max |diff| %.3g\n", tail.size(), ids_.size(),
              d);
  EXPECT_LT(d, 1e-4);
  EXPECT_EQ(s.fed(), ids_);
}

TEST_F(Session, ResumeStartsOverUnlessThePromptExtendsWhatWasFed) {
  plumb::Session s(*model_);
  const std::span<const TokenId> all(ids_);
  s.step(all.first(10));
  EXPECT_EQ(s.resume(all.first(10)).size(), 10u);  // nothing new: the last logits need a re-read
  EXPECT_TRUE(s.fed().empty());
  s.step(all.first(10));
  std::vector<TokenId> other(ids_.begin(), ids_.begin() + 20);
  other[5] ^= 1;  // differs inside what was fed
  EXPECT_EQ(s.resume(other).size(), 20u);
  EXPECT_TRUE(s.fed().empty());
  // After the reset the session reads the new prompt from scratch, as a fresh one would.
  const std::vector<float> logits = s.step(other);
  plumb::Session fresh(*model_);
  EXPECT_EQ(max_diff(logits, fresh.step(other)), 0.0);
}

// score_sequences returns every position but the last (the ones predicting a token of the input).
TEST_F(Session, ScoreSequencesEqualsOnePrefillEach) {
  const std::vector<std::vector<TokenId>> inputs = {{ids_.begin(), ids_.begin() + 30},
                                                    {ids_.begin() + 40, ids_.begin() + 45}};
  const auto out = score_sequences(*model_, inputs);
  ASSERT_EQ(out.size(), 2u);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    std::vector<float> alone = model_->prompt_logits(inputs[i]);
    alone.resize(alone.size() - vocab_);
    ASSERT_EQ(out[i].size(), alone.size());
    EXPECT_LT(max_diff(out[i], alone), 1e-4) << "input " << i;
  }
}

TEST_F(Session, SelfCheckFollowsTheGreedyGolden) {
  const std::vector<TokenId> prompt = read_token_ids((kGolden / "prompt_40.ids.npy").string());
  const std::vector<TokenId> greedy = read_token_ids((kGolden / "greedy_40.ids.npy").string());
  const SelfCheckResult r = self_check(*model_, prompt, 6);
  EXPECT_EQ(r.tokens, std::vector<TokenId>(greedy.begin(), greedy.begin() + 6));
  EXPECT_LT(r.max_logit_diff, 1e-4);
  EXPECT_THROW(self_check(*model_, {}, 4), Error);
}

}  // namespace
}  // namespace plumb::v4

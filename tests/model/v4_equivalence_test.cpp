// Prefill, chunked prefill, token-by-token decode and ragged batches of the V4 forward all give
// the logits of one full prefill (MODEL-SPEC 3.11, 5), in both numerics profiles, on the tiny
// synthetic model (ratios 0/4/16/4, window 16) and, when present, the tiny-b HF fixture (ratio
// 128). Lengths cross the window, the compression ratios and 3 mod 4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <vector>

#include "../format/safetensors_corpus.h"
#include "plumb/model/model_v4.h"
#include "plumb/model/synth_v4.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;
using v4::ModelV4;
using v4::SequenceState;

const std::vector<int64_t> kLengths = {1, 2, 3, 4, 5, 7, 8, 127, 128, 129, 131, 255, 256, 257};
constexpr int64_t kMax = 257;

struct Case {
  std::string name;
  std::string model;  // directory; empty: the synthesized tiny model
  Numerics numerics;
};

std::string PrintCase(const ::testing::TestParamInfo<Case>& i) { return i.param.name; }

class Equivalence : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new test::TempDir();
    v4::SynthOptions o;
    o.config_path = std::string(PLUMB_SOURCE_DIR) + "/tools/tiny-v4/config.json";
    o.out_dir = (tmp_->path() / "tiny-v4").string();
    o.seed = 99;
    v4::synthesize_checkpoint(o);
  }
  static void TearDownTestSuite() { delete tmp_; }

  void SetUp() override {
    const Case& c = GetParam();
    const std::string dir = c.model.empty() ? (tmp_->path() / "tiny-v4").string() : c.model;
    if (!fs::exists(dir)) FAIL() << dir << " is missing: it is a committed fixture";
    model_ = ModelV4::load(dir, {"cpu", 2, c.numerics});
    V_ = model_->config().vocab_size;
  }

  std::vector<TokenId> prompt(uint64_t seed, int64_t n) const {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<TokenId> d(2, static_cast<TokenId>(V_ - 1));
    std::vector<TokenId> p(static_cast<std::size_t>(n));
    for (auto& t : p) t = d(rng);
    return p;
  }

  // Runs one sequence through the given chunk sizes; returns all its logits [sum, V].
  std::vector<float> chunked(const std::vector<TokenId>& ids, const std::vector<int64_t>& chunks) {
    SequenceState s = model_->forward_pass().new_sequence();
    std::vector<float> out;
    int64_t done = 0;
    for (int64_t c : chunks) {
      const SequenceStep in{&s, std::span<const TokenId>(ids).subspan(static_cast<std::size_t>(done), static_cast<std::size_t>(c))};
      append(out, model_->forward_pass().forward({&in, 1}));
      done += c;
    }
    return out;
  }

  void append(std::vector<float>& out, const backend::Tensor& t) {
    const std::size_t n = out.size();
    out.resize(n + static_cast<std::size_t>(t.numel()));
    model_->backend().to_host(t, out.data() + n);
  }

  // max |a - b| / max |b| over the first `rows` rows of b.
  double rel(const std::vector<float>& a, const std::vector<float>& b, int64_t rows) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < rows * V_; ++i) {
      num = std::max(num, std::fabs(double(a[i]) - b[i]));
      den = std::max(den, std::fabs(double(b[i])));
    }
    worst_ = std::max(worst_, num / den);
    return num / den;
  }

  void TearDown() override {
    if (model_) std::printf("[equivalence] worst max|diff|/max|ref| = %.3g\n", worst_);
  }

  static test::TempDir* tmp_;
  std::unique_ptr<ModelV4> model_;
  int64_t V_ = 0;
  double worst_ = 0;
};

test::TempDir* Equivalence::tmp_ = nullptr;

constexpr double kTol = 1e-5;

TEST_P(Equivalence, PrefillOfEveryLengthIsAPrefixOfTheFullPrefill) {
  const std::vector<TokenId> ids = prompt(1, kMax);
  const std::vector<float> full = model_->prompt_logits(ids);
  for (int64_t L : kLengths) {
    const std::vector<float> part = model_->prompt_logits(std::span<const TokenId>(ids).first(static_cast<std::size_t>(L)));
    EXPECT_LE(rel(part, full, L), kTol) << "length " << L;
  }
}

TEST_P(Equivalence, TokenByTokenDecode) {
  const std::vector<TokenId> ids = prompt(2, kMax);
  const std::vector<float> full = model_->prompt_logits(ids);
  const std::vector<float> dec = chunked(ids, std::vector<int64_t>(kMax, 1));
  for (int64_t L : kLengths) EXPECT_LE(rel(dec, full, L), kTol) << "first " << L << " decode steps";
}

TEST_P(Equivalence, ChunkedPrefillSplitAnywhere) {
  const std::vector<TokenId> ids = prompt(3, kMax);
  const std::vector<float> full = model_->prompt_logits(ids);
  // Two chunks, split at the window (16), HCA ratios (16, 128) and CSA ratio (4) boundaries +-1.
  for (int64_t s : {1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 130, 131, 255, 256})
    EXPECT_LE(rel(chunked(ids, {s, kMax - s}), full, kMax), kTol) << "split at " << s;
  // Many chunks of random sizes (1..40).
  std::mt19937_64 rng(4);
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<int64_t> chunks;
    for (int64_t done = 0; done < kMax;) {
      const int64_t c = std::min<int64_t>(kMax - done, std::uniform_int_distribution<int64_t>(1, 40)(rng));
      chunks.push_back(c);
      done += c;
    }
    EXPECT_LE(rel(chunked(ids, chunks), full, kMax), kTol) << "random schedule " << rep;
  }
  // Every listed length as prefill of all but the last token, then one decode step.
  for (int64_t L : kLengths) {
    if (L < 2) continue;
    const std::vector<TokenId> p(ids.begin(), ids.begin() + L);
    EXPECT_LE(rel(chunked(p, {L - 1, 1}), full, L), kTol) << "length " << L;
  }
}

TEST_P(Equivalence, RaggedBatches) {
  // One sequence per listed length, each with its own prompt, all in one batch.
  std::vector<std::vector<TokenId>> prompts;
  std::vector<std::vector<float>> ref;
  for (std::size_t i = 0; i < kLengths.size(); ++i) {
    prompts.push_back(prompt(100 + i, kLengths[i]));
    ref.push_back(model_->prompt_logits(prompts.back()));
  }
  {
    std::vector<SequenceState> states;
    for (std::size_t i = 0; i < prompts.size(); ++i) states.push_back(model_->forward_pass().new_sequence());
    std::vector<SequenceStep> batch;
    for (std::size_t i = 0; i < prompts.size(); ++i) batch.push_back({&states[i], prompts[i]});
    std::vector<float> all;
    append(all, model_->forward_pass().forward(batch));
    int64_t row = 0;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      const std::vector<float> mine(all.begin() + row * V_, all.begin() + (row + kLengths[i]) * V_);
      EXPECT_LE(rel(mine, ref[i], kLengths[i]), kTol) << "one batch, length " << kLengths[i];
      row += kLengths[i];
    }
  }
  // Continuous batching: every call advances each unfinished sequence by its own chunk (often a
  // single decode token), so prefill chunks and decode steps of different sequences mix.
  std::mt19937_64 rng(5);
  std::vector<SequenceState> states;
  for (std::size_t i = 0; i < prompts.size(); ++i) states.push_back(model_->forward_pass().new_sequence());
  std::vector<std::vector<float>> got(prompts.size());
  for (;;) {
    std::vector<SequenceStep> batch;
    std::vector<std::size_t> who;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      const int64_t done = states[i].pos, left = kLengths[i] - done;
      if (left == 0) continue;
      const int64_t c = std::min<int64_t>(left, rng() % 3 == 0 ? 1 + rng() % 50 : 1);
      batch.push_back({&states[i], std::span<const TokenId>(prompts[i]).subspan(static_cast<std::size_t>(done), static_cast<std::size_t>(c))});
      who.push_back(i);
    }
    if (batch.empty()) break;
    std::vector<float> all;
    append(all, model_->forward_pass().forward(batch));
    int64_t row = 0;
    for (std::size_t k = 0; k < who.size(); ++k) {
      const int64_t n = static_cast<int64_t>(batch[k].tokens.size());
      got[who[k]].insert(got[who[k]].end(), all.begin() + row * V_, all.begin() + (row + n) * V_);
      row += n;
    }
  }
  for (std::size_t i = 0; i < prompts.size(); ++i)
    EXPECT_LE(rel(got[i], ref[i], kLengths[i]), kTol) << "continuous batching, length " << kLengths[i];
}

const std::string kTinyB = std::string(PLUMB_TEST_DATA) + "/golden/v4/tiny-b";

INSTANTIATE_TEST_SUITE_P(V4, Equivalence,
                         ::testing::Values(Case{"TinyReference", "", Numerics::Reference},
                                           Case{"TinyFaithful", "", Numerics::Faithful},
                                           Case{"TinyBReference", kTinyB, Numerics::Reference},
                                           Case{"TinyBFaithful", kTinyB, Numerics::Faithful}),
                         PrintCase);

}  // namespace
}  // namespace plumb

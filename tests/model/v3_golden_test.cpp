// DeepSeek-V3 against HF transformers goldens (tests/data/golden/v3/<config>/, made by
// tools/golden/make_v3_fixtures.py: fp32 HF logits of prompts of lengths 1..211 and a 32-token
// greedy continuation). HF computes MLA in the naive form (per-head K and V from kv_b); plumb runs
// the absorbed form, so matching the logits (max|diff| / max|ref| <= 1e-4, same argmax) and the
// greedy ids (prefill then 1-token decode steps on the latent cache) shows absorbed == naive.
// Also: binding and inspect on the V3 layout, and ragged-batch / chunked-prefill equivalence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "../format/safetensors_corpus.h"
#include "v3_test_util.h"
#include "plumb/backend/backend.h"
#include "plumb/format/config.h"
#include "plumb/format/npy.h"
#include "plumb/format/safetensors.h"
#include "plumb/model/checkpoint_summary.h"
#include "plumb/model/forward_v3.h"
#include "plumb/model/model_v4.h"
#include "plumb/model/weights_v3.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;

const fs::path kGolden = fs::path(PLUMB_TEST_DATA) / "golden" / "v3";
const char* kConfigs[] = {"tiny-a", "tiny-b"};

using test::LoadedV3;
using test::npy_f32;

double rel_diff(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    num = std::max(num, std::fabs(double(got[i]) - ref[i]));
    den = std::max(den, std::fabs(double(ref[i])));
  }
  return num / den;
}

TEST(V3Golden, BindsAndInspects) {
  for (const char* name : kConfigs) {
    const fs::path dir = kGolden / name;
    const ModelConfig cfg = load_model_config(dir.string());
    const Checkpoint ck = Checkpoint::open(dir.string());
    BindReport report;
    const v3::ModelWeights w = v3::bind_weights(ck, cfg, &report);
    EXPECT_TRUE(report.ok()) << report.summary();
    EXPECT_EQ(w.expert_format, WeightFormat::FP8Block128);
    EXPECT_TRUE(w.layers[0].dense);
    EXPECT_FALSE(w.layers[1].dense);
    EXPECT_EQ(w.layers[1].attn.q_b_proj.scale_dtype, DType::F32);  // V3's fp32 weight_scale_inv
    const CheckpointSummary s = summarize_checkpoint(ck, cfg);
    ASSERT_TRUE(s.binding.has_value());
    EXPECT_TRUE(s.binding->ok());
    EXPECT_NE(summary_text(s).find("binding       ok"), std::string::npos);
  }
}

// The MTP layer (model.layers.{num_hidden_layers}.*) is recognized and skipped, not "unexpected".
TEST(V3Golden, MtpLayerIsSkipped) {
  const fs::path src = kGolden / "tiny-b";
  test::TempDir tmp;
  fs::copy_file(src / "model.safetensors", tmp.path() / "model.safetensors");
  test::write_shard(tmp.path() / "mtp.safetensors", {{"model.layers.2.enorm.weight", DType::BF16, {96}},
                                                     {"model.layers.2.eh_proj.weight", DType::BF16, {96, 192}}});
  std::map<std::string, std::string> index = {{"model.layers.2.enorm.weight", "mtp.safetensors"},
                                              {"model.layers.2.eh_proj.weight", "mtp.safetensors"}};
  const Checkpoint base = Checkpoint::open(src.string());
  for (const TensorInfo* t : base.tensors()) index[t->name] = "model.safetensors";
  test::write_index(tmp.path(), index);
  std::ifstream f(src / "config.json");
  nlohmann::json j = nlohmann::json::parse(f);
  for (int mtp : {1, 0}) {
    j["num_nextn_predict_layers"] = mtp;
    test::write_file(tmp.path() / "config.json", j.dump());
    const Checkpoint ck = Checkpoint::open(tmp.path().string());
    BindReport report;
    const v3::ModelWeights w = v3::bind_weights(ck, load_model_config(tmp.path().string()), &report);
    EXPECT_EQ(w.mtp_tensors_skipped, mtp ? 2 : 0);
    EXPECT_EQ(report.unexpected.size(), mtp ? 0u : 2u) << report.summary();
  }
}

TEST(V3Golden, LogitsAndGreedyMatchHf) {
  for (const char* name : kConfigs) {
    const fs::path dir = kGolden / name;
    LoadedV3 m(dir);
    const int64_t V = m.cfg.vocab_size;
    for (int64_t L : {1, 3, 7, 64, 211}) {
      const std::vector<TokenId> ids = read_token_ids((dir / ("prompt_" + std::to_string(L) + ".ids.npy")).string());
      const std::vector<float> hf = npy_f32(dir / ("prompt_" + std::to_string(L) + ".logits.npy"));
      const std::vector<float> got = m.prefill(ids);
      ASSERT_EQ(got.size(), hf.size());
      int64_t argmax_diff = 0;
      for (int64_t t = 0; t < L; ++t)
        argmax_diff += argmax({got.data() + t * V, static_cast<std::size_t>(V)}) !=
                       argmax({hf.data() + t * V, static_cast<std::size_t>(V)});
      const double rel = rel_diff(got, hf);
      std::printf("[golden v3] %s prompt_%lld: max|diff|/max|ref| = %.3g, argmax mismatches %lld\n", name,
                  static_cast<long long>(L), rel, static_cast<long long>(argmax_diff));
      EXPECT_LE(rel, 1e-4) << name << " prompt_" << L;
      EXPECT_EQ(argmax_diff, 0) << name << " prompt_" << L;
    }
    // Greedy: one prefill, then 1-token decode steps reading only the latent / rope-key cache.
    const std::vector<TokenId> prompt = read_token_ids((dir / "prompt_7.ids.npy").string());
    const std::vector<TokenId> want = read_token_ids((dir / "greedy_7.ids.npy").string());
    v3::SequenceState s = m.fwd->new_sequence();
    std::vector<TokenId> step(prompt), got;
    while (got.size() < want.size()) {
      const SequenceStep in{&s, step};
      const std::vector<float> lg = m.run({&in, 1});
      got.push_back(static_cast<TokenId>(argmax({lg.data() + lg.size() - V, static_cast<std::size_t>(V)})));
      step.assign(1, got.back());
    }
    EXPECT_EQ(got, want) << name;
  }
}

// Two sequences fed as a ragged batch in uneven chunks give the logits of one prefill each.
TEST(V3Golden, RaggedChunkedDecodeEqualsPrefill) {
  LoadedV3 m(kGolden / "tiny-b");
  const std::vector<TokenId> a = read_token_ids((kGolden / "tiny-b" / "prompt_64.ids.npy").string());
  const std::vector<TokenId> b(a.rbegin(), a.rbegin() + 23);
  const std::vector<float> want_a = m.prefill(a), want_b = m.prefill(b);
  const test::RaggedChunked got = test::ragged_chunked(m, a, b);
  ASSERT_EQ(got.fed_a, a.size());
  ASSERT_EQ(got.fed_b, b.size());
  EXPECT_LE(rel_diff(got.a, want_a), 1e-5);
  EXPECT_LE(rel_diff(got.b, want_b), 1e-5);
}

}  // namespace
}  // namespace plumb

// Round trips of `plumb convert` on the tiny V4 checkpoints (models/tiny-v4, the HF-golden tiny-a)
// and a tiny V3 one: cast values equal the dequantized originals, the FP4 -> FP8 re-encode is
// bit-exact, and split tensors concatenate back to the original bytes.
#include "plumb/convert/convert.h"

#include <gtest/gtest.h>

#include "convert_test_util.h"
#include "plumb/convert/shard.h"
#include "plumb/format/config.h"
#include "plumb/model/synth_v4.h"
#include "plumb/model/weights_v4.h"

namespace plumb::test {
namespace {

convert::ConvertOutput out_to(const fs::path& dst) { return {dst.string(), false, false}; }

bool is_scale_name(const std::string& n) { return n.ends_with(".scale") || n.ends_with(".weight_scale_inv"); }

void expect_binds(const fs::path& dir, WeightFormat experts) {
  const Checkpoint c = Checkpoint::open(dir.string());
  v4::BindReport report;
  const auto w = v4::bind_weights(c, load_model_config(dir.string()), &report);
  EXPECT_TRUE(report.ok()) << report.summary();
  EXPECT_EQ(w.expert_format, experts);
}

// Every weight of `src` has the same dequantized values in `dst`, bit for bit; every other
// tensor has the same bytes. Returns how many tensors changed encoding.
int expect_same_values(const fs::path& src, const fs::path& dst) {
  const Checkpoint a = Checkpoint::open(src.string()), b = Checkpoint::open(dst.string());
  int changed = 0;
  for (const TensorInfo* t : a.tensors()) {
    if (is_scale_name(t->name)) continue;  // compared through their weights
    const TensorInfo* u = b.find(t->name);
    EXPECT_NE(u, nullptr) << t->name;
    if (!u) continue;
    if (u->dtype == t->dtype && u->shape == t->shape) {
      EXPECT_EQ(bytes_of(a, t->name), bytes_of(b, t->name)) << t->name;
    } else {
      ++changed;
      EXPECT_TRUE(bitwise_equal(dequantized(a, t->name), dequantized(b, t->name))) << t->name;
    }
  }
  return changed;
}

TEST(ConvertCast, TinyV4Fp8ToBf16IsExactAndKeepsFp4Experts) {
  TempDir tmp;
  const fs::path dst = tmp.path() / "bf16";
  const auto r = convert::convert_cast({kTinyV4.string(), out_to(dst), false});
  EXPECT_EQ(r.converted, 44);  // 4 layers + MTP: 5 FP8 linears x 5 + indexer wq_b x 2 + shared 3 x 5 + e/h_proj 2
  EXPECT_EQ(r.dropped, 44);
  EXPECT_GT(r.peak_rss_bytes, 0u);
  // E8M0 scales: e4m3 x 2^k has 4 significant bits, so BF16 holds it exactly.
  EXPECT_EQ(expect_same_values(kTinyV4, dst), 44);
  const Checkpoint b = Checkpoint::open(dst.string());
  for (const TensorInfo* t : b.tensors()) {
    EXPECT_NE(t->dtype, DType::F8_E4M3) << t->name;
    if (t->name.ends_with(".scale")) {
      EXPECT_TRUE(t->name.find(".experts.") != std::string::npos) << t->name;
    }
  }
  EXPECT_TRUE(fs::exists(dst / Checkpoint::kIndexName));
  expect_binds(dst, WeightFormat::FP4Block32);
  const auto cfg = read_json_file(dst / "config.json");
  EXPECT_FALSE(cfg.contains("quantization_config"));
  EXPECT_EQ(cfg["expert_dtype"], "fp4");
  EXPECT_EQ(cfg["plumb_conversion"][0]["command"], "cast");
  EXPECT_EQ(cfg["plumb_conversion"][0]["experts"], false);
}

TEST(ConvertCast, TinyAWithExpertsDequantizesEverything) {
  TempDir tmp;
  const fs::path dst = tmp.path() / "bf16";
  convert::convert_cast({kTinyA.string(), out_to(dst), true});
  EXPECT_EQ(expect_same_values(kTinyA, dst), 44 + 120);  // FP8 linears and FP4 experts
  const Checkpoint b = Checkpoint::open(dst.string());
  for (const TensorInfo* t : b.tensors()) {
    EXPECT_FALSE(is_scale_name(t->name)) << t->name;
    EXPECT_NE(t->dtype, DType::I8) << t->name;
  }
  // Single-file source: single-file output, no index invented; side files (fixtures) copied.
  EXPECT_TRUE(fs::exists(dst / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dst / Checkpoint::kIndexName));
  EXPECT_TRUE(fs::exists(dst / "meta.json"));
  expect_binds(dst, WeightFormat::Dense);
  EXPECT_FALSE(read_json_file(dst / "config.json").contains("expert_dtype"));
}

TEST(ConvertCast, V3WeightScaleInvRoundsToBf16) {
  TempDir tmp;
  const fs::path src = tmp.path() / "v3", dst = tmp.path() / "bf16";
  write_tiny_v3(src);
  const auto r = convert::convert_cast({src.string(), out_to(dst), false});
  EXPECT_EQ(r.converted, 21);
  EXPECT_EQ(r.dropped, 21);
  const Checkpoint a = Checkpoint::open(src.string()), b = Checkpoint::open(dst.string());
  EXPECT_EQ(b.tensor_count(), a.tensor_count() - 21);
  for (const TensorInfo* t : a.tensors()) {
    if (t->dtype != DType::F8_E4M3) continue;
    // F32 scales: e4m3 x scale is rounded once, to BF16 with ties to even.
    std::vector<float> want = dequantized(a, t->name);
    for (float& x : want) x = bf16_to_f32(f32_to_bf16(x));
    EXPECT_EQ(b.at(t->name).dtype, DType::BF16);
    EXPECT_TRUE(bitwise_equal(dequantized(b, t->name), want)) << t->name;
    EXPECT_EQ(b.find(t->name.substr(0, t->name.size() - 7) + ".weight_scale_inv"), nullptr);
  }
  EXPECT_EQ(bytes_of(a, "lm_head.weight"), bytes_of(b, "lm_head.weight"));
  const auto index = read_json_file(dst / Checkpoint::kIndexName);
  EXPECT_EQ(index["weight_map"].size(), b.tensor_count());
  EXPECT_EQ(read_json_file(dst / "tokenizer.json"), read_json_file(src / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(dst / "generation_config.json"));
  EXPECT_EQ(load_model_config(dst.string()).arch, Arch::DeepseekV3);
  EXPECT_FALSE(read_json_file(dst / "config.json").contains("quantization_config"));
}

TEST(ConvertCast, RefusesWhenNothingIsQuantized) {
  TempDir tmp;
  convert::convert_cast({kTinyA.string(), out_to(tmp.path() / "a"), true});
  try {
    convert::convert_cast({(tmp.path() / "a").string(), out_to(tmp.path() / "b"), true});
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nothing to cast"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(tmp.path() / "b"));
}

TEST(ConvertExperts, ReencodeIsBitExactOnTinyCheckpoints) {
  for (const fs::path& src : {kTinyV4, kTinyA}) {
    TempDir tmp;
    const fs::path dst = tmp.path() / "fp8";
    const auto r = convert::convert_experts_fp8({src.string(), out_to(dst)});
    const int experts = 3 * 8 * 5;               // w1/w2/w3 x 8 experts x (4 layers + MTP), both checkpoints
    EXPECT_EQ(r.converted, 2 * experts) << src;  // weight + its new scale
    EXPECT_EQ(expect_same_values(src, dst), experts) << src;
    const Checkpoint b = Checkpoint::open(dst.string());
    const TensorInfo& w = b.at("layers.1.ffn.experts.3.w2.weight");
    EXPECT_EQ(w.dtype, DType::F8_E4M3);
    const TensorInfo& s = b.at("layers.1.ffn.experts.3.w2.scale");
    EXPECT_EQ(s.dtype, DType::F8_E8M0);
    EXPECT_EQ(s.shape, (std::vector<int64_t>{(w.shape[0] + 127) / 128, (w.shape[1] + 127) / 128}));
    expect_binds(dst, WeightFormat::FP8Block128);
    const auto cfg = read_json_file(dst / "config.json");
    EXPECT_EQ(cfg["expert_dtype"], "fp8");
    EXPECT_TRUE(cfg.contains("quantization_config"));
  }
}

TEST(ConvertExperts, RefusesABlockThatIsNotExactNamingIt) {
  TempDir tmp;
  const fs::path src = tmp.path() / "src";
  fs::create_directories(src);
  fs::copy_file(kTinyV4 / "config.json", src / "config.json");
  // One FP4 expert whose first 128x128 block mixes 1x32 scales 2^-30 and 2^0 with non-zero
  // values in both: 30 binades, more than e4m3 under one scale holds.
  std::vector<std::byte> w(128 * 64, std::byte{0x22}), s(128 * 4, std::byte{127});
  for (int r = 0; r < 128; ++r) s[r * 4] = std::byte{97};
  SafetensorsWriter sw;
  sw.add("layers.0.ffn.experts.0.w1.weight", DType::I8, {128, 64}, w);
  sw.add("layers.0.ffn.experts.0.w1.scale", DType::F8_E8M0, {128, 4}, s);
  sw.write((src / "model.safetensors").string());
  try {
    convert::convert_experts_fp8({src.string(), out_to(tmp.path() / "dst")});
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("layers.0.ffn.experts.0.w1.weight: rows 0..127, cols 0..127"), std::string::npos) << m;
    EXPECT_NE(m.find("span 2^-30..2^0"), std::string::npos) << m;
  }
  EXPECT_FALSE(fs::exists(tmp.path() / "dst"));
}

// rank parts of `name` concatenated along `dim`.
std::vector<std::byte> concat_ranks(const std::vector<Checkpoint>& ranks, const std::string& name, int dim) {
  const TensorInfo& t0 = ranks[0].at(name);
  std::size_t outer = 1, seg = dtype_size(t0.dtype);
  for (int d = 0; d < dim; ++d) outer *= static_cast<std::size_t>(t0.shape[d]);
  for (std::size_t d = static_cast<std::size_t>(dim); d < t0.shape.size(); ++d)
    seg *= static_cast<std::size_t>(t0.shape[d]);
  std::vector<std::byte> out;
  for (std::size_t i = 0; i < outer; ++i)
    for (const auto& r : ranks) {
      const auto b = r.view(name).bytes;
      out.insert(out.end(), b.begin() + i * seg, b.begin() + (i + 1) * seg);
    }
  return out;
}

// Split tensors concatenate back to the source bytes; replicated ones are identical in every
// rank; routed experts are in exactly their rank. Returns the number of split tensors.
int expect_shards_rebuild(const fs::path& src, const fs::path& dst, int64_t tp) {
  const Checkpoint a = Checkpoint::open(src.string());
  const ModelConfig cfg = load_model_config(src.string());
  std::vector<Checkpoint> ranks;
  for (int64_t r = 0; r < tp; ++r) ranks.push_back(Checkpoint::open((dst / convert::tp_file_name(r, tp)).string()));
  int split = 0;
  for (const TensorInfo* t : a.tensors()) {
    const auto rule = convert::split_rule(cfg.arch, t->name);
    const auto want = bytes_of(a, t->name);
    if (rule.kind == convert::SplitRule::Expert) {
      const int64_t owner = rule.expert / (cfg.n_routed_experts / tp);
      for (int64_t r = 0; r < tp; ++r) EXPECT_EQ(ranks[r].find(t->name) != nullptr, r == owner) << t->name;
      EXPECT_EQ(bytes_of(ranks[owner], t->name), want) << t->name;
    } else if (rule.kind == convert::SplitRule::Split) {
      ++split;
      EXPECT_EQ(ranks[0].at(t->name).shape[rule.dim] * tp, t->shape[rule.dim]) << t->name;
      EXPECT_EQ(concat_ranks(ranks, t->name, rule.dim), want) << t->name;
    } else {
      for (const auto& r : ranks) EXPECT_EQ(bytes_of(r, t->name), want) << t->name;
    }
  }
  return split;
}

TEST(ConvertShard, Fp8TinyV4IsRefusedNamingTensorAndDims) {
  TempDir tmp;
  try {
    convert::convert_shard({kTinyV4.string(), out_to(tmp.path() / "tp2"), 2});
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("layers.0.attn.wq_b.weight [320, 96]: splitting dim 0 (320) 2 ways gives 160 per rank, which cuts "
                     "a 128-element scale block"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("cast to bf16 first"), std::string::npos) << m;
  }
  EXPECT_FALSE(fs::exists(tmp.path() / "tp2"));
}

TEST(ConvertShard, RefusesExpertCountNotDivisible) {
  TempDir tmp;
  try {
    convert::convert_shard({kTinyV4.string(), out_to(tmp.path() / "tp3"), 3});
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_routed_experts 8 is not divisible by --tp 3"), std::string::npos)
        << e.what();
  }
}

TEST(ConvertShard, CastThenShardConcatenatesBack) {
  TempDir tmp;
  const fs::path bf16 = tmp.path() / "bf16", tp2 = tmp.path() / "tp2";
  convert::convert_cast({kTinyV4.string(), out_to(bf16), true});
  const auto r = convert::convert_shard({bf16.string(), out_to(tp2), 2});
  EXPECT_EQ(r.files, 2);
  // wq_b, wo_a, wo_b, attn_sink in 4 layers + MTP, indexer wq_b and weights_proj in the CSA
  // layers 1 and 3, embed and head.
  EXPECT_EQ(expect_shards_rebuild(bf16, tp2, 2), 4 * 5 + 2 * 2 + 2);
  EXPECT_EQ(read_json_file(tp2 / "config.json")["plumb_conversion"][1]["tp"], 2);
}

TEST(ConvertShard, Fp8ScalesSplitOnBlockBoundaries) {
  TempDir tmp;
  const fs::path cfg = tmp.path() / "config.json", src = tmp.path() / "v4", tp2 = tmp.path() / "tp2";
  write_json_file(cfg, block_aligned_v4_config());
  v4::synthesize_checkpoint({.config_path = cfg.string(), .out_dir = src.string()});
  convert::convert_shard({src.string(), out_to(tp2), 2});
  // The 26 split weights above plus the scales of the FP8 ones (wq_b, wo_a, wo_b, indexer wq_b).
  EXPECT_EQ(expect_shards_rebuild(src, tp2, 2), 26 + 3 * 5 + 2);
  const Checkpoint r0 = Checkpoint::open((tp2 / "model0-mp2.safetensors").string());
  EXPECT_EQ(r0.at("layers.0.attn.wo_b.scale").shape, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(r0.at("layers.0.attn.wq_b.scale").shape, (std::vector<int64_t>{1, 1}));
}

TEST(ConvertShard, V3SplitsTheModelParallelLayout) {
  TempDir tmp;
  const fs::path src = tmp.path() / "v3", tp2 = tmp.path() / "tp2";
  write_tiny_v3(src);
  convert::convert_shard({src.string(), out_to(tp2), 2});
  // BF16 embed and lm_head; FP8 q_b, kv_b, o_proj, dense gate/up/down, shared gate/down with
  // their scales.
  EXPECT_EQ(expect_shards_rebuild(src, tp2, 2), 2 + 2 * 8);
  EXPECT_TRUE(fs::exists(tp2 / "tokenizer.json"));
}

TEST(SplitRules, FollowTheReferenceConverters) {
  using convert::SplitRule;
  auto v4 = [](const std::string& n) { return convert::split_rule(Arch::DeepseekV4, n); };
  auto v3 = [](const std::string& n) { return convert::split_rule(Arch::DeepseekV3, n); };
  for (const char* n : {"embed.weight", "head.weight", "layers.3.attn.wq_b.weight", "layers.3.attn.wq_b.scale",
                        "layers.2.attn.indexer.wq_b.weight", "layers.2.attn.indexer.weights_proj.weight",
                        "layers.0.attn.wo_a.weight", "layers.0.attn.attn_sink", "mtp.0.attn.wq_b.weight"}) {
    EXPECT_EQ(v4(n).kind, SplitRule::Split) << n;
    EXPECT_EQ(v4(n).dim, 0) << n;
  }
  EXPECT_EQ(v4("layers.0.attn.wo_b.scale").dim, 1);
  for (const char* n :
       {"layers.0.attn.wq_a.weight", "layers.0.attn.wkv.weight", "layers.0.ffn.shared_experts.w1.weight",
        "layers.0.ffn.gate.weight", "layers.2.attn.compressor.wkv.weight", "hc_head_fn", "norm.weight"})
    EXPECT_EQ(v4(n).kind, SplitRule::Replicate) << n;
  const auto e = v4("layers.5.ffn.experts.17.w2.scale");
  EXPECT_EQ(e.kind, SplitRule::Expert);
  EXPECT_EQ(e.expert, 17);
  EXPECT_EQ(v3("model.layers.0.self_attn.o_proj.weight_scale_inv").dim, 1);
  EXPECT_EQ(v3("model.layers.4.mlp.shared_experts.down_proj.weight").dim, 1);
  EXPECT_EQ(v3("model.layers.4.mlp.experts.200.up_proj.weight").expert, 200);
  EXPECT_EQ(v3("model.layers.0.self_attn.kv_a_proj_with_mqa.weight").kind, SplitRule::Replicate);
  EXPECT_EQ(v3("model.layers.4.mlp.gate.weight").kind, SplitRule::Replicate);
  EXPECT_EQ(v3("lm_head.weight").kind, SplitRule::Split);
}

}  // namespace
}  // namespace plumb::test

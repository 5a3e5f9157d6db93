// Binding of V4 checkpoints written by `synth` in the official layout, and the semantic part of
// the bad-input corpus (missing tensor, wrong scale shape, NaN scale, unexpected tensor, mixed
// expert formats), checked both through the API and through `plumb inspect` (exit code 2).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>

#include "../format/safetensors_corpus.h"
#include "plumb/format/codecs.h"
#include "plumb/format/config.h"
#include "plumb/model/checkpoint_summary.h"
#include "plumb/model/synth_v4.h"
#include "plumb/model/weights_v4.h"
#include "plumb/util/error.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

const std::string kTinyConfig = std::string(PLUMB_SOURCE_DIR) + "/tools/tiny-v4/config.json";

fs::path synth_tiny(const fs::path& dir, bool fp8_experts = false) {
  v4::SynthOptions o;
  o.config_path = kTinyConfig;
  o.out_dir = (dir / "ckpt").string();
  o.seed = 7;
  o.fp8_experts = fp8_experts;
  v4::synthesize_checkpoint(o);
  return o.out_dir;
}

// Rewrites the shard holding `tensor`, letting `edit` drop or change entries (return false to drop).
using Edit = std::function<bool(std::string& name, DType& dt, std::vector<int64_t>& shape, std::vector<std::byte>& data)>;
void rewrite_shard_of(const fs::path& ckpt_dir, const std::string& tensor, const Edit& edit) {
  fs::path shard;
  {
    const Checkpoint ck = Checkpoint::open(ckpt_dir.string());
    shard = ck.shards()[ck.at(tensor).shard]->path();
  }
  SafetensorsWriter w;
  std::vector<std::string> kept;
  {
    SafetensorsFile f(shard.string());
    for (const TensorInfo& t : f.tensors()) {
      std::string name = t.name;
      DType dt = t.dtype;
      std::vector<int64_t> shape = t.shape;
      auto bytes = f.bytes(t);
      std::vector<std::byte> data(bytes.begin(), bytes.end());
      if (edit(name, dt, shape, data)) w.add(name, dt, shape, std::move(data));
    }
  }
  w.write(shard.string());
}

// Drops `tensor` from its shard and from the index, so the checkpoint is self-consistent but
// incomplete.
void drop_tensor(const fs::path& dir, const std::string& tensor) {
  rewrite_shard_of(dir, tensor, [&](std::string& n, DType&, std::vector<int64_t>&, std::vector<std::byte>&) {
    return n != tensor;
  });
  const fs::path idx = dir / "model.safetensors.index.json";
  auto j = nlohmann::json::parse(std::ifstream(idx));
  j["weight_map"].erase(tensor);
  std::ofstream(idx) << j.dump(2);
}

struct CliResult {
  int status;
  std::string output;
};
CliResult run_plumb(const std::string& args) {
  std::string cmd = std::string(PLUMB_BINARY) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  int st = ::pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

TEST(BindV4, TinyCheckpointBindsCompletely) {
  TempDir tmp;
  const fs::path dir = synth_tiny(tmp.path());
  const Checkpoint ck = Checkpoint::open(dir.string());
  const ModelConfig cfg = load_model_config(dir.string());
  // Counted by hand from MODEL-SPEC 4.2-4.5 for the tiny config (8 experts, MTP on):
  // every layer 77 tensors (2 norms, 6 hc, sink + 2 norms, 5 FP8 linears x2, gate, tid2eid or
  // bias, shared 3x2, experts 8x3x2), CSA +11 (compressor 4, indexer wq_b 2, weights_proj,
  // indexer compressor 4), HCA +4; layers SWA,CSA,HCA,CSA = 77+88+81+88 = 334; MTP 77+2+2+3+3 = 87;
  // globals 6 (embed, head, norm, hc_head x3).
  EXPECT_EQ(ck.tensor_count(), 427u);
  v4::BindReport report;
  const v4::ModelWeights w = v4::bind_weights(ck, cfg, &report);
  EXPECT_TRUE(report.ok()) << report.summary();
  ASSERT_EQ(w.layers.size(), 4u);
  ASSERT_EQ(w.mtp.size(), 1u);
  EXPECT_EQ(w.expert_format, WeightFormat::FP4Block32);
  EXPECT_EQ(w.layers[0].type, AttnType::SWA);
  EXPECT_EQ(w.layers[1].type, AttnType::CSA);
  EXPECT_TRUE(w.layers[1].attn.indexer.has_value());
  EXPECT_TRUE(w.layers[2].attn.compressor.has_value());
  EXPECT_FALSE(w.layers[2].attn.indexer.has_value());
  EXPECT_TRUE(w.layers[1].ffn.tid2eid.present());   // hash layer
  EXPECT_FALSE(w.layers[2].ffn.tid2eid.present());  // learned routing
  EXPECT_TRUE(w.layers[2].ffn.gate_bias.present());
  // FP4 expert: logical [96, 192], scales [96, 6]; FP8 linear wq_b [320, 96], scales [3, 1].
  EXPECT_EQ(w.layers[0].ffn.experts[3].w1.shape, (std::vector<int64_t>{96, 192}));
  EXPECT_EQ(w.layers[0].ffn.experts[3].w1.scale_shape, (std::vector<int64_t>{96, 6}));
  EXPECT_EQ(w.layers[0].attn.wq_b.scale_shape, (std::vector<int64_t>{3, 1}));
}

TEST(BindV4, DetectsFp8ExpertsFromTensorsNotConfig) {
  TempDir tmp;
  const fs::path dir = synth_tiny(tmp.path(), /*fp8_experts=*/true);  // config still says fp4
  const v4::ModelWeights w = v4::bind_weights(Checkpoint::open(dir.string()), load_model_config(dir.string()));
  EXPECT_EQ(w.expert_format, WeightFormat::FP8Block128);
}

TEST(BindV4, DecodeRowsMatchesBlockDequantization) {
  TempDir tmp;
  const fs::path dir = synth_tiny(tmp.path());
  const Checkpoint ck = Checkpoint::open(dir.string());
  const v4::ModelWeights w = v4::bind_weights(ck, load_model_config(dir.string()));
  for (const WeightView* v : {&w.layers[1].attn.wq_b, &w.layers[0].ffn.experts[5].w2}) {
    std::vector<float> rows(static_cast<std::size_t>(v->numel())), whole(rows.size());
    decode_rows(*v, 0, v->rows(), rows.data());
    if (v->format == WeightFormat::FP8Block128)
      dequant_fp8_block128(reinterpret_cast<const uint8_t*>(v->data), v->rows(), v->cols(), v->scale, v->scale_dtype,
                           whole.data());
    else
      dequant_fp4_block32(reinterpret_cast<const uint8_t*>(v->data), v->rows(), v->cols(),
                          reinterpret_cast<const uint8_t*>(v->scale), whole.data());
    EXPECT_EQ(0, std::memcmp(rows.data(), whole.data(), rows.size() * sizeof(float))) << v->name;
    // A middle row range decodes to the same values as the full decode.
    std::vector<float> mid(static_cast<std::size_t>(3 * v->cols()));
    decode_rows(*v, 5, 8, mid.data());
    EXPECT_EQ(0, std::memcmp(mid.data(), whole.data() + 5 * v->cols(), mid.size() * sizeof(float))) << v->name;
  }
}

TEST(BindV4, RealConfigKvEstimateMatchesSpec) {
  const ModelConfig cfg = load_model_config(std::string(PLUMB_TEST_DATA) + "/configs/deepseek-v4-flash.json");
  const KvEstimate kv = estimate_kv(cfg);
  // MODEL-SPEC 5: 21 * (256 + 64) + 20 * 8 = 6,880 B/token; windows 43 x 128 x 1 KiB; compressor
  // state 21 x (64 + 16) KiB + 20 x 512 KiB.
  EXPECT_EQ(kv.bytes_per_token, 6880u);
  EXPECT_EQ(kv.fixed_per_sequence, 43u * 128 * 1024 + 21u * (64 + 16) * 1024 + 20u * 512 * 1024);
}

struct SemanticCase {
  const char* name;
  std::function<void(const fs::path&)> corrupt;
  std::string flags;                  // extra inspect flags
  std::vector<std::string> expect;    // substrings of the error line
};

class BadCheckpoint : public ::testing::TestWithParam<SemanticCase> {};

TEST_P(BadCheckpoint, InspectNamesTheProblemAndExits2) {
  TempDir tmp;
  const fs::path dir = synth_tiny(tmp.path());
  GetParam().corrupt(dir);
  const CliResult r = run_plumb("inspect " + dir.string() + " --no-progress " + GetParam().flags);
  EXPECT_EQ(r.status, 2) << r.output;
  const auto err = r.output.find("plumb: error: ");
  ASSERT_NE(err, std::string::npos) << r.output;
  const std::string line = r.output.substr(err, r.output.find('\n', err) - err);
  for (const auto& s : GetParam().expect) EXPECT_NE(line.find(s), std::string::npos) << "missing '" << s << "' in: " << line;
}

INSTANTIATE_TEST_SUITE_P(
    Corpus, BadCheckpoint,
    ::testing::Values(
        SemanticCase{"missing_tensor", [](const fs::path& d) { drop_tensor(d, "layers.2.attn.wkv.scale"); }, "",
                     {"1 missing tensor(s): layers.2.attn.wkv.scale"}},
        SemanticCase{"wrong_scale_shape",
                     [](const fs::path& d) {
                       rewrite_shard_of(d, "layers.1.attn.wq_a.scale", [](std::string& n, DType&, std::vector<int64_t>& s,
                                                                           std::vector<std::byte>& b) {
                         if (n == "layers.1.attn.wq_a.scale") {
                           s = {2, 1};
                           b.resize(2);
                         }
                         return true;
                       });
                     },
                     "", {"layers.1.attn.wq_a.scale: shape [2, 1], expected [1, 2] for layers.1.attn.wq_a.weight 96x192"}},
        SemanticCase{"wrong_dtype",
                     [](const fs::path& d) {
                       rewrite_shard_of(d, "layers.0.attn.attn_sink", [](std::string& n, DType& t, std::vector<int64_t>&,
                                                                        std::vector<std::byte>&) {
                         if (n == "layers.0.attn.attn_sink") t = DType::I32;
                         return true;
                       });
                     },
                     "", {"layers.0.attn.attn_sink: dtype I32, expected BF16, F16 or F32"}},
        SemanticCase{"nan_scale_byte",
                     [](const fs::path& d) {
                       rewrite_shard_of(d, "layers.3.ffn.experts.2.w2.scale", [](std::string& n, DType&, std::vector<int64_t>&,
                                                                                std::vector<std::byte>& b) {
                         if (n == "layers.3.ffn.experts.2.w2.scale") b[7] = std::byte{0xFF};
                         return true;
                       });
                     },
                     "--scan", {"layers.3.ffn.experts.2.w2.scale: 1 NaN value(s) (first at element 7)"}},
        SemanticCase{"unexpected_tensor",
                     [](const fs::path& d) {
                       const fs::path idx = d / "model.safetensors.index.json";
                       auto j = nlohmann::json::parse(std::ifstream(idx));
                       SafetensorsWriter w;
                       w.add("layers.0.attn.extra_bias", DType::F32, {4}, std::vector<std::byte>(16, std::byte{0}));
                       w.write((d / "extra.safetensors").string());
                       j["weight_map"]["layers.0.attn.extra_bias"] = "extra.safetensors";
                       std::ofstream(idx) << j.dump(2);
                     },
                     "", {"1 unexpected tensor(s): layers.0.attn.extra_bias"}},
        SemanticCase{"mixed_expert_formats",
                     [](const fs::path& d) {
                       // experts.0.w1 of layer 2 replaced by a dense bf16 copy: every other expert is FP4.
                       drop_tensor(d, "layers.2.ffn.experts.0.w1.scale");
                       rewrite_shard_of(d, "layers.2.ffn.experts.0.w1.weight", [](std::string& n, DType& t,
                                                                                  std::vector<int64_t>& s,
                                                                                  std::vector<std::byte>& b) {
                         if (n == "layers.2.ffn.experts.0.w1.weight") {
                           t = DType::BF16;
                           s = {96, 192};
                           b.assign(96 * 192 * 2, std::byte{0x3F});
                         }
                         return true;
                       });
                     },
                     "", {"layers.2.ffn.experts.0.w1.weight: expert format dense differs from the model's fp4-e2m1 block32"}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(InspectCli, TinySummaryCounts) {
  TempDir tmp;
  const fs::path dir = synth_tiny(tmp.path());
  const CliResult r = run_plumb("inspect " + dir.string() + " --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["tensor_count"], 427);
  EXPECT_EQ(j["shard_count"], 7);  // embed, 4 layers, norm/head, mtp.0
  EXPECT_EQ(j["layers"]["csa"], (std::vector<int>{1, 3}));
  EXPECT_EQ(j["layers"]["hca"], (std::vector<int>{2}));
  EXPECT_EQ(j["layers"]["hash"], (std::vector<int>{0, 1}));
  EXPECT_EQ(j["expert_format"], "fp4-e2m1 block32");
  EXPECT_EQ(j["binding"]["ok"], true);
  // I8 holds packed FP4: 4 main layers + MTP, 8 experts x 3 matrices each of 96x192/2 bytes.
  EXPECT_EQ(j["by_dtype"]["I8"]["tensors"], 5 * 8 * 3);
  EXPECT_EQ(j["by_dtype"]["I8"]["bytes"], 5 * 8 * 3 * 96 * 192 / 2);
}

}  // namespace
}  // namespace plumb

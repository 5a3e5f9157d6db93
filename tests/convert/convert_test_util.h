#pragma once
// Helpers for the conversion tests: dequantized values of any stored weight encoding, tiny
// V3 / block-aligned V4 checkpoints written at test time, and running the plumb binary.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "../format/safetensors_corpus.h"
#include "plumb/format/codecs.h"
#include "plumb/format/safetensors.h"
#include "plumb/util/error.h"

namespace plumb::test {

inline const fs::path kTinyV4 = fs::path(PLUMB_SOURCE_DIR) / "models" / "tiny-v4";
inline const fs::path kTinyA = fs::path(PLUMB_TEST_DATA) / "golden" / "v4" / "tiny-a";

inline std::vector<std::byte> bytes_of(const Checkpoint& c, const std::string& name) {
  const auto v = c.view(name).bytes;
  return {v.begin(), v.end()};
}

// The f32 values a weight stands for, whatever its encoding: dense float, FP8 + scale (`.scale`
// or `.weight_scale_inv`, E8M0 or F32) or packed FP4 + `.scale`. Decoding is exact, so equal
// vectors (compared bitwise) mean a lossless conversion.
inline std::vector<float> dequantized(const Checkpoint& c, const std::string& name) {
  const TensorInfo& t = c.at(name);
  const auto w = c.view(t).bytes;
  const std::string base = name.substr(0, name.size() - std::string(".weight").size());
  const TensorInfo* scale = c.find(base + ".scale");
  if (!scale) scale = c.find(base + ".weight_scale_inv");
  std::vector<float> out;
  if (t.dtype == DType::F8_E4M3) {
    out.resize(static_cast<std::size_t>(t.numel()));
    dequant_fp8_block128(reinterpret_cast<const uint8_t*>(w.data()), t.shape[0], t.shape[1],
                         c.view(*scale).bytes.data(), scale->dtype, out.data());
  } else if (t.dtype == DType::I8) {
    out.resize(static_cast<std::size_t>(t.numel() * 2));
    dequant_fp4_block32(reinterpret_cast<const uint8_t*>(w.data()), t.shape[0], t.shape[1] * 2,
                        reinterpret_cast<const uint8_t*>(c.view(*scale).bytes.data()), out.data());
  } else {
    for (int64_t i = 0; i < t.numel(); ++i) out.push_back(decode_float(t.dtype, w.data() + i * dtype_size(t.dtype)));
  }
  return out;
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

inline void write_json_file(const fs::path& p, const nlohmann::json& j) { std::ofstream(p) << j.dump(2) << "\n"; }
inline nlohmann::json read_json_file(const fs::path& p) { return nlohmann::json::parse(std::ifstream(p)); }

// A deepseek_v3 config shrunk to test size; dims keep whole 128-blocks under a 2-way split.
inline nlohmann::json tiny_v3_config() {
  nlohmann::json c = read_json_file(fs::path(PLUMB_TEST_DATA) / "configs" / "deepseek-v3.json");
  c.update({{"hidden_size", 256},
            {"intermediate_size", 256},
            {"moe_intermediate_size", 256},
            {"num_hidden_layers", 2},
            {"first_k_dense_replace", 1},
            {"n_routed_experts", 4},
            {"num_experts_per_tok", 2},
            {"n_group", 2},
            {"topk_group", 1},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 4},
            {"q_lora_rank", 128},
            {"kv_lora_rank", 128},
            {"qk_nope_head_dim", 64},
            {"qk_rope_head_dim", 64},
            {"v_head_dim", 64},
            {"vocab_size", 256},
            {"num_nextn_predict_layers", 0}});
  return c;
}

// A tiny V3 checkpoint (HF names, FP8 e4m3 + F32 weight_scale_inv): a dense layer 0, a MoE layer 1,
// in two shards with an index, plus tokenizer/generation files. Not every V3 tensor, but every
// kind a conversion treats differently.
inline void write_tiny_v3(const fs::path& dir) {
  fs::create_directories(dir);
  write_json_file(dir / "config.json", tiny_v3_config());
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> code(0, 253);
  std::uniform_real_distribution<float> scale(1e-3f, 1e-2f);
  std::map<std::string, std::string> index;
  auto fp8 = [&](SafetensorsWriter& w, const std::string& base, int64_t rows, int64_t cols) {
    std::vector<std::byte> q(static_cast<std::size_t>(rows * cols));
    for (auto& b : q) {
      int v = code(rng);
      b = static_cast<std::byte>(v == 0x7F ? 0x7E : v);  // no NaN codes
    }
    const int64_t sr = (rows + 127) / 128, sc = (cols + 127) / 128;
    std::vector<float> s(static_cast<std::size_t>(sr * sc));
    for (auto& x : s) x = scale(rng);
    std::vector<std::byte> sb(s.size() * 4);
    std::memcpy(sb.data(), s.data(), sb.size());
    w.add(base + ".weight", DType::F8_E4M3, {rows, cols}, std::move(q));
    w.add(base + ".weight_scale_inv", DType::F32, {sr, sc}, std::move(sb));
  };
  auto bf16 = [&](SafetensorsWriter& w, const std::string& name, std::vector<int64_t> shape) {
    const TensorSpec spec{name, DType::BF16, shape};
    w.add(name, DType::BF16, shape, pattern_bytes(name, spec.nbytes()));
  };
  SafetensorsWriter a, b;
  bf16(a, "model.embed_tokens.weight", {256, 256});
  bf16(a, "model.layers.0.input_layernorm.weight", {256});
  fp8(a, "model.layers.0.self_attn.q_a_proj", 128, 256);
  fp8(a, "model.layers.0.self_attn.q_b_proj", 512, 128);
  fp8(a, "model.layers.0.self_attn.kv_b_proj", 512, 128);
  fp8(a, "model.layers.0.self_attn.o_proj", 256, 256);
  fp8(a, "model.layers.0.mlp.gate_proj", 256, 256);
  fp8(a, "model.layers.0.mlp.up_proj", 256, 256);
  fp8(a, "model.layers.0.mlp.down_proj", 256, 256);
  bf16(b, "model.layers.1.mlp.gate.weight", {4, 256});
  b.add("model.layers.1.mlp.gate.e_score_correction_bias", DType::F32, {4},
        pattern_bytes("model.layers.1.mlp.gate.e_score_correction_bias", 16));
  for (int e = 0; e < 4; ++e) {
    const std::string p = "model.layers.1.mlp.experts." + std::to_string(e) + ".";
    fp8(b, p + "gate_proj", 256, 256);
    fp8(b, p + "up_proj", 256, 256);
    fp8(b, p + "down_proj", 256, 256);
  }
  fp8(b, "model.layers.1.mlp.shared_experts.gate_proj", 256, 256);
  fp8(b, "model.layers.1.mlp.shared_experts.down_proj", 256, 256);
  bf16(b, "model.norm.weight", {256});
  bf16(b, "lm_head.weight", {256, 256});
  a.write((dir / "model-00001-of-00002.safetensors").string());
  b.write((dir / "model-00002-of-00002.safetensors").string());
  for (const char* f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
    const SafetensorsFile file((dir / f).string());
    for (const auto& t : file.tensors()) index[t.name] = f;
  }
  write_index(dir, index);
  write_file(dir / "tokenizer.json", "{\"model\": {}}");
  write_file(dir / "generation_config.json", "{\"temperature\": 0.6}");
}

// tiny-v4's config with dims that keep whole 128x128 scale blocks under a 2-way split.
inline nlohmann::json block_aligned_v4_config() {
  nlohmann::json c = read_json_file(kTinyV4 / "config.json");
  c.update({{"hidden_size", 256},
            {"head_dim", 64},
            {"qk_rope_head_dim", 16},
            {"q_lora_rank", 128},
            {"o_lora_rank", 128},
            {"index_head_dim", 64},
            {"moe_intermediate_size", 128}});
  return c;
}

struct CliResult {
  int status;
  std::string output;  // stdout and stderr
};

inline CliResult run_plumb(const std::string& args) {
  const std::string cmd = std::string(PLUMB_BINARY) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int st = ::pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

}  // namespace plumb::test

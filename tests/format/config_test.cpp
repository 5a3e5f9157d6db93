#include "plumb/format/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include "plumb/util/error.h"

namespace plumb {
namespace {

using nlohmann::json;

const std::string kConfigs = std::string(PLUMB_TEST_DATA) + "/configs/";

json read_json(const std::string& name) {
  std::ifstream in(kConfigs + name);
  return json::parse(in);
}

// The message of the Error that parsing `j` throws, or "" when it parses.
std::string parse_error(const json& j) {
  try {
    parse_model_config(j, "test-config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigV4, RealFlashConfigParsesToSpecValues) {
  const ModelConfig c = load_model_config(kConfigs + "deepseek-v4-flash.json");
  EXPECT_EQ(c.arch, Arch::DeepseekV4);
  EXPECT_STREQ(arch_name(c.arch), "deepseek_v4");
  EXPECT_EQ(c.model_type, "deepseek_v4");
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_hidden_layers, 43);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.num_attention_heads, 64);
  EXPECT_EQ(c.num_key_value_heads, 1);
  EXPECT_EQ(c.head_dim, 512);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.q_lora_rank, 1024);
  EXPECT_EQ(c.o_groups, 8);
  EXPECT_EQ(c.o_lora_rank, 1024);
  EXPECT_EQ(c.sliding_window, 128);
  EXPECT_EQ(c.compress_rope_theta, 160000.0);
  EXPECT_EQ(c.rope_theta, 10000.0);
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->type, "yarn");
  EXPECT_EQ(c.rope_scaling->factor, 16.0);
  EXPECT_EQ(c.rope_scaling->original_max_position_embeddings, 65536);
  EXPECT_EQ(c.rope_scaling->beta_fast, 32.0);
  EXPECT_EQ(c.rope_scaling->beta_slow, 1.0);
  EXPECT_EQ(c.max_position_embeddings, 1048576);
  EXPECT_EQ(c.index_n_heads, 64);
  EXPECT_EQ(c.index_head_dim, 128);
  EXPECT_EQ(c.index_topk, 512);
  EXPECT_EQ(c.n_routed_experts, 256);
  EXPECT_EQ(c.num_experts_per_tok, 6);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.moe_intermediate_size, 2048);
  EXPECT_EQ(c.num_hash_layers, 3);
  EXPECT_EQ(c.scoring_func, "sqrtsoftplus");
  EXPECT_EQ(c.topk_method, "noaux_tc");
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.routed_scaling_factor, 1.5);
  EXPECT_EQ(c.swiglu_limit, 10.0);
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_EQ(c.hc_eps, 1e-6);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_EQ(c.eos_token_id, 1);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.expert_dtype, "fp4");
  EXPECT_EQ(c.quantization.quant_method, "fp8");
  EXPECT_EQ(c.quantization.fmt, "e4m3");
  EXPECT_EQ(c.quantization.scale_fmt, "ue8m0");
  EXPECT_EQ(c.quantization.activation_scheme, "dynamic");
  EXPECT_EQ(c.quantization.weight_block_size, (std::vector<int64_t>{128, 128}));
}

TEST(ConfigV4, LayerScheduleMatchesSpec) {
  const ModelConfig c = load_model_config(kConfigs + "deepseek-v4-flash.json");
  ASSERT_EQ(c.compress_ratios.size(), 44u);
  EXPECT_EQ(c.attn_type(0), AttnType::SWA);
  EXPECT_EQ(c.attn_type(1), AttnType::SWA);
  EXPECT_EQ(c.attn_type(2), AttnType::CSA);
  EXPECT_EQ(c.attn_type(3), AttnType::HCA);
  EXPECT_EQ(c.attn_type(41), AttnType::HCA);
  EXPECT_EQ(c.attn_type(42), AttnType::CSA);
  EXPECT_EQ(c.attn_type(43), AttnType::SWA);  // the MTP layer
  int csa = 0, hca = 0;
  for (int64_t l = 0; l < 43; ++l) {
    csa += c.attn_type(l) == AttnType::CSA;
    hca += c.attn_type(l) == AttnType::HCA;
    EXPECT_EQ(c.compress_ratio(l), l < 2 ? 0 : (l % 2 == 0 ? 4 : 128)) << l;
  }
  EXPECT_EQ(csa, 21);
  EXPECT_EQ(hca, 20);
  for (int64_t l = 0; l < 3; ++l) EXPECT_TRUE(c.is_hash_layer(l)) << l;
  EXPECT_FALSE(c.is_hash_layer(3));
  EXPECT_FALSE(c.is_dense_layer(0));  // V4 has no dense FFN layers
  for (int64_t bad : {-1, 44, 1000}) {
    try {
      c.attn_type(bad);
      ADD_FAILURE() << "layer " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
    }
  }
}

TEST(ConfigV4, TruncatedCompressRatiosArePaddedForMtp) {
  json j = read_json("deepseek-v4-flash.json");
  auto& cr = j["compress_ratios"];
  cr.erase(cr.size() - 1);  // as HF truncates: only the 43 main layers
  const ModelConfig c = parse_model_config(j, "t.json");
  ASSERT_EQ(c.compress_ratios.size(), 44u);
  EXPECT_EQ(c.compress_ratio(43), 0);
  EXPECT_EQ(c.attn_type(42), AttnType::CSA);
}

// Issue 13 item 4: what the release (compress_ratios[layer_id]) and HF read by prefix.
TEST(ConfigV4, LongerCompressRatiosAreReadByPrefixWithAWarning) {
  json j = read_json("deepseek-v4-flash.json");
  j["num_hidden_layers"] = 4;  // a truncated-depth model that kept the release's list
  j["num_nextn_predict_layers"] = 0;
  const ModelConfig c = parse_model_config(j, "t.json");
  ASSERT_EQ(c.compress_ratios, (std::vector<int64_t>{0, 0, 4, 128}));
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_NE(c.warnings[0].find("compress_ratios has 44 entries"), std::string::npos) << c.warnings[0];
  EXPECT_NE(c.warnings[0].find("using the first 4"), std::string::npos) << c.warnings[0];
  EXPECT_TRUE(parse_model_config(read_json("deepseek-v4-flash.json"), "t.json").warnings.empty());
}

TEST(ConfigV4, IndexerWithoutANopePartIsAccepted) {
  json j = read_json("deepseek-v4-flash.json");
  j["index_head_dim"] = 64;  // == qk_rope_head_dim
  EXPECT_EQ(parse_model_config(j, "t.json").index_head_dim, 64);
}

TEST(ConfigV4, OtherRatiosAreHcaStyle) {
  // Tiny test models use a small HCA ratio so that short sequences close windows.
  json j = read_json("deepseek-v4-flash.json");
  j["compress_ratios"][3] = 16;
  j["compress_ratios"][5] = 2;
  const ModelConfig c = parse_model_config(j, "t.json");
  EXPECT_EQ(c.attn_type(3), AttnType::HCA);
  EXPECT_EQ(c.compress_ratio(3), 16);
  EXPECT_EQ(c.attn_type(5), AttnType::HCA);
  EXPECT_EQ(c.compress_ratio(5), 2);
  EXPECT_EQ(c.attn_type(4), AttnType::CSA);
}

TEST(ConfigV4, DefaultsForOptionalFields) {
  json j = read_json("deepseek-v4-flash.json");
  for (const char* k : {"hc_eps", "norm_topk_prob", "topk_method", "expert_dtype", "bos_token_id",
                        "eos_token_id", "tie_word_embeddings", "rms_norm_eps", "quantization_config"})
    j.erase(k);
  j["rope_scaling"] = nullptr;  // HF writes null for "no scaling"
  const ModelConfig c = parse_model_config(j, "t.json");
  EXPECT_EQ(c.hc_eps, 1e-6);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.topk_method, "noaux_tc");
  EXPECT_EQ(c.expert_dtype, "");
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_EQ(c.eos_token_id, 1);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_FALSE(c.rope_scaling.has_value());
  EXPECT_EQ(c.quantization.quant_method, "");
  EXPECT_TRUE(c.quantization.weight_block_size.empty());
}

TEST(ConfigV3, RealV3ConfigParsesToSpecValues) {
  const ModelConfig c = load_model_config(kConfigs + "deepseek-v3.json");
  EXPECT_EQ(c.arch, Arch::DeepseekV3);
  EXPECT_STREQ(arch_name(c.arch), "deepseek_v3");
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.num_hidden_layers, 61);
  EXPECT_EQ(c.num_attention_heads, 128);
  EXPECT_EQ(c.num_key_value_heads, 128);
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.intermediate_size, 18432);
  EXPECT_EQ(c.moe_intermediate_size, 2048);
  EXPECT_EQ(c.n_routed_experts, 256);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_EQ(c.n_group, 8);
  EXPECT_EQ(c.topk_group, 4);
  EXPECT_EQ(c.first_k_dense_replace, 3);
  EXPECT_EQ(c.moe_layer_freq, 1);
  EXPECT_EQ(c.scoring_func, "sigmoid");
  EXPECT_EQ(c.topk_method, "noaux_tc");
  EXPECT_EQ(c.routed_scaling_factor, 2.5);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.qk_nope_head_dim, 128);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.v_head_dim, 128);
  EXPECT_EQ(c.rope_theta, 10000.0);
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->factor, 40.0);
  EXPECT_EQ(c.rope_scaling->original_max_position_embeddings, 4096);
  EXPECT_EQ(c.rope_scaling->beta_fast, 32.0);
  EXPECT_EQ(c.rope_scaling->beta_slow, 1.0);
  EXPECT_EQ(c.rope_scaling->mscale, 1.0);
  EXPECT_EQ(c.rope_scaling->mscale_all_dim, 1.0);
  EXPECT_EQ(c.max_position_embeddings, 163840);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.quantization.quant_method, "fp8");
  EXPECT_EQ(c.quantization.scale_fmt, "");  // V3: fp32 activation scales
  EXPECT_TRUE(c.is_dense_layer(2));
  EXPECT_FALSE(c.is_dense_layer(3));
  EXPECT_EQ(c.compress_ratio(10), 0);
  EXPECT_EQ(c.compress_ratio(61), 0);  // MTP layer
  EXPECT_THROW(c.compress_ratio(62), Error);
  EXPECT_THROW(c.attn_type(0), Error);  // MLA has no SWA/CSA/HCA
}

TEST(ConfigV3, V31ConfigHasUe8m0ScaleFormat) {
  const ModelConfig c = load_model_config(kConfigs + "deepseek-v3.1.json");
  EXPECT_EQ(c.arch, Arch::DeepseekV3);
  EXPECT_EQ(c.quantization.scale_fmt, "ue8m0");
}

TEST(ConfigV3, AcceptsRopeTypeSpelling) {
  json j = read_json("deepseek-v3.json");
  j["rope_scaling"].erase("type");
  j["rope_scaling"]["rope_type"] = "yarn";
  j["rope_scaling"].erase("mscale_all_dim");
  j.erase("num_key_value_heads");
  const ModelConfig c = parse_model_config(j, "t.json");
  EXPECT_EQ(c.rope_scaling->type, "yarn");
  EXPECT_EQ(c.rope_scaling->mscale_all_dim, 0.0);
  EXPECT_EQ(c.num_key_value_heads, 128);  // HF default: one KV head per query head
}

TEST(ConfigLoad, AcceptsDirectoryAndReportsBadFiles) {
  const auto dir = std::filesystem::temp_directory_path() / ("plumb-config-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kConfigs + "deepseek-v4-flash.json", dir / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(load_model_config(dir.string()).hidden_size, 4096);

  const auto load_error = [](const std::string& path) -> std::string {
    try {
      load_model_config(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "accepted";
  };
  std::ofstream(dir / "broken.json") << "{\"model_type\": ";
  EXPECT_NE(load_error((dir / "broken.json").string()).find("broken.json: invalid JSON"), std::string::npos);
  EXPECT_NE(load_error((dir / "absent").string()).find("absent"), std::string::npos);
  // A number beyond double (1e999) names the field, not just nlohmann's position; a repeated key
  // is refused rather than silently taking the last.
  std::ofstream(dir / "eps.json") << "{\"model_type\": \"deepseek_v4\", \"rms_norm_eps\": 1e999}";
  EXPECT_NE(load_error((dir / "eps.json").string()).find("eps.json: invalid JSON: field 'rms_norm_eps'"),
            std::string::npos)
      << load_error((dir / "eps.json").string());
  std::ofstream(dir / "dup.json") << "{\"model_type\": \"deepseek_v4\", \"model_type\": \"deepseek_v3\"}";
  EXPECT_NE(load_error((dir / "dup.json").string()).find("duplicate key 'model_type'"), std::string::npos);
  // A directory named as the file, a FIFO or a device is refused, never read (or waited on).
  std::filesystem::create_directories(dir / "sub" / "config.json");
  ASSERT_EQ(::mkfifo((dir / "fifo.json").c_str(), 0600), 0);
  EXPECT_NE(load_error((dir / "sub").string()).find("the config file is a directory"), std::string::npos);
  EXPECT_NE(load_error((dir / "fifo.json").string()).find("the config file is a FIFO"), std::string::npos);
  EXPECT_NE(load_error("/dev/zero").find("/dev/zero: the config file is a character device"), std::string::npos);
  std::filesystem::remove_all(dir);
}

struct BadCase {
  const char* base;  // file under tests/data/configs
  std::function<void(json&)> mutate;
  std::vector<std::string> expect;  // substrings of the error message
};

TEST(ConfigValidation, EachErrorNamesFileAndField) {
  const char* v4 = "deepseek-v4-flash.json";
  const char* v3 = "deepseek-v3.json";
  const std::vector<BadCase> cases = {
      {v4, [](json& j) { j.erase("hidden_size"); }, {"'hidden_size' is missing"}},
      {v4, [](json& j) { j["hidden_size"] = "4096"; }, {"field 'hidden_size' must be an integer, got string"}},
      {v4, [](json& j) { j["hidden_size"] = 4096.5; }, {"'hidden_size' must be an integer, got float"}},
      {v4, [](json& j) { j["hidden_size"] = 0; }, {"'hidden_size' must be positive"}},
      {v4, [](json& j) { j["num_hidden_layers"] = -1; }, {"'num_hidden_layers' must be positive"}},
      {v4, [](json& j) { j["vocab_size"] = true; }, {"'vocab_size' must be an integer, got boolean"}},
      {v4, [](json& j) { j["q_lora_rank"] = nullptr; }, {"'q_lora_rank' is missing"}},
      {v4, [](json& j) { j["qk_rope_head_dim"] = 63; }, {"'qk_rope_head_dim' must be even"}},
      {v4, [](json& j) { j["head_dim"] = 64; }, {"'head_dim'", "qk_rope_head_dim"}},
      {v4, [](json& j) { j["o_groups"] = 7; }, {"'o_groups'", "num_attention_heads"}},
      {v4, [](json& j) { j["num_key_value_heads"] = 8; }, {"'num_key_value_heads' must be 1"}},
      {v4, [](json& j) { j["num_experts_per_tok"] = 300; }, {"'num_experts_per_tok'", "n_routed_experts"}},
      {v4, [](json& j) { j["num_hash_layers"] = 44; }, {"'num_hash_layers'", "num_hidden_layers"}},
      {v4, [](json& j) { j["n_shared_experts"] = -1; }, {"'n_shared_experts' must be >= 0"}},
      {v4, [](json& j) { j.erase("compress_ratios"); }, {"'compress_ratios' is missing"}},
      {v4, [](json& j) { j["compress_ratios"] = "0,4"; }, {"'compress_ratios' must be an array of integers, got string"}},
      {v4, [](json& j) { j["compress_ratios"][7] = "4"; }, {"'compress_ratios'", "entry 7 is string"}},
      {v4, [](json& j) { j["compress_ratios"].erase(0); j["compress_ratios"].erase(0); },
       {"'compress_ratios' has 42 entries", "num_hidden_layers + num_nextn_predict_layers = 44"}},
      {v4, [](json& j) { j["compress_ratios"][5] = 1; }, {"'compress_ratios' entry 5 is 1;"}},
      {v4, [](json& j) { j["compress_ratios"][6] = -4; }, {"'compress_ratios' entry 6 is -4;"}},
      {v4, [](json& j) { j["compress_rope_theta"] = 0; }, {"'compress_rope_theta' must be positive"}},
      {v4, [](json& j) { j.erase("swiglu_limit"); }, {"'swiglu_limit' is missing"}},
      {v4, [](json& j) { j["swiglu_limit"] = -1; }, {"'swiglu_limit' must be >= 0"}},
      {v4, [](json& j) { j["hc_mult"] = 0; }, {"'hc_mult' must be positive"}},
      {v4, [](json& j) { j["hc_sinkhorn_iters"] = "20"; }, {"'hc_sinkhorn_iters' must be an integer"}},
      {v4, [](json& j) { j["hc_eps"] = 0.0; }, {"'hc_eps' must be positive"}},
      {v4, [](json& j) { j["rms_norm_eps"] = "1e-6"; }, {"'rms_norm_eps' must be a number, got string"}},
      {v4, [](json& j) { j["index_topk"] = 0; }, {"'index_topk' must be positive"}},
      {v4, [](json& j) { j["index_head_dim"] = 32; }, {"'index_head_dim' (32) must be at least qk_rope_head_dim (64)"}},
      {v4, [](json& j) { j["norm_topk_prob"] = "true"; }, {"'norm_topk_prob' must be a boolean, got string"}},
      {v4, [](json& j) { j["scoring_func"] = "relu"; }, {"'scoring_func' is 'relu'", "sqrtsoftplus"}},
      {v4, [](json& j) { j.erase("scoring_func"); }, {"'scoring_func' is missing"}},
      {v4, [](json& j) { j["topk_method"] = "greedy"; }, {"'topk_method' is 'greedy'"}},
      {v4, [](json& j) { j["hidden_act"] = "gelu"; }, {"'hidden_act' is 'gelu'"}},
      {v4, [](json& j) { j["expert_dtype"] = "int4"; }, {"'expert_dtype' is 'int4'"}},
      {v4, [](json& j) { j["eos_token_id"] = 129280; }, {"'eos_token_id'", "outside the vocabulary"}},
      {v4, [](json& j) { j["eos_token_id"] = json::array({1, 2}); }, {"'eos_token_id' must be an integer, got array"}},
      {v4, [](json& j) { j["routed_scaling_factor"] = -1.5; }, {"'routed_scaling_factor' must be positive"}},
      {v4, [](json& j) { j["max_position_embeddings"] = 0; }, {"'max_position_embeddings' must be positive"}},
      {v4, [](json& j) { j["rope_scaling"] = 16; }, {"'rope_scaling' must be an object, got integer"}},
      {v4, [](json& j) { j["rope_scaling"]["factor"] = "16"; }, {"'rope_scaling.factor' must be a number"}},
      {v4, [](json& j) { j["rope_scaling"]["type"] = "linear"; }, {"'rope_scaling.type' is 'linear'", "yarn"}},
      {v4, [](json& j) { j["rope_scaling"].erase("type"); }, {"'rope_scaling.type' is missing"}},
      {v4, [](json& j) { j["rope_scaling"].erase("original_max_position_embeddings"); },
       {"'rope_scaling.original_max_position_embeddings' is missing"}},
      {v4, [](json& j) { j["rope_scaling"]["beta_slow"] = 64; }, {"'rope_scaling.beta_slow'", "beta_fast"}},
      {v4, [](json& j) { j["quantization_config"]["quant_method"] = "gptq"; },
       {"'quantization_config.quant_method' is 'gptq'"}},
      {v4, [](json& j) { j["quantization_config"]["weight_block_size"] = json::array({64, 64}); },
       {"'quantization_config.weight_block_size' is [64, 64]"}},
      {v4, [](json& j) { j["quantization_config"].erase("weight_block_size"); },
       {"'quantization_config.weight_block_size' is missing"}},
      {v4, [](json& j) { j["quantization_config"]["scale_fmt"] = "e5m2"; }, {"'quantization_config.scale_fmt'"}},
      {v4, [](json& j) { j["quantization_config"]["fmt"] = "e5m2"; }, {"'quantization_config.fmt' is 'e5m2'"}},
      {v4, [](json& j) { j["quantization_config"]["activation_scheme"] = "static"; },
       {"'quantization_config.activation_scheme' is 'static'"}},
      {v4, [](json& j) { j["model_type"] = "llama"; }, {"model_type 'llama' is not supported", "deepseek_v4, deepseek_v3"}},
      {v4, [](json& j) { j.erase("model_type"); }, {"'model_type' is missing", "deepseek_v4"}},
      {v4, [](json& j) { j["model_type"] = 4; }, {"'model_type' must be a string, got integer"}},
      {v4, [](json& j) { j = json::array(); }, {"expected a JSON object, got array"}},
      // Sizes far beyond any model are refused with the bound, before anything is sized by them
      // (issue #19: sliding_window 2^40 asked for petabytes, hc_sinkhorn_iters 2^40 hung, heads 2^62
      // overflowed the layout's shape products).
      {v4, [](json& j) { j["sliding_window"] = int64_t{1} << 40; },
       {"'sliding_window' is 1099511627776, above the limit of 1048576 (max_position_embeddings)"}},
      {v4, [](json& j) { j["index_topk"] = int64_t{1} << 40; }, {"'index_topk' is 1099511627776, above the limit of 1048576"}},
      {v4, [](json& j) { j["hc_sinkhorn_iters"] = int64_t{1} << 40; }, {"'hc_sinkhorn_iters'", "above the limit of 1000"}},
      {v4, [](json& j) { j["num_attention_heads"] = int64_t{1} << 62; }, {"'num_attention_heads'", "above the limit of 4096"}},
      {v4, [](json& j) { j["hidden_size"] = int64_t{1} << 40; }, {"'hidden_size'", "above the limit of 1048576"}},
      {v4, [](json& j) { j["vocab_size"] = int64_t{1} << 40; }, {"'vocab_size'", "above the limit of 16777216"}},
      {v4, [](json& j) { j["n_routed_experts"] = int64_t{1} << 40; }, {"'n_routed_experts'", "above the limit of 65536"}},
      {v4, [](json& j) { j["num_hidden_layers"] = 5000; }, {"'num_hidden_layers' is 5000, above the limit of 4096"}},
      {v4, [](json& j) { j["max_position_embeddings"] = int64_t{1} << 40; }, {"'max_position_embeddings'", "16777216"}},
      {v4, [](json& j) { j["hc_mult"] = 65; }, {"'hc_mult' is 65, above the limit of 64"}},
      {v4, [](json& j) { j["compress_ratios"][3] = int64_t{1} << 40; }, {"'compress_ratios' entry 3", "max_position_embeddings"}},
      {v4, [](json& j) { j["num_nextn_predict_layers"] = int64_t{1} << 40; }, {"'num_nextn_predict_layers'", "4096"}},
      {v4, [](json& j) { j["rope_scaling"]["original_max_position_embeddings"] = int64_t{1} << 40; },
       {"'rope_scaling.original_max_position_embeddings'", "above the limit"}},
      {v3, [](json& j) { j["moe_layer_freq"] = 1000; }, {"'moe_layer_freq' is 1000, above the limit of 61 (num_hidden_layers)"}},
      {v3, [](json& j) { j["num_key_value_heads"] = int64_t{1} << 40; }, {"'num_key_value_heads'", "above the limit of 4096"}},
      {v3, [](json& j) { j.erase("kv_lora_rank"); }, {"'kv_lora_rank' is missing"}},
      {v3, [](json& j) { j["v_head_dim"] = 0; }, {"'v_head_dim' must be positive"}},
      {v3, [](json& j) { j.erase("intermediate_size"); }, {"'intermediate_size' is missing"}},
      {v3, [](json& j) { j["n_group"] = 7; }, {"'n_group' (7) must divide n_routed_experts (256)"}},
      {v3, [](json& j) { j["topk_group"] = 9; }, {"'topk_group' (9) exceeds n_group (8)"}},
      {v3, [](json& j) { j["num_experts_per_tok"] = 129; }, {"'num_experts_per_tok'", "kept groups"}},
      {v3, [](json& j) { j["first_k_dense_replace"] = 62; }, {"'first_k_dense_replace'", "num_hidden_layers"}},
      {v3, [](json& j) { j["first_k_dense_replace"] = -1; }, {"'first_k_dense_replace' must be >= 0"}},
      {v3, [](json& j) { j["moe_layer_freq"] = 0; }, {"'moe_layer_freq' must be positive"}},
      {v3, [](json& j) { j["num_key_value_heads"] = 0; }, {"'num_key_value_heads' must be positive"}},
      {v3, [](json& j) { j["rope_scaling"]["mscale"] = "1"; }, {"'rope_scaling.mscale' must be a number"}},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    json j = read_json(cases[i].base);
    cases[i].mutate(j);
    const std::string msg = parse_error(j);
    SCOPED_TRACE(testing::Message() << "case " << i << ": " << msg);
    ASSERT_FALSE(msg.empty()) << "accepted";
    EXPECT_EQ(msg.rfind("test-config.json: ", 0), 0u);
    for (const auto& want : cases[i].expect) EXPECT_NE(msg.find(want), std::string::npos) << want;
  }
}

}  // namespace
}  // namespace plumb

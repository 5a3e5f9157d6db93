#include "plumb/format/config.h"

#include <fmt/ranges.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "plumb/format/json_util.h"
#include "plumb/util/error.h"
#include "plumb/util/read_file.h"

// Which fields are required: every field that sets a tensor shape, a layer schedule or selects an
// algorithm (scoring function, SwiGLU clamp, mHC sizes, RoPE bases). Guessing those would load
// the weights fine and then compute garbage. Fields whose absence has one established meaning in
// HF's config classes get that default: rms_norm_eps / hc_eps 1e-6, norm_topk_prob true,
// topk_method noaux_tc, rope_theta 10000, num_nextn_predict_layers 0 (no MTP), bos/eos 0/1,
// tie_word_embeddings false, moe_layer_freq 1, num_key_value_heads = num_attention_heads (V3
// only), and no rope_scaling / quantization_config (plain RoPE / unquantized checkpoint). A JSON
// null counts as absent, as HF writes `"rope_scaling": null`.

namespace plumb {
namespace {

using nlohmann::json;

// Upper bounds far above any real model (V4-Flash: vocab 129280, hidden 4096, 43 layers, 64 heads,
// 256 experts, 1M positions) that keep every shape product of the layouts below 2^63 and every
// allocation sized by the config finite: a file saying sliding_window = 2^40 is refused here
// instead of asking for petabytes later.
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxWidth = int64_t{1} << 20;    // hidden sizes, LoRA ranks, FFN sizes, head dims
constexpr int64_t kMaxCount = int64_t{1} << 12;    // layers, heads, groups, shared experts
constexpr int64_t kMaxExperts = int64_t{1} << 16;  // routed experts
constexpr int64_t kMaxContext = int64_t{1} << 24;  // max_position_embeddings
constexpr int64_t kMaxHcMult = 64;
constexpr int64_t kMaxSinkhornIters = 1000;
constexpr uint64_t kMaxConfigBytes = 16u << 20;  // a config.json is a few KB

std::string type_desc(const json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number_float()) return fmt::format("float {}", v.get<double>());
  return v.type_name();  // "string", "boolean", "array", "object", "null"
}

// Typed access to one JSON object with errors that name the file and the (dotted) field.
class Fields {
 public:
  Fields(const json& obj, const std::string& source, std::string prefix = "")
      : obj_(obj), source_(source), prefix_(std::move(prefix)) {}

  [[noreturn]] void bad(const std::string& name, const std::string& what) const {
    fail("{}: field '{}{}' {}", source_, prefix_, name, what);
  }

  const json* find(const std::string& name) const {
    auto it = obj_.find(name);
    return (it == obj_.end() || it->is_null()) ? nullptr : &*it;
  }
  const json& need(const std::string& name) const {
    if (const json* v = find(name)) return *v;
    bad(name, "is missing (required)");
  }

  int64_t integer(const std::string& name) const { return as_int(name, need(name)); }
  int64_t integer(const std::string& name, int64_t dflt) const {
    const json* v = find(name);
    return v ? as_int(name, *v) : dflt;
  }
  double number(const std::string& name) const { return as_number(name, need(name)); }
  double number(const std::string& name, double dflt) const {
    const json* v = find(name);
    return v ? as_number(name, *v) : dflt;
  }
  bool boolean(const std::string& name, bool dflt) const {
    const json* v = find(name);
    if (!v) return dflt;
    if (!v->is_boolean()) bad(name, "must be a boolean, got " + type_desc(*v));
    return v->get<bool>();
  }
  std::string string(const std::string& name) const { return as_string(name, need(name)); }
  std::string string(const std::string& name, const std::string& dflt) const {
    const json* v = find(name);
    return v ? as_string(name, *v) : dflt;
  }
  std::vector<int64_t> int_list(const std::string& name) const {
    const json& v = need(name);
    if (!v.is_array()) bad(name, "must be an array of integers, got " + type_desc(v));
    std::vector<int64_t> out;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_number_integer())
        bad(name, fmt::format("must be an array of integers, but entry {} is {}", i, type_desc(v[i])));
      out.push_back(as_int(name, v[i]));
    }
    return out;
  }

  // Range checks, so that each message names the field it is about.
  // `limit_of` names the field the bound comes from, when it is one ("max_position_embeddings").
  int64_t positive(const std::string& name, int64_t max, const char* limit_of = nullptr) const {
    return check_range(name, integer(name), 1, max, limit_of);
  }
  int64_t positive(const std::string& name, int64_t dflt, int64_t max, const char* limit_of) const {
    return check_range(name, integer(name, dflt), 1, max, limit_of);
  }
  int64_t non_negative(const std::string& name, int64_t max) const { return check_range(name, integer(name), 0, max); }
  int64_t non_negative(const std::string& name, int64_t dflt, int64_t max) const {
    return check_range(name, integer(name, dflt), 0, max);
  }
  double positive_number(const std::string& name) const { return check_positive(name, number(name)); }
  double positive_number(const std::string& name, double dflt) const {
    return check_positive(name, number(name, dflt));
  }
  std::string one_of(const std::string& name, const std::string& value,
                     std::initializer_list<const char*> allowed) const {
    for (const char* a : allowed)
      if (value == a) return value;
    bad(name, fmt::format("is '{}', but plumb supports only {}", value, fmt::join(allowed, ", ")));
  }

 private:
  int64_t as_int(const std::string& name, const json& v) const {
    if (!v.is_number_integer()) bad(name, "must be an integer, got " + type_desc(v));
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      bad(name, "is too large");
    return v.get<int64_t>();
  }
  double as_number(const std::string& name, const json& v) const {
    if (!v.is_number()) bad(name, "must be a number, got " + type_desc(v));
    return v.get<double>();
  }
  std::string as_string(const std::string& name, const json& v) const {
    if (!v.is_string()) bad(name, "must be a string, got " + type_desc(v));
    return v.get<std::string>();
  }
  int64_t check_range(const std::string& name, int64_t v, int64_t min, int64_t max,
                      const char* limit_of = nullptr) const {
    if (v < min) bad(name, fmt::format("must be {}, got {}", min == 0 ? ">= 0" : "positive", v));
    if (v > max)
      bad(name, fmt::format("is {}, above the limit of {}{}", v, max, limit_of ? fmt::format(" ({})", limit_of) : ""));
    return v;
  }
  double check_positive(const std::string& name, double v) const {
    if (!(v > 0)) bad(name, fmt::format("must be positive, got {}", v));
    return v;
  }

  const json& obj_;
  const std::string& source_;
  std::string prefix_;
};

const json* sub_object(const Fields& f, const std::string& name) {
  const json* v = f.find(name);
  if (v && !v->is_object()) f.bad(name, "must be an object, got " + type_desc(*v));
  return v;
}

std::optional<RopeScaling> parse_rope_scaling(const Fields& top, const std::string& source) {
  const json* obj = sub_object(top, "rope_scaling");
  if (!obj) return std::nullopt;
  const Fields f(*obj, source, "rope_scaling.");
  RopeScaling r;
  // V3's config.json spells it `type`; newer HF code writes `rope_type`.
  const char* key = (f.find("type") || !f.find("rope_type")) ? "type" : "rope_type";
  r.type = f.one_of(key, f.string(key), {"yarn"});
  r.factor = f.positive_number("factor");
  r.original_max_position_embeddings = f.positive("original_max_position_embeddings", kMaxContext);
  r.beta_fast = f.positive_number("beta_fast", r.beta_fast);
  r.beta_slow = f.positive_number("beta_slow", r.beta_slow);
  if (r.beta_slow >= r.beta_fast)
    f.bad("beta_slow", fmt::format("({}) must be below beta_fast ({})", r.beta_slow, r.beta_fast));
  r.mscale = f.number("mscale", r.mscale);
  r.mscale_all_dim = f.number("mscale_all_dim", r.mscale_all_dim);
  return r;
}

QuantizationConfig parse_quantization(const Fields& top, const std::string& source) {
  QuantizationConfig q;
  const json* obj = sub_object(top, "quantization_config");
  if (!obj) return q;
  const Fields f(*obj, source, "quantization_config.");
  // Only DeepSeek's own block FP8 is understood; another quantizer (GPTQ, AWQ, per-tensor FP8...)
  // stores different tensors, and loading it as block FP8 would be silently wrong.
  q.quant_method = f.one_of("quant_method", f.string("quant_method"), {"fp8"});
  q.fmt = f.string("fmt", "");
  if (!q.fmt.empty()) f.one_of("fmt", q.fmt, {"e4m3"});
  q.scale_fmt = f.string("scale_fmt", "");
  if (!q.scale_fmt.empty()) f.one_of("scale_fmt", q.scale_fmt, {"ue8m0"});
  q.activation_scheme = f.string("activation_scheme", "");
  if (!q.activation_scheme.empty()) f.one_of("activation_scheme", q.activation_scheme, {"dynamic"});
  q.weight_block_size = f.int_list("weight_block_size");
  if (q.weight_block_size != std::vector<int64_t>{128, 128})
    f.bad("weight_block_size",
          fmt::format("is [{}], but plumb dequantizes only [128, 128] blocks", fmt::join(q.weight_block_size, ", ")));
  return q;
}

void parse_common(const Fields& f, const std::string& source, ModelConfig& c) {
  c.vocab_size = f.positive("vocab_size", kMaxVocab);
  c.hidden_size = f.positive("hidden_size", kMaxWidth);
  c.num_hidden_layers = f.positive("num_hidden_layers", kMaxCount);
  c.num_attention_heads = f.positive("num_attention_heads", kMaxCount);
  c.q_lora_rank = f.positive("q_lora_rank", kMaxWidth);
  c.qk_rope_head_dim = f.positive("qk_rope_head_dim", kMaxWidth);
  // RoPE rotates (x[2i], x[2i+1]) pairs.
  if (c.qk_rope_head_dim % 2) f.bad("qk_rope_head_dim", fmt::format("must be even, got {}", c.qk_rope_head_dim));
  c.n_routed_experts = f.positive("n_routed_experts", kMaxExperts);
  c.num_experts_per_tok = f.positive("num_experts_per_tok", kMaxExperts);
  if (c.num_experts_per_tok > c.n_routed_experts)
    f.bad("num_experts_per_tok", fmt::format("({}) exceeds n_routed_experts ({})", c.num_experts_per_tok,
                                             c.n_routed_experts));
  c.n_shared_experts = f.non_negative("n_shared_experts", kMaxCount);
  c.moe_intermediate_size = f.positive("moe_intermediate_size", kMaxWidth);
  c.num_nextn_predict_layers = f.non_negative("num_nextn_predict_layers", 0, kMaxCount);
  // The routers of the reference code implement these three scoring functions.
  c.scoring_func = f.one_of("scoring_func", f.string("scoring_func"), {"sqrtsoftplus", "sigmoid", "softmax"});
  c.topk_method = f.one_of("topk_method", f.string("topk_method", "noaux_tc"), {"noaux_tc"});
  c.norm_topk_prob = f.boolean("norm_topk_prob", true);
  c.routed_scaling_factor = f.positive_number("routed_scaling_factor");
  c.rms_norm_eps = f.positive_number("rms_norm_eps", 1e-6);
  c.rope_theta = f.positive_number("rope_theta", 10000.0);
  c.rope_scaling = parse_rope_scaling(f, source);
  c.max_position_embeddings = f.positive("max_position_embeddings", kMaxContext);
  auto token_id = [&](const char* name, int64_t dflt) {
    const int64_t id = f.non_negative(name, dflt, kMaxVocab);
    if (id >= c.vocab_size) f.bad(name, fmt::format("({}) is outside the vocabulary ({})", id, c.vocab_size));
    return id;
  };
  c.bos_token_id = token_id("bos_token_id", 0);
  c.eos_token_id = token_id("eos_token_id", 1);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.quantization = parse_quantization(f, source);
  // The expert FFNs are SwiGLU; a checkpoint declaring another activation needs other math.
  f.one_of("hidden_act", f.string("hidden_act", "silu"), {"silu"});
}

void parse_v4(const Fields& f, ModelConfig& c) {
  // MQA with K = V: the forward is written for exactly one shared KV head (MODEL-SPEC 1).
  c.num_key_value_heads = f.positive("num_key_value_heads", kMaxCount);
  if (c.num_key_value_heads != 1)
    f.bad("num_key_value_heads", fmt::format("must be 1 for deepseek_v4 (one shared KV head), got {}",
                                             c.num_key_value_heads));
  c.head_dim = f.positive("head_dim", kMaxWidth);
  if (c.head_dim <= c.qk_rope_head_dim)
    f.bad("head_dim", fmt::format("({}) must exceed qk_rope_head_dim ({})", c.head_dim, c.qk_rope_head_dim));
  c.o_groups = f.positive("o_groups", kMaxCount);
  if (c.num_attention_heads % c.o_groups)
    f.bad("o_groups", fmt::format("({}) must divide num_attention_heads ({})", c.o_groups, c.num_attention_heads));
  c.o_lora_rank = f.positive("o_lora_rank", kMaxWidth);
  c.sliding_window = f.positive("sliding_window", c.max_position_embeddings, "max_position_embeddings");
  c.compress_rope_theta = f.positive_number("compress_rope_theta");
  c.index_n_heads = f.positive("index_n_heads", kMaxCount);
  c.index_head_dim = f.positive("index_head_dim", kMaxWidth);
  // Equal is an indexer without a nope part: the release and HF run it (RoPE covers the head).
  if (c.index_head_dim < c.qk_rope_head_dim)
    f.bad("index_head_dim",
          fmt::format("({}) must be at least qk_rope_head_dim ({})", c.index_head_dim, c.qk_rope_head_dim));
  c.index_topk = f.positive("index_topk", c.max_position_embeddings, "max_position_embeddings");
  c.num_hash_layers = f.non_negative("num_hash_layers", kMaxCount);
  if (c.num_hash_layers > c.num_hidden_layers)
    f.bad("num_hash_layers",
          fmt::format("({}) exceeds num_hidden_layers ({})", c.num_hash_layers, c.num_hidden_layers));
  c.swiglu_limit = f.number("swiglu_limit");
  if (c.swiglu_limit < 0) f.bad("swiglu_limit", fmt::format("must be >= 0 (0 = no clamp), got {}", c.swiglu_limit));
  c.hc_mult = f.positive("hc_mult", kMaxHcMult);
  c.hc_sinkhorn_iters = f.positive("hc_sinkhorn_iters", kMaxSinkhornIters);
  c.hc_eps = f.positive_number("hc_eps", 1e-6);
  c.expert_dtype = f.string("expert_dtype", "");
  if (!c.expert_dtype.empty()) f.one_of("expert_dtype", c.expert_dtype, {"fp4", "fp8"});

  // One entry per layer, MTP layers included. HF-truncated configs carry only the main layers;
  // OFF builds every MTP layer as ratio 0 (sliding window only), so those entries are padded
  // with 0. A longer list (a truncated-depth config that kept the release's trailing entries) is
  // read by prefix, as the release (compress_ratios[layer_id]) and HF do. Anything else is an
  // inconsistent file.
  c.compress_ratios = f.int_list("compress_ratios");
  const auto n = static_cast<int64_t>(c.compress_ratios.size());
  const int64_t total = c.num_hidden_layers + c.num_nextn_predict_layers;
  if (n == c.num_hidden_layers) {
    c.compress_ratios.resize(static_cast<std::size_t>(total), 0);
  } else if (n > total) {
    c.warnings.push_back(fmt::format("compress_ratios has {} entries, num_hidden_layers + num_nextn_predict_layers "
                                     "= {}: using the first {}",
                                     n, total, total));
    c.compress_ratios.resize(static_cast<std::size_t>(total));
  } else if (n != total) {
    f.bad("compress_ratios",
          fmt::format("has {} entries, expected num_hidden_layers + num_nextn_predict_layers = {} "
                      "(or num_hidden_layers = {})",
                      n, total, c.num_hidden_layers));
  }
  for (std::size_t i = 0; i < c.compress_ratios.size(); ++i) {
    const int64_t r = c.compress_ratios[i];
    // 0 = sliding window only; 4 = CSA (overlapping windows + indexer), the one ratio with that
    // meaning in the reference code; any other ratio >= 2 is HCA-style (disjoint windows, no
    // indexer), 128 in V4-Flash, smaller in tiny test models so short sequences exercise it.
    if (r != 0 && r < 2)
      f.bad("compress_ratios", fmt::format("entry {} is {}; a ratio must be 0 (sliding window only) or >= 2 "
                                           "(4 = CSA, any other = HCA-style)", i, r));
    if (r > c.max_position_embeddings)
      f.bad("compress_ratios", fmt::format("entry {} is {}, above max_position_embeddings ({})", i, r,
                                           c.max_position_embeddings));
  }
}

void parse_v3(const Fields& f, ModelConfig& c) {
  c.num_key_value_heads = f.positive("num_key_value_heads", c.num_attention_heads, kMaxCount, nullptr);
  c.kv_lora_rank = f.positive("kv_lora_rank", kMaxWidth);
  c.qk_nope_head_dim = f.positive("qk_nope_head_dim", kMaxWidth);
  c.v_head_dim = f.positive("v_head_dim", kMaxWidth);
  c.intermediate_size = f.positive("intermediate_size", kMaxWidth);
  c.first_k_dense_replace = f.non_negative("first_k_dense_replace", kMaxCount);
  if (c.first_k_dense_replace > c.num_hidden_layers)
    f.bad("first_k_dense_replace", fmt::format("({}) exceeds num_hidden_layers ({})", c.first_k_dense_replace,
                                               c.num_hidden_layers));
  c.n_group = f.positive("n_group", kMaxExperts);
  if (c.n_routed_experts % c.n_group)
    f.bad("n_group", fmt::format("({}) must divide n_routed_experts ({})", c.n_group, c.n_routed_experts));
  c.topk_group = f.positive("topk_group", kMaxExperts);
  if (c.topk_group > c.n_group)
    f.bad("topk_group", fmt::format("({}) exceeds n_group ({})", c.topk_group, c.n_group));
  // Group-limited routing picks the top-k experts among the kept groups only.
  if (c.num_experts_per_tok > c.topk_group * (c.n_routed_experts / c.n_group))
    f.bad("num_experts_per_tok", fmt::format("({}) exceeds the {} experts in the topk_group = {} kept groups",
                                             c.num_experts_per_tok, c.topk_group * (c.n_routed_experts / c.n_group),
                                             c.topk_group));
  c.moe_layer_freq = f.positive("moe_layer_freq", 1, c.num_hidden_layers, "num_hidden_layers");
}

}  // namespace

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::DeepseekV4: return "deepseek_v4";
    case Arch::DeepseekV3: return "deepseek_v3";
  }
  return "unknown";
}

int64_t ModelConfig::compress_ratio(int64_t layer) const {
  const int64_t total = num_hidden_layers + num_nextn_predict_layers;
  if (layer < 0 || layer >= total)
    fail("layer {} is out of range: the model has {} layers ({} main + {} MTP)", layer, total,
         num_hidden_layers, num_nextn_predict_layers);
  if (arch != Arch::DeepseekV4) return 0;  // V3's MLA never compresses the sequence
  return compress_ratios.at(static_cast<std::size_t>(layer));
}

AttnType ModelConfig::attn_type(int64_t layer) const {
  if (arch != Arch::DeepseekV4)
    fail("attn_type: {} has no sliding-window or compressed attention layers", arch_name(arch));
  const int64_t ratio = compress_ratio(layer);
  if (ratio == 0) return AttnType::SWA;
  if (ratio == 4) return AttnType::CSA;
  if (ratio >= 2) return AttnType::HCA;  // at whatever ratio
  fail("layer {}: compress ratio {} has no attention type", layer, ratio);
}

ModelConfig parse_model_config(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) fail("{}: expected a JSON object, got {}", source, type_desc(j));
  const Fields f(j, source);
  ModelConfig c;
  if (!f.find("model_type")) f.bad("model_type", "is missing (supported: deepseek_v4, deepseek_v3)");
  c.model_type = f.string("model_type");
  if (c.model_type == "deepseek_v4") c.arch = Arch::DeepseekV4;
  else if (c.model_type == "deepseek_v3") c.arch = Arch::DeepseekV3;
  else fail("{}: model_type '{}' is not supported (supported: deepseek_v4, deepseek_v3)", source, c.model_type);

  parse_common(f, source, c);
  if (c.arch == Arch::DeepseekV4) parse_v4(f, c);
  else parse_v3(f, c);
  return c;
}

ModelConfig load_model_config(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path file = fs::is_directory(path, ec) ? fs::path(path) / "config.json" : fs::path(path);
  const std::string text = read_regular_file(file.string(), kMaxConfigBytes, "config file");
  ModelConfig c = parse_model_config(parse_json_strict(text, file.string()), file.string());
  for (const std::string& w : c.warnings) fmt::print(stderr, "plumb: warning: {}: {}\n", file.string(), w);
  return c;
}

}  // namespace plumb

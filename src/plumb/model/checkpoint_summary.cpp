#include "plumb/model/checkpoint_summary.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "plumb/model/weights_v3.h"
#include "plumb/model/weights_v4.h"
#include "plumb/util/progress.h"

namespace plumb {

KvEstimate estimate_kv(const ModelConfig& c) {
  KvEstimate kv;
  if (c.arch == Arch::DeepseekV3) {  // MLA caches the latent + rope key per token and layer
    kv.bytes_per_token = static_cast<uint64_t>(c.num_hidden_layers * (c.kv_lora_rank + c.qk_rope_head_dim) * 2);
    return kv;
  }
  const uint64_t entry = static_cast<uint64_t>(c.head_dim) * 2;  // one bf16 KV vector
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const int64_t m = c.compress_ratio(i);
    kv.fixed_per_sequence += static_cast<uint64_t>(c.sliding_window) * entry;
    if (m == 0) continue;
    const uint64_t chans = static_cast<uint64_t>(m == 4 ? 2 : 1);  // CSA keeps 2 overlapping series
    kv.bytes_per_token += entry / m;
    kv.fixed_per_sequence += 2 * chans * m * chans * c.head_dim * 4;  // fp32 kv + score state
    if (m == 4) {
      kv.bytes_per_token += static_cast<uint64_t>(c.index_head_dim) * 2 / m;
      kv.fixed_per_sequence += 2 * chans * m * chans * c.index_head_dim * 4;
    }
  }
  return kv;
}

CheckpointSummary summarize_checkpoint(const Checkpoint& ckpt, const ModelConfig& cfg) {
  CheckpointSummary s;
  s.path = ckpt.root();
  s.config = cfg;
  s.shard_count = static_cast<int64_t>(ckpt.shards().size());
  for (const TensorInfo* t : ckpt.tensors()) {
    ++s.tensor_count;
    s.total_bytes += t->nbytes;
    auto& [n, b] = s.by_dtype[std::string(dtype_name(t->dtype))];
    ++n;
    b += t->nbytes;
    if (t->name.rfind("mtp.", 0) == 0 || t->name.rfind("model.layers." + std::to_string(cfg.num_hidden_layers) + ".", 0) == 0)
      s.mtp_bytes += t->nbytes;
  }
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    if (cfg.arch == Arch::DeepseekV4) {
      switch (cfg.attn_type(i)) {
        case AttnType::SWA: s.swa_layers.push_back(i); break;
        case AttnType::CSA: s.csa_layers.push_back(i); break;
        case AttnType::HCA: s.hca_layers.push_back(i); break;
        case AttnType::MLA: break;  // attn_type() gives it only to V3, which has no compress ratios
      }
      if (cfg.is_hash_layer(i)) s.hash_layers.push_back(i);
    }
  }
  BindReport report;
  s.expert_format = weight_format_name(cfg.arch == Arch::DeepseekV4 ? v4::bind_weights(ckpt, cfg, &report).expert_format
                                                                    : v3::bind_weights(ckpt, cfg, &report).expert_format);
  s.binding = report;
  s.kv = estimate_kv(cfg);
  return s;
}

namespace {

// "2, 4, 6, ..., 42 (21)" for long arithmetic runs, the full list otherwise.
std::string layer_list(const std::vector<int64_t>& v) {
  if (v.empty()) return "none";
  if (v.size() > 6) return fmt::format("{}, {}, ..., {} ({})", v[0], v[1], v.back(), v.size());
  return fmt::format("{} ({})", fmt::join(v, ", "), v.size());
}

}  // namespace

std::string summary_text(const CheckpointSummary& s) {
  const ModelConfig& c = s.config;
  std::string out;
  out += fmt::format("checkpoint    {}\n", s.path);
  out += fmt::format("architecture  {} (model_type {})\n", arch_name(c.arch), c.model_type);
  out += fmt::format("dims          hidden {}, layers {} (+{} MTP), heads {}, vocab {}, experts {} (top-{}) + {} shared\n",
                     c.hidden_size, c.num_hidden_layers, c.num_nextn_predict_layers, c.num_attention_heads,
                     c.vocab_size, c.n_routed_experts, c.num_experts_per_tok, c.n_shared_experts);
  if (c.arch == Arch::DeepseekV4) {
    out += fmt::format("layers SWA    {}\n", layer_list(s.swa_layers));
    out += fmt::format("layers CSA    {}\n", layer_list(s.csa_layers));
    out += fmt::format("layers HCA    {}\n", layer_list(s.hca_layers));
    out += fmt::format("hash layers   {}\n", layer_list(s.hash_layers));
  } else {
    out += fmt::format("dense layers  0..{} then MoE\n", c.first_k_dense_replace - 1);
  }
  out += fmt::format("tensors       {} in {} shard(s), {}\n", s.tensor_count, s.shard_count, format_bytes(s.total_bytes));
  for (const auto& [dt, nb] : s.by_dtype)
    out += fmt::format("  {:<10}  {:>7} tensors  {:>12}\n", dt, nb.first, format_bytes(nb.second));
  if (!s.expert_format.empty()) out += fmt::format("experts       {}\n", s.expert_format);
  out += fmt::format("memory        weights {} ({} without MTP)\n", format_bytes(s.total_bytes),
                     format_bytes(s.total_bytes - s.mtp_bytes));
  out += fmt::format("KV cache      {} per 1K tokens (bf16) + {} fixed per sequence\n",
                     format_bytes(s.kv.bytes_per_token * 1024.0), format_bytes(s.kv.fixed_per_sequence));
  if (s.binding)
    out += s.binding->ok() ? "binding       ok: every tensor matches the config\n"
                           : fmt::format("binding       PROBLEMS: {}\n", s.binding->summary());
  return out;
}

nlohmann::json summary_json(const CheckpointSummary& s) {
  const ModelConfig& c = s.config;
  nlohmann::json j;
  j["path"] = s.path;
  j["architecture"] = arch_name(c.arch);
  j["model_type"] = c.model_type;
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["vocab_size"] = c.vocab_size;
  j["layers"] = {{"swa", s.swa_layers}, {"csa", s.csa_layers}, {"hca", s.hca_layers}, {"hash", s.hash_layers}};
  j["tensor_count"] = s.tensor_count;
  j["shard_count"] = s.shard_count;
  j["total_bytes"] = s.total_bytes;
  j["mtp_bytes"] = s.mtp_bytes;
  for (const auto& [dt, nb] : s.by_dtype) j["by_dtype"][dt] = {{"tensors", nb.first}, {"bytes", nb.second}};
  j["expert_format"] = s.expert_format;
  j["kv_bytes_per_1k_tokens"] = s.kv.bytes_per_token * 1024;
  j["kv_fixed_bytes_per_sequence"] = s.kv.fixed_per_sequence;
  if (s.binding) {
    j["binding"] = {{"ok", s.binding->ok()},
                    {"missing", s.binding->missing},
                    {"unexpected", s.binding->unexpected},
                    {"mismatched", s.binding->mismatched}};
  }
  return j;
}

}  // namespace plumb

#pragma once
// What `plumb inspect` reports about a checkpoint: architecture, layer schedule, tensor and byte
// counts, detected expert format, memory estimates, and the binding report.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plumb/format/config.h"
#include "plumb/format/safetensors.h"
#include "plumb/model/binder.h"

namespace plumb {

struct KvEstimate {
  uint64_t bytes_per_token = 0;     // growth of the bf16 KV cache per token, all layers
  uint64_t fixed_per_sequence = 0;  // window rings + compressor state, bf16/f32 as the reference keeps them
};

struct CheckpointSummary {
  std::string path;
  ModelConfig config;
  int64_t tensor_count = 0;
  int64_t shard_count = 0;
  uint64_t total_bytes = 0;
  uint64_t mtp_bytes = 0;
  std::map<std::string, std::pair<int64_t, uint64_t>> by_dtype;  // dtype -> (tensors, bytes)
  std::vector<int64_t> swa_layers, csa_layers, hca_layers, hash_layers;
  std::string expert_format;   // routed experts, detected from tensors; "" when not bound
  std::optional<BindReport> binding;
  KvEstimate kv;
};

CheckpointSummary summarize_checkpoint(const Checkpoint& ckpt, const ModelConfig& cfg);
KvEstimate estimate_kv(const ModelConfig& cfg);
std::string summary_text(const CheckpointSummary& s);
nlohmann::json summary_json(const CheckpointSummary& s);

}  // namespace plumb

#include "plumb/runtime/kv_layout.h"

#include <algorithm>

#include <fmt/format.h>

#include "plumb/util/error.h"
#include "plumb/util/progress.h"

namespace plumb::runtime {
namespace {

constexpr std::int64_t kMiB = 1 << 20;

// One KV entry of `dim` values whose last `rope` are rope dims.
std::int64_t entry_bytes(KvDtype t, std::int64_t dim, std::int64_t rope) {
  switch (t) {
    case KvDtype::kF32: return dim * 4;
    case KvDtype::kBF16: return dim * 2;
    case KvDtype::kFP8: {
      const std::int64_t nope = dim - rope;
      return nope + (nope + 63) / 64 + rope * 2;
    }
  }
  return 0;
}

std::int64_t index_key_bytes(IndexKeyDtype t, std::int64_t dim) {
  switch (t) {
    case IndexKeyDtype::kF32: return dim * 4;
    case IndexKeyDtype::kBF16: return dim * 2;
    case IndexKeyDtype::kFP4: return dim / 2 + (dim + 31) / 32;
  }
  return 0;
}

void add_v4_layer(const ModelConfig& c, std::int64_t layer, KvLayout& l) {
  const std::int64_t d = c.head_dim, rope = c.qk_rope_head_dim, entry = entry_bytes(l.format.kv, d, rope);
  l.state_bytes_per_seq += c.sliding_window * entry;  // the window ring
  const std::int64_t m = c.compress_ratio(layer);
  if (m == 0) return;
  if (l.block_size % m != 0)
    fail("KV block size {} is not a multiple of layer {}'s compress ratio {}", l.block_size, layer, m);
  const bool csa = c.attn_type(layer) == AttnType::CSA;
  const std::int64_t overlap = csa ? 2 : 1;
  l.bytes_per_block += l.block_size / m * entry;
  l.state_bytes_per_seq += 2 * (overlap * m) * (overlap * d) * 4;  // kv and score sums, f32
  if (!csa) return;
  const std::int64_t di = c.index_head_dim;
  l.bytes_per_block += l.block_size / m * index_key_bytes(l.format.index_keys, di);
  l.state_bytes_per_seq += 2 * (2 * m) * (2 * di) * 4;  // the indexer's compressor
}

}  // namespace

KvDtype parse_kv_dtype(const std::string& n) {
  if (n == "f32") return KvDtype::kF32;
  if (n == "bf16") return KvDtype::kBF16;
  if (n == "fp8") return KvDtype::kFP8;
  fail("unknown KV dtype '{}': expected f32, bf16 or fp8", n);
}

IndexKeyDtype parse_index_key_dtype(const std::string& n) {
  if (n == "f32") return IndexKeyDtype::kF32;
  if (n == "bf16") return IndexKeyDtype::kBF16;
  if (n == "fp4") return IndexKeyDtype::kFP4;
  fail("unknown indexer-key dtype '{}': expected f32, bf16 or fp4", n);
}

const char* to_string(KvDtype t) { return t == KvDtype::kF32 ? "f32" : t == KvDtype::kBF16 ? "bf16" : "fp8"; }
const char* to_string(IndexKeyDtype t) {
  return t == IndexKeyDtype::kF32 ? "f32" : t == IndexKeyDtype::kBF16 ? "bf16" : "fp4";
}

void check_stored_kv_format(KvFormat f) {
  if (f.kv != KvDtype::kF32 || f.index_keys != IndexKeyDtype::kF32)
    fail("KV storage format {} entries / {} indexer keys is not implemented yet: plumb stores both as f32 (use "
         "--kv-dtype f32 --kv-index-dtype f32, the default)",
         to_string(f.kv), to_string(f.index_keys));
}

KvLayout kv_layout(const ModelConfig& c, std::int64_t block_size, KvFormat format) {
  if (block_size < 128 || block_size % 128 != 0)
    fail("KV block size must be a positive multiple of 128 positions, got {}", block_size);
  KvLayout l{block_size, format, 0, 0};
  if (c.arch == Arch::DeepseekV3) {  // MLA: the latent and the shared rope key of every token
    const std::int64_t row = entry_bytes(format.kv, c.kv_lora_rank + c.qk_rope_head_dim, c.qk_rope_head_dim);
    l.bytes_per_block = c.num_hidden_layers * block_size * row;
    return l;
  }
  for (std::int64_t layer = 0; layer < c.num_hidden_layers; ++layer) add_v4_layer(c, layer, l);
  return l;
}

std::int64_t pool_blocks(const KvLayout& l, std::int64_t cache_mib, std::int64_t max_seqs) {
  if (cache_mib < 1) fail("--kv-cache-mb must be at least 1, got {}", cache_mib);
  const std::int64_t left = cache_mib * kMiB - max_seqs * l.state_bytes_per_seq;
  const std::int64_t blocks = l.bytes_per_block > 0 ? std::max<std::int64_t>(left, 0) / l.bytes_per_block : 1 << 30;
  if (blocks < 1)
    fail("--kv-cache-mb {}: the fixed state of {} sequences ({}) and one KV block ({}) need more; raise it or "
         "lower --max-seqs",
         cache_mib, max_seqs, format_bytes(static_cast<double>(max_seqs * l.state_bytes_per_seq)),
         format_bytes(static_cast<double>(l.bytes_per_block)));
  return blocks;
}

std::string memory_table(const KvLayout& l, std::int64_t weight_bytes, std::int64_t blocks, std::int64_t max_seqs,
                         std::int64_t max_context) {
  const auto b = [](std::int64_t n) { return format_bytes(static_cast<double>(n)); };
  const std::int64_t tokens = blocks * l.block_size;
  const std::int64_t full_context_blocks = (max_context + l.block_size - 1) / l.block_size;
  std::string t;
  t += fmt::format("memory: weights            {:>12}\n", b(weight_bytes));
  t += fmt::format("memory: KV pool            {:>12}  {} blocks x {} positions x {} (KV {}, indexer keys {})\n",
                   b(blocks * l.bytes_per_block), blocks, l.block_size, b(l.bytes_per_block), to_string(l.format.kv),
                   to_string(l.format.index_keys));
  t += fmt::format("memory: per-sequence state {:>12}  {} x {} sequences (window rings, compressor states)\n",
                   b(max_seqs * l.state_bytes_per_seq), b(l.state_bytes_per_seq), max_seqs);
  t += fmt::format("memory: fits {} token positions in all and {} sequences at once; {} sequences at the full context "
                   "of {}\n",
                   tokens, max_seqs, std::min(max_seqs, blocks / full_context_blocks), max_context);
  t += "memory: accounting only: the model still keeps each sequence's caches in its dense f32 state\n";
  return t;
}

}  // namespace plumb::runtime

#include "plumb/runtime/kv_layout.h"

#include <algorithm>

#include <fmt/format.h>

#include "plumb/util/error.h"
#include "plumb/util/progress.h"

namespace plumb::runtime {
namespace {

constexpr std::int64_t kMiB = 1 << 20;

using backend::KvRowFormat;

KvRowFormat row_format(KvDtype t) {
  return t == KvDtype::kF32 ? KvRowFormat::F32 : t == KvDtype::kBF16 ? KvRowFormat::BF16 : KvRowFormat::FP8;
}
KvRowFormat row_format(IndexKeyDtype t) {
  return t == IndexKeyDtype::kF32 ? KvRowFormat::F32 : t == IndexKeyDtype::kBF16 ? KvRowFormat::BF16 : KvRowFormat::FP4;
}

// The stored bytes of one row of `dim` values in format f, the last `rope` rope dims (fp8).
std::int64_t stored_bytes(KvRowFormat f, std::int64_t dim, std::int64_t rope) {
  return backend::kv_row_words({f, dim, f == KvRowFormat::FP8 ? rope : 0}) * 4;
}

// The window ring: f32 rows in every format.
std::int64_t ring_entry_bytes(std::int64_t dim) { return dim * 4; }

void add_v4_layer(const ModelConfig& c, std::int64_t layer, KvLayout& l) {
  const std::int64_t d = c.head_dim, rope = c.qk_rope_head_dim, entry = stored_bytes(row_format(l.format.kv), d, rope);
  l.state_bytes_per_seq += c.sliding_window * ring_entry_bytes(d);  // the window ring
  const std::int64_t m = c.compress_ratio(layer);
  if (m == 0) return;
  if (l.block_size % m != 0)
    fail("KV block size {} is not a multiple of layer {}'s compress ratio {}", l.block_size, layer, m);
  const bool csa = c.attn_type(layer) == AttnType::CSA;
  const std::int64_t overlap = csa ? 2 : 1;
  l.bytes_per_block += l.block_size / m * entry;
  l.state_bytes_per_seq += 2 * (overlap * m) * (overlap * d) * 4;  // kv and score sums, f32
  if (l.format.bf16_recent > 0)  // the recent ring (f32 rows holding bf16 values)
    l.state_bytes_per_seq += backend::kv_recent_ring_rows(l.format.bf16_recent, m) * ring_entry_bytes(d);
  if (!csa) return;
  const std::int64_t di = c.index_head_dim;
  l.bytes_per_block += l.block_size / m * stored_bytes(row_format(l.format.index_keys), di, 0);
  l.state_bytes_per_seq += 2 * (2 * m) * (2 * di) * 4;  // the indexer's compressor
}

}  // namespace

std::int64_t decode_kv_read_bytes(const ModelConfig& c, std::int64_t layer, const KvFormat& f, std::int64_t positions) {
  if (c.arch != Arch::DeepseekV4) fail("decode_kv_read_bytes: a DeepSeek-V4 config is expected");
  const std::int64_t d = c.head_dim, m = c.compress_ratio(layer);
  std::int64_t bytes = std::min(positions, c.sliding_window) * ring_entry_bytes(d);
  if (m == 0) return bytes;
  const std::int64_t entries = positions / m, entry = stored_bytes(row_format(f.kv), d, c.qk_rope_head_dim);
  if (c.attn_type(layer) != AttnType::CSA) return bytes + entries * entry;
  return bytes + std::min(entries, c.index_topk) * entry +
         entries * stored_bytes(row_format(f.index_keys), c.index_head_dim, 0);
}

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

KvFormat default_kv_format(Arch arch, bool faithful) {
  if (!faithful) return {};
  if (arch == Arch::DeepseekV3) return {KvDtype::kBF16, IndexKeyDtype::kF32};
  return {KvDtype::kFP8, IndexKeyDtype::kFP4};
}

backend::KvStorage kv_storage(const KvFormat& f) { return {row_format(f.kv), row_format(f.index_keys), f.bf16_recent}; }

KvLayout kv_layout(const ModelConfig& c, std::int64_t block_size, KvFormat format) {
  if (block_size < 128 || block_size % 128 != 0)
    fail("KV block size must be a positive multiple of 128 positions, got {}", block_size);
  KvLayout l{block_size, format, 0, 0};
  if (c.arch == Arch::DeepseekV3) {  // MLA: the latent and the shared rope key of every token
    // fp8 latents (all dims e4m3) keep their rope keys in bf16 (KvPool).
    const KvRowFormat lat = row_format(format.kv), pe = lat == KvRowFormat::FP8 ? KvRowFormat::BF16 : lat;
    const std::int64_t row = stored_bytes(lat, c.kv_lora_rank, 0) + stored_bytes(pe, c.qk_rope_head_dim, 0);
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
  t += fmt::format("memory: KV pool            {:>12}  {} blocks x {} positions x {} (KV {}, indexer keys {}{})\n",
                   b(blocks * l.bytes_per_block), blocks, l.block_size, b(l.bytes_per_block), to_string(l.format.kv),
                   to_string(l.format.index_keys),
                   l.format.bf16_recent > 0 ? fmt::format(", the last {} positions bf16", l.format.bf16_recent) : "");
  t += fmt::format("memory: per-sequence state {:>12}  {} x {} sequences (window rings, compressor states)\n",
                   b(max_seqs * l.state_bytes_per_seq), b(l.state_bytes_per_seq), max_seqs);
  t += fmt::format("memory: fits {} token positions in all and {} sequences at once; {} sequences at the full context "
                   "of {}\n",
                   tokens, max_seqs, std::min(max_seqs, blocks / full_context_blocks), max_context);
  return t;
}

}  // namespace plumb::runtime

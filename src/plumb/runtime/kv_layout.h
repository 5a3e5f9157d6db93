#pragma once
// What one KV block and one sequence's fixed state cost, from the model config and the storage
// formats (MODEL-SPEC 5). A block holds B native token positions of every layer: for a CSA layer
// (ratio 4) B/4 compressed entries and B/4 indexer keys, for another compressed layer (ratio m:
// 128 in V4-Flash) B/m entries, for a sliding-window layer nothing; V3 holds B latent + rope rows
// per layer. Fixed per sequence (V4): every layer's window ring of `sliding_window` entries and
// the compressor states (f32 running sums). The pool is sized from these numbers, which are the
// bytes the model's pools store (backend/kv_row.h: an encoded row padded to 4-byte words, e.g.
// 584 B for a 583 B fp8 V4-Flash entry). The window rings stay f32 in every format (ARCHITECTURE
// "KV storage formats" says why).
#include <cstdint>
#include <string>

#include "plumb/backend/kv_row.h"
#include "plumb/format/config.h"

namespace plumb::runtime {

// KV entries: f32, bf16, or the release's fp8 (e4m3 nope dims with a ue8m0 scale per 64 values,
// bf16 rope dims: 583 B + 1 B padding for a 512-d V4-Flash entry).
enum class KvDtype { kF32, kBF16, kFP8 };
// CSA indexer keys: f32, bf16, or the release's fp4 (e2m1 pairs with a ue8m0 scale per 32: 68 B
// for a 128-d key).
enum class IndexKeyDtype { kF32, kBF16, kFP4 };

KvDtype parse_kv_dtype(const std::string& name);               // "f32" | "bf16" | "fp8"
IndexKeyDtype parse_index_key_dtype(const std::string& name);  // "f32" | "bf16" | "fp4"
const char* to_string(KvDtype dtype);
const char* to_string(IndexKeyDtype dtype);

struct KvFormat {
  KvDtype kv = KvDtype::kF32;
  IndexKeyDtype index_keys = IndexKeyDtype::kF32;
  std::int64_t bf16_recent = 0;  // --kv-bf16-recent N: a per-sequence bf16 ring per compressed layer
};
// The numerics' lossless default (model/kv_pool.h default_kv_storage): faithful V4 fp8 + fp4,
// faithful V3 bf16, reference f32.
KvFormat default_kv_format(Arch arch, bool faithful);
// The model-side formats of a KvFormat (V3 latents take `kv`; its rope keys follow KvPool).
backend::KvStorage kv_storage(const KvFormat& format);

struct KvLayout {
  std::int64_t block_size = 0;           // native token positions per block
  KvFormat format;
  std::int64_t bytes_per_block = 0;      // all layers
  std::int64_t state_bytes_per_seq = 0;  // window rings + compressor states, all layers
};

// Throws plumb::Error unless block_size is a positive multiple of 128 and of every compress ratio.
KvLayout kv_layout(const ModelConfig& cfg, std::int64_t block_size, KvFormat format);

// The KV bytes one decode step of one V4 sequence of `positions` tokens (the new one included)
// reads in `layer` (MODEL-SPEC 5): its window ring's min(positions, sliding_window) rows (f32);
// a CSA layer's min(positions / 4, index_topk) selected entries and every one of its
// positions / 4 indexer keys; another compressed layer's positions / m entries. Entries as
// stored (kv_layout's sizes); with bf16_recent, recent entries read from the f32 recent ring are
// counted at the stored size (a slight undercount). Throws for a V3 config.
std::int64_t decode_kv_read_bytes(const ModelConfig& cfg, std::int64_t layer, const KvFormat& format,
                                  std::int64_t positions);

// Blocks that fit `cache_mib` MiB after reserving the fixed state of `max_seqs` sequences.
// Throws when not even one block fits beside that state.
std::int64_t pool_blocks(const KvLayout& layout, std::int64_t cache_mib, std::int64_t max_seqs);

// The start-up memory table: weights, KV pool, per-sequence state, and how many tokens and
// sequences fit.
std::string memory_table(const KvLayout& layout, std::int64_t weight_bytes, std::int64_t blocks,
                         std::int64_t max_seqs, std::int64_t max_context);

}  // namespace plumb::runtime

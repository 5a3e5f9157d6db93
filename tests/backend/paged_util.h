#pragma once
// Paged caches for op tests and benchmarks (backend.h, "Paged caches"): per-sequence dense caches
// scattered into one pool through block tables of distinct, shuffled ids, with spare blocks in
// between, and every pool row no table maps holding NaN, so an op that reads a wrong row shows
// it in its output. No gtest here (the bench links none).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "plumb/backend/backend.h"

namespace plumb::test {

// Tables for sequences of entries[s] entries, per_block a block: distinct ids of a pool with
// `spare` blocks no sequence uses, shuffled by `seed` (seed 0: ids in order, no spare blocks).
inline std::vector<std::vector<int32_t>> block_ids(const std::vector<int64_t>& entries, int64_t per_block,
                                                   uint64_t seed, int64_t spare = 3) {
  std::vector<int64_t> need;
  int64_t total = 0;
  for (int64_t n : entries) total += need.emplace_back((n + per_block - 1) / per_block);
  if (seed != 0) total += spare;
  std::vector<int32_t> ids(static_cast<std::size_t>(total));
  std::iota(ids.begin(), ids.end(), 0);
  if (seed != 0) {
    std::mt19937_64 rng(seed);
    std::shuffle(ids.begin(), ids.end(), rng);
  }
  std::vector<std::vector<int32_t>> out;
  std::size_t next = 0;
  for (int64_t n : need) {
    out.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(next), ids.begin() + static_cast<std::ptrdiff_t>(next + n));
    next += static_cast<std::size_t>(n);
  }
  return out;
}

// A pool [blocks * per_block, row] (blocks: the largest id + 1, at least 1) holding caches[s]
// (rows of `row` values) where `ids` maps them; NaN elsewhere. With an encoded format
// (kv_row.h; spec.values is set to row) the backend's own paged_write encodes the rows, and
// every other row is all 0xFF bytes, which decode to NaN in bf16, fp8 and fp4 alike.
inline backend::PagedCache paged_pool(backend::Backend& be, const std::vector<std::vector<float>>& caches, int64_t row,
                                      int64_t per_block, const std::vector<std::vector<int32_t>>& ids,
                                      backend::KvRowSpec spec = {}) {
  int64_t blocks = 1;
  for (const auto& t : ids)
    for (int32_t id : t) blocks = std::max<int64_t>(blocks, int64_t{id} + 1);
  if (spec.format != backend::KvRowFormat::F32) {
    spec.values = row;
    backend::PagedCache c{be.full(backend::ElemType::I32, {blocks * per_block, backend::kv_row_words(spec)}, -1.f),
                          per_block, spec};
    std::vector<float> src;
    std::vector<backend::CacheRun> runs;
    for (const auto& cache : caches) {
      runs.push_back({0, static_cast<int64_t>(cache.size()) / row});
      src.insert(src.end(), cache.begin(), cache.end());
    }
    be.paged_write(c, backend::make_block_tables(be, ids), be.from_host(src.data(), {static_cast<int64_t>(src.size()) / row, row}),
                   runs);
    return c;
  }
  std::vector<float> pool(static_cast<std::size_t>(blocks * per_block * row), std::numeric_limits<float>::quiet_NaN());
  for (std::size_t s = 0; s < caches.size(); ++s)
    for (int64_t w = 0; w * row < static_cast<int64_t>(caches[s].size()); ++w) {
      const int64_t r = int64_t{ids[s][static_cast<std::size_t>(w / per_block)]} * per_block + w % per_block;
      std::copy_n(caches[s].begin() + w * row, row, pool.begin() + r * row);
    }
  return {be.from_host(pool.data(), {blocks * per_block, row}), per_block, {}};
}

struct Paged {
  backend::PagedCache cache;
  backend::BlockTables tables;
};

// caches[s] (rows of `row` values) paged in blocks of per_block entries, tables shuffled by seed,
// stored in `spec`'s format.
inline Paged paged(backend::Backend& be, const std::vector<std::vector<float>>& caches, int64_t row, int64_t per_block,
                   uint64_t seed, backend::KvRowSpec spec = {}) {
  std::vector<int64_t> entries;
  for (const auto& c : caches) entries.push_back(static_cast<int64_t>(c.size()) / row);
  const std::vector<std::vector<int32_t>> ids = block_ids(entries, per_block, seed);
  return {paged_pool(be, caches, row, per_block, ids, spec), backend::make_block_tables(be, ids)};
}

// Each value as a pool in `spec`'s format stores it (what the ops read from an encoded pool).
inline std::vector<float> stored_values(std::vector<float> v, int64_t row, backend::KvRowSpec spec) {
  if (spec.format == backend::KvRowFormat::F32) return v;
  spec.values = row;
  std::vector<uint8_t> bytes(static_cast<std::size_t>(backend::kv_row_words(spec) * 4));
  for (std::size_t r = 0; r * static_cast<std::size_t>(row) < v.size(); ++r) {
    float* x = v.data() + r * static_cast<std::size_t>(row);
    backend::kv_encode_row(spec, x, bytes.data());
    for (int64_t i = 0; i < row; ++i) x[i] = backend::kv_value(spec, bytes.data(), i);
  }
  return v;
}

// The formats the op harness runs each paged case in: f32, bf16, and the release's fp8 entries
// (rope: their bf16 tail) or fp4 keys.
inline std::vector<backend::KvRowSpec> entry_formats(int64_t rope) {
  return {{}, {backend::KvRowFormat::BF16, 0, 0}, {backend::KvRowFormat::FP8, 0, rope}};
}
inline std::vector<backend::KvRowSpec> key_formats() {
  return {{}, {backend::KvRowFormat::BF16, 0, 0}, {backend::KvRowFormat::FP4, 0, 0}};
}
inline std::string format_name(const backend::KvRowSpec& s) {
  switch (s.format) {
    case backend::KvRowFormat::F32: return "f32";
    case backend::KvRowFormat::BF16: return "bf16";
    case backend::KvRowFormat::FP8: return "fp8";
    case backend::KvRowFormat::FP4: return "fp4";
  }
  return "?";
}

inline backend::KvRowSpec rope_key_format(backend::KvRowSpec latent) {
  if (latent.format == backend::KvRowFormat::FP8) return {backend::KvRowFormat::BF16, 0, 0};
  latent.rope = 0;
  return latent;
}

// The two MLA caches of the same sequences (latent rows of R, rope key rows of P), paged through
// one table, as a model pages them.
struct PagedMla {
  backend::PagedCache latent, k_pe;
  backend::BlockTables tables;
};
// An fp8 latent format keeps the rope keys in bf16 (as KvPool does).
inline PagedMla paged_mla(backend::Backend& be, const std::vector<std::vector<float>>& latent, int64_t R,
                          const std::vector<std::vector<float>>& k_pe, int64_t P, int64_t per_block, uint64_t seed,
                          backend::KvRowSpec spec = {}) {
  std::vector<int64_t> entries;
  for (const auto& c : latent) entries.push_back(static_cast<int64_t>(c.size()) / R);
  const std::vector<std::vector<int32_t>> ids = block_ids(entries, per_block, seed);
  return {paged_pool(be, latent, R, per_block, ids, spec), paged_pool(be, k_pe, P, per_block, ids, rope_key_format(spec)),
          backend::make_block_tables(be, ids)};
}

}  // namespace plumb::test

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
// (rows of `row` values) where `ids` maps them; NaN elsewhere.
inline backend::PagedCache paged_pool(backend::Backend& be, const std::vector<std::vector<float>>& caches, int64_t row,
                                      int64_t per_block, const std::vector<std::vector<int32_t>>& ids) {
  int64_t blocks = 1;
  for (const auto& t : ids)
    for (int32_t id : t) blocks = std::max<int64_t>(blocks, int64_t{id} + 1);
  std::vector<float> pool(static_cast<std::size_t>(blocks * per_block * row), std::numeric_limits<float>::quiet_NaN());
  for (std::size_t s = 0; s < caches.size(); ++s)
    for (int64_t w = 0; w * row < static_cast<int64_t>(caches[s].size()); ++w) {
      const int64_t r = int64_t{ids[s][static_cast<std::size_t>(w / per_block)]} * per_block + w % per_block;
      std::copy_n(caches[s].begin() + w * row, row, pool.begin() + r * row);
    }
  return {be.from_host(pool.data(), {blocks * per_block, row}), per_block};
}

struct Paged {
  backend::PagedCache cache;
  backend::BlockTables tables;
};

// caches[s] (rows of `row` values) paged in blocks of per_block entries, tables shuffled by seed.
inline Paged paged(backend::Backend& be, const std::vector<std::vector<float>>& caches, int64_t row, int64_t per_block,
                   uint64_t seed) {
  std::vector<int64_t> entries;
  for (const auto& c : caches) entries.push_back(static_cast<int64_t>(c.size()) / row);
  const std::vector<std::vector<int32_t>> ids = block_ids(entries, per_block, seed);
  return {paged_pool(be, caches, row, per_block, ids), backend::make_block_tables(be, ids)};
}

// The two MLA caches of the same sequences (latent rows of R, rope key rows of P), paged through
// one table, as a model pages them.
struct PagedMla {
  backend::PagedCache latent, k_pe;
  backend::BlockTables tables;
};
inline PagedMla paged_mla(backend::Backend& be, const std::vector<std::vector<float>>& latent, int64_t R,
                          const std::vector<std::vector<float>>& k_pe, int64_t P, int64_t per_block, uint64_t seed) {
  std::vector<int64_t> entries;
  for (const auto& c : latent) entries.push_back(static_cast<int64_t>(c.size()) / R);
  const std::vector<std::vector<int32_t>> ids = block_ids(entries, per_block, seed);
  return {paged_pool(be, latent, R, per_block, ids), paged_pool(be, k_pe, P, per_block, ids),
          backend::make_block_tables(be, ids)};
}

}  // namespace plumb::test

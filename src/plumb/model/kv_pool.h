#pragma once
// A model's paged KV storage (issue #15): one pool tensor of fixed-size blocks per (layer, cache
// kind), read and written by the ops through each sequence's block table (backend.h, "Paged
// caches"). Block ids are one id space for all pools: a block is `block_size` native token
// positions, i.e. block_size / ratio entries of a cache that keeps one entry per `ratio` tokens.
// Who hands the ids out:
//   - the serving engine (use_external_blocks): its KvBlockManager; the model only checks that a
//     sequence's table covers the positions of each forward and reads through it;
//   - otherwise (plumb run / generate, verify, tests): the pool's private allocator grows each
//     sequence's table as it advances and takes the ids back when the sequence is destroyed.
// Storage follows the highest id in use (grown by doubling, capped by the engine's block count),
// so a pool sized for many sequences costs memory only as blocks are used. Each cache stores its
// rows in a format (backend/kv_row.h) chosen by kind from the model's KvStorage: V4's compressed
// entries f32 | bf16 | fp8 (e4m3 nope dims, bf16 rope dims), its indexer keys f32 | bf16 | fp4;
// V3's latents f32 | bf16 | fp8 (all dims e4m3) with the rope keys in bf16 when latents are fp8.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "plumb/backend/backend.h"
#include "plumb/format/config.h"
#include "plumb/model/numerics.h"
#include "plumb/model/model.h"

namespace plumb {

// The private allocator's free ids: the lowest-numbered free block first, so storage stays small.
class BlockAllocator {
 public:
  int32_t take();
  void give_back(std::span<const int32_t> ids);

 private:
  std::vector<int32_t> free_;  // a min-heap
  int32_t next_ = 0;           // ids >= next_ have never been handed out
};

// The storage a model's caches start with: the formats that hold exactly what the numerics
// profile computes. faithful: V4 fp8 entries + fp4 keys (the release's round trips happen before
// the write), V3 bf16 latents (the release's bf16 cache); reference: f32.
backend::KvStorage default_kv_storage(Arch arch, Numerics numerics);

class KvPool {
 public:
  static constexpr int64_t kDefaultBlockSize = 256;
  // What a cache holds, which decides its format under a KvStorage.
  enum class Kind { kEntry, kIndexKey, kLatent, kRopeKey };

  explicit KvPool(backend::Backend& be);
  // Adds a cache of layer `layer` with one entry of `row` values per `ratio` token positions, the
  // last `rope` of them rope dims (kept bf16 in an fp8 entry); returns its index.
  int add(int64_t layer, int64_t ratio, int64_t row, Kind kind, int64_t rope = 0);
  // The formats of every cache from now on. Drops the storage like use_external_blocks (call it
  // before the first forward); throws for a format a kind cannot take (fp4 entries, fp8 keys).
  void set_storage(const backend::KvStorage& storage);
  const backend::KvStorage& storage() const { return storage_; }
  // Values one entry of `layer` takes over all its caches (what CacheSpec's `entry` describes).
  int64_t entry_values(int64_t layer) const;

  // From now on every sequence's table comes from the caller (SequenceState::blocks.ids, covering
  // its positions before each forward), with ids below `blocks` of `block_size` positions. Drops
  // the storage: sequences made before hold nothing valid afterwards. Throws plumb::Error unless
  // block_size is a positive multiple of every cache's ratio and blocks >= 1.
  void use_external_blocks(int64_t block_size, int64_t blocks);

  // The blocks of a fresh sequence: none yet, owned by the private allocator unless external.
  SequenceBlocks new_blocks() const;
  // Before a forward (states not yet advanced): every table covers the positions the batch
  // reaches (grown privately, or checked), storage exists for every id, and the batch's tables
  // are uploaded once.
  backend::BlockTables prepare(std::span<const SequenceStep> batch);

  // The blocks of a copy of `s` (Model::fork_sequence): the cache rows of s's positions copied
  // (one batched row copy per cache, stored bytes as they are) from `from` into `to` (the
  // caller's ids, as many, covering s.pos) or, with both empty and the private allocator, from
  // s's own blocks into newly taken ones.
  SequenceBlocks fork_blocks(const SequenceState& s, std::span<const int32_t> from, std::span<const int32_t> to);

  backend::PagedCache& cache(int index) { return caches_[static_cast<std::size_t>(index)]; }
  int64_t block_size() const { return block_size_; }

 private:
  void reserve(int64_t blocks);  // storage for ids below `blocks`
  int64_t blocks_for(int64_t positions) const { return (positions + block_size_ - 1) / block_size_; }

  backend::Backend& be_;
  int64_t block_size_ = kDefaultBlockSize;
  int64_t max_blocks_ = 0;  // external ids are below it; 0: private, unbounded
  int64_t capacity_ = 0;    // blocks with storage in every pool
  backend::PagedCache empty_cache(std::size_t i, int64_t per_block) const;

  std::vector<int64_t> layers_, ratios_, rows_, ropes_;
  std::vector<Kind> kinds_;
  backend::KvStorage storage_;
  std::vector<backend::PagedCache> caches_;
  std::shared_ptr<BlockAllocator> allocator_;  // null when external
};

}  // namespace plumb

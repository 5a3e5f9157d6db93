#pragma once
// Prefix reuse (issue #15 item 9): snapshots of sequence states taken at KV block boundaries,
// indexed by the tokens before the boundary, so that a request whose prompt starts with the same
// tokens (the earlier turns of a chat, a shared system prompt) starts from a fork of the
// snapshot instead of position 0.
//
// A snapshot is a whole EngineModel::fork() of the sequence at that position: the caches and the
// per-sequence fixed state (V4's sliding-window rings and compressor slots), so nothing the
// forward reads is left behind. Its result is therefore bitwise the one of a prefill from 0.
//
// Index: one entry per cached boundary k*B, keyed by a hash chain over the token blocks
// (h_k = H(h_{k-1}, block k)); a hit also compares the tokens themselves, so a hash collision is
// a miss, never a wrong state. Memory: each snapshot is charged to the engine's KV pool (the
// blocks of its k*B positions plus the blocks its fixed state is worth), and snapshots are
// evicted least recently used first whenever a running or waiting sequence needs blocks
// (reclaim), so they only ever use blocks that no request wants.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "plumb/runtime/engine_model.h"
#include "plumb/runtime/kv_blocks.h"
#include "plumb/util/token_id.h"

namespace plumb::runtime {

class PrefixCache {
 public:
  // `blocks` (the engine's pool) must outlive the cache; each snapshot also takes
  // `fixed_state_blocks` blocks for the per-sequence state it copies.
  PrefixCache(KvBlockManager& blocks, std::int64_t fixed_state_blocks);
  ~PrefixCache();

  struct Hit {
    std::int64_t tokens = 0;                        // prefix length covered (a multiple of the block size)
    const EngineModel::Sequence* state = nullptr;   // the snapshot at that position; null: no hit
    std::span<const BlockId> blocks;                // its KV blocks covering those tokens
    std::int64_t shared = 0;  // the longest whole-block prefix an earlier lookup had too (a branching point)
  };
  // The longest cached prefix of `tokens` that leaves at least one token to feed, and the
  // longest one that earlier lookups shared (so that a system prompt shared by several requests
  // is worth a snapshot at its last whole block even when no request's prompt ends there). The
  // hit's snapshot is pinned (not evicted) until unpin_all().
  Hit lookup(std::span<const TokenId> tokens);
  void unpin_all();

  // Whether a snapshot of `prefix` (a positive multiple of the block size) would be new.
  bool wants(std::span<const TokenId> prefix) const;
  // Stores the snapshot `take(blocks)` makes, the state after exactly `prefix`, its entries in
  // `blocks` (the snapshot's own, one per block of the prefix). Frees blocks of older snapshots
  // when the pool is short; when it cannot fit even so, nothing is evicted, `take` is not called
  // and insert() returns false.
  using TakeSnapshot = std::function<std::unique_ptr<EngineModel::Sequence>(std::span<const BlockId> blocks)>;
  bool insert(std::span<const TokenId> prefix, const TakeSnapshot& take);

  // Evicts unpinned snapshots, least recently used first, until `blocks` blocks are free or
  // none is left. Returns whether it evicted any.
  bool reclaim(std::int64_t blocks);

  std::int64_t block_size() const { return blocks_.block_size(); }
  std::int64_t snapshots() const { return static_cast<std::int64_t>(entries_.size()); }
  std::int64_t held_blocks() const { return held_blocks_; }  // pool blocks the snapshots hold

 private:
  struct Entry {
    std::vector<TokenId> tokens;  // the exact prefix (checked on every hit)
    std::unique_ptr<EngineModel::Sequence> state;
    std::uint64_t pool_key = 0;   // its blocks in the KV pool
    std::uint64_t last_used = 0;
    bool pinned = false;
  };
  // Hash chain of every whole block of `tokens` (element k-1: the first k blocks).
  std::vector<std::uint64_t> chain(std::span<const TokenId> tokens) const;

  KvBlockManager& blocks_;
  std::int64_t fixed_state_blocks_;
  std::unordered_map<std::uint64_t, Entry> entries_;  // by chain hash
  // Chain hashes of every whole-block prefix looked up so far (no tokens, no state: a collision
  // only costs a useless snapshot); cleared when it grows past kMaxSeen.
  std::unordered_set<std::uint64_t> seen_;
  static constexpr std::size_t kMaxSeen = 1 << 16;
  std::vector<std::uint64_t> pinned_;
  std::uint64_t clock_ = 0, next_pool_key_ = 0;
  std::int64_t held_blocks_ = 0;
};

}  // namespace plumb::runtime

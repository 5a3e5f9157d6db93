#pragma once
// The KV block pool: a fixed number of blocks of `block_size` native token positions and, per
// sequence, the table of blocks that covers its positions. The ids it hands out are the storage
// rows of the model's paged caches (model/kv_pool.h: one id space for every layer's pools, as in
// vLLM), so releasing a sequence's blocks frees its storage for the next; it also guarantees that
// the sequences the scheduler runs together fit the memory the pool stands for.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace plumb::runtime {

using BlockId = std::int32_t;

class KvBlockManager {
 public:
  // Throws plumb::Error unless block_size >= 1 and num_blocks >= 1.
  KvBlockManager(std::int64_t block_size, std::int64_t num_blocks);

  std::int64_t block_size() const { return block_size_; }
  std::int64_t total_blocks() const { return total_; }
  std::int64_t free_blocks() const { return static_cast<std::int64_t>(free_.size()); }
  std::int64_t used_blocks() const { return total_ - free_blocks(); }

  // Blocks that `positions` token positions occupy: ceil(positions / block_size).
  std::int64_t blocks_for(std::int64_t positions) const;

  // Grows `seq`'s table to cover `positions` positions. Returns false, and changes nothing, when
  // the pool has too few free blocks. Never shrinks a table.
  bool reserve(std::uint64_t seq, std::int64_t positions);
  // Returns all of `seq`'s blocks to the pool (finish, cancel, preemption); unknown ids are a no-op.
  void release(std::uint64_t seq);

  std::span<const BlockId> table(std::uint64_t seq) const;

 private:
  std::int64_t block_size_, total_;
  std::vector<BlockId> free_;  // a stack: the most recently freed block is reused first
  std::unordered_map<std::uint64_t, std::vector<BlockId>> tables_;
};

}  // namespace plumb::runtime

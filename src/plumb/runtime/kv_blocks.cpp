#include "plumb/runtime/kv_blocks.h"

#include "plumb/util/error.h"

namespace plumb::runtime {

KvBlockManager::KvBlockManager(std::int64_t block_size, std::int64_t num_blocks)
    : block_size_(block_size), total_(num_blocks) {
  if (block_size < 1) fail("KV block size must be at least 1 position, got {}", block_size);
  if (num_blocks < 1) fail("the KV pool must hold at least one block, got {}", num_blocks);
  free_.reserve(static_cast<std::size_t>(num_blocks));
  for (std::int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<BlockId>(b));
}

std::int64_t KvBlockManager::blocks_for(std::int64_t positions) const {
  return positions <= 0 ? 0 : (positions + block_size_ - 1) / block_size_;
}

bool KvBlockManager::reserve(std::uint64_t seq, std::int64_t positions) {
  std::vector<BlockId>& t = tables_[seq];
  const std::int64_t need = blocks_for(positions) - static_cast<std::int64_t>(t.size());
  if (need <= 0) return true;
  if (need > free_blocks()) {
    if (t.empty()) tables_.erase(seq);
    return false;
  }
  for (std::int64_t i = 0; i < need; ++i) {
    t.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void KvBlockManager::release(std::uint64_t seq) {
  const auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  for (auto b = it->second.rbegin(); b != it->second.rend(); ++b) free_.push_back(*b);
  tables_.erase(it);
}

std::span<const BlockId> KvBlockManager::table(std::uint64_t seq) const {
  const auto it = tables_.find(seq);
  if (it == tables_.end()) return {};
  return it->second;
}

}  // namespace plumb::runtime

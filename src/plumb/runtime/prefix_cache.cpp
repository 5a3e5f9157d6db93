#include "plumb/runtime/prefix_cache.h"

#include <algorithm>

#include "plumb/util/error.h"

namespace plumb::runtime {
namespace {

// Pool keys of snapshots live above every request id (ids count up from 1).
constexpr std::uint64_t kSnapshotKeyBit = 1ull << 63;

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

PrefixCache::PrefixCache(KvBlockManager& blocks, std::int64_t fixed_state_blocks)
    : blocks_(blocks), fixed_state_blocks_(fixed_state_blocks) {
  if (fixed_state_blocks < 0) fail("prefix cache: fixed_state_blocks must be >= 0, got {}", fixed_state_blocks);
}

PrefixCache::~PrefixCache() {
  for (auto& [key, e] : entries_) blocks_.release(e.pool_key);
}

std::vector<std::uint64_t> PrefixCache::chain(std::span<const TokenId> tokens) const {
  const std::size_t B = static_cast<std::size_t>(block_size());
  std::vector<std::uint64_t> out;
  std::uint64_t h = 0;
  for (std::size_t k = 0; (k + 1) * B <= tokens.size(); ++k) {
    for (std::size_t i = k * B; i < (k + 1) * B; ++i) h = mix(h ^ (tokens[i] + 0x100000001b3ull * (i + 1)));
    out.push_back(h);
  }
  return out;
}

PrefixCache::Hit PrefixCache::lookup(std::span<const TokenId> tokens) {
  if (tokens.size() < 2) return {};
  const std::vector<std::uint64_t> keys = chain(tokens.first(tokens.size() - 1));  // one token must stay to feed
  const auto B = static_cast<std::int64_t>(block_size());
  Hit hit;
  for (std::size_t k = keys.size(); k > 0 && !hit.shared; --k)
    if (seen_.count(keys[k - 1])) hit.shared = static_cast<std::int64_t>(k) * B;
  if (seen_.size() + keys.size() > kMaxSeen) seen_.clear();
  seen_.insert(keys.begin(), keys.end());
  for (std::size_t k = keys.size(); k > 0; --k) {
    const auto it = entries_.find(keys[k - 1]);
    if (it == entries_.end()) continue;
    Entry& e = it->second;
    const auto prefix = tokens.first(k * static_cast<std::size_t>(B));
    if (!std::equal(prefix.begin(), prefix.end(), e.tokens.begin(), e.tokens.end())) continue;  // a hash collision
    e.last_used = ++clock_;
    if (!e.pinned) pinned_.push_back(it->first);
    e.pinned = true;
    hit.tokens = static_cast<std::int64_t>(prefix.size());
    hit.state = e.state.get();
    hit.blocks = blocks_.table(e.pool_key).first(k);
    break;
  }
  return hit;
}

void PrefixCache::unpin_all() {
  for (std::uint64_t key : pinned_)
    if (const auto it = entries_.find(key); it != entries_.end()) it->second.pinned = false;
  pinned_.clear();
}

bool PrefixCache::wants(std::span<const TokenId> prefix) const {
  const auto B = static_cast<std::size_t>(block_size());
  if (prefix.empty() || prefix.size() % B != 0) return false;
  return !entries_.count(chain(prefix).back());  // a colliding other prefix keeps its entry
}

bool PrefixCache::insert(std::span<const TokenId> prefix, const TakeSnapshot& take) {
  if (!wants(prefix)) return false;
  const std::int64_t positions = static_cast<std::int64_t>(prefix.size()) + fixed_state_blocks_ * block_size();
  std::int64_t evictable = 0;  // evict nothing for a snapshot that cannot fit anyway
  for (const auto& [key, e] : entries_)
    if (!e.pinned) evictable += static_cast<std::int64_t>(blocks_.table(e.pool_key).size());
  if (blocks_.blocks_for(positions) > blocks_.free_blocks() + evictable) return false;
  const std::uint64_t pool_key = kSnapshotKeyBit | next_pool_key_++;
  while (!blocks_.reserve(pool_key, positions))
    if (!reclaim(blocks_.blocks_for(positions))) return false;
  Entry e;
  try {
    e.state = take(blocks_.table(pool_key).first(prefix.size() / static_cast<std::size_t>(block_size())));
    if (!e.state) fail("prefix cache: no snapshot to insert");
  } catch (...) {  // the blocks go back with the failure
    blocks_.release(pool_key);
    throw;
  }
  e.tokens.assign(prefix.begin(), prefix.end());
  e.pool_key = pool_key;
  e.last_used = ++clock_;
  held_blocks_ += static_cast<std::int64_t>(blocks_.table(pool_key).size());
  entries_.emplace(chain(prefix).back(), std::move(e));
  return true;
}

bool PrefixCache::reclaim(std::int64_t blocks) {
  bool evicted = false;
  while (blocks_.free_blocks() < blocks) {
    auto lru = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (!it->second.pinned && (lru == entries_.end() || it->second.last_used < lru->second.last_used)) lru = it;
    if (lru == entries_.end()) break;
    held_blocks_ -= static_cast<std::int64_t>(blocks_.table(lru->second.pool_key).size());
    blocks_.release(lru->second.pool_key);
    entries_.erase(lru);
    evicted = true;
  }
  return evicted;
}

}  // namespace plumb::runtime

#include "plumb/model/kv_pool.h"

#include <algorithm>
#include <functional>
#include <numeric>

#include "plumb/util/error.h"

namespace plumb {

int32_t BlockAllocator::take() {
  if (free_.empty()) return next_++;
  std::pop_heap(free_.begin(), free_.end(), std::greater<>());
  const int32_t id = free_.back();
  free_.pop_back();
  return id;
}

void BlockAllocator::give_back(std::span<const int32_t> ids) {
  for (int32_t id : ids) {
    free_.push_back(id);
    std::push_heap(free_.begin(), free_.end(), std::greater<>());
  }
}

SequenceBlocks::SequenceBlocks(SequenceBlocks&& o) noexcept : ids(std::move(o.ids)), owner(std::move(o.owner)) {
  o.ids.clear();
}

SequenceBlocks& SequenceBlocks::operator=(SequenceBlocks&& o) noexcept {
  if (this != &o) {
    if (owner) owner->give_back(ids);
    ids = std::move(o.ids);
    owner = std::move(o.owner);
    o.ids.clear();
  }
  return *this;
}

SequenceBlocks::~SequenceBlocks() {
  if (owner) owner->give_back(ids);
}

backend::KvStorage default_kv_storage(Arch arch, Numerics numerics) {
  using backend::KvRowFormat;
  if (numerics != Numerics::Faithful) return {};
  if (arch == Arch::DeepseekV3) return {KvRowFormat::BF16, KvRowFormat::F32};
  return {KvRowFormat::FP8, KvRowFormat::FP4};
}

KvPool::KvPool(backend::Backend& be) : be_(be), allocator_(std::make_shared<BlockAllocator>()) {}

backend::PagedCache KvPool::empty_cache(std::size_t i, int64_t per_block) const {
  using backend::KvRowFormat;
  const KvRowFormat f = kinds_[i] == Kind::kIndexKey ? storage_.index_keys
                        : kinds_[i] == Kind::kRopeKey && storage_.entries == KvRowFormat::FP8 ? KvRowFormat::BF16
                                                                                               : storage_.entries;
  backend::PagedCache c;
  c.per_block = per_block;
  c.spec = {f, rows_[i], f == KvRowFormat::FP8 ? ropes_[i] : 0};
  c.pool = c.encoded() ? be_.full(backend::ElemType::I32, {0, backend::kv_row_words(c.spec)}, 0.f)
                       : be_.full(backend::ElemType::F32, {0, rows_[i]}, 0.f);
  return c;
}

int KvPool::add(int64_t layer, int64_t ratio, int64_t row, Kind kind, int64_t rope) {
  if (ratio < 1) fail("KV pool: a cache of one entry per {} positions", ratio);
  if (rope < 0 || rope > row) fail("KV pool: {} rope dims in a cache row of {}", rope, row);
  if (capacity_ > 0) fail("KV pool: caches are added before the first forward");
  // The private block size holds whole entries of every cache.
  block_size_ = std::lcm(block_size_, ratio);
  layers_.push_back(layer);
  ratios_.push_back(ratio);
  rows_.push_back(row);
  ropes_.push_back(rope);
  kinds_.push_back(kind);
  caches_.push_back(empty_cache(caches_.size(), 0));
  for (std::size_t i = 0; i < caches_.size(); ++i) caches_[i].per_block = block_size_ / ratios_[i];
  return static_cast<int>(caches_.size()) - 1;
}

void KvPool::set_storage(const backend::KvStorage& storage) {
  using backend::KvRowFormat;
  if (storage.entries == KvRowFormat::FP4)
    fail("KV pool: cache entries are stored as f32, bf16 or fp8, not fp4 (fp4 is an indexer-key format)");
  if (storage.index_keys == KvRowFormat::FP8)
    fail("KV pool: indexer keys are stored as f32, bf16 or fp4, not fp8");
  if (storage.bf16_recent < 0) fail("KV pool: --kv-bf16-recent {} is negative", storage.bf16_recent);
  for (std::size_t i = 0; i < caches_.size(); ++i)
    if (kinds_[i] == Kind::kIndexKey && storage.index_keys == KvRowFormat::FP4 && rows_[i] % 2 != 0)
      fail("KV pool: fp4 indexer keys need an even key size, layer {} has {}", layers_[i], rows_[i]);
  storage_ = storage;
  capacity_ = 0;
  for (std::size_t i = 0; i < caches_.size(); ++i) caches_[i] = empty_cache(i, caches_[i].per_block);
}

int64_t KvPool::entry_values(int64_t layer) const {
  int64_t n = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i)
    if (layers_[i] == layer) n += rows_[i];
  return n;
}

void KvPool::use_external_blocks(int64_t block_size, int64_t blocks) {
  if (blocks < 1) fail("KV pool: the engine's pool must hold at least one block, got {}", blocks);
  for (int64_t r : ratios_)
    if (block_size < 1 || block_size % r != 0)
      fail("KV pool: a block of {} positions does not hold whole entries of a cache with one per {} positions",
           block_size, r);
  block_size_ = block_size;
  max_blocks_ = blocks;
  allocator_.reset();
  capacity_ = 0;
  for (std::size_t i = 0; i < caches_.size(); ++i) caches_[i] = empty_cache(i, block_size / ratios_[i]);
}

SequenceBlocks KvPool::new_blocks() const {
  SequenceBlocks b;
  b.owner = allocator_;
  return b;
}

backend::BlockTables KvPool::prepare(std::span<const SequenceStep> batch) {
  std::vector<std::vector<int32_t>> tables;
  int64_t top = 0;  // highest id + 1
  for (std::size_t i = 0; i < batch.size(); ++i) {
    SequenceBlocks& b = batch[i].state->blocks;
    const int64_t positions = batch[i].state->pos + static_cast<int64_t>(batch[i].tokens.size());
    const int64_t need = blocks_for(positions);
    if (b.owner) {
      if (b.owner != allocator_) fail("forward: sequence {} was made before the KV pool's blocks changed hands", i);
      while (static_cast<int64_t>(b.ids.size()) < need) b.ids.push_back(b.owner->take());
    } else if (allocator_) {
      fail("forward: sequence {} holds blocks of another KV pool", i);
    } else if (static_cast<int64_t>(b.ids.size()) < need) {
      fail("forward: sequence {}'s block table has {} blocks of {} positions; this step reaches position {}", i,
           b.ids.size(), block_size_, positions - 1);
    }
    for (std::size_t k = 0; k < static_cast<std::size_t>(need); ++k) {
      const int32_t id = b.ids[k];
      if (id < 0 || (max_blocks_ > 0 && id >= max_blocks_))
        fail("forward: block {} of sequence {}'s table is {}, outside the KV pool of {} blocks", k, i, id, max_blocks_);
      top = std::max<int64_t>(top, int64_t{id} + 1);
    }
    tables.emplace_back(b.ids.begin(), b.ids.begin() + static_cast<std::ptrdiff_t>(need));
  }
  reserve(top);
  return backend::make_block_tables(be_, tables);
}

SequenceBlocks KvPool::fork_blocks(const SequenceState& s, std::span<const int32_t> from, std::span<const int32_t> to) {
  const int64_t need = blocks_for(s.pos);
  SequenceBlocks out;
  std::vector<int32_t> src;
  if (allocator_) {
    if (!from.empty() || !to.empty()) fail("fork: block ids given to a model whose KV pool allocates its own");
    if (s.blocks.owner != allocator_) fail("fork: the sequence holds blocks of another KV pool");
    if (static_cast<int64_t>(s.blocks.ids.size()) < need)
      fail("fork: the sequence's {} blocks do not cover its {} positions", s.blocks.ids.size(), s.pos);
    src.assign(s.blocks.ids.begin(), s.blocks.ids.begin() + static_cast<std::ptrdiff_t>(need));
    out = new_blocks();
    for (int64_t i = 0; i < need; ++i) out.ids.push_back(allocator_->take());
  } else {
    if (from.size() != to.size()) fail("fork: {} source blocks for {} destination blocks", from.size(), to.size());
    if (static_cast<int64_t>(from.size()) < need)
      fail("fork: {} blocks of {} positions do not cover the sequence's {} positions", from.size(), block_size_, s.pos);
    src.assign(from.begin(), from.end());
    out.ids.assign(to.begin(), to.end());
  }
  int64_t top = 0;
  for (const std::vector<int32_t>* ids : {&src, &out.ids})
    for (int32_t id : *ids) {
      if (id < 0 || (max_blocks_ > 0 && id >= max_blocks_))
        fail("fork: block {} is outside the KV pool of {} blocks", id, max_blocks_);
      top = std::max<int64_t>(top, int64_t{id} + 1);
    }
  reserve(top);
  for (backend::PagedCache& c : caches_) {
    std::vector<int64_t> from_rows, to_rows;
    for (std::size_t i = 0; i < src.size(); ++i)
      if (src[i] != out.ids[i]) {
        from_rows.push_back(src[i] * c.per_block);
        to_rows.push_back(out.ids[i] * c.per_block);
      }
    be_.copy_row_runs(c.pool, from_rows, to_rows, c.per_block);
  }
  return out;
}

void KvPool::reserve(int64_t blocks) {
  if (blocks <= capacity_) return;
  int64_t cap = std::max<int64_t>({blocks, 2 * capacity_, 4});  // doubling: amortized O(1) growth
  if (max_blocks_ > 0) cap = std::min(cap, max_blocks_);
  for (backend::PagedCache& c : caches_) {
    backend::Tensor grown = be_.full(c.pool.type(), {cap * c.per_block, c.pool.row_size()}, 0.f);
    if (capacity_ > 0) be_.copy_rows(grown, 0, c.pool, 0, capacity_ * c.per_block);
    c.pool = grown;
  }
  capacity_ = cap;
}

}  // namespace plumb

#include "plumb/tokenizer/bpe.h"

#include <queue>

#include "plumb/tokenizer/byte_level.h"
#include "plumb/util/error.h"

namespace plumb {
namespace {

using nlohmann::json;

constexpr std::size_t kCacheMaxPieceBytes = 256;  // long pieces are rare and would bloat the cache
constexpr std::size_t kCacheMaxEntries = 1 << 16;

void require_null_or(const json& model, const char* field, const json& allowed) {
  if (model.contains(field) && !model[field].is_null() && model[field] != allowed)
    fail("unsupported BPE model: {} = {}", field, model[field].dump());
}

}  // namespace

BpeModel::BpeModel(BpeModel&& o) noexcept
    : tokens_(std::move(o.tokens_)), ids_(std::move(o.ids_)), present_(std::move(o.present_)),
      merges_(std::move(o.merges_)), byte_ids_(o.byte_ids_) {}

BpeModel& BpeModel::operator=(BpeModel&& o) noexcept {
  tokens_ = std::move(o.tokens_);
  ids_ = std::move(o.ids_);
  present_ = std::move(o.present_);
  merges_ = std::move(o.merges_);
  byte_ids_ = o.byte_ids_;
  std::lock_guard lock(cache_mutex_);
  cache_.clear();
  return *this;
}

BpeModel BpeModel::build(const BpeSource& source) {
  const json& model = source.options;
  std::string type = model.value("type", "BPE");
  if (type != "BPE") fail("unsupported model type \"{}\" (only BPE)", type);
  require_null_or(model, "dropout", json());
  require_null_or(model, "continuing_subword_prefix", "");
  require_null_or(model, "end_of_word_suffix", "");
  require_null_or(model, "ignore_merges", false);
  BpeModel bpe;
  bpe.read_vocab(source);
  bpe.read_merges(source);
  return bpe;
}

void BpeModel::read_vocab(const BpeSource& source) {
  std::size_t limit = 0;
  for (const auto& [token, id] : source.vocab) limit = std::max<std::size_t>(limit, id + 1);
  tokens_.resize(limit);
  present_.resize(limit);
  for (const auto& [token, id] : source.vocab) {
    tokens_[id] = token;
    present_[id] = true;
  }
  ids_.build(tokens_, present_);
  for (unsigned b = 0; b < 256; ++b) {
    auto id = find(byte_level::token_for_byte(static_cast<unsigned char>(b)));
    if (!id) fail("model.vocab lacks the byte-level token for byte 0x{:02X}", b);
    byte_ids_[b] = *id;
  }
}

void BpeModel::read_merges(const BpeSource& source) {
  merges_.reserve(source.merges.size());
  std::string joined;
  for (std::size_t rank = 0; rank < source.merges.size(); ++rank) {
    auto [left, right] = source.merges[rank];
    (joined = left) += right;
    auto l = find(left), r = find(right), merged = find(joined);
    if (!l || !r || !merged) fail("model.merges[{}] \"{} {}\" uses a token missing from the vocab", rank, left, right);
    merges_.emplace(pair_key(*l, *r), Merge{static_cast<std::uint32_t>(rank), *merged});  // first rank wins
  }
}

std::optional<std::uint32_t> BpeModel::find(std::string_view token) const {
  return ids_.find(token, tokens_);
}

void BpeModel::encode_piece(std::string_view bytes, std::vector<std::uint32_t>& out) const {
  bool cacheable = bytes.size() <= kCacheMaxPieceBytes;
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (auto it = cache_.find(std::string(bytes)); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<std::uint32_t> ids;
  ids.reserve(bytes.size());
  for (unsigned char b : bytes) ids.push_back(byte_ids_[b]);
  merge_symbols(ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= kCacheMaxEntries) cache_.clear();
    cache_.emplace(std::string(bytes), std::move(ids));
  }
}

// Merges `ids` in place. Symbols form a doubly linked list over the initial positions; the heap
// holds candidate merges ordered by (rank, position), and a popped candidate is applied only if
// both of its symbols are still what they were when it was pushed.
void BpeModel::merge_symbols(std::vector<std::uint32_t>& ids) const {
  const int n = static_cast<int>(ids.size());
  if (n < 2) return;
  std::vector<int> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    std::uint32_t rank;
    int pos;
    std::uint32_t left, right;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int pos) {
    if (pos < 0 || next[pos] < 0) return;
    auto it = merges_.find(pair_key(ids[pos], ids[next[pos]]));
    if (it != merges_.end()) heap.push({it->second.rank, pos, ids[pos], ids[next[pos]]});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);

  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    int right = next[c.pos];
    if (!alive[c.pos] || right < 0 || ids[c.pos] != c.left || ids[right] != c.right) continue;  // stale
    ids[c.pos] = merges_.find(pair_key(c.left, c.right))->second.result;
    alive[right] = false;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    consider(prev[c.pos]);
    consider(c.pos);
  }
  int w = 0;
  for (int i = 0; i >= 0; i = next[i]) ids[w++] = ids[i];
  ids.resize(w);
}

}  // namespace plumb

#include "plumb/tokenizer/token_trie.h"

#include <algorithm>

namespace plumb {

TokenTrie::TokenTrie(const std::vector<std::string>& bytes) {
  std::vector<std::uint32_t> sorted;
  for (std::uint32_t id = 0; id < bytes.size(); ++id)
    if (!bytes[id].empty()) sorted.push_back(id);
  // Byte order (std::string compares as unsigned char), so that every subtree is a contiguous range.
  std::stable_sort(sorted.begin(), sorted.end(), [&](std::uint32_t a, std::uint32_t b) { return bytes[a] < bytes[b]; });
  build(bytes, sorted, 0);
  std::size_t single = 0;
  for (std::uint32_t e = 0; e < nodes_[0].edges; ++e) single += nodes_[edge_child_[e]].ids > 0;
  every_byte_ = single == 256;
}

// The node for the ids in `sorted`, which all share their first `depth` bytes.
std::uint32_t TokenTrie::build(const std::vector<std::string>& bytes, std::span<const std::uint32_t> sorted, std::size_t depth) {
  const auto index = static_cast<std::uint32_t>(nodes_.size());
  nodes_.emplace_back();
  std::size_t ending = 0;  // the ids of exactly `depth` bytes come first
  while (ending < sorted.size() && bytes[sorted[ending]].size() == depth) ++ending;
  if (ending > 0) max_length_ = std::max(max_length_, depth);
  nodes_[index].first_id = static_cast<std::uint32_t>(ids_.size());
  nodes_[index].ids = static_cast<std::uint32_t>(ending);
  ids_.insert(ids_.end(), sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(ending));

  std::vector<std::size_t> starts;  // where each child's range begins in `sorted`
  for (std::size_t k = ending; k < sorted.size(); ++k)
    if (k == ending || bytes[sorted[k]][depth] != bytes[sorted[k - 1]][depth]) starts.push_back(k);
  const auto first_edge = static_cast<std::uint32_t>(edge_bytes_.size());
  nodes_[index].first_edge = first_edge;
  nodes_[index].edges = static_cast<std::uint32_t>(starts.size());
  edge_bytes_.resize(first_edge + starts.size());
  edge_child_.resize(first_edge + starts.size());
  for (std::size_t g = 0; g < starts.size(); ++g) {
    const std::size_t end = g + 1 < starts.size() ? starts[g + 1] : sorted.size();
    edge_bytes_[first_edge + g] = static_cast<unsigned char>(bytes[sorted[starts[g]]][depth]);
    const std::uint32_t c = build(bytes, sorted.subspan(starts[g], end - starts[g]), depth + 1);
    edge_child_[first_edge + g] = c;
  }
  return index;
}

std::uint32_t TokenTrie::child(std::uint32_t node, unsigned char byte) const {
  const Node& n = nodes_[node];
  const auto begin = edge_bytes_.begin() + n.first_edge, end = begin + n.edges;
  const auto it = std::lower_bound(begin, end, byte);
  return it != end && *it == byte ? edge_child_[static_cast<std::size_t>(n.first_edge + (it - begin))] : 0;
}

std::size_t TokenTrie::fewest_tokens(std::string_view text) const {
  // fewest[i]: tokens for text[i..]; each step follows the trie from i as far as text allows.
  std::vector<std::size_t> fewest(text.size() + 1, kNone);
  fewest[text.size()] = 0;
  for (std::size_t i = text.size(); i-- > 0;) {
    std::uint32_t node = 0;
    for (std::size_t j = i; j < text.size(); ++j) {
      node = child(node, static_cast<unsigned char>(text[j]));
      if (node == 0) break;
      if (nodes_[node].ids > 0 && fewest[j + 1] != kNone) fewest[i] = std::min(fewest[i], fewest[j + 1] + 1);
    }
  }
  return fewest[0];
}

}  // namespace plumb

#pragma once
// A prefix tree over token bytes, built once per vocabulary, for constrained decoding: walking
// it together with a byte-level recognizer costs one recognizer step per distinct token prefix
// it does not prune, instead of one per byte of every token. Nodes and edges are flat arrays
// (children of a node contiguous, sorted by byte).
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace plumb {

class TokenTrie {
 public:
  // Holds every id whose `bytes[id]` is not empty (ids with equal bytes share a node).
  explicit TokenTrie(const std::vector<std::string>& bytes);

  // Depth first, children in byte order. `v.enter(depth, byte)`: the walk goes down from a node
  // `depth` bytes deep along `byte`; false skips that subtree. `v.tokens(depth, ids)`: the ids
  // whose bytes are the `depth` bytes entered so far.
  template <typename Visitor>
  void walk(Visitor& v) const {
    walk_from(0, 0, v);
  }

  // The fewest tokens whose bytes concatenate to `text` (0 for ""; kNone when none do).
  static constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
  std::size_t fewest_tokens(std::string_view text) const;

  bool has_every_byte() const { return every_byte_; }  // each of the 256 single bytes is a token
  std::size_t node_count() const { return nodes_.size(); }
  std::size_t max_length() const { return max_length_; }

 private:
  struct Node {
    std::uint32_t first_edge = 0, edges = 0;  // into edge_bytes_ / edge_child_
    std::uint32_t first_id = 0, ids = 0;      // into ids_
  };

  std::uint32_t build(const std::vector<std::string>& bytes, std::span<const std::uint32_t> sorted, std::size_t depth);
  std::uint32_t child(std::uint32_t node, unsigned char byte) const;  // 0 (the root) when there is none

  template <typename Visitor>
  void walk_from(std::uint32_t node, std::size_t depth, Visitor& v) const {
    const Node& n = nodes_[node];
    for (std::uint32_t e = n.first_edge; e < n.first_edge + n.edges; ++e) {
      if (!v.enter(depth, edge_bytes_[e])) continue;
      const Node& c = nodes_[edge_child_[e]];
      if (c.ids > 0) v.tokens(depth + 1, std::span<const std::uint32_t>(ids_.data() + c.first_id, c.ids));
      walk_from(edge_child_[e], depth + 1, v);
    }
  }

  std::vector<Node> nodes_;  // [0]: the root
  std::vector<unsigned char> edge_bytes_;
  std::vector<std::uint32_t> edge_child_;
  std::vector<std::uint32_t> ids_;
  std::size_t max_length_ = 0;
  bool every_byte_ = false;
};

}  // namespace plumb

#pragma once
// String -> id lookup over a tokenizer vocabulary: an open-addressing table of ids (linear
// probing, a power-of-two size at most half full) that compares against the vocabulary strings
// themselves. Loading needs ~400k lookups (three per merge), which a node-based unordered_map
// made the slowest part of reading tokenizer.json.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace plumb {

class TokenIndex {
 public:
  // Indexes tokens[id] for every id with present[id]. Of equal strings, the largest id wins.
  // The index keeps no pointer to `tokens`: find() must be given the same, unchanged vector.
  void build(const std::vector<std::string>& tokens, const std::vector<bool>& present);
  std::optional<std::uint32_t> find(std::string_view token, const std::vector<std::string>& tokens) const;

 private:
  struct Slot {
    std::uint32_t hash = 0;
    std::uint32_t id_plus_one = 0;  // 0: empty
  };
  static std::uint32_t hash_of(std::string_view s);

  std::vector<Slot> slots_;
};

}  // namespace plumb

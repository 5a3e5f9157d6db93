#pragma once
// The byte-level BPE model of tokenizer.json: a vocabulary (token string -> id) and ranked merges.
// A pre-tokenized piece starts as one symbol per byte (the vocabulary's one-character token for
// that byte) and the lowest-ranked adjacent pair is merged, leftmost first, until no pair has a
// merge. Done with a min-heap over a linked list of symbols (O(n log n) per piece), plus a cache
// of recent short pieces, since natural text repeats words constantly.
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "plumb/tokenizer/token_index.h"

namespace plumb {

// The model section of tokenizer.json, as read by read_tokenizer_json(): the big vocab and
// merges tables as views into the parsed file, everything else as JSON.
struct BpeSource {
  nlohmann::json options;  // "type", "dropout", ... (the model object without vocab and merges)
  std::vector<std::pair<std::string_view, std::uint32_t>> vocab;
  std::vector<std::pair<std::string_view, std::string_view>> merges;  // in rank order
};

class BpeModel {
 public:
  static BpeModel build(const BpeSource& source);

  BpeModel() = default;
  BpeModel(BpeModel&& other) noexcept;
  BpeModel& operator=(BpeModel&& other) noexcept;

  // Appends the ids of one pre-tokenized piece given as raw bytes.
  void encode_piece(std::string_view bytes, std::vector<std::uint32_t>& out) const;

  // One past the largest id in the vocabulary.
  std::size_t id_limit() const { return tokens_.size(); }
  // The vocabulary string of `id` ("" for an id with no entry; see has_id).
  const std::string& token(std::uint32_t id) const { return tokens_[id]; }
  bool has_id(std::uint32_t id) const { return id < present_.size() && present_[id]; }
  std::optional<std::uint32_t> find(std::string_view token) const;

 private:
  struct Merge {
    std::uint32_t rank;
    std::uint32_t result;
  };
  static std::uint64_t pair_key(std::uint32_t left, std::uint32_t right) { return (std::uint64_t(left) << 32) | right; }

  void read_vocab(const BpeSource& source);
  void read_merges(const BpeSource& source);
  void merge_symbols(std::vector<std::uint32_t>& ids) const;

  std::vector<std::string> tokens_;
  TokenIndex ids_;  // looks up in tokens_
  std::vector<bool> present_;
  std::unordered_map<std::uint64_t, Merge> merges_;
  std::array<std::uint32_t, 256> byte_ids_{};

  // Cache of encoded pieces; guarded because encode is const and may run on several threads.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<std::uint32_t>> cache_;
};

}  // namespace plumb

#pragma once
// Added tokens (special tokens such as "<｜User｜>" and extra vocabulary) are found in the raw text
// before any BPE runs, as HF tokenizers does: two passes, first the tokens marked
// normalized=false over the original text, then the normalized=true ones over what is left (after
// normalization, which is the identity for DeepSeek). Each pass takes, at the leftmost position
// where some token occurs, the longest one (Aho-Corasick "leftmost-longest"), then honours the
// token's single_word / lstrip / rstrip flags.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "plumb/tokenizer/regex.h"

namespace plumb {

struct AddedToken {
  std::uint32_t id = 0;
  std::string content;
  bool special = false;      // dropped by decode(skip_special=true)
  bool normalized = false;   // matched after normalization (second pass)
  bool lstrip = false;       // swallows the whitespace before it
  bool rstrip = false;       // swallows the whitespace after it
  bool single_word = false;  // only matches when not inside a word
};

// A span of the input: an added token (is_added) or text for the normal pipeline.
struct TextSegment {
  std::string_view text;
  bool is_added = false;
  std::uint32_t id = 0;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher();
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

  // Splits valid UTF-8 `text` into added-token and plain segments covering it in order.
  std::vector<TextSegment> split(std::string_view text) const;

 private:
  // A byte trie of token contents; node 0 is the root.
  struct Trie {
    std::unordered_map<std::uint64_t, std::uint32_t> children;  // (node << 8 | byte) -> node
    std::vector<int> token_at;  // per node: index into tokens_ of the token ending there, or -1
    std::uint32_t add_node();
    void insert(std::string_view content, int token_index);
    // Longest token starting at `pos`: {token index, end} or {-1, pos}.
    std::pair<int, std::size_t> longest_at(std::string_view text, std::size_t pos) const;
  };

  void split_pass(const Trie& trie, std::string_view text, std::vector<TextSegment>& out) const;
  bool is_single_word_match(std::string_view text, std::size_t start, std::size_t end) const;
  std::size_t whitespace_start_before(std::string_view text, std::size_t pos) const;
  std::size_t whitespace_end_after(std::string_view text, std::size_t pos) const;

  std::vector<AddedToken> tokens_;
  Trie raw_trie_, normalized_trie_;
  Regex word_char_, whitespace_char_;
};

}  // namespace plumb

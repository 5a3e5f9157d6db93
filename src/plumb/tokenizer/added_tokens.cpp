#include "plumb/tokenizer/added_tokens.h"

namespace plumb {
namespace {

// A Unicode word character as Rust's regex crate defines \w (HF uses it for single_word).
constexpr const char* kWordChar = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]";
constexpr const char* kWhitespaceChar = "\\p{White_Space}";

bool is_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

std::size_t previous_char_start(std::string_view text, std::size_t pos) {
  do --pos;
  while (pos > 0 && is_continuation(text[pos]));
  return pos;
}

std::size_t next_char_end(std::string_view text, std::size_t pos) {
  do ++pos;
  while (pos < text.size() && is_continuation(text[pos]));
  return pos;
}

}  // namespace

std::uint32_t AddedTokenMatcher::Trie::add_node() {
  token_at.push_back(-1);
  return static_cast<std::uint32_t>(token_at.size() - 1);
}

void AddedTokenMatcher::Trie::insert(std::string_view content, int token_index) {
  if (token_at.empty()) add_node();
  std::uint32_t node = 0;
  for (unsigned char b : content) {
    std::uint64_t key = (std::uint64_t(node) << 8) | b;
    auto it = children.find(key);
    if (it == children.end()) it = children.emplace(key, add_node()).first;
    node = it->second;
  }
  token_at[node] = token_index;  // a later duplicate wins, like HF's content -> id map
}

std::pair<int, std::size_t> AddedTokenMatcher::Trie::longest_at(std::string_view text, std::size_t pos) const {
  std::pair<int, std::size_t> best{-1, pos};
  if (token_at.empty()) return best;
  std::uint32_t node = 0;
  for (std::size_t i = pos; i < text.size(); ++i) {
    auto it = children.find((std::uint64_t(node) << 8) | static_cast<unsigned char>(text[i]));
    if (it == children.end()) break;
    node = it->second;
    if (token_at[node] >= 0) best = {token_at[node], i + 1};
  }
  return best;
}

AddedTokenMatcher::AddedTokenMatcher() : AddedTokenMatcher(std::vector<AddedToken>{}) {}

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens)
    : tokens_(tokens), word_char_(kWordChar), whitespace_char_(kWhitespaceChar) {
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].content.empty()) continue;  // HF ignores empty added tokens
    (tokens_[i].normalized ? normalized_trie_ : raw_trie_).insert(tokens_[i].content, static_cast<int>(i));
  }
}

std::vector<TextSegment> AddedTokenMatcher::split(std::string_view text) const {
  std::vector<TextSegment> first;
  split_pass(raw_trie_, text, first);
  // The normalizer is the identity for the files we accept, so the second pass sees the same bytes.
  std::vector<TextSegment> result;
  for (const TextSegment& s : first) {
    if (s.is_added) result.push_back(s);
    else split_pass(normalized_trie_, s.text, result);
  }
  return result;
}

void AddedTokenMatcher::split_pass(const Trie& trie, std::string_view text, std::vector<TextSegment>& out) const {
  std::size_t emitted = 0;  // end of the last segment pushed
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto [index, end] = trie.longest_at(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    std::size_t start = pos;
    pos = end;  // a rejected match still consumes its bytes, as Aho-Corasick's find_iter does
    const AddedToken& token = tokens_[index];
    if (token.single_word && !is_single_word_match(text, start, end)) continue;
    if (token.lstrip) start = std::max(whitespace_start_before(text, start), emitted);
    // HF resumes its search at the match end even after rstrip, and could then emit overlapping
    // segments if a token began with whitespace; we resume after the swallowed whitespace instead.
    if (token.rstrip) end = pos = whitespace_end_after(text, end);
    if (emitted < start) out.push_back({text.substr(emitted, start - emitted)});
    out.push_back({text.substr(start, end - start), true, token.id});
    emitted = end;
  }
  if (emitted < text.size()) out.push_back({text.substr(emitted)});
}

bool AddedTokenMatcher::is_single_word_match(std::string_view text, std::size_t start, std::size_t end) const {
  auto is_word = [&](std::size_t a, std::size_t b) { return word_char_.matches_entirely(text.substr(a, b - a)); };
  bool word_before = start > 0 && is_word(previous_char_start(text, start), start);
  bool word_after = end < text.size() && is_word(end, next_char_end(text, end));
  return !word_before && !word_after;
}

std::size_t AddedTokenMatcher::whitespace_start_before(std::string_view text, std::size_t pos) const {
  while (pos > 0) {
    std::size_t prev = previous_char_start(text, pos);
    if (!whitespace_char_.matches_entirely(text.substr(prev, pos - prev))) break;
    pos = prev;
  }
  return pos;
}

std::size_t AddedTokenMatcher::whitespace_end_after(std::string_view text, std::size_t pos) const {
  while (pos < text.size()) {
    std::size_t next = next_char_end(text, pos);
    if (!whitespace_char_.matches_entirely(text.substr(pos, next - pos))) break;
    pos = next;
  }
  return pos;
}

}  // namespace plumb

#include "plumb/server/json_constraint.h"

#include <algorithm>

namespace plumb::server {
namespace {

std::vector<std::string> json_token_bytes(const Tokenizer& tokenizer) {
  std::vector<std::string> bytes(tokenizer.id_limit());
  for (std::uint32_t id = 0; id < bytes.size(); ++id)
    if (tokenizer.has_id(id) && !tokenizer.is_special(id)) bytes[id] = tokenizer.token_bytes(id);
  return bytes;
}

// Whole well-formed UTF-8 characters (RFC 3629) with no '"', '\' or control byte: text that
// JsonMatcher takes inside a string without changing anything but the string's length.
bool plain_string_text(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == '"' || c == '\\') return false;
      ++i;
      continue;
    }
    const std::size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    const auto lo = static_cast<unsigned char>(c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80);
    const auto hi = static_cast<unsigned char>(c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF);
    for (std::size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return false;
    }
    i += n;
  }
  return true;
}

std::vector<bool> plain_text_ids(const std::vector<std::string>& bytes) {
  std::vector<bool> plain(bytes.size());
  for (std::size_t id = 0; id < bytes.size(); ++id) plain[id] = !bytes[id].empty() && plain_string_text(bytes[id]);
  return plain;
}

// The bytes of the ids that are not plain text (the others left empty: not in the trie).
std::vector<std::string> not_plain(const std::vector<std::string>& bytes, const std::vector<bool>& plain) {
  std::vector<std::string> kept(bytes.size());
  for (std::size_t id = 0; id < bytes.size(); ++id)
    if (!plain[id]) kept[id] = bytes[id];
  return kept;
}

}  // namespace

TokenTable::TokenTable(const Tokenizer& tokenizer)
    : bytes(json_token_bytes(tokenizer)), plain(plain_text_ids(bytes)), trie(bytes), not_plain_text(not_plain(bytes, plain)) {
  for (std::uint32_t id = 0; id < bytes.size(); ++id)
    if (plain[id]) plain_text.push_back(id);
  std::stable_sort(plain_text.begin(), plain_text.end(), [&](std::uint32_t a, std::uint32_t b) { return bytes[a].size() < bytes[b].size(); });
  think_end = tokenizer.token_to_id("</think>");
  eos = tokenizer.eos_id();
}

JsonConstraint::JsonConstraint(JsonMatcher matcher, std::shared_ptr<const TokenTable> table, bool after_think_end)
    : matcher_(std::move(matcher)), table_(std::move(table)), waiting_for_think_end_(after_think_end && table_->think_end) {}

std::size_t JsonConstraint::fewest_tokens(const JsonMatcher& state) const {
  std::string completion = state.completion();
  if (auto it = fewest_.find(completion); it != fewest_.end()) return it->second;
  if (fewest_.size() >= 4096) fewest_.clear();  // a bounded cache: completions seen in the last steps
  const std::size_t n = table_->trie.fewest_tokens(completion);
  fewest_.emplace(std::move(completion), n);
  return n;
}

bool JsonConstraint::fits(const JsonMatcher& state, std::int64_t budget) const {
  if (budget < 0) return false;
  const auto room = static_cast<std::size_t>(budget);
  // With every byte a token, the completion's byte count bounds its token count: no need to
  // spell it out while there is that much room.
  if (table_->trie.has_every_byte() && state.completion_size() <= room) return true;
  const std::size_t n = fewest_tokens(state);
  return n != TokenTrie::kNone && n <= room;
}

// Sets allowed[id] for the tokens the matcher takes from its state and, with a budget, after
// which the completion fits in it.
struct JsonConstraint::Walk {
  JsonConstraint& c;
  std::span<bool> allowed;
  const std::int64_t* budget;
  bool any = false;

  bool enter(std::size_t depth, unsigned char byte) {
    JsonMatcher& next = c.states_[depth + 1];
    next.assign_state(c.states_[depth]);
    return next.feed(byte);
  }
  void tokens(std::size_t depth, std::span<const std::uint32_t> ids) {
    if (budget && !c.fits(c.states_[depth], *budget)) return;
    for (std::uint32_t id : ids)
      if (id < allowed.size()) allowed[id] = any = true;
  }
};

bool JsonConstraint::mask_json(std::span<bool> allowed, const std::int64_t* budget) {
  const TokenTable& t = *table_;
  if (states_.empty()) states_.assign(t.trie.max_length() + 1, matcher_);
  states_[0].assign_state(matcher_);
  Walk walk{*this, allowed, budget};
  if (const std::optional<std::size_t> room = matcher_.string_room()) {
    // Plain text leaves the completion as it is: it fits exactly when the current one does.
    if (!budget || fits(matcher_, *budget))
      for (std::uint32_t id : t.plain_text) {
        if (t.bytes[id].size() > *room) break;
        if (id < allowed.size()) allowed[id] = walk.any = true;
      }
    t.not_plain_text.walk(walk);
  } else {
    t.trie.walk(walk);
  }
  return walk.any;
}

void JsonConstraint::mask(std::span<bool> allowed, std::int64_t remaining) {
  const std::int64_t after_this = remaining - 1;  // tokens left once this one is sampled
  if (waiting_for_think_end_) {
    // The reasoning is free while "</think>" and the shortest JSON still fit after this token.
    const std::size_t json = minimal_tokens();
    if (json != TokenTrie::kNone && after_this >= static_cast<std::int64_t>(json) + 1) {
      if (table_->eos && *table_->eos < allowed.size()) allowed[*table_->eos] = false;  // the JSON must still come
      return;
    }
    std::fill(allowed.begin(), allowed.end(), false);
    if (*table_->think_end < allowed.size()) allowed[*table_->think_end] = true;
    return;
  }
  std::fill(allowed.begin(), allowed.end(), false);
  // Below the shortest completion no token fits: keep the output a valid prefix (it ends with "length").
  if (!mask_json(allowed, &after_this)) mask_json(allowed, nullptr);
}

void JsonConstraint::accept(runtime::TokenId token) {
  if (waiting_for_think_end_) {
    waiting_for_think_end_ = token != *table_->think_end;
    return;
  }
  for (char c : table_->bytes.at(token)) matcher_.feed(static_cast<unsigned char>(c));
}

bool JsonConstraint::done() const { return !waiting_for_think_end_ && matcher_.complete(); }

}  // namespace plumb::server

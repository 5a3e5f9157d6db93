#pragma once
// response_format enforcement: a runtime::TokenConstraint that allows only tokens whose bytes
// keep the output a prefix of JSON matching the schema (JsonMatcher), and reports done() when
// the value is complete. In thinking mode the reasoning is free and the JSON starts after the
// "</think>" token (the JSON belongs in the content, CHAT-ENCODING.md).
//
// Budget: of those tokens it allows only the ones after which the shortest completion
// (JsonMatcher::completion(), counted in the fewest tokens that spell it) still fits in the
// tokens the request has left, so the value closes before max_tokens or the context ends it.
// The first token always fits when the budget is at least minimal_tokens(); below that nothing
// can complete the value, the constraint keeps the output a valid prefix and the request ends
// with finish_reason "length". In thinking mode the reasoning is cut with "</think>" while there
// is still room for the JSON after it, and cannot end the request with EOS.
//
// Cost: the tokens are walked as a prefix tree (TokenTrie) together with the matcher, pruning
// every subtree the matcher refuses; inside a string, the tokens of plain text are allowed as a
// block (they leave the completion as it is) and only the others are walked.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "plumb/runtime/engine.h"
#include "plumb/server/json_matcher.h"
#include "plumb/tokenizer/token_trie.h"
#include "plumb/tokenizer/tokenizer.h"

namespace plumb::server {

// The bytes of every token id and their prefix trees, built once per tokenizer; special tokens
// are never JSON.
struct TokenTable {
  explicit TokenTable(const Tokenizer& tokenizer);
  std::vector<std::string> bytes;  // empty for special tokens and unknown ids
  std::vector<bool> plain;         // per id: its bytes are plain string text (JsonMatcher::string_room)
  TokenTrie trie;                  // every id with bytes
  TokenTrie not_plain_text;               // the ids with bytes that are not plain
  std::vector<std::uint32_t> plain_text;  // the plain ids, shortest first
  std::optional<runtime::TokenId> think_end, eos;
};

class JsonConstraint : public runtime::TokenConstraint {
 public:
  // `after_think_end`: free tokens until table->think_end has been sampled (thinking mode).
  JsonConstraint(JsonMatcher matcher, std::shared_ptr<const TokenTable> table, bool after_think_end);

  void mask(std::span<bool> allowed, std::int64_t remaining) override;
  void accept(runtime::TokenId token) override;
  bool done() const override;

  // The fewest tokens that can write the whole value (the budget below which no request can
  // complete): the shortest completion of the empty output, in the fewest tokens.
  std::size_t minimal_tokens() const { return fewest_tokens(matcher_); }

 private:
  struct Walk;
  std::size_t fewest_tokens(const JsonMatcher& state) const;  // for its completion; TokenTrie::kNone if unwritable
  bool fits(const JsonMatcher& state, std::int64_t budget) const;
  bool mask_json(std::span<bool> allowed, const std::int64_t* budget);  // true when it allowed some token

  JsonMatcher matcher_;
  std::shared_ptr<const TokenTable> table_;
  bool waiting_for_think_end_;
  std::vector<JsonMatcher> states_;  // the walk's matcher after each depth of the trie
  mutable std::unordered_map<std::string, std::size_t> fewest_;  // completion -> fewest tokens
};

}  // namespace plumb::server

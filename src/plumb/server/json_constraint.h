#pragma once
// response_format enforcement: a runtime::TokenConstraint that allows only tokens whose bytes
// keep the output a prefix of JSON matching the schema (JsonMatcher), and reports done() when
// the value is complete. In thinking mode the reasoning is free and the JSON starts after the
// "</think>" token (the JSON belongs in the content, CHAT-ENCODING.md). Cost: every token of the
// vocabulary is tried at every step (O(vocabulary x token length)).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "plumb/runtime/engine.h"
#include "plumb/server/json_matcher.h"
#include "plumb/tokenizer/tokenizer.h"

namespace plumb::server {

// The bytes of every token id, built once per tokenizer; special tokens are never JSON.
struct TokenTable {
  explicit TokenTable(const Tokenizer& tokenizer);
  std::vector<std::string> bytes;  // empty for special tokens and unknown ids
  std::optional<runtime::TokenId> think_end;
};

class JsonConstraint : public runtime::TokenConstraint {
 public:
  // `after_think_end`: free tokens until table->think_end has been sampled (thinking mode).
  JsonConstraint(JsonMatcher matcher, std::shared_ptr<const TokenTable> table, bool after_think_end);

  void mask(std::span<bool> allowed) override;
  void accept(runtime::TokenId token) override;
  bool done() const override;

 private:
  JsonMatcher matcher_;
  std::shared_ptr<const TokenTable> table_;
  bool waiting_for_think_end_;
};

}  // namespace plumb::server

#include "plumb/server/json_constraint.h"

namespace plumb::server {

TokenTable::TokenTable(const Tokenizer& tokenizer) : bytes(tokenizer.id_limit()) {
  for (std::uint32_t id = 0; id < bytes.size(); ++id)
    if (tokenizer.has_id(id) && !tokenizer.is_special(id)) bytes[id] = tokenizer.token_bytes(id);
  think_end = tokenizer.token_to_id("</think>");
}

JsonConstraint::JsonConstraint(JsonMatcher matcher, std::shared_ptr<const TokenTable> table, bool after_think_end)
    : matcher_(std::move(matcher)), table_(std::move(table)), waiting_for_think_end_(after_think_end && table_->think_end) {}

void JsonConstraint::mask(std::span<bool> allowed) {
  if (waiting_for_think_end_) return;
  for (std::size_t id = 0; id < allowed.size(); ++id) {
    if (id >= table_->bytes.size() || table_->bytes[id].empty()) {
      allowed[id] = false;
      continue;
    }
    JsonMatcher trial = matcher_;
    bool ok = true;
    for (char c : table_->bytes[id])
      if (!(ok = trial.feed(static_cast<unsigned char>(c)))) break;
    allowed[id] = ok;
  }
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

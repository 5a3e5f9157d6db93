#include "plumb/tokenizer/decode_stream.h"

#include "plumb/tokenizer/utf8.h"

namespace plumb {

std::string StreamingDetokenizer::push(std::uint32_t id) {
  const std::string& bytes = tokenizer_.token_bytes(id);
  if (skip_special_ && tokenizer_.is_special(id)) return {};
  pending_ += bytes;
  std::size_t held = utf8::incomplete_tail(pending_);
  std::string ready = utf8::decode_lossy(std::string_view(pending_).substr(0, pending_.size() - held));
  pending_.erase(0, pending_.size() - held);
  return ready;
}

std::string StreamingDetokenizer::finish() {
  std::string rest = utf8::decode_lossy(pending_);
  pending_.clear();
  return rest;
}

}  // namespace plumb

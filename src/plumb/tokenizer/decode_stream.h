#pragma once
// Incremental detokenization for streaming generation: tokens arrive one at a time and may end in
// the middle of a multi-byte UTF-8 character (byte-level BPE splits characters freely). push()
// returns only text made of complete characters and holds back a trailing incomplete sequence
// until the bytes that complete it arrive. Bytes that can never form a character become U+FFFD
// exactly as in Tokenizer::decode, so the concatenated chunks equal the decode of all ids.
#include <cstdint>
#include <string>

#include "plumb/tokenizer/tokenizer.h"

namespace plumb {

class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}

  // Valid UTF-8 text now complete (possibly empty). Throws plumb::Error on an unknown id.
  std::string push(std::uint32_t id);
  // Flushes what is held back (an incomplete character becomes U+FFFD) and resets.
  std::string finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;  // at most 3 bytes: the start of an incomplete character
};

}  // namespace plumb

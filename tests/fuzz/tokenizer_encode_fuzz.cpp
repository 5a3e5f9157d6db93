// libFuzzer target for encoding arbitrary bytes with tiny-kjv's tokenizer (DeepSeek's pre-tokenizer
// regexes, added tokens, BPE). Invalid UTF-8 must be refused with plumb::Error; valid text must
// encode to known ids that decode back to exactly the same bytes (byte-level BPE loses nothing).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "plumb/tokenizer/tokenizer.h"
#include "plumb/tokenizer/utf8.h"
#include "plumb/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const plumb::Tokenizer t = plumb::Tokenizer::load(PLUMB_SOURCE_DIR "/models/tiny-kjv");
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool valid = plumb::utf8::is_valid(text);
  std::vector<std::uint32_t> ids;
  try {
    ids = t.encode(text);
  } catch (const plumb::Error&) {
    if (valid) std::abort();  // valid UTF-8 must always encode
    return 0;
  }
  if (!valid) std::abort();
  for (std::uint32_t id : ids)
    if (!t.has_id(id)) std::abort();
  if (t.decode(ids) != text) std::abort();
  return 0;
}

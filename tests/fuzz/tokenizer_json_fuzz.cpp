// libFuzzer target for tokenizer.json loading. Loading must succeed or throw plumb::Error; a
// loaded tokenizer must encode a fixed text to known ids and decode them again without error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "plumb/tokenizer/tokenizer.h"
#include "plumb/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<plumb::Tokenizer> t;
  try {
    t = plumb::Tokenizer::from_json_text(std::string_view(reinterpret_cast<const char*>(data), size), "", "fuzz.json");
  } catch (const plumb::Error&) {
    return 0;  // rejected input: the expected outcome for most mutations
  }
  for (std::string_view text : {std::string_view("hello world 123"), std::string_view("\xe4\xbd\xa0\xe5\xa5\xbd <x>")}) {
    const std::vector<std::uint32_t> ids = t->encode(text);
    for (std::uint32_t id : ids)
      if (!t->has_id(id)) std::abort();  // encode may only produce ids the tokenizer knows
    t->decode(ids);
  }
  return 0;
}

#pragma once
// Reading tokenizer.json fast: the file is 6-8 MB, almost all of it the BPE vocab (128k entries)
// and merges (127k pairs). A DOM of those in nlohmann::json costs ~0.5 s to build and free, so
// the file is parsed with simdjson and those two tables are handed over as string views into the
// parsed document; the small remaining sections are converted to nlohmann::json.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "plumb/tokenizer/bpe.h"

namespace plumb {

// Token ids (vocabulary and added tokens) must lie below this: 8x the largest real vocabulary
// (262k), and small enough that the per-id tables (~50 bytes an id) stay near 100 MB. An id is an
// index into those tables, so a file naming id 4294967295 must be refused before they are sized.
inline constexpr std::uint32_t kTokenIdLimit = 1u << 21;

struct TokenizerJson {
  nlohmann::json root;  // every top-level section except "model"
  BpeSource model;      // views into `document`
  std::shared_ptr<const void> document;  // keeps the parsed document (and the views) alive
};

// Throws plumb::Error naming `origin` if the text is not JSON or model.vocab / model.merges have
// the wrong shape.
TokenizerJson read_tokenizer_json(std::string_view text, const std::string& origin);

}  // namespace plumb

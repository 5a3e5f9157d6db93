#pragma once
// Reading tokenizer.json fast: the file is 6-8 MB, almost all of it the BPE vocab (128k entries)
// and merges (127k pairs). A DOM of those in nlohmann::json costs ~0.5 s to build and free, so
// the file is parsed with simdjson and those two tables are handed over as string views into the
// parsed document; the small remaining sections are converted to nlohmann::json.
#include <memory>
#include <string>
#include <string_view>

#include "plumb/tokenizer/bpe.h"

namespace plumb {

struct TokenizerJson {
  nlohmann::json root;  // every top-level section except "model"
  BpeSource model;      // views into `document`
  std::shared_ptr<const void> document;  // keeps the parsed document (and the views) alive
};

// Throws plumb::Error naming `origin` if the text is not JSON or model.vocab / model.merges have
// the wrong shape.
TokenizerJson read_tokenizer_json(std::string_view text, const std::string& origin);

}  // namespace plumb

#pragma once
// The normalizer and pre-tokenizer stages of tokenizer.json, restricted to what DeepSeek's files
// use: an empty normalizer Sequence, and a pre-tokenizer Sequence of Split(Regex, "Isolated",
// invert=false) steps ending with ByteLevel(add_prefix_space=false, use_regex=false). Anything
// else is rejected at load with the offending type named, rather than silently mis-tokenized.
#include <nlohmann/json.hpp>

#include <string_view>
#include <vector>

#include "plumb/tokenizer/regex.h"

namespace plumb {

// Throws plumb::Error unless `normalizer` is null or a (nested) Sequence with no normalizers.
void check_identity_normalizer(const nlohmann::json& normalizer);

class PreTokenizer {
 public:
  static PreTokenizer from_json(const nlohmann::json& pre_tokenizer);

  // Splits valid UTF-8 `text` into the pieces BPE encodes independently. Each Split step is
  // applied to every piece of the previous step on its own (look-arounds do not see across
  // pieces); matches and the gaps between them both become pieces, empty ones are dropped. The
  // final ByteLevel step only maps bytes to its alphabet, which the BPE model does itself.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  std::vector<Regex> splits_;
};

}  // namespace plumb

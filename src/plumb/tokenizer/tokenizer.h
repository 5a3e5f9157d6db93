#pragma once
// A HF tokenizer.json byte-level BPE tokenizer (DeepSeek-V3 / V4 family) that produces exactly
// the ids of HF `tokenizers`: added tokens are split out first, the rest goes through the
// pre-tokenizer's regex splits and the BPE merges. Decoding maps tokens back to bytes (ByteLevel
// decoder) and replaces ill-formed UTF-8 with U+FFFD like HF does. No BOS is ever added unless
// asked for: DeepSeek's post-processor is ByteLevel, which adds nothing.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "plumb/tokenizer/added_tokens.h"
#include "plumb/tokenizer/bpe.h"
#include "plumb/tokenizer/pre_tokenizer.h"

namespace plumb {

class Tokenizer {
 public:
  // `path` is a tokenizer.json or a directory holding one. A tokenizer_config.json next to it,
  // when present, names the BOS and EOS tokens. Throws plumb::Error naming the file on any problem.
  static Tokenizer load(const std::string& path);
  // Builds from tokenizer.json text (and optionally tokenizer_config.json text); `origin` names
  // the source in error messages.
  static Tokenizer from_json_text(std::string_view tokenizer_json, std::string_view config_json, const std::string& origin);

  // Ids for `text` (must be valid UTF-8); special tokens written in the text are recognized.
  std::vector<std::uint32_t> encode(std::string_view text, bool add_bos = false) const;

  // Text for `ids`; throws plumb::Error on an id with no token. With skip_special, tokens marked
  // special in added_tokens are left out.
  std::string decode(std::span<const std::uint32_t> ids, bool skip_special = false) const;

  // The raw bytes token `id` stands for (possibly an incomplete UTF-8 sequence).
  const std::string& token_bytes(std::uint32_t id) const;
  bool is_special(std::uint32_t id) const { return id < special_.size() && special_[id]; }
  bool has_id(std::uint32_t id) const { return id < known_.size() && known_[id]; }
  // One past the largest id: the size of the embedding table this tokenizer needs.
  std::size_t id_limit() const { return bytes_.size(); }
  // The id of an added token or vocabulary entry, looked up by its tokenizer.json string.
  std::optional<std::uint32_t> token_to_id(std::string_view token) const;

  std::optional<std::uint32_t> bos_id() const { return bos_id_; }
  std::optional<std::uint32_t> eos_id() const { return eos_id_; }

 private:
  void read_added_tokens(const nlohmann::json& added);
  void read_special_token_names(const nlohmann::json& config);
  void build_id_tables();

  std::vector<AddedToken> added_tokens_;
  AddedTokenMatcher added_matcher_;
  PreTokenizer pre_tokenizer_;
  BpeModel bpe_;
  std::vector<std::string> bytes_;  // per id: the bytes it decodes to
  std::vector<bool> known_, special_;
  std::optional<std::uint32_t> bos_id_, eos_id_;
};

}  // namespace plumb

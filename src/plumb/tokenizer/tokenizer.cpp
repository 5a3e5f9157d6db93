#include "plumb/tokenizer/tokenizer.h"

#include <filesystem>
#include <unordered_set>

#include "plumb/tokenizer/byte_level.h"
#include "plumb/tokenizer/tokenizer_json.h"
#include "plumb/tokenizer/utf8.h"
#include "plumb/util/error.h"
#include "plumb/util/read_file.h"

namespace plumb {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// tokenizer.json is 6-8 MB for DeepSeek; tokenizer_config.json a few KB (or ~200 KB with a chat
// template).
constexpr std::uint64_t kMaxTokenizerBytes = 256u << 20;
// Added tokens are matched with a byte trie, one node per content byte: bounding their total
// size bounds its memory and build time (DeepSeek's ~800 added tokens total ~20 KB).
constexpr std::size_t kMaxAddedTokenBytes = 4u << 20;

json parse_json(std::string_view text, const std::string& origin) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: invalid JSON: {}", origin, e.what());
  }
}

// DeepSeek's post-processor is ByteLevel with trim_offsets, which only adjusts offsets.
void check_post_processor(const json& post) {
  if (post.is_null()) return;
  std::string type = post.value("type", "");
  if (type != "ByteLevel") fail("unsupported post_processor type \"{}\" (only ByteLevel)", type);
}

void check_decoder(const json& decoder) {
  std::string type = decoder.is_object() ? decoder.value("type", "") : "none";
  if (type != "ByteLevel") fail("unsupported decoder type \"{}\" (only ByteLevel)", type);
}

// tokenizer_config.json writes special tokens as "text" or {"content": "text", ...}.
std::optional<std::string> config_token(const json& config, const char* field) {
  if (!config.contains(field)) return std::nullopt;
  const json& v = config[field];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& path) {
  fs::path file = path;
  if (fs::is_directory(file)) file /= "tokenizer.json";
  if (!fs::exists(file)) fail("tokenizer not found: {} (expected a tokenizer.json or a directory holding one)", file.string());
  fs::path config_file = file.parent_path() / "tokenizer_config.json";
  std::string config = fs::exists(config_file)
                           ? read_regular_file(config_file.string(), kMaxTokenizerBytes, "tokenizer config")
                           : "";
  return from_json_text(read_regular_file(file.string(), kMaxTokenizerBytes, "tokenizer file"), config, file.string());
}

Tokenizer Tokenizer::from_json_text(std::string_view tokenizer_json, std::string_view config_json, const std::string& origin) {
  TokenizerJson file = read_tokenizer_json(tokenizer_json, origin);
  const json& root = file.root;
  Tokenizer t;
  try {
    check_identity_normalizer(root.value("normalizer", json()));
    t.pre_tokenizer_ = PreTokenizer::from_json(root.value("pre_tokenizer", json()));
    check_post_processor(root.value("post_processor", json()));
    check_decoder(root.value("decoder", json()));
    t.bpe_ = BpeModel::build(file.model);
    t.read_added_tokens(root.value("added_tokens", json::array()));
    t.build_id_tables();
    if (!config_json.empty()) t.read_special_token_names(parse_json(config_json, origin + " (tokenizer_config.json)"));
  } catch (const json::exception& e) {
    fail("{}: malformed tokenizer.json: {}", origin, e.what());
  } catch (const Error& e) {
    rethrow_with_context(origin, e);
  }
  return t;
}

void Tokenizer::read_added_tokens(const json& added) {
  if (!added.is_array()) fail("added_tokens must be an array, got {}", added.type_name());
  std::size_t total_bytes = 0;
  for (std::size_t i = 0; i < added.size(); ++i) {
    const json& a = added[i];
    AddedToken t;
    const json& id = a.at("id");
    // nlohmann would convert -1 to 4294967295 silently; ids index the tables built below.
    if (!id.is_number_unsigned() || id.get<std::uint64_t>() >= kTokenIdLimit)
      fail("added_tokens[{}].id must be an integer in [0, {}), got {}", i, kTokenIdLimit, id.dump());
    t.id = id.get<std::uint32_t>();
    t.content = a.at("content").get<std::string>();
    total_bytes += t.content.size();
    if (total_bytes > kMaxAddedTokenBytes)
      fail("added_tokens: the contents of the first {} tokens total more than the {} bytes plumb accepts", i + 1,
           kMaxAddedTokenBytes);
    t.special = a.value("special", false);
    t.normalized = a.value("normalized", !t.special);  // HF's default
    t.lstrip = a.value("lstrip", false);
    t.rstrip = a.value("rstrip", false);
    t.single_word = a.value("single_word", false);
    added_tokens_.push_back(std::move(t));
  }
  added_matcher_ = AddedTokenMatcher(added_tokens_);
}

void Tokenizer::build_id_tables() {
  std::size_t limit = bpe_.id_limit();
  for (const AddedToken& a : added_tokens_) limit = std::max<std::size_t>(limit, a.id + 1);
  bytes_.assign(limit, {});
  known_.assign(limit, false);
  special_.assign(limit, false);
  // HF decodes an id to its added-token content if it has one, else its vocabulary string, and
  // decides "special" by that string.
  std::vector<const std::string*> text(limit, nullptr);
  std::unordered_set<std::string> special_contents;
  for (std::uint32_t id = 0; id < bpe_.id_limit(); ++id)
    if (bpe_.has_id(id)) text[id] = &bpe_.token(id);
  for (const AddedToken& a : added_tokens_) {
    text[a.id] = &a.content;
    if (a.special) special_contents.insert(a.content);
  }
  for (std::size_t id = 0; id < limit; ++id) {
    if (!text[id]) continue;
    known_[id] = true;
    bytes_[id] = byte_level::decode_token(*text[id]);
    special_[id] = special_contents.count(*text[id]) > 0;
  }
}

void Tokenizer::read_special_token_names(const json& config) {
  auto lookup = [&](const char* field) -> std::optional<std::uint32_t> {
    auto name = config_token(config, field);
    if (!name) return std::nullopt;
    auto id = token_to_id(*name);
    if (!id) fail("tokenizer_config.json: {} \"{}\" is not in the vocabulary", field, *name);
    return id;
  };
  bos_id_ = lookup("bos_token");
  eos_id_ = lookup("eos_token");
}

std::optional<std::uint32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (auto it = added_tokens_.rbegin(); it != added_tokens_.rend(); ++it)
    if (it->content == token) return it->id;
  return bpe_.find(token);
}

std::vector<std::uint32_t> Tokenizer::encode(std::string_view text, bool add_bos) const {
  if (std::size_t bad = utf8::first_invalid(text); bad != std::string_view::npos)
    fail("cannot tokenize: the text is not valid UTF-8 (byte {} of {})", bad, text.size());
  std::vector<std::uint32_t> ids;
  if (add_bos) {
    if (!bos_id_) fail("cannot add BOS: no bos_token is known (tokenizer_config.json missing or without bos_token)");
    ids.push_back(*bos_id_);
  }
  for (const TextSegment& segment : added_matcher_.split(text)) {
    if (segment.is_added) {
      ids.push_back(segment.id);
      continue;
    }
    for (std::string_view piece : pre_tokenizer_.split(segment.text)) bpe_.encode_piece(piece, ids);
  }
  return ids;
}

const std::string& Tokenizer::token_bytes(std::uint32_t id) const {
  if (!has_id(id)) fail("token id {} is out of range (this tokenizer has ids 0..{})", id, id_limit() - 1);
  return bytes_[id];
}

std::string Tokenizer::decode(std::span<const std::uint32_t> ids, bool skip_special) const {
  std::string bytes;
  for (std::uint32_t id : ids) {
    const std::string& b = token_bytes(id);
    if (!(skip_special && special_[id])) bytes += b;
  }
  return utf8::decode_lossy(bytes);
}

}  // namespace plumb

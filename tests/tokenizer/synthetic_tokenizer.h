#pragma once
// A tiny byte-level BPE tokenizer.json built in code, small enough to derive expected ids by hand:
// byte b has id b, merges h+e -> "he" (256), l+l -> "ll" (257), he+ll -> "hell" (258),
// hell+o -> "hello" (259), Ġ+hello -> "Ġhello" (260). Tests add their own added tokens.
#include <nlohmann/json.hpp>

#include <string>

#include "plumb/tokenizer/byte_level.h"

namespace plumb::test {

inline nlohmann::json synthetic_tokenizer_json(nlohmann::json added_tokens = nlohmann::json::array()) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level::token_for_byte(static_cast<unsigned char>(b))] = b;
  vocab["he"] = 256;
  vocab["ll"] = 257;
  vocab["hell"] = 258;
  vocab["hello"] = 259;
  vocab["Ġhello"] = 260;
  return {
      {"version", "1.0"},
      {"added_tokens", added_tokens},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", nlohmann::json::array()}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", " ?\\p{L}+|\\s+|\\p{N}|[^\\s\\p{L}\\p{N}]+"}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
      {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"vocab", vocab},
        {"merges", {"h e", "l l", "he ll", "hell o", "Ġ hello"}}}},
  };
}

inline nlohmann::json added_token(std::uint32_t id, const std::string& content, nlohmann::json flags = nlohmann::json::object()) {
  nlohmann::json t = {{"id", id},         {"content", content}, {"single_word", false}, {"lstrip", false},
                      {"rstrip", false},  {"normalized", false}, {"special", true}};
  for (auto& [key, value] : flags.items()) t[key] = value;
  return t;
}

}  // namespace plumb::test

#pragma once
// The DeepSeek tokenizers committed under tests/data/tokenizer, loaded once per test process.
// V4-Flash is rebuilt from V3's tokenizer.json and V4's added-token table (the two files differ
// only there; see tests/data/tokenizer/README.md).
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "plumb/tokenizer/tokenizer.h"

namespace plumb::test {

inline std::string tokenizer_data(const std::string& relative) { return std::string(PLUMB_TEST_DATA) + "/tokenizer/" + relative; }
// DeepSeek-V3's tokenizer folder, unpacked into the build tree (tests/CMakeLists.txt).
inline std::string v3_tokenizer(const std::string& file = "") {
  return std::string(PLUMB_V3_TOKENIZER_DIR) + (file.empty() ? "" : "/" + file);
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

inline std::string v4_tokenizer_json_text() {
  nlohmann::json v4 = nlohmann::json::parse(read_text(v3_tokenizer("tokenizer.json")));
  v4["added_tokens"] = nlohmann::json::parse(read_text(tokenizer_data("deepseek-v4-flash/added_tokens.json")));
  return v4.dump();
}

// Writes a V4-Flash model-style directory (tokenizer.json + tokenizer_config.json) under `dir`.
inline std::string write_v4_dir(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << v4_tokenizer_json_text();
  std::filesystem::copy_file(tokenizer_data("deepseek-v4-flash/tokenizer_config.json"), dir / "tokenizer_config.json",
                             std::filesystem::copy_options::overwrite_existing);
  return dir.string();
}

inline const Tokenizer& deepseek_v3() {
  static const Tokenizer t = Tokenizer::load(v3_tokenizer());
  return t;
}

inline const Tokenizer& deepseek_v4() {
  static const Tokenizer t = Tokenizer::from_json_text(
      v4_tokenizer_json_text(), read_text(tokenizer_data("deepseek-v4-flash/tokenizer_config.json")), "deepseek-v4-flash");
  return t;
}

}  // namespace plumb::test

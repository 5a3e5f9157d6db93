#include "plumb/tokenizer/pre_tokenizer.h"

#include <string>

#include "plumb/util/error.h"

namespace plumb {
namespace {

using nlohmann::json;

std::string type_of(const json& j) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) fail("expected an object with a \"type\", got {}", j.dump());
  return j["type"].get<std::string>();
}

// Reads an optional boolean field, requiring it to equal `expected` when present.
void require_flag(const json& j, const char* field, bool expected, const std::string& where) {
  if (!j.contains(field) || j[field].is_null()) return;
  if (!j[field].is_boolean() || j[field].get<bool>() != expected)
    fail("unsupported {}: {} must be {} (got {})", where, field, expected, j[field].dump());
}

Regex split_regex(const json& step) {
  std::string behavior = step.value("behavior", "");
  if (behavior != "Isolated") fail("unsupported pre-tokenizer Split behavior \"{}\" (only \"Isolated\")", behavior);
  require_flag(step, "invert", false, "pre-tokenizer Split");
  const json& pattern = step.at("pattern");
  if (pattern.contains("Regex")) return Regex(pattern["Regex"].get<std::string>());
  fail("unsupported pre-tokenizer Split pattern {} (only {{\"Regex\": ...}})", pattern.dump());
}

void check_byte_level(const json& step) {
  require_flag(step, "add_prefix_space", false, "pre-tokenizer ByteLevel");
  require_flag(step, "use_regex", false, "pre-tokenizer ByteLevel");
}

}  // namespace

void check_identity_normalizer(const json& normalizer) {
  if (normalizer.is_null()) return;
  std::string type = type_of(normalizer);
  if (type != "Sequence") fail("unsupported normalizer type \"{}\" (only an empty Sequence)", type);
  for (const json& inner : normalizer.at("normalizers")) check_identity_normalizer(inner);
}

PreTokenizer PreTokenizer::from_json(const json& pre_tokenizer) {
  if (pre_tokenizer.is_null()) fail("tokenizer.json has no pre_tokenizer; byte-level BPE needs ByteLevel");
  std::vector<json> steps;
  if (type_of(pre_tokenizer) == "Sequence") steps = pre_tokenizer.at("pretokenizers").get<std::vector<json>>();
  else steps.push_back(pre_tokenizer);

  PreTokenizer result;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    std::string type = type_of(steps[i]);
    bool last = i + 1 == steps.size();
    if (type == "Split") {
      result.splits_.push_back(split_regex(steps[i]));
    } else if (type == "ByteLevel" && last) {
      check_byte_level(steps[i]);
    } else if (type == "ByteLevel") {
      fail("unsupported pre-tokenizer: ByteLevel must be the last step");
    } else {
      fail("unsupported pre-tokenizer type \"{}\" (only Split and ByteLevel)", type);
    }
    if (last && type != "ByteLevel") fail("unsupported pre-tokenizer: the last step must be ByteLevel, got \"{}\"", type);
  }
  return result;
}

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (!text.empty()) pieces.push_back(text);
  std::vector<std::string_view> next;
  for (const Regex& regex : splits_) {
    next.clear();
    for (std::string_view piece : pieces) {
      std::size_t gap_start = 0;
      for (auto [start, end] : regex.find_all(piece)) {
        if (gap_start < start) next.push_back(piece.substr(gap_start, start - gap_start));
        next.push_back(piece.substr(start, end - start));
        gap_start = end;
      }
      if (gap_start < piece.size()) next.push_back(piece.substr(gap_start));
    }
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace plumb

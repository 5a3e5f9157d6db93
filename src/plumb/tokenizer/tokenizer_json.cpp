#include "plumb/tokenizer/tokenizer_json.h"

#include <simdjson.h>

#include "plumb/util/error.h"

namespace plumb {
namespace {

namespace dom = simdjson::dom;

template <typename T>
T value_or_fail(simdjson::simdjson_result<T> result, const std::string& what) {
  T value;
  if (auto error = std::move(result).get(value)) fail("{}: {}", what, simdjson::error_message(error));
  return value;
}

nlohmann::json to_nlohmann(const dom::element& element) { return nlohmann::json::parse(simdjson::minify(element)); }

void read_vocab(const dom::element& vocab, BpeSource& out) {
  dom::object entries = value_or_fail(vocab.get_object(), "model.vocab is not an object");
  out.vocab.reserve(entries.size());
  for (dom::key_value_pair entry : entries) {
    uint64_t id = value_or_fail(entry.value.get_uint64(), fmt::format("model.vocab[\"{}\"] is not a token id", entry.key));
    if (id >= kTokenIdLimit)
      fail("model.vocab[\"{}\"] = {} is too large (token ids must be below {})", entry.key, id, kTokenIdLimit);
    out.vocab.emplace_back(entry.key, static_cast<std::uint32_t>(id));
  }
}

// A merge is "left right" (one space) or ["left", "right"].
std::pair<std::string_view, std::string_view> merge_halves(const dom::element& merge, std::size_t index) {
  std::string_view s;
  if (merge.get_string().get(s) == simdjson::SUCCESS) {
    std::size_t space = s.find(' ');
    if (space != std::string_view::npos && s.find(' ', space + 1) == std::string_view::npos)
      return {s.substr(0, space), s.substr(space + 1)};
  }
  dom::array pair;
  std::string_view left, right;
  if (merge.get_array().get(pair) == simdjson::SUCCESS && pair.size() == 2 &&
      pair.at(0).get_string().get(left) == simdjson::SUCCESS && pair.at(1).get_string().get(right) == simdjson::SUCCESS)
    return {left, right};
  fail("model.merges[{}] is not a pair of tokens: {}", index, simdjson::minify(merge));
}

void read_merges(const dom::element& merges, BpeSource& out) {
  dom::array list = value_or_fail(merges.get_array(), "model.merges is not an array");
  out.merges.reserve(list.size());
  std::size_t index = 0;
  for (dom::element merge : list) out.merges.push_back(merge_halves(merge, index++));
}

void read_model(const dom::element& model, BpeSource& out) {
  dom::object fields = value_or_fail(model.get_object(), "model is not an object");
  out.options = nlohmann::json::object();
  bool has_vocab = false, has_merges = false;
  for (dom::key_value_pair field : fields) {
    if (field.key == "vocab") {
      read_vocab(field.value, out);
      has_vocab = true;
    } else if (field.key == "merges") {
      read_merges(field.value, out);
      has_merges = true;
    } else {
      out.options[std::string(field.key)] = to_nlohmann(field.value);
    }
  }
  if (!has_vocab || !has_merges) fail("model has no {}", has_vocab ? "merges" : "vocab");
}

}  // namespace

TokenizerJson read_tokenizer_json(std::string_view text, const std::string& origin) {
  auto parser = std::make_shared<dom::parser>();
  TokenizerJson result;
  try {
    dom::element document = value_or_fail(parser->parse(text.data(), text.size()), "invalid JSON");
    dom::object sections = value_or_fail(document.get_object(), "the top level is not an object");
    result.root = nlohmann::json::object();
    bool has_model = false;
    for (dom::key_value_pair section : sections) {
      if (section.key == "model") {
        read_model(section.value, result.model);
        has_model = true;
      } else {
        result.root[std::string(section.key)] = to_nlohmann(section.value);
      }
    }
    if (!has_model) fail("no \"model\" section");
  } catch (const Error& e) {
    rethrow_with_context(origin, e);
  }
  result.document = parser;
  return result;
}

}  // namespace plumb

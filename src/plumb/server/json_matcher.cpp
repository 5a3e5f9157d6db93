#include "plumb/server/json_matcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "plumb/server/api_error.h"

namespace plumb::server {

enum TypeBit : std::uint8_t { kObject = 1, kArray = 2, kString = 4, kNumber = 8, kInteger = 16, kBoolean = 32, kNull = 64, kAll = 127 };

struct SchemaNode {
  std::uint8_t types = kAll;
  bool declared = false;  // "properties" given: only those keys
  std::vector<std::string> names;
  std::vector<const SchemaNode*> values;
  std::uint64_t required = 0;
  const SchemaNode* items = nullptr;
  std::vector<std::string> enum_texts;  // non-empty: exactly one of these
};

namespace {

using Json = nlohmann::ordered_json;
using Nodes = std::vector<std::unique_ptr<SchemaNode>>;

// Numbers stay within what every JSON reader holds exactly: 15 digits before and after the
// point (below 2^53), exponents of 2 digits.
constexpr std::size_t kMaxDepth = 32, kMaxDigits = 15, kMaxExponentDigits = 2;
const std::vector<std::string> kTrue = {"true"}, kFalse = {"false"}, kNullText = {"null"};

[[noreturn]] void unsupported(const std::string& where, const std::string& what) {
  throw ApiError(400, fmt::format("response_format schema at {}: {}", where, what), "response_format");
}

std::uint8_t type_bit(const Json& name, const std::string& where) {
  static const std::pair<const char*, std::uint8_t> kTypes[] = {{"object", kObject}, {"array", kArray},    {"string", kString},
                                                                {"number", kNumber | kInteger}, {"integer", kInteger},
                                                                {"boolean", kBoolean}, {"null", kNull}};
  if (name.is_string())
    for (auto [n, bit] : kTypes)
      if (name.get<std::string>() == n) return bit;
  unsupported(where, fmt::format("unknown type {}", name.dump()));
}

const SchemaNode* compile(const Json& schema, const std::string& where, Nodes& nodes, std::size_t depth) {
  if (!schema.is_object()) unsupported(where, "a schema must be an object");
  if (depth > kMaxDepth) unsupported(where, "nested too deeply");
  for (const char* keyword : {"anyOf", "oneOf", "allOf", "not", "$ref", "pattern", "format", "minLength", "maxLength", "minimum",
                              "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems", "uniqueItems",
                              "patternProperties", "if"})
    if (schema.contains(keyword)) unsupported(where, fmt::format("'{}' is not supported (supported: type, properties, required, enum, const, items)", keyword));
  nodes.push_back(std::make_unique<SchemaNode>());
  SchemaNode& node = *nodes.back();
  if (schema.contains("enum") || schema.contains("const")) {
    const Json values = schema.contains("const") ? Json::array({schema["const"]}) : schema["enum"];
    if (!values.is_array() || values.empty()) unsupported(where, "'enum' must be a non-empty array");
    for (const Json& v : values) node.enum_texts.push_back(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    return &node;
  }
  if (const auto t = schema.find("type"); t != schema.end()) {
    node.types = 0;
    if (t->is_array()) {
      for (const Json& name : *t) node.types |= type_bit(name, where);
    } else {
      node.types = type_bit(*t, where);
    }
  } else if (schema.contains("properties")) {
    node.types = kObject;
  } else if (schema.contains("items")) {
    node.types = kArray;
  }
  if (const auto props = schema.find("properties"); props != schema.end()) {
    if (!props->is_object()) unsupported(where, "'properties' must be an object");
    if (props->size() > 64) unsupported(where, "more than 64 properties");
    node.declared = true;
    for (const auto& [name, sub] : props->items()) {
      if (name.find_first_of("\"\\") != std::string::npos || name.empty()) unsupported(where, fmt::format("property name '{}'", name));
      node.names.push_back(name);
      node.values.push_back(compile(sub, where + "." + name, nodes, depth + 1));
    }
  }
  if (const auto req = schema.find("required"); req != schema.end()) {
    if (!req->is_array()) unsupported(where, "'required' must be an array");
    for (const Json& name : *req) {
      auto it = name.is_string() ? std::find(node.names.begin(), node.names.end(), name.get<std::string>()) : node.names.end();
      if (it == node.names.end()) unsupported(where, fmt::format("required property {} is not in 'properties'", name.dump()));
      node.required |= std::uint64_t{1} << (it - node.names.begin());
    }
  }
  if (const auto items = schema.find("items"); items != schema.end()) node.items = compile(*items, where + "[]", nodes, depth + 1);
  return &node;
}

bool is_space(unsigned char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

}  // namespace

JsonMatcher::JsonMatcher(const Json& schema, std::size_t max_string_bytes) : max_string_bytes_(max_string_bytes) {
  auto nodes = std::make_shared<Nodes>();
  nodes->push_back(std::make_unique<SchemaNode>());  // [0]: any value (missing sub-schemas)
  compile(schema, "$", *nodes, 0);
  nodes_ = std::move(nodes);
}

bool JsonMatcher::whitespace(unsigned char c) {
  if (!is_space(c) || ws_run_ >= 2) return false;
  ++ws_run_;
  return true;
}

bool JsonMatcher::feed(unsigned char c) {
  if (!is_space(c)) ws_run_ = 0;
  return step(c);
}

bool JsonMatcher::complete() const {
  if (done_) return true;
  // A number at the top level has no closing byte: it is complete once it could end.
  return stack_.size() == 1 && stack_[0].kind == FrameKind::kNumber &&
         (stack_[0].state == 1 || stack_[0].state == 2 || stack_[0].state == 4 || stack_[0].state == 7);
}

bool JsonMatcher::step(unsigned char c) {
  if (stack_.empty()) {
    if (done_ || is_space(c)) return whitespace(c);
    return start_value((*nodes_)[1].get(), c);
  }
  Frame& f = stack_.back();
  switch (f.kind) {
    case FrameKind::kObject: return feed_object(c);
    case FrameKind::kArray: return feed_array(c);
    case FrameKind::kString: return feed_string(c);
    case FrameKind::kNumber:
    case FrameKind::kLiteral: {
      Step s = f.kind == FrameKind::kNumber ? feed_number(f, c) : feed_literal(f, c);
      if (s == Step::kReject) return false;
      if (s == Step::kTaken) return true;
      stack_.pop_back();
      value_done();
      return s == Step::kTakenAndDone || step(c);  // a byte after the scalar belongs to the parent
    }
    default: return false;
  }
}

bool JsonMatcher::start_value(const SchemaNode* node, unsigned char c) {
  if (!node) node = (*nodes_)[0].get();
  if (stack_.size() >= kMaxDepth) return false;
  Frame f{FrameKind::kLiteral, node};
  if (!node->enum_texts.empty()) {
    f.candidates = &node->enum_texts;
  } else if (c == '{' && (node->types & kObject)) {
    f.kind = FrameKind::kObject;
  } else if (c == '[' && (node->types & kArray)) {
    f.kind = FrameKind::kArray;
  } else if (c == '"' && (node->types & kString)) {
    f.kind = FrameKind::kString;
  } else if ((c == '-' || is_digit(c)) && (node->types & (kNumber | kInteger))) {
    f.kind = FrameKind::kNumber;
    f.state = c == '-' ? 0 : c == '0' ? 1 : 2;
    f.length = c == '-' ? 0 : 1;
    stack_.push_back(f);
    return true;
  } else if (node->types & kBoolean && (c == 't' || c == 'f')) {
    f.candidates = c == 't' ? &kTrue : &kFalse;
  } else if (node->types & kNull && c == 'n') {
    f.candidates = &kNullText;
  } else {
    return false;
  }
  if (f.kind != FrameKind::kLiteral) {
    stack_.push_back(f);
    return true;
  }
  Step s = feed_literal(f, c);
  if (s == Step::kReject || s == Step::kDoneBefore) return false;
  stack_.push_back(f);
  if (s == Step::kTakenAndDone) {
    stack_.pop_back();
    value_done();
  }
  return true;
}

void JsonMatcher::value_done() {
  if (stack_.empty()) {
    done_ = true;
    return;
  }
  Frame& parent = stack_.back();
  if (parent.kind == FrameKind::kObject) parent.state = 4;
  else if (parent.kind == FrameKind::kArray) parent.state = 2;
}

// Object states: 0 after '{', 1 after ',', 2 after a key, 3 after ':', 4 after a value.
bool JsonMatcher::feed_object(unsigned char c) {
  Frame& f = stack_.back();
  const SchemaNode& node = *f.node;
  const bool all_required = (node.required & ~f.seen) == 0;
  const bool keys_left = !node.declared || f.seen != (node.names.size() == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << node.names.size()) - 1);
  if (is_space(c)) return whitespace(c);
  switch (f.state) {
    case 0:
    case 4:
      if (c == '}' && all_required) {
        stack_.pop_back();
        value_done();
        return true;
      }
      if (f.state == 4) {
        if (c != ',' || !keys_left) return false;
        f.state = 1;
        return true;
      }
      [[fallthrough]];
    case 1:
      if (c != '"' || !keys_left) return false;
      {
        Frame key{FrameKind::kString, f.node};
        key.is_key = true;
        stack_.push_back(key);
      }
      return true;
    case 2:
      if (c != ':') return false;
      f.state = 3;
      return true;
    case 3: {
      const SchemaNode* value = f.property >= 0 ? node.values[f.property] : nullptr;
      return start_value(value, c);
    }
    default: return false;
  }
}

// Array states: 0 after '[', 1 after ',', 2 after a value.
bool JsonMatcher::feed_array(unsigned char c) {
  Frame& f = stack_.back();
  if (is_space(c)) return whitespace(c);
  if (f.state == 2) {
    if (c == ',') return f.state = 1, true;
    if (c != ']') return false;
  } else if (f.state == 0 && c != ']') {
    return start_value(f.node->items, c);
  } else if (f.state == 1) {
    return start_value(f.node->items, c);
  }
  stack_.pop_back();  // ']'
  value_done();
  return true;
}

bool JsonMatcher::close_key() {
  Frame key = std::move(stack_.back());
  stack_.pop_back();
  Frame& object = stack_.back();
  const SchemaNode& node = *object.node;
  object.property = -1;
  if (node.declared) {
    for (std::size_t i = 0; i < node.names.size(); ++i)
      if (!(object.seen >> i & 1) && node.names[i] == key.text) object.property = static_cast<int>(i);
    if (object.property < 0) return false;
    object.seen |= std::uint64_t{1} << object.property;
  }
  object.state = 2;
  return true;
}

bool JsonMatcher::feed_string(unsigned char c) {
  Frame& f = stack_.back();
  const bool declared_key = f.is_key && f.node->declared;
  std::size_t bytes = 1;  // what this byte adds to the string's length (a lead byte reserves its character)
  if (f.utf8_left > 0) {
    if (c < 0x80 || c > 0xBF) return false;
    --f.utf8_left;
    bytes = 0;
  } else if (f.state == 1) {
    if (c == 'u') f.state = 2, f.hex_left = 4;
    else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') f.state = 0;
    else return false;
  } else if (f.state == 2) {
    if (!std::isxdigit(c)) return false;
    if (--f.hex_left == 0) f.state = 0;
  } else if (c == '"') {
    if (f.is_key) return close_key();
    stack_.pop_back();
    value_done();
    return true;
  } else if (c == '\\') {
    if (declared_key) return false;
    f.state = 1;
  } else if (c < 0x20) {
    return false;
  } else if (c >= 0x80) {
    if (c >= 0xC2 && c <= 0xDF) f.utf8_left = 1;
    else if (c >= 0xE0 && c <= 0xEF) f.utf8_left = 2;
    else if (c >= 0xF0 && c <= 0xF4) f.utf8_left = 3;
    else return false;
    bytes += f.utf8_left;
  }
  // The limit is checked at character starts, so a string can always close.
  if (f.length + bytes > max_string_bytes_) return false;
  f.length += static_cast<std::uint32_t>(bytes);
  if (declared_key) {
    f.text += static_cast<char>(c);
    const SchemaNode& node = *f.node;
    const Frame& object = stack_[stack_.size() - 2];
    bool prefix = false;
    for (std::size_t i = 0; i < node.names.size() && !prefix; ++i)
      prefix = !(object.seen >> i & 1) && node.names[i].starts_with(f.text);
    return prefix;
  }
  return true;
}

// Number states: 0 after '-', 1 after a leading 0, 2 integer digits, 3 after '.', 4 fraction
// digits, 5 after 'e', 6 after the exponent's sign, 7 exponent digits.
JsonMatcher::Step JsonMatcher::feed_number(Frame& f, unsigned char c) const {
  const bool integer = !(f.node->types & kNumber);
  const bool can_end = f.state == 1 || f.state == 2 || f.state == 4 || f.state == 7;
  std::uint8_t next = 255;
  if (is_digit(c)) {
    switch (f.state) {
      case 0: next = c == '0' ? 1 : 2; break;
      case 2: case 4: case 7: next = f.state; break;
      case 3: next = 4; break;
      case 5: case 6: next = 7; break;
      default: break;  // no digits after a leading 0
    }
  } else if (c == '.' && !integer && (f.state == 1 || f.state == 2)) {
    next = 3;
  } else if ((c == 'e' || c == 'E') && !integer && (f.state == 1 || f.state == 2 || f.state == 4)) {
    next = 5;
  } else if ((c == '+' || c == '-') && f.state == 5) {
    next = 6;
  }
  if (next != 255) {
    // f.length counts the digits of the current part (integer, fraction, exponent).
    const bool digit = is_digit(c), same_part = next == f.state;
    const std::size_t digits = digit ? (same_part ? f.length + 1 : 1) : 0;
    if (digits > (next == 7 ? kMaxExponentDigits : kMaxDigits)) return can_end ? Step::kDoneBefore : Step::kReject;
    f.state = next;
    f.length = static_cast<std::uint32_t>(digits);
    return Step::kTaken;
  }
  return can_end ? Step::kDoneBefore : Step::kReject;
}

JsonMatcher::Step JsonMatcher::feed_literal(Frame& f, unsigned char c) const {
  std::string grown = f.text + static_cast<char>(c);
  bool extends = false, longer = false;
  for (const std::string& t : *f.candidates)
    if (t.starts_with(grown)) extends = true, longer = longer || t.size() > grown.size();
  if (!extends) {
    for (const std::string& t : *f.candidates)
      if (t == f.text) return Step::kDoneBefore;
    return Step::kReject;
  }
  f.text = std::move(grown);
  return longer ? Step::kTaken : Step::kTakenAndDone;
}

}  // namespace plumb::server

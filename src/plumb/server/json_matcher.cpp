#include "plumb/server/json_matcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "plumb/server/api_error.h"
#include "plumb/server/json_schema_node.h"

namespace plumb::server {
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

// The shortest value of `node` (its children's already known). Ties go to the first of: an
// enum's earlier text; number, string, array, object, null, boolean.
std::string shortest_value(const SchemaNode& node) {
  auto shorter = [](const std::string& a, const std::string& b) { return a.size() < b.size(); };
  if (!node.enum_texts.empty()) return *std::min_element(node.enum_texts.begin(), node.enum_texts.end(), shorter);
  std::vector<std::string> options;
  if (node.types & (kNumber | kInteger)) options.push_back("0");
  if (node.types & kString) options.push_back("\"\"");
  if (node.types & kArray) options.push_back("[]");
  if (node.types & kObject) {
    std::string object = "{";
    for (std::size_t i = 0; i < node.names.size(); ++i)
      if (node.required >> i & 1) object += fmt::format("{}\"{}\":{}", object.size() > 1 ? "," : "", node.names[i], node.values[i]->shortest);
    options.push_back(object + "}");
  }
  if (node.types & kNull) options.push_back("null");
  if (node.types & kBoolean) options.push_back("true");
  return *std::min_element(options.begin(), options.end(), shorter);
}

const SchemaNode* compile(const Json& schema, const std::string& where, Nodes& nodes, std::size_t depth) {
  if (!schema.is_object()) unsupported(where, "a schema must be an object");
  if (depth >= kMaxDepth) unsupported(where, fmt::format("nested deeper than {} levels", kMaxDepth));
  for (const char* keyword : {"anyOf", "oneOf", "allOf", "not", "$ref", "pattern", "format", "minLength", "maxLength", "minimum",
                              "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems", "uniqueItems",
                              "patternProperties", "if"})
    if (schema.contains(keyword)) unsupported(where, fmt::format("'{}' is not supported (supported: type, properties, required, enum, const, items)", keyword));
  nodes.push_back(std::make_unique<SchemaNode>());
  SchemaNode& node = *nodes.back();
  node.items = nodes.front().get();
  if (schema.contains("enum") || schema.contains("const")) {
    const Json values = schema.contains("const") ? Json::array({schema["const"]}) : schema["enum"];
    if (!values.is_array() || values.empty()) unsupported(where, "'enum' must be a non-empty array");
    for (const Json& v : values) node.enum_texts.push_back(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    node.shortest = shortest_value(node);
    return &node;
  }
  if (const auto t = schema.find("type"); t != schema.end()) {
    node.types = 0;
    if (t->is_array()) {
      for (const Json& name : *t) node.types |= type_bit(name, where);
      if (node.types == 0) unsupported(where, "'type' must name at least one type");
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
      if (name.find_first_of("\"\\") != std::string::npos || name.empty() ||
          std::any_of(name.begin(), name.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; }))
        unsupported(where, fmt::format("property name {} (must be non-empty, without quotes, backslashes or control characters)", Json(name).dump()));
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
  node.shortest = shortest_value(node);
  return &node;
}

bool is_space(unsigned char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
int hex_value(unsigned char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

JsonMatcher::JsonMatcher(const Json& schema, std::size_t max_string_bytes) : max_string_bytes_(max_string_bytes) {
  auto nodes = std::make_shared<Nodes>();
  nodes->push_back(std::make_unique<SchemaNode>());  // [0]: any value (missing sub-schemas)
  SchemaNode& any = *nodes->front();
  any.items = &any;
  any.shortest.push_back('0');  // (not = "0": a GCC 12 -Wrestrict false positive)
  compile(schema, "$", *nodes, 0);
  nodes_ = std::move(nodes);
}

void JsonMatcher::assign_state(const JsonMatcher& other) {
  stack_.assign(other.stack_.begin(), other.stack_.end());  // trivially copyable frames into reused storage
  ws_run_ = other.ws_run_;
  done_ = other.done_;
}

std::optional<std::size_t> JsonMatcher::string_room() const {
  if (stack_.empty()) return std::nullopt;
  const Frame& f = stack_.back();
  if (f.kind != FrameKind::kString || f.state != 0 || f.utf8_left > 0 || (f.is_key && f.node->declared)) return std::nullopt;
  return max_string_bytes_ - f.length;
}

const SchemaNode* JsonMatcher::any() const { return (*nodes_)[0].get(); }

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
  // A top-level scalar with no closing byte (a number, an enum literal that a longer one extends)
  // is complete once it could end.
  if (stack_.size() != 1) return false;
  const Frame& f = stack_[0];
  if (f.kind == FrameKind::kNumber) return f.state == 1 || f.state == 2 || f.state == 4 || f.state == 7;
  return f.kind == FrameKind::kLiteral && (*f.candidates)[shortest_candidate(f)].size() == f.matched;
}

std::size_t JsonMatcher::shortest_candidate(const Frame& f) {
  const std::vector<std::string>& texts = *f.candidates;
  const std::string& prefix = texts[f.candidate];
  std::size_t best = f.candidate;  // ties go to the lowest index
  for (std::size_t i = 0; i < texts.size(); ++i)
    if (texts[i].size() >= f.matched && texts[i].compare(0, f.matched, prefix, 0, f.matched) == 0 &&
        (texts[i].size() < texts[best].size() || (texts[i].size() == texts[best].size() && i < best)))
      best = i;
  return best;
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
  }
  return false;
}

bool JsonMatcher::start_value(const SchemaNode* node, unsigned char c) {
  Frame f{FrameKind::kLiteral};
  f.node = node;
  const bool container = (c == '{' || c == '[') && node->enum_texts.empty();
  if (container && stack_.size() >= kMaxDepth) return false;  // scalars need no room: they close themselves
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
        Frame key{FrameKind::kString};
        key.node = f.node;
        key.is_key = true;
        stack_.push_back(key);
      }
      return true;
    case 2:
      if (c != ':') return false;
      f.state = 3;
      return true;
    case 3: return start_value(f.property >= 0 ? node.values[f.property] : any(), c);
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
  Frame key = stack_.back();
  stack_.pop_back();
  Frame& object = stack_.back();
  const SchemaNode& node = *object.node;
  object.property = -1;
  if (node.declared) {
    const std::string& name = node.names[key.candidate];
    for (std::size_t i = 0; i < node.names.size(); ++i)
      if (!(object.seen >> i & 1) && node.names[i].size() == key.matched && name.compare(0, key.matched, node.names[i]) == 0)
        object.property = static_cast<int>(i);
    if (object.property < 0) return false;
    object.seen |= std::uint64_t{1} << object.property;
  }
  object.state = 2;
  return true;
}

// A declared key's bytes must keep it a prefix of a property name not yet written.
bool JsonMatcher::feed_declared_key(Frame& key, unsigned char c) {
  const SchemaNode& node = *key.node;
  const Frame& object = stack_[stack_.size() - 2];
  const std::string& prefix = node.names[key.candidate];
  for (std::size_t i = 0; i < node.names.size(); ++i) {
    const std::string& name = node.names[i];
    if (object.seen >> i & 1 || name.size() <= key.matched || static_cast<unsigned char>(name[key.matched]) != c) continue;
    if (key.matched > 0 && name.compare(0, key.matched, prefix, 0, key.matched) != 0) continue;
    key.candidate = static_cast<std::uint32_t>(i);
    ++key.matched;
    return true;
  }
  return false;
}

// String states: 0 plain, 1 after '\', 2 in \u digits, 3 after a high surrogate's digits
// (expects '\'), 4 expects its low surrogate's 'u', 5 in the low surrogate's digits.
bool JsonMatcher::feed_string(unsigned char c) {
  Frame& f = stack_.back();
  if (f.state == 0 && f.utf8_left == 0 && c == '"') {
    if (f.is_key) return close_key();
    stack_.pop_back();
    value_done();
    return true;
  }
  if (f.is_key && f.node->declared) {
    // Names are valid UTF-8 without escapes or control bytes: following one is all it takes.
    return feed_declared_key(f, c);
  }
  return feed_string_byte(f, c);
}

bool JsonMatcher::feed_string_byte(Frame& f, unsigned char c) {
  // Bytes a character or escape adds when it starts (its later bytes add none), so that the
  // max_string_bytes check at its start guarantees the string can still close.
  std::size_t reserve = 0;
  if (f.utf8_left > 0) {
    if (c < f.utf8_lo || c > f.utf8_hi) return false;
    --f.utf8_left;
    f.utf8_lo = 0x80, f.utf8_hi = 0xBF;
  } else if (f.state == 1) {
    if (c == 'u') f.state = 2, f.hex_left = 4, f.candidate = 0, reserve = 4;
    else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') f.state = 0;
    else return false;
  } else if (f.state == 2 || f.state == 5) {
    const int v = hex_value(c);
    if (v < 0) return false;
    const std::uint32_t code = f.candidate << 4 | static_cast<std::uint32_t>(v);  // the digits so far
    const int digits = 5 - f.hex_left;
    if (f.state == 5 && ((digits == 1 && code != 0xD) || (digits == 2 && (code < 0xDC || code > 0xDF)))) return false;  // a low surrogate
    if (f.state == 2 && digits == 2 && code >= 0xDC && code <= 0xDF) return false;  // a lone low surrogate
    if (f.state == 2 && digits == 2 && code >= 0xD8 && code <= 0xDB) reserve = 6;   // a high one: its low half must fit
    f.candidate = code;
    if (--f.hex_left == 0) f.state = f.state == 2 && code >= 0xD800 && code <= 0xDBFF ? 3 : 0;
  } else if (f.state == 3) {
    if (c != '\\') return false;
    f.state = 4;
  } else if (f.state == 4) {
    if (c != 'u') return false;
    f.state = 5, f.hex_left = 4, f.candidate = 0;
  } else if (c == '\\') {
    f.state = 1, reserve = 2;
  } else if (c < 0x20) {
    return false;
  } else if (c < 0x80) {
    reserve = 1;
  } else {
    // RFC 3629: the lead byte fixes how many continuation bytes follow and the first one's range
    // (no overlong forms, no surrogates, nothing above U+10FFFF).
    if (c >= 0xC2 && c <= 0xDF) f.utf8_left = 1;
    else if (c >= 0xE0 && c <= 0xEF) f.utf8_left = 2;
    else if (c >= 0xF0 && c <= 0xF4) f.utf8_left = 3;
    else return false;
    f.utf8_lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    f.utf8_hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    reserve = 1 + f.utf8_left;
  }
  if (f.length + reserve > max_string_bytes_) return false;
  f.length += static_cast<std::uint32_t>(reserve);
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

// A literal's matched bytes are the first `matched` bytes of candidates[candidate].
JsonMatcher::Step JsonMatcher::feed_literal(Frame& f, unsigned char c) const {
  const std::vector<std::string>& texts = *f.candidates;
  const std::string& prefix = texts[f.candidate];
  bool extends = false, longer = false, equal = false;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const std::string& t = texts[i];
    if (t.size() < f.matched || t.compare(0, f.matched, prefix, 0, f.matched) != 0) continue;
    if (t.size() == f.matched) {
      equal = true;
      continue;
    }
    if (static_cast<unsigned char>(t[f.matched]) != c) continue;
    if (!extends) f.candidate = static_cast<std::uint32_t>(i);
    extends = true;
    longer = longer || t.size() > f.matched + 1;
  }
  if (!extends) return equal ? Step::kDoneBefore : Step::kReject;
  ++f.matched;
  return longer ? Step::kTaken : Step::kTakenAndDone;
}

}  // namespace plumb::server

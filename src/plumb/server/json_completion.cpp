// JsonMatcher::completion(): the shortest bytes that finish the value from the current state,
// frame by frame from the innermost out. Every choice is a fixed function of the state (missing
// required properties in declaration order, the cheapest property after a comma, the shortest
// value of a schema, ties to the lowest index), so that after a prefix of the completion has
// been fed the completion is the rest: JsonConstraint's budget argument relies on this.
#include <algorithm>
#include <string_view>

#include "plumb/server/json_matcher.h"
#include "plumb/server/json_schema_node.h"

namespace plumb::server {
namespace {

struct Appender {
  std::string& out;
  void put(std::string_view s) { out.append(s); }
  void put(char c) { out.push_back(c); }
};

struct Counter {
  std::size_t n = 0;
  void put(std::string_view s) { n += s.size(); }
  void put(char) { ++n; }
};

bool has(std::uint64_t set, std::size_t i) { return set >> i & 1; }

// `"name":value`, the shortest way to write property i.
template <typename Out>
void put_property(const SchemaNode& node, std::size_t i, Out& out) {
  out.put('"');
  out.put(node.names[i]);
  out.put("\":");
  out.put(node.values[i]->shortest);
}

std::size_t property_size(const SchemaNode& node, std::size_t i) { return node.names[i].size() + 3 + node.values[i]->shortest.size(); }

// The property a key that has `matched` bytes of `prefix` so far best becomes: the fewest bytes
// for the key's rest, its value and the required properties still missing after it.
std::size_t choose_property(const SchemaNode& node, std::uint64_t seen, const std::string& prefix, std::size_t matched) {
  std::size_t missing = 0;
  for (std::size_t j = 0; j < node.names.size(); ++j)
    if (has(node.required, j) && !has(seen, j)) missing += 1 + property_size(node, j);
  std::size_t best = node.names.size(), best_cost = 0;
  for (std::size_t i = 0; i < node.names.size(); ++i) {
    const std::string& name = node.names[i];
    if (has(seen, i) || name.size() < matched || name.compare(0, matched, prefix, 0, matched) != 0) continue;
    std::size_t cost = property_size(node, i) - matched + missing;
    if (has(node.required, i)) cost -= 1 + property_size(node, i);
    if (best == node.names.size() || cost < best_cost) best = i, best_cost = cost;
  }
  return best;  // a key's matched bytes always begin some unwritten name
}

// An object's rest from `state` (0 after '{', 1 after ',', 2 after a key, 3 after ':', 4 after
// a value); `property` is the one whose value comes in states 2 and 3.
template <typename Out>
void object_rest(const SchemaNode& node, const SchemaNode& value, int state, std::uint64_t seen, Out& out) {
  if (state == 2) out.put(':');
  if (state == 2 || state == 3) out.put(value.shortest);
  if (state == 1) {  // a key must follow the comma
    if (!node.declared) {
      out.put("\"\":0}");
      return;
    }
    const std::size_t i = choose_property(node, seen, {}, 0);
    put_property(node, i, out);
    seen |= std::uint64_t{1} << i;
  }
  bool comma = state != 0;
  for (std::size_t j = 0; j < node.names.size(); ++j)
    if (has(node.required, j) && !has(seen, j)) {
      if (comma) out.put(',');
      comma = true;
      put_property(node, j, out);
    }
  out.put('}');
}

// A string's rest up to and including its closing quote; `digits_value` holds the \u digits so far.
template <typename Out>
void string_rest(std::uint8_t state, std::uint8_t utf8_left, std::uint8_t utf8_lo, std::uint8_t hex_left, std::uint32_t digits_value,
                 Out& out) {
  if (utf8_left > 0) {
    out.put(static_cast<char>(utf8_lo));
    for (int k = 1; k < utf8_left; ++k) out.put('\x80');
  }
  if (state == 1) out.put('n');
  if (state == 2) {
    for (int k = 0; k < hex_left; ++k) out.put('0');
    const std::uint32_t code = digits_value << (4 * hex_left);
    if (code >= 0xD800 && code <= 0xDBFF) out.put("\\udc00");  // a high surrogate needs its low half
  }
  if (state == 3) out.put("\\udc00");
  if (state == 4) out.put("udc00");
  if (state == 5) out.put(std::string_view("dc00").substr(4 - hex_left));
  out.put('"');
}

}  // namespace

template <typename Out>
void JsonMatcher::complete_frame(const Frame& f, std::size_t depth, Out& out) const {
  const bool innermost = depth + 1 == stack_.size();
  switch (f.kind) {
    case FrameKind::kObject: {
      const SchemaNode* value = f.property >= 0 ? f.node->values[f.property] : any();
      object_rest(*f.node, *value, innermost ? f.state : 4, f.seen, out);
      return;
    }
    case FrameKind::kArray:
      if (innermost && f.state == 1) out.put(f.node->items->shortest);
      out.put(']');
      return;
    case FrameKind::kString:
      if (f.is_key) return;  // written with its object (complete_into)
      string_rest(f.state, f.utf8_left, f.utf8_lo, f.hex_left, f.candidate, out);
      return;
    case FrameKind::kNumber:
      if (f.state == 0 || f.state == 3 || f.state == 5 || f.state == 6) out.put('0');
      return;
    case FrameKind::kLiteral:
      out.put(std::string_view((*f.candidates)[shortest_candidate(f)]).substr(f.matched));
      return;
  }
}

template <typename Out>
void JsonMatcher::complete_into(Out& out) const {
  if (done_) return;
  if (stack_.empty()) {
    out.put((*nodes_)[1]->shortest);
    return;
  }
  std::size_t depth = stack_.size() - 1;
  const Frame& top = stack_[depth];
  if (top.is_key) {
    // The key and its object together: which property the key becomes decides what is missing.
    const Frame& object = stack_[--depth];
    const SchemaNode& node = *object.node;
    if (node.declared) {
      const std::size_t i = choose_property(node, object.seen, node.names[top.candidate], top.matched);
      out.put(std::string_view(node.names[i]).substr(top.matched));
      out.put("\":");
      out.put(node.values[i]->shortest);
      object_rest(node, node, 4, object.seen | std::uint64_t{1} << i, out);
    } else {
      string_rest(top.state, top.utf8_left, top.utf8_lo, top.hex_left, top.candidate, out);
      out.put(':');
      out.put(any()->shortest);
      object_rest(node, node, 4, object.seen, out);
    }
  } else {
    complete_frame(top, depth, out);
  }
  while (depth-- > 0) complete_frame(stack_[depth], depth, out);
}

std::string JsonMatcher::completion() const {
  std::string text;
  Appender out{text};
  complete_into(out);
  return text;
}

std::size_t JsonMatcher::completion_size() const {
  Counter out;
  complete_into(out);
  return out.n;
}

}  // namespace plumb::server

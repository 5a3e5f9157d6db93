#pragma once
// A byte-at-a-time JSON recognizer for a JSON-Schema subset (type, properties, required, enum,
// items, nesting): feed() accepts a byte only if the text so far can still become a value the
// schema allows, so sampling only accepted bytes always yields valid, matching JSON. It never
// accepts a byte after which no valid completion exists, and completion() names the shortest
// one (the budget side of constrained output: JsonConstraint). The state is a small value type
// of trivially copyable frames: copy it (or assign_state()) to try bytes without committing.
//
// Deliberate restrictions (each one still yields schema-valid output): objects with declared
// properties take only those keys, each once, with no backslash escapes in keys; enum values
// are written compactly as nlohmann::json dumps them; at most 2 whitespace bytes in a row;
// strings up to `max_string_bytes` (escapes and characters count whole); UTF-8 as RFC 3629
// (no overlong forms, no surrogates); containers nested up to 32 levels.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace plumb::server {

struct SchemaNode;

class JsonMatcher {
 public:
  // Throws ApiError(400, param "response_format") on a schema outside the subset.
  explicit JsonMatcher(const nlohmann::ordered_json& schema, std::size_t max_string_bytes = 4096);

  bool feed(unsigned char c);  // false (state unchanged in meaning: discard the copy) if c cannot come next
  bool complete() const;       // a whole value has been read (only whitespace may follow)

  // The shortest bytes that complete the value from here (empty when complete()); feeding them
  // all is accepted. Deterministic and consistent: after feeding a prefix of it, completion() is
  // the rest. completion_size() is its length without building it.
  std::string completion() const;
  std::size_t completion_size() const;

  // This matcher takes `other`'s parse state (both must come from the same schema): a copy that
  // reuses this one's storage, for walking many candidate tokens.
  void assign_state(const JsonMatcher& other);

  // Inside a string value or a free object key, between characters and escapes: how many bytes
  // of plain text (whole UTF-8 characters, no '"', '\\' or control bytes) it still takes; such
  // text leaves completion() as it is. nullopt anywhere else.
  std::optional<std::size_t> string_room() const;

 private:
  enum class FrameKind : std::uint8_t { kObject, kArray, kString, kNumber, kLiteral };
  struct Frame {
    FrameKind kind;
    std::uint8_t state = 0;
    bool is_key = false;         // string: an object key
    std::uint8_t utf8_left = 0;  // string: continuation bytes still due
    std::uint8_t utf8_lo = 0x80, utf8_hi = 0xBF;  // string: the range of the next continuation byte
    std::uint8_t hex_left = 0;   // string: \u digits still due
    int property = -1;           // object: the property whose value is being read
    const SchemaNode* node = nullptr;
    std::uint64_t seen = 0;      // object: declared properties already written
    std::uint32_t length = 0;    // string: bytes so far (counting a started character or escape whole)
    std::uint32_t matched = 0;   // declared key / literal: bytes matched so far
    // Declared key: a name index; literal: a candidate index (both start with the matched bytes);
    // string in \u digits: their value so far.
    std::uint32_t candidate = 0;
    const std::vector<std::string>* candidates = nullptr;  // literal: the texts it may become
  };

  // What a scalar frame did with a byte.
  enum class Step { kReject, kTaken, kTakenAndDone, kDoneBefore };

  bool step(unsigned char c);
  bool start_value(const SchemaNode* node, unsigned char c);
  bool feed_object(unsigned char c);
  bool feed_array(unsigned char c);
  bool feed_string(unsigned char c);
  bool feed_string_byte(Frame& f, unsigned char c);
  bool feed_declared_key(Frame& key, unsigned char c);
  Step feed_number(Frame& f, unsigned char c) const;
  Step feed_literal(Frame& f, unsigned char c) const;
  bool close_key();
  void value_done();
  bool whitespace(unsigned char c);
  const SchemaNode* any() const;
  static std::size_t shortest_candidate(const Frame& literal);  // of those the matched bytes begin

  template <typename Out>
  void complete_into(Out& out) const;
  template <typename Out>
  void complete_frame(const Frame& f, std::size_t depth, Out& out) const;

  std::shared_ptr<const std::vector<std::unique_ptr<SchemaNode>>> nodes_;  // shared by copies
  std::vector<Frame> stack_;
  std::size_t max_string_bytes_;
  std::uint8_t ws_run_ = 0;
  bool done_ = false;
};

}  // namespace plumb::server

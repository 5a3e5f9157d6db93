#pragma once
// A byte-at-a-time JSON recognizer for a JSON-Schema subset (type, properties, required, enum,
// items, nesting): feed() accepts a byte only if the text so far can still become a value the
// schema allows, so sampling only accepted bytes always yields valid, matching JSON. The state
// is a small value type: copy it to try a token without committing.
//
// Deliberate restrictions (each one still yields schema-valid output): objects with declared
// properties take only those keys, each once, with no backslash escapes in keys; enum values
// are written compactly as nlohmann::json dumps them; at most 2 whitespace bytes in a row;
// strings up to `max_string_bytes`; nesting up to 32 levels.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
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

 private:
  enum class FrameKind : std::uint8_t { kValue, kObject, kArray, kString, kNumber, kLiteral };
  struct Frame {
    FrameKind kind;
    const SchemaNode* node = nullptr;
    std::uint8_t state = 0;
    std::uint64_t seen = 0;     // object: declared properties already written
    int property = -1;          // object: the property whose value is being read
    bool is_key = false;        // string: an object key
    std::string text;           // string: key bytes so far; literal: the bytes matched
    const std::vector<std::string>* candidates = nullptr;  // literal: the texts it may become
    std::uint32_t length = 0;   // string: bytes so far
    std::uint8_t utf8_left = 0, hex_left = 0;
  };

  // What a scalar frame did with a byte.
  enum class Step { kReject, kTaken, kTakenAndDone, kDoneBefore };

  bool step(unsigned char c);
  bool start_value(const SchemaNode* node, unsigned char c);
  bool feed_object(unsigned char c);
  bool feed_array(unsigned char c);
  bool feed_string(unsigned char c);
  Step feed_number(Frame& f, unsigned char c) const;
  Step feed_literal(Frame& f, unsigned char c) const;
  bool close_key();
  void value_done();
  bool whitespace(unsigned char c);

  std::shared_ptr<const std::vector<std::unique_ptr<SchemaNode>>> nodes_;  // shared by copies
  std::vector<Frame> stack_;
  std::size_t max_string_bytes_;
  std::uint8_t ws_run_ = 0;
  bool done_ = false;
};

}  // namespace plumb::server

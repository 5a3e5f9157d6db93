#pragma once
// The compiled form of a response_format schema that JsonMatcher walks (json_matcher.cpp compiles
// it; json_completion.cpp reads it to write shortest completions).
#include <cstdint>
#include <string>
#include <vector>

namespace plumb::server {

enum TypeBit : std::uint8_t { kObject = 1, kArray = 2, kString = 4, kNumber = 8, kInteger = 16, kBoolean = 32, kNull = 64, kAll = 127 };

struct SchemaNode {
  std::uint8_t types = kAll;
  bool declared = false;  // "properties" given: only those keys
  std::vector<std::string> names;
  std::vector<const SchemaNode*> values;  // per name; never null
  std::uint64_t required = 0;
  const SchemaNode* items = nullptr;    // never null once compiled (the any-value node if absent)
  std::vector<std::string> enum_texts;  // non-empty: exactly one of these
  std::string shortest;                 // the shortest value this schema allows (ties: see json_matcher.cpp)
};

}  // namespace plumb::server

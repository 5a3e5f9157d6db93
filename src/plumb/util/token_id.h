#pragma once
// The one token-id type of plumb: the tokenizer produces it, the model consumes it, the runtime
// samples it. Unsigned: an id is an index into the vocabulary (checked against its size where an
// id enters the model).
#include <cstdint>

namespace plumb {

using TokenId = std::uint32_t;

}  // namespace plumb

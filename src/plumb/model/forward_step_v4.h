#pragma once
// Internal to the V4 forward (forward_v4.cpp, attention_v4.cpp): the context of one call.
#include <string>
#include <vector>

#include "plumb/model/forward_v4.h"

namespace plumb::v4 {

struct ForwardV4::Step {
  backend::Batch batch;
  std::vector<SequenceState*> states;  // batch order
  std::vector<int64_t> prefill;        // batch order: SequenceStep::prefill
  backend::BlockTables tables;         // the states' KV blocks (kv_pool.h), uploaded once
  backend::Tensor ids;                 // [N] i32
  std::vector<int32_t> host_ids;       // the same ids on the host (hash routing reads them there)
  backend::Tensor positions;           // [N] i32
  const Taps* taps = nullptr;
  std::string prefix;                  // "layer.{i}." for taps
  bool faithful = false;
  backend::Round R = backend::Round::None;  // rounding of activations between ops
};

}  // namespace plumb::v4

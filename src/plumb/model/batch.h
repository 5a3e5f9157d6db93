#pragma once
// The host side of a forward call, shared by the architectures: checks the batch, lays out its
// ragged slices, ids and positions, and gathers the rows that want logits.
#include <cstdint>
#include <span>
#include <vector>

#include "plumb/backend/backend.h"
#include "plumb/format/config.h"
#include "plumb/model/model.h"
#include "plumb/util/error.h"

namespace plumb {

struct BatchLayout {
  backend::Batch batch;
  std::vector<int32_t> ids, positions;  // [rows] each
};

// plumb::Error for an empty batch, a sequence without state or tokens, a state given twice (it
// advances once per call), or a token outside the vocabulary.
BatchLayout lay_out_batch(std::span<const SequenceStep> batch, const ModelConfig& cfg);

// Each step's state as the architecture's own type; plumb::Error for a state another model made.
template <class State>
std::vector<State*> states_of(std::span<const SequenceStep> batch, const char* model_name) {
  std::vector<State*> out;
  for (const SequenceStep& s : batch) {
    auto* st = dynamic_cast<State*>(s.state);
    if (!st) fail("forward: a sequence state that {} did not make", model_name);
    out.push_back(st);
  }
  return out;
}

// After the call: every state has advanced by its tokens.
void advance(std::span<const SequenceStep> batch);

// plumb::Error unless `rows` are ascending, distinct indices below `n`.
void check_logit_rows(std::span<const int64_t> rows, int64_t n);
// Rows `rows` (checked) of x [n, ...]; all n of them: x itself.
backend::Tensor gather_rows(backend::Backend& be, const backend::Tensor& x, std::span<const int64_t> rows);

}  // namespace plumb

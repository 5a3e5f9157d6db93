#pragma once
// The window part of the release's sparse-attention index row (AttentionParams::prob_block),
// written once for the CPU and the GPU kernels. The release lays out a query's index row as
// [window part | compressed candidates] and runs its online softmax over blocks of prob_block
// slots of that row, so where the compressed candidates start changes how P is rounded. Its
// window part is min(P, W) slots wide in the prefill of a P-token prompt and W wide in a decode
// step (inference/model.py get_window_topk_idxs). Taken per query position from the sequence's
// prefill length, the width does not depend on how the prompt was cut into chunks: a prompt fed
// in chunks by the serving engine gives the rows of its one-call prefill, bit for bit.
#include <cstdint>

#include "plumb/backend/gpu/gpu_numerics.h"

namespace plumb::backend {

// Slots of the window part for a query at position t of a sequence whose prefill was its first
// `prefill` positions (0: none, every query a decode step), with a window of W.
PLUMB_HD int64_t index_row_window_slots(int64_t t, int64_t prefill, int64_t W) {
  return t < prefill ? (prefill < W ? prefill : W) : W;
}

// The prefill a batch slice implies when the caller does not say (AttentionParams::prefill): a
// slice from position 0 is the whole prefill, any other slice continues after it.
PLUMB_HD int64_t implied_prefill(int64_t start, int64_t len) { return start == 0 ? len : 0; }

}  // namespace plumb::backend

#pragma once
// Per-sequence decode state of DeepSeek-V4 (MODEL-SPEC 5): for every layer the sliding-window
// ring, and for compressed layers the compressed KV entries, the compressor's raw slots and, in
// CSA layers, the indexer's keys and compressor slots. All tensors are backend-owned; `pos`
// (tokens consumed so far, plumb::SequenceState) is the only host-side counter: entry counts
// follow from it (floor(pos / ratio) entries are complete).
#include <cstdint>
#include <vector>

#include "plumb/backend/backend.h"
#include "plumb/model/model.h"

namespace plumb::v4 {

struct LayerState {
  backend::Tensor window;                        // [W, head_dim], slot = pos % W
  backend::Tensor compressed;                    // [capacity, head_dim], entry w at row w
  backend::CompressorState compressor;           // [c*m, c*head_dim] each
  backend::Tensor index_keys;                    // [capacity, index_head_dim] (CSA)
  backend::CompressorState index_compressor;     // [2*m, 2*index_head_dim] (CSA)
};

struct SequenceState final : plumb::SequenceState {
  std::vector<LayerState> layers;
};

// A deep copy of `s` (Model::fork_sequence): every ring, cache and compressor slot copied, so
// either state may advance without the other.
SequenceState copy_state(backend::Backend& be, const SequenceState& s);

// Grows `cache` (rows = capacity) to hold at least `rows` rows, keeping its first `used` rows.
void ensure_capacity(backend::Backend& be, backend::Tensor& cache, int64_t rows, int64_t used);

}  // namespace plumb::v4

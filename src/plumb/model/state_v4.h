#pragma once
// Per-sequence decode state of DeepSeek-V4 (MODEL-SPEC 5): for every layer the sliding-window
// ring and, for compressed layers, the compressor's raw slots and, in CSA layers, the indexer's
// compressor slots. The growing caches (compressed entries, indexer keys) are paged: they live in
// the model's KvPool (kv_pool.h), reached through the sequence's blocks. All tensors are
// backend-owned; `pos` (tokens consumed so far, plumb::SequenceState) is the only host-side
// counter: entry counts follow from it (floor(pos / ratio) entries are complete).
#include <cstdint>
#include <vector>

#include "plumb/backend/backend.h"
#include "plumb/model/model.h"

namespace plumb::v4 {

struct LayerState {
  backend::Tensor window;                     // [W, head_dim], slot = pos % W
  backend::CompressorState compressor;        // [c*m, c*head_dim] each
  backend::CompressorState index_compressor;  // [2*m, 2*index_head_dim] (CSA)
  // --kv-bf16-recent (compressed layers): the last kv_recent_ring_rows(N, m) entries as bf16
  // values (f32 tensor), slot = entry % rows (backend.h RecentEntries); undefined without.
  backend::Tensor recent;
};

struct SequenceState final : plumb::SequenceState {
  std::vector<LayerState> layers;
};

// A copy of `s`'s fixed state (Model::fork_sequence): every ring and compressor slot copied, so
// either state may advance without the other; the paged cache rows are the KvPool's to copy.
SequenceState copy_state(backend::Backend& be, const SequenceState& s);

}  // namespace plumb::v4

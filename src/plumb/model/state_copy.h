#pragma once
// Deep copies of sequence-state tensors, for Model::fork_sequence (the prefix cache's snapshots):
// backend tensors share their storage when copied as values, and the forward updates rings and
// caches in place, so a fork must own new storage.
#include "plumb/backend/backend.h"

namespace plumb {

// A tensor of the same type and shape with its own storage and the same values (an undefined
// tensor stays undefined).
inline backend::Tensor copy_tensor(backend::Backend& be, const backend::Tensor& t) {
  if (!t.defined()) return t;
  backend::Tensor out = be.full(t.type(), t.shape(), 0.f);
  be.copy_rows(out, 0, t, 0, t.rows());
  return out;
}

inline backend::CompressorState copy_compressor(backend::Backend& be, const backend::CompressorState& s) {
  return {copy_tensor(be, s.kv), copy_tensor(be, s.score)};
}

}  // namespace plumb

#include "plumb/model/state_v4.h"

#include <algorithm>

#include "plumb/model/state_copy.h"

namespace plumb::v4 {

SequenceState copy_state(backend::Backend& be, const SequenceState& s) {
  SequenceState out;
  out.pos = s.pos;
  for (const LayerState& l : s.layers)
    out.layers.push_back({copy_tensor(be, l.window), copy_tensor(be, l.compressed), copy_compressor(be, l.compressor),
                          copy_tensor(be, l.index_keys), copy_compressor(be, l.index_compressor)});
  return out;
}

void ensure_capacity(backend::Backend& be, backend::Tensor& cache, int64_t rows, int64_t used) {
  if (cache.rows() >= rows) return;
  // Doubling keeps appends amortized O(1) over a long decode.
  const int64_t cap = std::max<int64_t>({rows, 2 * cache.rows(), 16});
  backend::Tensor grown = be.full(backend::ElemType::F32, {cap, cache.row_size()}, 0.f);
  if (used > 0) be.copy_rows(grown, 0, cache, 0, used);
  cache = grown;
}

}  // namespace plumb::v4

#include "plumb/model/state_v4.h"

#include <algorithm>

namespace plumb::v4 {

void ensure_capacity(backend::Backend& be, backend::Tensor& cache, int64_t rows, int64_t used) {
  if (cache.rows() >= rows) return;
  // Doubling keeps appends amortized O(1) over a long decode.
  const int64_t cap = std::max<int64_t>({rows, 2 * cache.rows(), 16});
  backend::Tensor grown = be.full(backend::ElemType::F32, {cap, cache.row_size()}, 0.f);
  if (used > 0) be.copy_rows(grown, 0, cache, 0, used);
  cache = grown;
}

}  // namespace plumb::v4

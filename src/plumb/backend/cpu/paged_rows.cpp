#include "plumb/backend/cpu/paged_rows.h"

#include "plumb/backend/cpu/cpu_tensor.h"

namespace plumb::cpu {

PagedRows::PagedRows(const backend::PagedCache& c, const backend::BlockTables& t, std::size_t seq, int64_t n,
                     std::span<const uint8_t> wanted, ThreadPool& pool)
    : values_(c.values()), rows_(static_cast<std::size_t>(n > 0 ? n : 0), -1) {
  if (n <= 0) return;
  if (!c.encoded()) {
    in_place_ = f32(c.pool, "paged cache");
    for (int64_t e = 0; e < n; ++e) rows_[static_cast<std::size_t>(e)] = c.row(t, seq, e);
    return;
  }
  std::vector<int64_t> src;  // pool row of each decoded entry
  for (int64_t e = 0; e < n; ++e)
    if (wanted.empty() || wanted[static_cast<std::size_t>(e)]) {
      rows_[static_cast<std::size_t>(e)] = static_cast<int64_t>(src.size());
      src.push_back(c.row(t, seq, e));
    }
  decoded_.resize(src.size() * static_cast<std::size_t>(values_));
  const auto* pool_bytes = static_cast<const uint8_t*>(bytes(c.pool, "paged cache"));
  const int64_t stride = c.pool.row_size() * 4;
  pool.parallel_for(static_cast<int64_t>(src.size()), 16, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const uint8_t* row = pool_bytes + src[static_cast<std::size_t>(i)] * stride;
      float* out = decoded_.data() + i * values_;
      for (int64_t v = 0; v < values_; ++v) out[v] = backend::kv_value(c.spec, row, v);
    }
  });
}

}  // namespace plumb::cpu

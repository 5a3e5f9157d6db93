#pragma once
// The entries one sequence reads from a paged cache, as f32 rows (backend.h "Paged caches"). An
// f32 pool's rows are used in place; an encoded pool's (kv_row.h) are decoded once per call into
// a buffer holding only the entries the call reads (never the whole pool).
#include <cstdint>
#include <span>
#include <vector>

#include "plumb/backend/backend.h"
#include "plumb/util/thread_pool.h"

namespace plumb::cpu {

class PagedRows {
 public:
  // Entries [0, n) of table row `seq`; wanted[e] != 0 marks those the caller reads (empty: all).
  PagedRows(const backend::PagedCache& c, const backend::BlockTables& t, std::size_t seq, int64_t n,
            std::span<const uint8_t> wanted, ThreadPool& pool);
  // Entry e's values (e must be wanted).
  const float* operator[](int64_t e) const {
    return in_place_ ? in_place_ + rows_[static_cast<std::size_t>(e)] * values_
                     : decoded_.data() + rows_[static_cast<std::size_t>(e)] * values_;
  }

 private:
  const float* in_place_ = nullptr;  // the f32 pool
  int64_t values_ = 0;
  std::vector<int64_t> rows_;   // f32: pool row of each entry; encoded: its row in decoded_
  std::vector<float> decoded_;
};

}  // namespace plumb::cpu

// Block tables of a batch (backend.h, "Paged caches"): the host ids and one upload of them.
#include <algorithm>

#include "plumb/backend/backend.h"

namespace plumb::backend {

BlockTables make_block_tables(Backend& be, std::span<const std::vector<int32_t>> tables) {
  BlockTables t;
  t.seqs = static_cast<int64_t>(tables.size());
  for (const std::vector<int32_t>& ids : tables) t.width = std::max(t.width, static_cast<int64_t>(ids.size()));
  t.ids.assign(tables.size() * static_cast<std::size_t>(t.width), -1);
  for (std::size_t s = 0; s < tables.size(); ++s)
    std::copy(tables[s].begin(), tables[s].end(), t.ids.begin() + static_cast<std::ptrdiff_t>(s * t.width));
  if (t.width > 0) t.device = be.from_host(t.ids.data(), {static_cast<int64_t>(tables.size()), t.width});
  return t;
}

}  // namespace plumb::backend

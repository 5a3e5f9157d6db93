#pragma once
// Paged cache addressing on the device (backend.h, "Paged caches"): entry w of a sequence whose
// block table row is `blocks` sits at pool row blocks[w / per_block] * per_block + w % per_block.
// The host side checks every id a call reads (op_checks.h check_paged).
#include <cstdint>

#include "plumb/backend/gpu/gpu_compat.h"

namespace plumb::gpu::k {

__device__ __forceinline__ int64_t paged_row(const int32_t* blocks, int64_t w, int64_t per_block) {
  return static_cast<int64_t>(blocks[w / per_block]) * per_block + w % per_block;
}

}  // namespace plumb::gpu::k

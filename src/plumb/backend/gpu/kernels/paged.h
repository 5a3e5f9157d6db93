#pragma once
// Paged cache addressing on the device (backend.h, "Paged caches"): entry w of a sequence whose
// block table row is `blocks` sits at pool row blocks[w / per_block] * per_block + w % per_block.
// The host side checks every id a call reads (op_checks.h check_paged). A pool's rows are f32 or
// encoded (backend/kv_row.h); readers take values one at a time through paged_value.
#include <cstdint>

#include "plumb/backend/gpu/gpu_compat.h"
#include "plumb/backend/kv_row.h"

namespace plumb::gpu::k {

// A paged cache as a kernel sees it: its rows of `stride` bytes in the format `spec`.
struct PagedRef {
  const uint8_t* pool = nullptr;
  int64_t stride = 0;  // bytes per pool row
  int64_t per_block = 1;
  backend::KvRowSpec spec;
};

// One row of paged_write: source row src_row encoded into dst.
struct RowEncode {
  uint8_t* dst = nullptr;
  int64_t src_row = 0;
};
gpuError_t encode_rows(const RowEncode* jobs, int64_t n_jobs, const float* src, const backend::KvRowSpec& spec,
                       gpuStream_t s);

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(PLUMB_EMU)  // the device side (host files see the structs only)
__device__ __forceinline__ int64_t paged_row(const int32_t* blocks, int64_t w, int64_t per_block) {
  return static_cast<int64_t>(blocks[w / per_block]) * per_block + w % per_block;
}

// The stored row of entry w.
__device__ __forceinline__ const uint8_t* paged_entry(const PagedRef& c, const int32_t* blocks, int64_t w) {
  return c.pool + paged_row(blocks, w, c.per_block) * c.stride;
}

// Value i of a stored row (f32 rows are read as floats; the others decoded exactly).
__device__ __forceinline__ float paged_value(const PagedRef& c, const uint8_t* row, int64_t i) {
  return c.spec.format == backend::KvRowFormat::F32 ? reinterpret_cast<const float*>(row)[i]
                                                    : backend::kv_value(c.spec, row, i);
}
#endif

}  // namespace plumb::gpu::k

#pragma once
// A device-resident weight as kernels see it: the checkpoint's bytes and scales exactly as stored
// (FP8 e4m3 + 128x128 scales, packed FP4 e2m1 + 1x32 ue8m0 scales, bf16 or f32), decoded in
// registers element by element. Passed to kernels by value.
#include <cstdint>

#include "plumb/backend/gpu/gpu_numerics.h"

namespace plumb::gpu {

enum class WFormat : int32_t { F32, BF16, FP8, FP4 };

struct WeightRef {
  WFormat format = WFormat::F32;
  const uint8_t* data = nullptr;   // device bytes
  const uint8_t* scale = nullptr;  // device bytes (FP8: ue8m0 or f32 per 128x128; FP4: ue8m0 per 1x32)
  bool scale_f32 = false;          // FP8 only: f32 scales (V3's weight_scale_inv) instead of ue8m0
  int64_t rows = 0, cols = 0;      // logical shape (a 1-D weight is rows = numel, cols = 1)
  int64_t scale_cols = 0;          // scales per row of scale blocks: ceil(cols/128) or ceil(cols/32)
};

// Where the scale of element (r, c) of an FP8 / FP4 weight is stored: its index in w.scale (bytes
// for ue8m0, 4-byte words for FP8 with scale_f32).
PLUMB_HD int64_t weight_scale_index(const WeightRef& w, int64_t r, int64_t c) {
  return w.format == WFormat::FP8 ? (r >> 7) * w.scale_cols + (c >> 7) : r * w.scale_cols + (c >> 5);
}

// A stored scale of an F weight (FP8 or FP4) as a float: the ue8m0 byte, or for FP8 with
// scale_f32 the f32's bits.
template <WFormat F>
PLUMB_HD float weight_scale_from_bits(const WeightRef& w, uint32_t bits) {
  return F == WFormat::FP8 && w.scale_f32 ? bits_f32(bits) : ue8m0_to_f32(static_cast<uint8_t>(bits));
}

PLUMB_HD float weight_scale(const WeightRef& w, int64_t r, int64_t c) {
  const int64_t i = weight_scale_index(w, r, c);
  if (w.format == WFormat::FP8 && w.scale_f32) return load_f32(w.scale + 4 * i);
  return ue8m0_to_f32(w.scale[i]);
}

// Element (r, c) as f32 (exact: every format's value is representable).
PLUMB_HD float weight_at(const WeightRef& w, int64_t r, int64_t c) {
  const int64_t i = r * w.cols + c;
  switch (w.format) {
    case WFormat::F32: return load_f32(w.data + 4 * i);
    case WFormat::BF16: return bf16_to_f32(load_u16(w.data + 2 * i));
    case WFormat::FP8: return e4m3_to_f32(w.data[i]) * weight_scale(w, r, c);
    case WFormat::FP4: {
      const uint8_t byte = w.data[i >> 1];  // element 2j in the low nibble, 2j+1 in the high one
      return e2m1_to_f32((c & 1) ? (byte >> 4) : (byte & 0xFu)) * weight_scale(w, r, c);
    }
  }
  return 0.f;
}

}  // namespace plumb::gpu

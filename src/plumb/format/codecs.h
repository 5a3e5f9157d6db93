#pragma once
// Scalar codecs for every number format the checkpoints and the faithful numerics use, plus block
// dequantization of quantized weights. Decoders are exact; encoders round to nearest, ties to even.
#include <cstddef>
#include <cstdint>
#include <span>

#include "plumb/format/dtype.h"

namespace plumb {

// ---- scalars
float bf16_to_f32(uint16_t bits);
uint16_t f32_to_bf16(float x);  // RNE; NaN stays NaN (quiet)
float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float x);  // RNE; overflow -> Inf; subnormals handled

float e4m3_to_f32(uint8_t bits);  // e4m3fn: bias 7, no Inf, 0x7F/0xFF NaN, max 448
uint8_t f32_to_e4m3(float x);     // RNE; |x| > 448 (Inf too) saturates to +-448 (callers clamp first anyway); NaN -> 0x7F
float e5m2_to_f32(uint8_t bits);  // IEEE-like: bias 15, Inf and NaN
uint8_t f32_to_e5m2(float x);     // RNE; overflow -> Inf
float ue8m0_to_f32(uint8_t bits);  // 2^(bits-127); 0xFF -> NaN
float e2m1_to_f32(uint8_t nibble);  // low 4 bits: 0,0.5,1,1.5,2,3,4,6; bit 3 = sign
uint8_t f32_to_e2m1(float x);       // RNE over the e2m1 grid; saturates at +-6 (Inf too); NaN -> +6

// Packed FP4 (I8 storage): byte k holds element 2k in its low nibble, 2k+1 in its high nibble.
inline uint8_t fp4_nibble(const uint8_t* packed, std::size_t i) {
  uint8_t b = packed[i / 2];
  return (i & 1) ? (b >> 4) : (b & 0x0F);
}

// Decodes any float dtype element to f32 (BF16, F16, F32, F64, F8_*). Throws for integer types.
float decode_float(DType t, const std::byte* p);

// ---- block dequantization (row-major [rows, cols] output in f32)
// FP8 e4m3 weight [rows, cols] with 128x128 block scales of shape [ceil(rows/128), ceil(cols/128)];
// scale dtype F8_E8M0 (V4) or F32 (V3 weight_scale_inv, V4-Base .scale). Edge blocks are partial.
void dequant_fp8_block128(const uint8_t* w, int64_t rows, int64_t cols, const std::byte* scales,
                          DType scale_dtype, float* out);
// FP4 e2m1 packed weight [rows, cols/2 bytes] with 1x32 ue8m0 scales [rows, ceil(cols/32)].
// cols must be even (throws otherwise).
void dequant_fp4_block32(const uint8_t* w, int64_t rows, int64_t cols, const uint8_t* scales,
                         float* out);

// Re-encodes an e5m2 weight [rows, cols] to e4m3 with one f32 scale per output row (channel):
// scale = amax(row) / 448 (1 for an all-zero row), q = e4m3(x / scale). For checkpoints that mix
// the two FP8 flavours. Throws on an Inf/NaN input code (a corrupt weight).
void reencode_e5m2_to_e4m3_per_channel(const uint8_t* w, int64_t rows, int64_t cols, uint8_t* out,
                                       float* row_scales);

}  // namespace plumb

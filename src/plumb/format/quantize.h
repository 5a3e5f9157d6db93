#pragma once
// Quantizers for the release's formats, used to write checkpoints (synthetic models, conversion)
// and by the faithful numerics. Scales are powers of two chosen as the release does:
// s = 2^ceil(log2(amax / qmax)), the ceil taken exactly on the fp32 bits of amax / qmax.
#include <cstdint>
#include <vector>

namespace plumb {

// ue8m0 byte (exponent + 127) of the power-of-two scale for a block with max |x| = amax.
// amax is clamped below at `min_amax` so an all-zero block still gets a finite scale.
uint8_t ue8m0_scale_for(float amax, float qmax, float min_amax);

struct QuantizedWeight {
  std::vector<uint8_t> data;    // e4m3 codes [rows, cols] or packed e2m1 [rows, cols/2]
  std::vector<uint8_t> scales;  // ue8m0 bytes, row-major scale grid
};

// FP8 e4m3 with one scale per 128x128 block (grid [ceil(rows/128), ceil(cols/128)]).
QuantizedWeight quantize_fp8_block128(const float* w, int64_t rows, int64_t cols);
// FP4 e2m1, two per byte (low nibble = even column), one scale per 1x32 block (grid
// [rows, ceil(cols/32)]). cols must be even.
QuantizedWeight quantize_fp4_block32(const float* w, int64_t rows, int64_t cols);

}  // namespace plumb

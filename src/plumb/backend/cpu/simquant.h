#pragma once
// The release's quantization round trips on f32 arrays (MODEL-SPEC 2.2, 9), used by the CPU
// backend's `faithful` numerics and as the reference the other backends are tested against.
// Scales are powers of two, s = 2^ceil(log2(max(amax, floor) / qmax)); a trailing partial block
// is quantized on its own (amax over the elements present).
#include <bit>
#include <cstdint>

namespace plumb::cpu {

// Round to nearest even bf16, returned as f32 (NaN stays NaN).
inline float round_bf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x7FFFFFu)) return std::bit_cast<float>(u | 0x00400000u);
  return std::bit_cast<float>((u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u);
}
void round_bf16(float* x, int64_t n);

// FP8 e4m3 (max 448, amax floor 1e-4): x[i] <- dequant(quant(x[i])) for blocks of `block`.
void fp8_roundtrip(float* x, int64_t n, int64_t block);
// FP4 e2m1 (max 6, amax floor 6 * 2^-126), same block rule.
void fp4_roundtrip(float* x, int64_t n, int64_t block);
// In-place normalized Walsh-Hadamard transform, n a power of two (Sylvester order).
void hadamard(float* x, int64_t n);

}  // namespace plumb::cpu

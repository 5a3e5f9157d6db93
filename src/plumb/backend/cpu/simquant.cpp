#include "plumb/backend/cpu/simquant.h"

#include <algorithm>
#include <cmath>

#include "plumb/format/codecs.h"
#include "plumb/format/quantize.h"
#include "plumb/util/error.h"

namespace plumb::cpu {
namespace {

// One block: scale from amax, then x / s clamped to the format range, rounded to the format
// (RNE) and multiplied back. s is a power of two, so the division and product are exact.
template <typename Encode, typename Decode>
void roundtrip_blocks(float* x, int64_t n, int64_t block, float qmax, float min_amax, Encode enc, Decode dec) {
  if (block <= 0) fail("quantization block size must be positive, got {}", block);
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t b1 = std::min(n, b0 + block);
    float amax = 0.f;
    for (int64_t i = b0; i < b1; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float s = ue8m0_to_f32(ue8m0_scale_for(amax, qmax, min_amax));
    for (int64_t i = b0; i < b1; ++i) x[i] = dec(enc(std::clamp(x[i] / s, -qmax, qmax))) * s;
  }
}

}  // namespace

void round_bf16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
}

void fp8_roundtrip(float* x, int64_t n, int64_t block) {
  roundtrip_blocks(x, n, block, 448.f, 1e-4f, f32_to_e4m3, e4m3_to_f32);
}

void fp4_roundtrip(float* x, int64_t n, int64_t block) {
  roundtrip_blocks(x, n, block, 6.f, 6.f * std::ldexp(1.f, -126), f32_to_e2m1, e2m1_to_f32);
}

void hadamard(float* x, int64_t n) {
  if (n <= 0 || (n & (n - 1)) != 0) fail("hadamard: length {} is not a power of two", n);
  // Butterflies h = 1, 2, 4, ...: (a, b) -> (a + b, a - b) builds H_2n = [[H, H], [H, -H]].
  for (int64_t h = 1; h < n; h *= 2)
    for (int64_t i = 0; i < n; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  const float s = 1.0f / std::sqrt(static_cast<float>(n));
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace plumb::cpu

#include "plumb/format/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "plumb/format/codecs.h"
#include "plumb/util/error.h"

namespace plumb {

uint8_t ue8m0_scale_for(float amax, float qmax, float min_amax) {
  const float s = std::max(amax, min_amax) / qmax;
  uint32_t bits;
  std::memcpy(&bits, &s, sizeof bits);
  const int exp = static_cast<int>((bits >> 23) & 0xFF) - 127;
  const int ceil_log2 = exp + ((bits & 0x7FFFFF) != 0 ? 1 : 0);  // exact ceil(log2(s)) for normal s
  return static_cast<uint8_t>(std::clamp(ceil_log2, -127, 127) + 127);
}

QuantizedWeight quantize_fp8_block128(const float* w, int64_t rows, int64_t cols) {
  const int64_t gr = (rows + 127) / 128, gc = (cols + 127) / 128;
  QuantizedWeight q;
  q.data.resize(static_cast<std::size_t>(rows * cols));
  q.scales.resize(static_cast<std::size_t>(gr * gc));
  for (int64_t br = 0; br < gr; ++br) {
    for (int64_t bc = 0; bc < gc; ++bc) {
      const int64_t r1 = std::min(rows, (br + 1) * 128), c1 = std::min(cols, (bc + 1) * 128);
      float amax = 0.f;
      for (int64_t r = br * 128; r < r1; ++r)
        for (int64_t c = bc * 128; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      const uint8_t sb = ue8m0_scale_for(amax, 448.f, 1e-4f);
      q.scales[br * gc + bc] = sb;
      const float inv = 1.0f / ue8m0_to_f32(sb);  // exact: a power of two
      for (int64_t r = br * 128; r < r1; ++r)
        for (int64_t c = bc * 128; c < c1; ++c)
          q.data[r * cols + c] = f32_to_e4m3(std::clamp(w[r * cols + c] * inv, -448.f, 448.f));
    }
  }
  return q;
}

QuantizedWeight quantize_fp4_block32(const float* w, int64_t rows, int64_t cols) {
  if (cols % 2 != 0) fail("quantize_fp4_block32: cols = {} must be even (two values per byte)", cols);
  const int64_t gc = (cols + 31) / 32;
  QuantizedWeight q;
  q.data.assign(static_cast<std::size_t>(rows * cols / 2), 0);
  q.scales.resize(static_cast<std::size_t>(rows * gc));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    for (int64_t b = 0; b < gc; ++b) {
      const int64_t c1 = std::min(cols, (b + 1) * 32);
      float amax = 0.f;
      for (int64_t c = b * 32; c < c1; ++c) amax = std::max(amax, std::fabs(row[c]));
      const uint8_t sb = ue8m0_scale_for(amax, 6.f, 6.f * std::ldexp(1.f, -126));
      q.scales[r * gc + b] = sb;
      const float inv = 1.0f / ue8m0_to_f32(sb);
      for (int64_t c = b * 32; c < c1; ++c) {
        const uint8_t nib = f32_to_e2m1(row[c] * inv);
        q.data[(r * cols + c) / 2] |= static_cast<uint8_t>((c & 1) ? nib << 4 : nib);
      }
    }
  }
  return q;
}

}  // namespace plumb

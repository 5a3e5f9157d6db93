#include "plumb/backend/cpu/weight_decode.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "plumb/format/codecs.h"
#include "plumb/util/error.h"

namespace plumb::cpu {
namespace {

struct Tables {
  std::array<float, 256> e4m3, ue8m0;
  std::array<float, 16> e2m1;
};

const Tables& tables() {
  static const Tables t = [] {
    Tables r{};
    for (int b = 0; b < 256; ++b) {
      r.e4m3[b] = e4m3_to_f32(static_cast<uint8_t>(b));
      r.ue8m0[b] = ue8m0_to_f32(static_cast<uint8_t>(b));
    }
    for (int b = 0; b < 16; ++b) r.e2m1[b] = e2m1_to_f32(static_cast<uint8_t>(b));
    return r;
  }();
  return t;
}

float block_scale(const WeightView& w, int64_t idx) {
  if (w.scale_dtype == DType::F32) {
    float s;
    std::memcpy(&s, w.scale + idx * 4, 4);
    return s;
  }
  return tables().ue8m0[static_cast<uint8_t>(w.scale[idx])];
}

void fp8_rows(const WeightView& w, int64_t r0, int64_t r1, float* out) {
  const auto& lut = tables().e4m3;
  const int64_t cols = w.cols(), sc = w.scale_shape[1];
  const auto* q = reinterpret_cast<const uint8_t*>(w.data);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = q + r * cols;
    float* o = out + (r - r0) * cols;
    for (int64_t c0 = 0, cb = 0; c0 < cols; c0 += 128, ++cb) {
      const float s = block_scale(w, (r / 128) * sc + cb);
      const int64_t c1 = std::min<int64_t>(cols, c0 + 128);
      for (int64_t c = c0; c < c1; ++c) o[c] = lut[row[c]] * s;
    }
  }
}

void fp4_rows(const WeightView& w, int64_t r0, int64_t r1, float* out) {
  const auto& lut = tables().e2m1;
  const int64_t cols = w.cols(), sc = w.scale_shape[1];
  const auto* q = reinterpret_cast<const uint8_t*>(w.data);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = q + r * (cols / 2);
    float* o = out + (r - r0) * cols;
    for (int64_t c0 = 0, cb = 0; c0 < cols; c0 += 32, ++cb) {
      const float s = block_scale(w, r * sc + cb);
      const int64_t c1 = std::min<int64_t>(cols, c0 + 32);
      for (int64_t c = c0; c < c1; c += 2) {  // low nibble = even column
        const uint8_t b = row[c / 2];
        o[c] = lut[b & 0x0F] * s;
        if (c + 1 < c1) o[c + 1] = lut[b >> 4] * s;
      }
    }
  }
}

}  // namespace

void decode_weight_rows(const WeightView& w, int64_t r0, int64_t r1, float* out) {
  if (!w.present()) fail("weight '{}' is not bound", w.name);
  switch (w.format) {
    case WeightFormat::FP8Block128: return fp8_rows(w, r0, r1, out);
    case WeightFormat::FP4Block32: return fp4_rows(w, r0, r1, out);
    case WeightFormat::Dense: break;
  }
  if (w.dtype == DType::BF16) {
    const int64_t cols = w.shape.size() <= 1 ? 1 : w.cols();
    const auto* p = reinterpret_cast<const uint8_t*>(w.data) + r0 * cols * 2;
    for (int64_t i = 0, n = (r1 - r0) * cols; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out[i] = std::bit_cast<float>(static_cast<uint32_t>(v) << 16);
    }
    return;
  }
  decode_rows(w, r0, r1, out);  // F32 (a copy), F16
}

float dot(const float* a, const float* b, int64_t n) {
  // Two 4-lane accumulators: vectorizes on any SIMD target, and the order of additions is fixed
  // by n alone, so a row's result is the same in prefill, decode and any batch.
  typedef float v4 __attribute__((vector_size(16)));
  v4 acc0 = {0, 0, 0, 0}, acc1 = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    v4 a0, a1, b0, b1;
    std::memcpy(&a0, a + i, 16);
    std::memcpy(&a1, a + i + 4, 16);
    std::memcpy(&b0, b + i, 16);
    std::memcpy(&b1, b + i + 4, 16);
    acc0 += a0 * b0;
    acc1 += a1 * b1;
  }
  const v4 acc = acc0 + acc1;
  float s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

float dot_other(const float* a, const float* b, int64_t n, SumOrder o, float acc) {
  if (o == SumOrder::Reversed) {
    for (int64_t i = n - 1; i >= 0; --i) acc += a[i] * b[i];
    return acc;
  }
  for (int64_t i0 = 0; i0 < n; i0 += 32) {
    float part = 0.f;
    for (int64_t i = i0; i < std::min(n, i0 + 32); ++i) part += a[i] * b[i];
    acc += part;
  }
  return acc;
}

}  // namespace plumb::cpu

#include "plumb/format/weight_view.h"

#include <cstring>

#include <fmt/format.h>

#include "plumb/format/codecs.h"
#include "plumb/util/error.h"

namespace plumb {

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::Dense: return "dense";
    case WeightFormat::FP8Block128: return "fp8-e4m3 block128";
    case WeightFormat::FP4Block32: return "fp4-e2m1 block32";
  }
  return "?";
}

int64_t WeightView::cols() const {
  int64_t c = 1;
  for (std::size_t i = 1; i < shape.size(); ++i) c *= shape[i];
  return c;
}

int64_t WeightView::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

namespace {

float scale_at(const WeightView& w, int64_t r, int64_t c) {
  const int64_t idx = r * w.scale_shape[1] + c;
  return w.scale_dtype == DType::F32 ? reinterpret_cast<const float*>(w.scale)[idx]
                                     : ue8m0_to_f32(reinterpret_cast<const uint8_t*>(w.scale)[idx]);
}

void decode_fp8_rows(const WeightView& w, int64_t r0, int64_t r1, float* out) {
  const int64_t cols = w.cols();
  const auto* q = reinterpret_cast<const uint8_t*>(w.data);
  for (int64_t r = r0; r < r1; ++r) {
    float* o = out + (r - r0) * cols;
    const uint8_t* row = q + r * cols;
    for (int64_t cb = 0; cb * 128 < cols; ++cb) {
      const float s = scale_at(w, r / 128, cb);
      const int64_t end = std::min<int64_t>(cols, (cb + 1) * 128);
      for (int64_t c = cb * 128; c < end; ++c) o[c] = e4m3_to_f32(row[c]) * s;
    }
  }
}

void decode_fp4_rows(const WeightView& w, int64_t r0, int64_t r1, float* out) {
  const int64_t cols = w.cols();
  const auto* q = reinterpret_cast<const uint8_t*>(w.data);
  for (int64_t r = r0; r < r1; ++r) {
    float* o = out + (r - r0) * cols;
    const uint8_t* row = q + r * (cols / 2);
    for (int64_t c = 0; c < cols; ++c) o[c] = e2m1_to_f32(fp4_nibble(row, c)) * scale_at(w, r, c / 32);
  }
}

}  // namespace

void decode_rows(const WeightView& w, int64_t r0, int64_t r1, float* out) {
  if (!w.present()) fail("weight '{}' is not bound", w.name);
  const int64_t rows = w.shape.size() <= 1 ? w.numel() : w.rows();
  const int64_t cols = w.shape.size() <= 1 ? 1 : w.cols();
  if (r0 < 0 || r1 > rows || r0 > r1) fail("weight '{}': rows [{}, {}) out of range [0, {})", w.name, r0, r1, rows);
  switch (w.format) {
    case WeightFormat::FP8Block128: return decode_fp8_rows(w, r0, r1, out);
    case WeightFormat::FP4Block32: return decode_fp4_rows(w, r0, r1, out);
    case WeightFormat::Dense: break;
  }
  if (!dtype_is_float(w.dtype)) fail("weight '{}': dtype {} is not a float type", w.name, dtype_name(w.dtype));
  const std::size_t es = dtype_size(w.dtype);
  const std::byte* p = w.data + static_cast<std::size_t>(r0 * cols) * es;
  const int64_t n = (r1 - r0) * cols;
  if (w.dtype == DType::F32) {
    std::memcpy(out, p, static_cast<std::size_t>(n) * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = decode_float(w.dtype, p + i * es);
}

std::vector<float> decode_all(const WeightView& w) {
  std::vector<float> out(static_cast<std::size_t>(w.numel()));
  const int64_t rows = w.shape.size() <= 1 ? w.numel() : w.rows();
  decode_rows(w, 0, rows, out.data());
  return out;
}

std::vector<int64_t> decode_ints(const WeightView& w) {
  if (!w.present()) fail("weight '{}' is not bound", w.name);
  std::vector<int64_t> out(static_cast<std::size_t>(w.numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    switch (w.dtype) {
      case DType::I64: std::memcpy(&out[i], w.data + i * 8, 8); break;
      case DType::I32: {
        int32_t v;
        std::memcpy(&v, w.data + i * 4, 4);
        out[i] = v;
        break;
      }
      default: fail("weight '{}': expected an I64 or I32 tensor, got {}", w.name, dtype_name(w.dtype));
    }
  }
  return out;
}

WeightView row_slice(const WeightView& w, int64_t begin, int64_t count) {
  if (begin < 0 || count < 0 || begin + count > w.rows())
    fail("{}: rows [{}, {}) are not rows of its {}", w.name, begin, begin + count, w.rows());
  WeightView v = w;
  v.name = fmt::format("{} rows {}..{}", w.name, begin, begin + count);
  v.shape[0] = count;
  const int64_t cols = w.cols();
  switch (w.format) {
    case WeightFormat::Dense:
      v.data = w.data + static_cast<std::size_t>(begin * cols) * dtype_size(w.dtype);
      break;
    case WeightFormat::FP8Block128: {
      if (begin % 128 != 0 || (count % 128 != 0 && begin + count != w.rows()))
        fail("{}: rows [{}, {}) cut a 128-row FP8 scale block", w.name, begin, begin + count);
      v.data = w.data + static_cast<std::size_t>(begin * cols);
      v.scale = w.scale + static_cast<std::size_t>(begin / 128 * w.scale_shape[1]) * dtype_size(w.scale_dtype);
      v.scale_shape[0] = (count + 127) / 128;
      break;
    }
    case WeightFormat::FP4Block32:
      v.data = w.data + static_cast<std::size_t>(begin * cols / 2);
      v.scale = w.scale + static_cast<std::size_t>(begin * w.scale_shape[1]) * dtype_size(w.scale_dtype);
      v.scale_shape[0] = count;
      break;
  }
  return v;
}

}  // namespace plumb

#pragma once
// A weight as stored in the checkpoint: format, data, scales. Quantized weights stay quantized;
// ops decode the rows they need (decode_rows) instead of holding a second, expanded copy.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "plumb/format/dtype.h"

namespace plumb {

enum class WeightFormat {
  Dense,        // BF16 / F16 / F32 / I64 values, no scales
  FP8Block128,  // F8_E4M3 [rows, cols] + scales [ceil(rows/128), ceil(cols/128)] (E8M0 or F32)
  FP4Block32,   // I8 packed e2m1 [rows, cols/2] + E8M0 scales [rows, ceil(cols/32)]
};
const char* weight_format_name(WeightFormat f);

struct WeightView {
  std::string name;  // checkpoint tensor name (for error messages and taps)
  WeightFormat format = WeightFormat::Dense;
  DType dtype = DType::F32;     // storage dtype of data
  std::vector<int64_t> shape;   // logical shape; FP4: [rows, cols] with cols = 2 * stored bytes/row
  const std::byte* data = nullptr;
  const std::byte* scale = nullptr;
  DType scale_dtype = DType::F8_E8M0;
  std::vector<int64_t> scale_shape;

  bool present() const { return data != nullptr; }
  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  int64_t cols() const;  // product of dims after the first (1 for a vector)
  int64_t numel() const;
};

// Decodes rows [row_begin, row_end) of a 2-D (or 1-D, rows = numel, cols = 1) float weight into
// f32, row-major, `out` holding (row_end - row_begin) * cols() floats.
void decode_rows(const WeightView& w, int64_t row_begin, int64_t row_end, float* out);
// Whole weight as f32 (for small tensors: norms, biases, hc params, sinks).
std::vector<float> decode_all(const WeightView& w);
// Rows [begin, begin + count) of a weight as a view of the same storage (tensor parallelism:
// a rank's heads of a projection). An FP8 weight's slice must cut whole 128-row scale blocks;
// a plumb::Error names the weight otherwise.
WeightView row_slice(const WeightView& w, int64_t begin, int64_t count);
// I64 / I32 tensors as int64 (tid2eid).
std::vector<int64_t> decode_ints(const WeightView& w);

}  // namespace plumb

// linear(): y = x . w^T for dense, FP8 128x128 and FP4 1x32 weights.
#include <algorithm>
#include <vector>

#include "plumb/backend/cpu/cpu_backend.h"
#include "plumb/backend/cpu/cpu_tensor.h"
#include "plumb/backend/cpu/gemm.h"
#include "plumb/backend/cpu/simquant.h"
#include "plumb/backend/cpu/weight_decode.h"

namespace plumb::cpu {

namespace {
constexpr int64_t kTileRows = 16;  // weight rows decoded at once (16 x K f32 stays in cache)
}

void gemm_wt(ThreadPool& pool, const float* x, int64_t N, int64_t ldx, const WeightView& w, int64_t row0,
             int64_t nrows, float* y, int64_t ldy, bool bf16_weight, SumOrder order) {
  const int64_t K = w.cols();
  const int64_t tiles = (nrows + kTileRows - 1) / kTileRows;
  pool.parallel_for(tiles, 1, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> tile;
    tile.resize(static_cast<std::size_t>(kTileRows * K));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r0 = t * kTileRows, r1 = std::min(nrows, r0 + kTileRows);
      decode_weight_rows(w, row0 + r0, row0 + r1, tile.data());
      if (bf16_weight) round_bf16(tile.data(), (r1 - r0) * K);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t r = r0; r < r1; ++r) y[n * ldy + r] = dot(x + n * ldx, tile.data() + (r - r0) * K, K, order);
    }
  });
}

void act_quant_fp8_rows(float* x, int64_t N, int64_t K) {
  for (int64_t n = 0; n < N; ++n) fp8_roundtrip(x + n * K, K, 128);
}

Tensor CpuBackend::linear(const Tensor& x, const WeightView& w, const LinearOpts& o) {
  const LinearDims d = check_linear(x, w, o);
  const int64_t G = d.groups, K = d.K, R = d.rows_per_group, in = d.in, N = d.N;
  const float* src = f32(x, "linear input");
  std::vector<float> quantized;
  if (o.act_fp8) {  // the product sees the FP8 round trip of x, per group's K blocks
    quantized.assign(src, src + N * in);
    act_quant_fp8_rows(quantized.data(), N * G, K);
    src = quantized.data();
  }
  Tensor y = new_f32(d.out);
  float* dst = f32(y);
  for (int64_t g = 0; g < G; ++g) gemm_wt(pool(), src + g * K, N, in, w, g * R, R, dst + g * R, G * R, o.bf16_weight, order(kLinear));
  apply_round(dst, N * G * R, o.out);
  return y;
}

}  // namespace plumb::cpu

// linear() in the CPU backend's order (reduction order "cpu", gpu_backend.h): every output is
// summed by a group of 8 lanes exactly as cpu::dot sums it (kernels/cpu_order.h), so y is bitwise
// the CPU's for every weight format. No data reuse beyond the caches: this path exists to make
// GPU results reproducible bit for bit (plumb verify), not to be fast; its cost is about
// 8 x (the outputs' K) serial adds spread over the device.
#include "plumb/backend/gpu/kernels/cpu_order.h"
#include "plumb/backend/gpu/kernels/launch.h"
#include "plumb/backend/gpu/kernels/linear.h"
#include "plumb/backend/gpu/kernels/linear_common.h"

namespace plumb::gpu::k {
namespace {

constexpr int kThreads = 256;

// Group o (8 lanes) computes output o = (n, g, r) in row-major order of y's logical [N, G*R], so
// the groups of a warp share x's row n and read neighbouring weight rows.
template <WFormat F>
__global__ void __launch_bounds__(kThreads) cpu_order_kernel(LinearArgs a, WeightRef w, int64_t outputs) {
  pdl_begin();
  const int64_t o = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 8;
  const int sub = static_cast<int>(threadIdx.x % 8);
  const bool live = o < outputs;  // dead groups still take part in the warp's shuffles
  const int64_t GR = a.groups * a.R;
  const int64_t n = live ? o / GR : 0, gr = live ? o % GR : 0;
  const int64_t g = gr / a.R;
  const float* x = a.x + n * a.ldx + g * a.K;
  auto wv = [&](int64_t i) {
    const float v = wload<F>(w, gr, i);
    return a.round_w ? round_bf16(v) : v;
  };
  const float v = cpu_order_sum8([&](int64_t i) { return live ? __fmul_rn(x[i], wv(i)) : 0.f; }, a.K, sub);
  if (live && sub == 0) a.y[n * a.ldy + gr] = a.round_bf16 ? round_bf16(v) : v;
}

}  // namespace

gpuError_t linear_cpu_order(const LinearArgs& a, const WeightRef& w, gpuStream_t s) {
  const int64_t outputs = a.nrows * a.groups * a.R;
  if (outputs <= 0) return gpuGetLastError();
  const int64_t blocks = (outputs * 8 + kThreads - 1) / kThreads;
  return dispatch_format(w.format, [&]<WFormat F>() {
    return launch(cpu_order_kernel<F>, static_cast<unsigned>(blocks), kThreads, 0, s, a, w, outputs);
  });
}

}  // namespace plumb::gpu::k

// Where plumb's 1-row FP8 GEMV loses to gemv_probe.cu's (24.5 us against 12.8 for wq_b's 33.6 MB
// on the H200, same loads per lane, same occupancy: docs/PERF.md v12 / v13): a probe for
// docs/PERF.md, not part of the build. Linked against the bundle's libplumb_backend.so
// (gemv_bisect.sh), so one binary times, on the same bytes: the probe's kernel; that kernel
// rebuilt from plumb's building blocks (wraw16, wdecode4 of linear_common.h) and with plumb's loop
// features added one at a time; and plumb's linear_gemv() itself, with and without the fused
// act-quant.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "plumb/backend/gpu/kernels/linear.h"
#include "plumb/backend/gpu/kernels/linear_common.h"

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { std::printf("%s: %s\n", #x, cudaGetErrorString(e)); std::exit(1); } } while (0)

namespace probe {
using plumb::gpu::WeightRef;
using plumb::gpu::WFormat;
using plumb::gpu::k::WRaw;
constexpr int kThreads = 256, kWarps = 8, RPW = 4;

// acc += w[e] * x[e] for e = 0..3 in turn (linear_gemv.cu's fma4: the same order).
__device__ __forceinline__ float fma4(const float (&w)[4], float4 x, float acc) {
  acc = fmaf(w[0], x.x, acc);
  acc = fmaf(w[1], x.y, acc);
  acc = fmaf(w[2], x.z, acc);
  return fmaf(w[3], x.w, acc);
}

// The probe's kernel (gemv_probe.cu, RPW 4 U 1, scale per weight) unless a flag adds one of
// plumb's features: BLOCKS plumb's wraw16 / wdecode4 / fma4 instead of inline loads and decode;
// UNROLL1 plumb's `#pragma unroll 1` on the column loop; XQ x read a quarter (one float4) at a time
// inside the row loop, as plumb's column() does, instead of 4 float4 before it; ROW64 plumb's
// per-row 64-bit row index array (row[j] = r0 + j, the index r * cols + c formed per load).
template <bool BLOCKS, bool UNROLL1, bool XQ, bool ROW64>
__global__ void __launch_bounds__(kThreads) gemv(WeightRef w, const float* x, float* y, int64_t R, int64_t K) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t r0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * RPW;
  if (r0 >= R) return;
  int64_t row[RPW];
#pragma unroll
  for (int j = 0; j < RPW; ++j) row[j] = r0 + j;
  float acc[RPW] = {};
  const auto body = [&](int64_t c) __attribute__((always_inline)) {
    WRaw<WFormat::FP8> g[RPW];
#pragma unroll
    for (int j = 0; j < RPW; ++j) {
      if constexpr (BLOCKS || ROW64) {
        g[j] = plumb::gpu::k::wraw16<WFormat::FP8>(w, ROW64 ? row[j] : r0 + j, c);
      } else {
        g[j].v[0] = __ldcs(reinterpret_cast<const uint4*>(w.data + (r0 + j) * K + c));
        g[j].sbits = w.scale[((r0 + j) >> 7) * w.scale_cols + (c >> 7)];
      }
    }
    float4 xv[4];
    if constexpr (!XQ) {
#pragma unroll
      for (int q = 0; q < 4; ++q) xv[q] = __ldg(reinterpret_cast<const float4*>(x + c) + q);
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 xq = XQ ? *(reinterpret_cast<const float4*>(x + c) + q) : xv[q];
#pragma unroll
      for (int j = 0; j < RPW; ++j) {
        float f[4];
        if constexpr (BLOCKS) {
          plumb::gpu::k::wdecode4<WFormat::FP8, true>(g[j], w, q, f);
        } else {
          const uint32_t words[4] = {g[j].v[0].x, g[j].v[0].y, g[j].v[0].z, g[j].v[0].w};
#ifdef __CUDA_ARCH__  // (the hardware decode exists in the device pass only)
          plumb::gpu::k::fp8x4_cvt(words[q], __uint_as_float(g[j].sbits << 23), f);
#endif
        }
        acc[j] = fma4(f, xq, acc[j]);
      }
    }
  };
  if constexpr (UNROLL1) {
#pragma unroll 1
    for (int64_t c = lane * 16; c < K; c += 512) body(c);
  } else {
    for (int64_t c = lane * 16; c < K; c += 512) body(c);
  }
#pragma unroll
  for (int j = 0; j < RPW; ++j) {
    float v = acc[j];
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0 && r0 + j < R) y[r0 + j] = v;
  }
}

struct Shape {
  const char* name;
  int64_t R, K;
};

template <typename Launch>
float median_us(Launch launch, int copies) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) launch(i % copies);
  std::vector<float> t;
  for (int rep = 0; rep < 20; ++rep) {
    CK(cudaEventRecord(a));
    for (int i = 0; i < copies; ++i) launch(i);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e3f / copies);
  }
  CK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void row(const Shape& s, const char* what, float us, std::vector<float>* out, const std::vector<float>& ref) {
  double diff = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs((*out)[i] - ref[i])));
  std::printf("| %s | %s | %.2f | %.0f | %.3g |\n", s.name, what, us, s.R * s.K / us / 1e3, diff);
}

}  // namespace probe

int main() {
  using namespace probe;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const Shape shapes[] = {{"wq_b 32768x1024", 32768, 1024}, {"wo_b 4096x8192", 4096, 8192}, {"shared w1 2048x4096", 2048, 4096}};
  std::printf("| shape | variant | us | GB/s | max diff to the first row |\n|---|---|---|---|---|\n");
  std::mt19937 rng(1);
  for (const Shape& s : shapes) {
    const int64_t bytes = s.R * s.K, sk = s.K / 128;
    const int copies = static_cast<int>((160'000'000 + bytes - 1) / bytes);
    std::vector<uint8_t> hw(bytes), hs((s.R / 128) * sk);
    for (auto& b : hw) b = static_cast<uint8_t>(rng() % 0x7F) | static_cast<uint8_t>(rng() & 0x80);  // no NaN codes
    for (auto& b : hs) b = static_cast<uint8_t>(120 + rng() % 8);
    std::vector<float> hx(s.K);
    for (auto& v : hx) v = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 1000.f;
    std::vector<WeightRef> w(copies);
    for (int i = 0; i < copies; ++i) {
      uint8_t *d, *sc;
      CK(cudaMalloc(&d, bytes));
      CK(cudaMalloc(&sc, hs.size()));
      CK(cudaMemcpy(d, hw.data(), bytes, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(sc, hs.data(), hs.size(), cudaMemcpyHostToDevice));
      w[i].format = WFormat::FP8, w[i].data = d, w[i].scale = sc, w[i].rows = s.R, w[i].cols = s.K, w[i].scale_cols = sk;
    }
    float *x, *y;
    CK(cudaMalloc(&x, s.K * 4));
    CK(cudaMalloc(&y, s.R * 4));
    CK(cudaMemcpy(x, hx.data(), s.K * 4, cudaMemcpyHostToDevice));
    std::vector<float> ref(s.R), out(s.R);
    const auto fetch = [&](std::vector<float>& v) { CK(cudaMemcpy(v.data(), y, s.R * 4, cudaMemcpyDeviceToHost)); };
    const unsigned blocks = static_cast<unsigned>((s.R + kWarps * RPW - 1) / (kWarps * RPW));
    const auto variant = [&](const char* what, auto kernel, bool first = false) {
      const float us = median_us([&](int i) { kernel<<<blocks, kThreads>>>(w[i], x, y, s.R, s.K); }, copies);
      fetch(first ? ref : out);
      row(s, what, us, first ? &ref : &out, ref);
    };
    variant("probe kernel (RPW 4 U 1)", gemv<false, false, false, false>, true);
    variant("+ plumb's wraw16 / wdecode4", gemv<true, false, false, false>);
    variant("+ unroll 1", gemv<false, true, false, false>);
    variant("+ x a quarter at a time", gemv<false, false, true, false>);
    variant("+ 64-bit row array", gemv<false, false, false, true>);
    variant("all four", gemv<true, true, true, true>);
    for (const bool qx : {false, true}) {
      plumb::gpu::k::LinearArgs a;
      a.y = y, a.ldy = s.R, a.x = x, a.ldx = s.K, a.nrows = 1, a.R = s.R, a.K = s.K, a.quant_x = qx;
      const float us = median_us([&](int i) { CK(plumb::gpu::k::linear_gemv(a, w[i], 2 * sms, nullptr)); }, copies);
      fetch(out);
      row(s, qx ? "plumb linear_gemv, act-quant fused" : "plumb linear_gemv", us, &out, ref);
    }
    for (auto& wi : w) {
      CK(cudaFree(const_cast<uint8_t*>(wi.data)));
      CK(cudaFree(const_cast<uint8_t*>(wi.scale)));
    }
    CK(cudaFree(x));
    CK(cudaFree(y));
  }
  return 0;
}

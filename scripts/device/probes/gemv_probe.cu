// What an FP8 (e4m3, ue8m0 scale per 128 x 128) GEMV of one x row can reach on this GPU, apart
// from plumb's kernel: a probe for docs/PERF.md, not part of the build. Compiled and run on the
// GPU machine by scripts/device/probes/gemv_probe.sh (nvcc there; no plumb code is linked).
// Shapes of a V4-Flash decode step (wq_b, wo_b, shared w1); each weight in enough copies to
// exceed 160 MB (the 50 MB L2 cannot hold them), all copies called back to back, median of 20.
// Variants: a plain 16-byte streaming read of the same bytes (the ceiling of the access pattern),
// then GEMVs of RPW rows per warp with U 16-byte loads per row and lane issued before their math,
// the scale applied per weight (plumb's order) or per 16-column segment (one multiply a segment),
// plumb's features one at a time, and 2 / 4 / 8 x rows at once.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { std::printf("%s: %s\n", #x, cudaGetErrorString(e)); std::exit(1); } } while (0)

constexpr int kThreads = 256, kWarps = kThreads / 32;

__global__ void stream_kernel(const uint4* w, int64_t n16, uint32_t* sink) {
  uint32_t acc = 0;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n16; i += int64_t{gridDim.x} * kThreads) {
    const uint4 v = __ldcs(w + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345679u) *sink = acc;
}

__device__ __forceinline__ void fp8x4(uint32_t u, float* f) {
  uint32_t h01, h23;
  asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %2;\n\tcvt.rn.f16x2.e4m3x2 %0, lo;\n\tcvt.rn.f16x2.e4m3x2 %1, hi;\n\t}"
      : "=r"(h01), "=r"(h23) : "r"(u));
  const __half2 a = *reinterpret_cast<__half2*>(&h01), b = *reinterpret_cast<__half2*>(&h23);
  const float2 fa = __half22float2(a), fb = __half22float2(b);
  f[0] = fa.x, f[1] = fa.y, f[2] = fb.x, f[3] = fb.y;
}

// A lane's batch: the 16 weight bytes and the scale byte of rows r0 .. r0 + RPW - 1 at columns
// c, c + 512, ... (U steps, those inside K). SCALE_SEL: the scale read as a u32 when scale_f32
// (plumb's f32-scale option, a run-time choice per load).
template <int RPW, int U, bool SCALE_SEL>
__device__ __forceinline__ void load_batch(const uint8_t* w, const uint8_t* sc, int64_t r0, int64_t c, int64_t K,
                                           bool scale_f32, uint4 (&v)[U][RPW], uint8_t (&s)[U][RPW]) {
  const int64_t sk = K / 128;
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int j = 0; j < RPW; ++j) {
      const int64_t cc = c + u * 512;
      if (cc < K) {
        v[u][j] = __ldcs(reinterpret_cast<const uint4*>(w + (r0 + j) * K + cc));
        const int64_t si = ((r0 + j) >> 7) * sk + (cc >> 7);
        if (SCALE_SEL && scale_f32)
          s[u][j] = static_cast<uint8_t>(reinterpret_cast<const uint32_t*>(sc)[si] >> 23);
        else
          s[u][j] = sc[si];
      }
    }
}

// Warp w of block b: rows (b * kWarps + w) * RPW ... + RPW - 1, all K columns; lane l reads 16
// bytes at columns l * 16 + m * 512. PER_SEG: one scale multiply per 16-column segment.
// The features of plumb's kernel (linear_gemv.cu), one at a time, to find what costs: SMEM_X x
// staged in shared memory by the block behind a barrier (plumb's act-quant staging, without the
// quantization), MINB3 __launch_bounds__(256, 3) (plumb's lean form: <= 85 registers), SCALE_SEL
// the scale loaded as a u32 or a byte by a run-time flag (plumb's f32-scale option).
template <int RPW, int U, bool PER_SEG, bool SMEM_X = false, bool MINB3 = false, bool SCALE_SEL = false>
__global__ void __launch_bounds__(kThreads, MINB3 ? 3 : 1)
    gemv_kernel(const uint8_t* w, const uint8_t* sc, const float* x, float* y, int64_t R, int64_t K, bool scale_f32) {
  extern __shared__ float4 xs4[];
  if constexpr (SMEM_X) {
    float* xs = reinterpret_cast<float*>(xs4);
    for (int64_t i = threadIdx.x; i < K; i += kThreads) xs[i] = x[i];
    __syncthreads();
    x = xs;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t r0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * RPW;
  if (r0 >= R) return;
  float acc[RPW] = {};
  for (int64_t c = lane * 16; c < K; c += 512 * U) {
    uint4 v[U][RPW];
    uint8_t s[U][RPW];
    load_batch<RPW, U, SCALE_SEL>(w, sc, r0, c, K, scale_f32, v, s);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (c + u * 512 >= K) break;
      const float4* xp = reinterpret_cast<const float4*>(x + c + u * 512);
      float4 xv[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) xv[q] = SMEM_X ? xp[q] : __ldg(xp + q);
#pragma unroll
      for (int j = 0; j < RPW; ++j) {
        const float scale = __uint_as_float(static_cast<uint32_t>(s[u][j]) << 23);
        const uint32_t words[4] = {v[u][j].x, v[u][j].y, v[u][j].z, v[u][j].w};
        float part = 0.f;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          float f[4];
          fp8x4(words[q], f);
          if (PER_SEG) {
            part = fmaf(f[0], xv[q].x, part), part = fmaf(f[1], xv[q].y, part);
            part = fmaf(f[2], xv[q].z, part), part = fmaf(f[3], xv[q].w, part);
          } else {
            acc[j] = fmaf(f[0] * scale, xv[q].x, acc[j]), acc[j] = fmaf(f[1] * scale, xv[q].y, acc[j]);
            acc[j] = fmaf(f[2] * scale, xv[q].z, acc[j]), acc[j] = fmaf(f[3] * scale, xv[q].w, acc[j]);
          }
        }
        if (PER_SEG) acc[j] = fmaf(part, scale, acc[j]);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < RPW; ++j) {
    float v = acc[j];
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0 && r0 + j < R) y[r0 + j] = v;
  }
}

// NB x rows at once (plumb's batched decode: up to 8 rows a launch), plumb's order (the scale
// applied per weight, one fmaf chain per (row, x row)); x [NB, K] through L1. MINB: the launch
// bound's blocks per SM (1: up to 255 registers, plumb's 8-row form; 2: <= 128).
template <int NB, int RPW, int U, int MINB>
__global__ void __launch_bounds__(kThreads, MINB)
    gemv_nb_kernel(const uint8_t* w, const uint8_t* sc, const float* x, float* y, int64_t R, int64_t K) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t r0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * RPW;
  if (r0 >= R) return;
  float acc[RPW][NB] = {};
  for (int64_t c = lane * 16; c < K; c += 512 * U) {
    uint4 v[U][RPW];
    uint8_t s[U][RPW];
    load_batch<RPW, U, false>(w, sc, r0, c, K, false, v, s);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (c + u * 512 >= K) break;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        float4 xv[NB];
#pragma unroll
        for (int n = 0; n < NB; ++n) xv[n] = __ldg(reinterpret_cast<const float4*>(x + n * K + c + u * 512) + q);
#pragma unroll
        for (int j = 0; j < RPW; ++j) {
          const float scale = __uint_as_float(static_cast<uint32_t>(s[u][j]) << 23);
          const uint32_t word = q == 0 ? v[u][j].x : q == 1 ? v[u][j].y : q == 2 ? v[u][j].z : v[u][j].w;
          float f[4];
          fp8x4(word, f);
#pragma unroll
          for (int e = 0; e < 4; ++e) f[e] *= scale;
#pragma unroll
          for (int n = 0; n < NB; ++n) {
            acc[j][n] = fmaf(f[0], xv[n].x, acc[j][n]), acc[j][n] = fmaf(f[1], xv[n].y, acc[j][n]);
            acc[j][n] = fmaf(f[2], xv[n].z, acc[j][n]), acc[j][n] = fmaf(f[3], xv[n].w, acc[j][n]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < RPW; ++j)
#pragma unroll
    for (int n = 0; n < NB; ++n) {
      float v = acc[j][n];
      for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane == 0 && r0 + j < R) y[n * R + r0 + j] = v;
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

template <int RPW, int U, bool PER_SEG, bool SMEM_X = false, bool MINB3 = false, bool SCALE_SEL = false>
void run_gemv(const Shape& s, const std::vector<uint8_t*>& w, const std::vector<uint8_t*>& sc, const float* x, float* y,
              int per_sm = 0) {
  const int64_t blocks = (s.R + kWarps * RPW - 1) / (kWarps * RPW);
  // per_sm: unused shared memory that leaves room for only that many blocks an SM (of 228 KB):
  // occupancy alone, at the same registers and code
  std::size_t smem = SMEM_X ? static_cast<std::size_t>(s.K) * 4 : 0;
  if (per_sm > 0) smem = std::max(smem, static_cast<std::size_t>(220 * 1024 / per_sm));
  if (smem > 48 * 1024)
    CK(cudaFuncSetAttribute(gemv_kernel<RPW, U, PER_SEG, SMEM_X, MINB3, SCALE_SEL>,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const float us = median_us([&](int i) {
    gemv_kernel<RPW, U, PER_SEG, SMEM_X, MINB3, SCALE_SEL>
        <<<static_cast<unsigned>(blocks), kThreads, smem>>>(w[i], sc[i], x, y, s.R, s.K, false);
  }, static_cast<int>(w.size()));
  char occ[40] = "";
  if (per_sm > 0) std::snprintf(occ, sizeof occ, ", at most %d blocks/SM", per_sm);
  std::printf("| %s | gemv RPW %d U %d scale per %s%s%s%s%s | %lld | %.2f | %.0f |\n", s.name, RPW, U,
              PER_SEG ? "segment" : "weight", SMEM_X ? ", x in shared memory" : "", MINB3 ? ", 3 blocks/SM bound" : "",
              SCALE_SEL ? ", scale type by flag" : "", occ, static_cast<long long>(blocks), us, s.R * s.K / us / 1e3);
}

template <int NB, int RPW, int U, int MINB>
void run_gemv_nb(const Shape& s, const std::vector<uint8_t*>& w, const std::vector<uint8_t*>& sc, const float* x, float* y) {
  const int64_t blocks = (s.R + kWarps * RPW - 1) / (kWarps * RPW);
  const float us = median_us([&](int i) {
    gemv_nb_kernel<NB, RPW, U, MINB><<<static_cast<unsigned>(blocks), kThreads>>>(w[i], sc[i], x, y, s.R, s.K);
  }, static_cast<int>(w.size()));
  std::printf("| %s | %d x rows: gemv RPW %d U %d, bound %d blocks/SM | %lld | %.2f | %.0f |\n", s.name, NB, RPW, U, MINB,
              static_cast<long long>(blocks), us, s.R * s.K / us / 1e3);
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const Shape shapes[] = {{"wq_b 32768x1024", 32768, 1024}, {"wo_b 4096x8192", 4096, 8192}, {"shared w1 2048x4096", 2048, 4096}};
  std::printf("| shape | variant | blocks | us | GB/s |\n|---|---|---|---|---|\n");
  std::mt19937 rng(1);
  for (const Shape& s : shapes) {
    const int64_t bytes = s.R * s.K;
    const int copies = static_cast<int>((160'000'000 + bytes - 1) / bytes);
    std::vector<uint8_t> hw(bytes), hs((s.R / 128) * (s.K / 128));
    for (auto& b : hw) b = static_cast<uint8_t>(rng() % 0x7F) | static_cast<uint8_t>(rng() & 0x80);  // no NaN codes
    for (auto& b : hs) b = static_cast<uint8_t>(120 + rng() % 8);
    std::vector<float> hx(8 * s.K);  // 8 x rows for the batched variants
    for (auto& v : hx) v = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 1000.f;
    std::vector<uint8_t*> w(copies), sc(copies);
    for (int i = 0; i < copies; ++i) {
      CK(cudaMalloc(&w[i], bytes));
      CK(cudaMalloc(&sc[i], hs.size()));
      CK(cudaMemcpy(w[i], hw.data(), bytes, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(sc[i], hs.data(), hs.size(), cudaMemcpyHostToDevice));
    }
    float *x, *y;
    uint32_t* sink;
    CK(cudaMalloc(&x, 8 * s.K * 4));
    CK(cudaMalloc(&y, 8 * s.R * 4));
    CK(cudaMalloc(&sink, 4));
    CK(cudaMemcpy(x, hx.data(), 8 * s.K * 4, cudaMemcpyHostToDevice));
    for (int per_sm : {2, 4, 8}) {
      const float us = median_us([&](int i) {
        stream_kernel<<<sms * per_sm, kThreads>>>(reinterpret_cast<const uint4*>(w[i]), bytes / 16, sink);
      }, copies);
      std::printf("| %s | stream, %d blocks/SM | %d | %.2f | %.0f |\n", s.name, per_sm, sms * per_sm, us, bytes / us / 1e3);
    }
    run_gemv<1, 2, false>(s, w, sc, x, y);
    run_gemv<1, 4, false>(s, w, sc, x, y);
    run_gemv<1, 8, false>(s, w, sc, x, y);
    run_gemv<2, 2, false>(s, w, sc, x, y);
    run_gemv<2, 4, false>(s, w, sc, x, y);
    run_gemv<4, 1, false>(s, w, sc, x, y);
    run_gemv<4, 2, false>(s, w, sc, x, y);
    run_gemv<1, 4, true>(s, w, sc, x, y);
    run_gemv<2, 4, true>(s, w, sc, x, y);
    run_gemv<4, 2, true>(s, w, sc, x, y);
    // plumb's lean form is RPW 4 U 1, scale per weight: each of its features alone, then together
    run_gemv<4, 1, false, true>(s, w, sc, x, y);
    run_gemv<4, 1, false, false, true>(s, w, sc, x, y);
    run_gemv<4, 1, false, false, false, true>(s, w, sc, x, y);
    run_gemv<4, 1, false, true, true, true>(s, w, sc, x, y);
    // occupancy alone (plumb's lean form: 80 registers, 3 blocks/SM; the probe's 59: 4)
    run_gemv<4, 1, false>(s, w, sc, x, y, 3);
    run_gemv<4, 1, false>(s, w, sc, x, y, 2);
    run_gemv<2, 2, false>(s, w, sc, x, y, 3);
    // 8 x rows (plumb's 8-row GEMV took 71-89 us for these 33.6 MB shapes, 3.5x its 1-row time)
    run_gemv_nb<8, 4, 1, 1>(s, w, sc, x, y);
    run_gemv_nb<8, 2, 1, 1>(s, w, sc, x, y);
    run_gemv_nb<8, 2, 1, 2>(s, w, sc, x, y);
    run_gemv_nb<8, 1, 2, 2>(s, w, sc, x, y);
    run_gemv_nb<8, 1, 1, 3>(s, w, sc, x, y);
    run_gemv_nb<4, 2, 1, 2>(s, w, sc, x, y);
    run_gemv_nb<2, 4, 1, 2>(s, w, sc, x, y);
    for (int i = 0; i < copies; ++i) {
      CK(cudaFree(w[i]));
      CK(cudaFree(sc[i]));
    }
    CK(cudaFree(x));
    CK(cudaFree(y));
    CK(cudaFree(sink));
  }
  return 0;
}

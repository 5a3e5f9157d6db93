// Elementwise, norm, RoPE, simulated-quantization and Hadamard kernels. Each computes exactly the
// CPU backend's function (cpu_backend.cpp, simquant.cpp): products and sums that the CPU does as
// separate f32 operations use the _rn intrinsics so the compiler cannot contract them into FMAs
// (which would round once instead of twice and differ from the CPU in the last bit).
#include <cmath>

#include "plumb/backend/gpu/gpu_numerics.h"
#include "plumb/backend/gpu/kernels/elementwise.h"
#include "plumb/backend/gpu/kernels/launch.h"
#include "plumb/backend/gpu/kernels/norm_row.h"

namespace plumb::gpu::k {
namespace {

constexpr int kThreads = 256;  // a multiple of every warp width (32, 64)
constexpr int64_t kMaxBlocks = 65535;

unsigned grid_for(int64_t n, int64_t per_block = kThreads) {
  int64_t b = (n + per_block - 1) / per_block;
  if (b < 1) b = 1;
  return static_cast<unsigned>(b > kMaxBlocks ? kMaxBlocks : b);
}

__device__ __forceinline__ int64_t global_id() { return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ int64_t global_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }

__global__ void embed_kernel(float* y, const int32_t* ids, int64_t n, WeightRef w) {
  pdl_begin();
  const int64_t d = w.cols, total = n * d;
  for (int64_t i = global_id(); i < total; i += global_stride()) {
    const int64_t row = i / d, c = i % d;
    int64_t id = ids[row];
    id = id < 0 ? 0 : (id >= w.rows ? w.rows - 1 : id);  // checked on the host; never read outside
    y[i] = weight_at(w, id, c);
  }
}

__global__ void repeat_kernel(float* y, const float* x, int64_t n, int64_t copies, int64_t d) {
  pdl_begin();
  const int64_t total = n * copies * d;
  for (int64_t i = global_id(); i < total; i += global_stride()) {
    const int64_t row = i / (copies * d), c = i % d;
    y[i] = x[row * d + c];
  }
}

// Element i of a norm weight as weight_at gives it (flat index i -> element (i / cols, i % cols)).
__device__ __forceinline__ float norm_weight(const WeightRef& w, int64_t i) {
  if (w.format == WFormat::F32) return load_f32(w.data + 4 * i);
  if (w.format == WFormat::BF16) return bf16_to_f32(load_u16(w.data + 2 * i));
  return w.rows == 1 ? weight_at(w, 0, i) : weight_at(w, i / w.cols, i % w.cols);
}

// One row of d values per block of T = norm_threads(d) threads (rows past the grid: grid-stride).
// A row's arithmetic, whatever PER, is norm_row_regs'. PER > 0 (d <= PER * T, a weight only when
// norm_weight_words): the row in registers (norm_row_regs), one memory latency plus the reduction,
// where the element loop over memory re-read x and loaded each weight after the previous
// element's store (the compiler cannot move a load above a store that may alias it: ~PER
// dependent latencies, each weight element as bytes behind a 64-bit division). PER == 0: any d,
// through memory. qy (and chunk, its shared memory) null: no act_fp8 copy (act_fp8_row).
template <int PER>
__device__ __forceinline__ void rms_norm_rows(float* y, const float* x, int64_t rows, int64_t d, const WeightRef& w,
                                              bool has_weight, float eps, bool bf16_steps, bool round_out,
                                              bool cpu_order, float* qy, float* chunk) {
  __shared__ float scratch[1024 / 32];
  const float inv_d = 1.0f / static_cast<float>(d);
  const bool weighted = has_weight && !bf16_steps;  // the bf16-steps form has no weight
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* v = x + r * d;
    float* o = y + r * d;
    if constexpr (PER > 0) {  // 32-bit offsets: d <= PER * T <= 8192
      const int ti = threadIdx.x, Ti = blockDim.x, di = static_cast<int>(d);
      float out[PER];
      norm_row_regs<PER>(v, di, w, weighted, eps, bf16_steps, round_out, cpu_order, scratch, out);
#pragma unroll
      for (int k = 0; k < PER; ++k)
        if (ti + k * Ti < di) o[ti + k * Ti] = out[k];
      if (qy) act_fp8_row<PER>(out, ti, Ti, di, qy + r * d, chunk);
    } else {
      const float ss = row_sum_squares(v, d, bf16_steps, cpu_order, scratch);
      if (bf16_steps) {
        const float var = round_bf16(add_rn(round_bf16(mul_rn(ss, inv_d)), eps));
        const float inv = round_bf16(1.0f / sqrtf(var));
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x) o[i] = round_bf16(mul_rn(v[i], inv));
      } else {
        const float inv = 1.0f / sqrtf(add_rn(mul_rn(ss, inv_d), eps));
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
          float p = mul_rn(v[i], inv);
          if (weighted) p = mul_rn(norm_weight(w, i), p);
          o[i] = maybe_round(p, round_out);
        }
      }
    }
  }
}

template <int PER>
__global__ void __launch_bounds__(1024) rms_norm_kernel(float* y, const float* x, int64_t rows, int64_t d, WeightRef w,
                                                        bool has_weight, float eps, bool bf16_steps, bool round_out,
                                                        bool cpu_order) {
  pdl_begin();
  rms_norm_rows<PER>(y, x, rows, d, w, has_weight, eps, bf16_steps, round_out, cpu_order, nullptr, nullptr);
}

// With the act_fp8 copy (a decode step's few rows): one block a multiprocessor is all it needs,
// and ptxas's default bound for 1,024 threads (32 registers) spilled its copy's values.
template <int PER>
__global__ void __launch_bounds__(1024, 1) rms_norm_copy_kernel(float* y, const float* x, int64_t rows, int64_t d,
                                                                WeightRef w, bool has_weight, float eps, bool bf16_steps,
                                                                bool round_out, bool cpu_order, float* qy) {
  pdl_begin();
  __shared__ float chunk[PER * 1024 / 32];
  rms_norm_rows<PER>(y, x, rows, d, w, has_weight, eps, bf16_steps, round_out, cpu_order, qy, chunk);
}

__global__ void scale_kernel(float* y, const float* x, int64_t n, float s, bool r) {
  pdl_begin();
  for (int64_t i = global_id(); i < n; i += global_stride()) y[i] = maybe_round(mul_rn(x[i], s), r);
}

__global__ void add_kernel(float* y, const float* a, const float* b, int64_t n, bool r) {
  pdl_begin();
  for (int64_t i = global_id(); i < n; i += global_stride()) y[i] = maybe_round(add_rn(a[i], b[i]), r);
}

__global__ void columns_kernel(float* y, const float* x, int64_t n, int64_t c, int64_t begin, int64_t count) {
  pdl_begin();
  const int64_t total = n * count;
  for (int64_t i = global_id(); i < total; i += global_stride()) y[i] = x[(i / count) * c + begin + i % count];
}

// One thread per (row, frequency): the angle and its cos/sin once, then every vector of the row.
// The CPU takes cos/sin in double of the f32 angle and rounds to f32 (correctly rounded); the
// device's double cos/sin are within an ulp of double, so the f32 results agree except in cases
// astronomically close to a rounding boundary.
// One thread per (row, vector, pair): each recomputes its pair's angle (the same value for every
// vector of the row), so that a decode step's single row of 64 heads still fills the device.
__global__ void rope_kernel(float* y, const int32_t* pos, const float* inv_freq, int64_t n, int64_t vecs, int64_t dl,
                            int64_t f, bool inverse, bool r) {
  pdl_begin();
  const int64_t total = n * vecs * f;
  for (int64_t t = global_id(); t < total; t += global_stride()) {
    const int64_t i = t % f, rv = t / f, row = rv / vecs;
    const float angle = mul_rn(static_cast<float>(pos[row]), inv_freq[i]);
    double sd, cd;
    sincos(static_cast<double>(angle), &sd, &cd);
    const float c = static_cast<float>(cd);
    float s = static_cast<float>(sd);
    if (inverse) s = -s;
    float* p = y + rv * dl + (dl - 2 * f) + 2 * i;
    const float a = p[0], b = p[1];
    p[0] = maybe_round(sub_rn(mul_rn(a, c), mul_rn(b, s)), r);
    p[1] = maybe_round(add_rn(mul_rn(a, s), mul_rn(b, c)), r);
  }
}

// One warp per quantization block: amax by warp_max (fmaxf ignores NaN like the CPU's std::max
// with the running max first), the power-of-two scale, then the element round trips of x into y
// (in place when x == y).
__global__ void quant_kernel(float* y, const float* x, int64_t vecs, int64_t dl, int64_t cols, int64_t block, bool fp4) {
  pdl_begin();
  const int64_t nb = (cols + block - 1) / block, units = vecs * nb;
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t u = global_id() / kWarp; u < units; u += warps) {
    const int64_t vec = u / nb, b0 = (u % nb) * block;
    const int64_t len = cols - b0 < block ? cols - b0 : block;
    float* p = y + vec * dl + b0;
    const float* q = x + vec * dl + b0;
    float amax = 0.f;
    for (int64_t i = lane; i < len; i += kWarp) amax = fmaxf(amax, fabsf(q[i]));
    amax = warp_max(amax);
    const float s = fp4 ? ue8m0_to_f32(ue8m0_scale_for(amax, kFp4Max, fp4_min_amax()))
                        : ue8m0_to_f32(ue8m0_scale_for(amax, kFp8Max, kFp8MinAmax));
    for (int64_t i = lane; i < len; i += kWarp) p[i] = fp4 ? fp4_roundtrip(q[i], s) : fp8_roundtrip(q[i], s);
  }
}

// norm_rope's fused row: the FP8 round trip of a row's first qcols values in blocks of qblock
// (both multiples of kWarp), the row in registers as norm_row_regs leaves it (thread t: elements
// t + k T). quant_kernel's values: each block's amax (|v|, NaN ignored, from 0) as a warp's max per
// chunk of kWarp consecutive elements (chunk k T / kWarp + warp), then the max of the block's
// chunks; its ue8m0 scale; fp8_roundtrip. chunk: PER * T / kWarp floats (the caller's barriers
// keep a previous row's reads before these writes).
template <int PER>
__device__ __forceinline__ void quant_row_fp8(float (&v)[PER], int t, int T, int qcols, int qblock, float* chunk) {
  chunk_amax<PER>(v, t, T, chunk);
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const int e = t + k * T;
    if (e >= qcols) continue;
    const int b0 = e / qblock * qblock, len = qcols - b0 < qblock ? qcols - b0 : qblock;
    float m = 0.f;
    for (int c = b0 / kWarp; c < (b0 + len) / kWarp; ++c) m = fmaxf(m, chunk[c]);
    v[k] = fp8_roundtrip(v[k], ue8m0_to_f32(ue8m0_scale_for(m, kFp8Max, kFp8MinAmax)));
  }
}

// rms_norm, rope and quant_blocks (FP8) of a decode step's q, kv or compressed entries in one
// launch, instead of a norm, two copies and two kernels: one vector of d values a block (T =
// norm_threads(d) threads, grid-stride), its norm in registers (norm_row_regs), then rope_kernel's
// rotation of its last 2f values (a pair's two values in adjacent lanes: d is even, so an element
// of even offset sits in an even lane; its partner by shfl_xor 1; the angle of the vector's row,
// vector / vecs), then (qcols > 0) quant_row_fp8, then one store. The same operations on the same
// values as the three kernels, so the same bits.
template <int PER>
__global__ void __launch_bounds__(1024, 1) norm_rope_kernel(float* y, const float* x, int64_t rows, int64_t vecs,
                                                            int d, WeightRef w, bool weighted, float eps,
                                                            bool bf16_steps, bool r, bool cpu_order,
                                                            const int32_t* pos, const float* inv_freq, int f,
                                                            int qcols, int qblock) {
  pdl_begin();
  __shared__ float scratch[1024 / 32];
  __shared__ float chunk[PER * 1024 / 32];
  const int t = threadIdx.x, T = blockDim.x, rope0 = d - 2 * f;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    float v[PER];
    norm_row_regs<PER>(x + row * d, d, w, weighted, eps, bf16_steps, r, cpu_order, scratch, v);
    const float p = static_cast<float>(pos[row / vecs]);
#pragma unroll
    for (int k = 0; k < PER; ++k) {
      const int e = t + k * T;
      const float other = shfl_xor(v[k], 1);  // every lane: the shuffle takes the whole warp
      if (e < rope0 || e >= d) continue;
      const float angle = mul_rn(p, inv_freq[(e - rope0) / 2]);
      double sd, cd;
      sincos(static_cast<double>(angle), &sd, &cd);
      const float c = static_cast<float>(cd), s = static_cast<float>(sd);
      v[k] = (e - rope0) % 2 == 0 ? maybe_round(sub_rn(mul_rn(v[k], c), mul_rn(other, s)), r)
                                  : maybe_round(add_rn(mul_rn(other, s), mul_rn(v[k], c)), r);
    }
    if (qcols > 0) quant_row_fp8<PER>(v, t, T, qcols, qblock, chunk);
    float* o = y + row * d;
#pragma unroll
    for (int k = 0; k < PER; ++k)
      if (t + k * T < d) o[t + k * T] = v[k];
  }
}

// Butterfly stage h over n values at v: pair p -> (i, i + h), (a, b) -> (a + b, a - b). Every
// stage's results do not depend on the order pairs are visited, so this equals the CPU's loop.
__device__ __forceinline__ void butterflies(float* v, int64_t n, int64_t h) {
  for (int64_t p = threadIdx.x; p < n / 2; p += blockDim.x) {
    const int64_t i = (p / h) * 2 * h + p % h;
    const float a = v[i], b = v[i + h];
    v[i] = add_rn(a, b);
    v[i + h] = sub_rn(a, b);
  }
}

// One block per vector; the vector in shared memory (n <= kSharedMax) or, for longer vectors,
// transformed in place in global memory (L2-resident; the long transforms are rare). CUDA opts in
// to 64 KiB of dynamic shared memory (sm_80: 164 KiB, sm_90: 227 KiB); gfx90a has 64 KiB of LDS
// in all, so HIP stays at 32 KiB.
#ifdef PLUMB_CUDA
constexpr int64_t kSharedMax = 16384;
#else
constexpr int64_t kSharedMax = 8192;
#endif

__global__ void hadamard_shared(float* y, int64_t vecs, int64_t n, bool r) {
  pdl_begin();
  PLUMB_DYNAMIC_SHARED(float, sm);
  const float s = 1.0f / sqrtf(static_cast<float>(n));
  for (int64_t vec = blockIdx.x; vec < vecs; vec += gridDim.x) {
    float* g = y + vec * n;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sm[i] = g[i];
    for (int64_t h = 1; h < n; h *= 2) {
      __syncthreads();
      butterflies(sm, n, h);
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) g[i] = maybe_round(mul_rn(sm[i], s), r);
  }
}

__global__ void hadamard_global(float* y, int64_t vecs, int64_t n, bool r) {
  pdl_begin();
  const float s = 1.0f / sqrtf(static_cast<float>(n));
  for (int64_t vec = blockIdx.x; vec < vecs; vec += gridDim.x) {
    float* g = y + vec * n;
    for (int64_t h = 1; h < n; h *= 2) {
      __syncthreads();
      butterflies(g, n, h);
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) g[i] = maybe_round(mul_rn(g[i], s), r);
  }
}

}  // namespace

gpuError_t embed(float* y, const int32_t* ids, int64_t n, const WeightRef& table, gpuStream_t s) {
  if (n * table.cols <= 0) return gpuGetLastError();
  return launch(embed_kernel, grid_for(n * table.cols), kThreads, 0, s, y, ids, n, table);
}

gpuError_t repeat_rows(float* y, const float* x, int64_t n, int64_t copies, int64_t d, gpuStream_t s) {
  if (n * copies * d <= 0) return gpuGetLastError();
  return launch(repeat_kernel, grid_for(n * copies * d), kThreads, 0, s, y, x, n, copies, d);
}

// Threads per row of rms_norm: about 4 elements each (a decode step's one row of 4096 is then
// not left to 256 threads), in whole warps, 32 to 1024 (block_sum's limit). A function of d
// only, so that a row's sum never depends on how many rows the call has.
unsigned norm_threads(int64_t d) {
  int64_t t = (d + 3) / 4;
  t = (t + kWarp - 1) / kWarp * kWarp;
  return static_cast<unsigned>(t < 32 ? (kWarp > 32 ? kWarp : 32) : (t > 1024 ? 1024 : t));
}

namespace {
// rms_norm's kernel: PER (0: the element loop over memory) from d and the weight's form.
int norm_per(int64_t d, const WeightRef* weight, bool bf16_steps) {
  const int64_t per = (d + norm_threads(d) - 1) / norm_threads(d);  // elements per thread: <= 4 up to d = 4096
  const bool general = weight && !bf16_steps && !norm_weight_words(*weight);  // FP8 / FP4 (or unaligned) weights
  return general || per > 8 ? 0 : (per <= 4 ? 4 : 8);
}
}  // namespace

bool rms_norm_act_fp8_ok(int64_t d, const WeightRef* weight, bool bf16_steps) {
  return d > 0 && norm_per(d, weight, bf16_steps) > 0;  // (its threads are whole warps)
}

gpuError_t rms_norm(float* y, const float* x, int64_t rows, int64_t d, const WeightRef* weight, float eps,
                    bool bf16_steps, bool round_bf16, bool cpu_order, float* act_fp8, gpuStream_t s) {
  if (rows <= 0 || d <= 0) return gpuGetLastError();
  if (act_fp8 && !rms_norm_act_fp8_ok(d, weight, bf16_steps)) return gpuErrorNotSupported;
  const unsigned grid = static_cast<unsigned>(rows > kMaxBlocks ? kMaxBlocks : rows), threads = norm_threads(d);
  const WeightRef w = weight ? *weight : WeightRef{};
  const int per = norm_per(d, weight, bf16_steps);
  if (act_fp8)
    return launch(per == 4 ? &rms_norm_copy_kernel<4> : &rms_norm_copy_kernel<8>, grid, threads, 0, s, y, x, rows, d, w,
                  weight != nullptr, eps, bf16_steps, round_bf16, cpu_order, act_fp8);
  const auto kernel = per == 0 ? &rms_norm_kernel<0> : (per == 4 ? &rms_norm_kernel<4> : &rms_norm_kernel<8>);
  return launch(kernel, grid, threads, 0, s, y, x, rows, d, w, weight != nullptr, eps, bf16_steps, round_bf16,
                cpu_order);
}

bool norm_rope_ok(int64_t d, const WeightRef* weight, bool bf16_steps, int64_t f, int64_t qcols, int64_t qblock) {
  const bool quant_ok = qcols == 0 || (qcols > 0 && qcols <= d && qcols % kWarp == 0 && qblock > 0 && qblock % kWarp == 0);
  return d > 0 && d % 2 == 0 && f >= 0 && 2 * f <= d && quant_ok && norm_per(d, weight, bf16_steps) > 0;
}

gpuError_t norm_rope(float* y, const float* x, int64_t rows, int64_t vecs, int64_t d, const WeightRef* weight,
                     float eps, bool bf16_steps, bool round_bf16, bool cpu_order, const int32_t* pos,
                     const float* inv_freq, int64_t f, int64_t qcols, int64_t qblock, gpuStream_t s) {
  if (!norm_rope_ok(d, weight, bf16_steps, f, qcols, qblock)) return gpuErrorNotSupported;
  if (rows <= 0 || vecs <= 0) return gpuGetLastError();
  const unsigned grid = static_cast<unsigned>(rows > kMaxBlocks ? kMaxBlocks : rows);
  const WeightRef w = weight ? *weight : WeightRef{};
  const bool weighted = weight != nullptr && !bf16_steps;  // the bf16-steps form has no weight
  return launch(norm_per(d, weight, bf16_steps) == 4 ? &norm_rope_kernel<4> : &norm_rope_kernel<8>, grid,
                norm_threads(d), 0, s, y, x, rows, vecs, static_cast<int>(d), w, weighted, eps, bf16_steps,
                round_bf16, cpu_order, pos, inv_freq, static_cast<int>(f), static_cast<int>(qcols),
                static_cast<int>(qblock));
}

gpuError_t scale(float* y, const float* x, int64_t n, float v, bool round_bf16, gpuStream_t s) {
  return n > 0 ? launch(scale_kernel, grid_for(n), kThreads, 0, s, y, x, n, v, round_bf16) : gpuGetLastError();
}

gpuError_t add(float* y, const float* a, const float* b, int64_t n, bool round_bf16, gpuStream_t s) {
  return n > 0 ? launch(add_kernel, grid_for(n), kThreads, 0, s, y, a, b, n, round_bf16) : gpuGetLastError();
}

gpuError_t columns(float* y, const float* x, int64_t n, int64_t c, int64_t begin, int64_t count, gpuStream_t s) {
  if (n * count <= 0) return gpuGetLastError();
  return launch(columns_kernel, grid_for(n * count), kThreads, 0, s, y, x, n, c, begin, count);
}

gpuError_t rope(float* y, const int32_t* pos, const float* inv_freq, int64_t n, int64_t vecs, int64_t dl, int64_t f,
                bool inverse, bool round_bf16, gpuStream_t s) {
  if (n * f <= 0 || vecs <= 0) return gpuGetLastError();
  return launch(rope_kernel, grid_for(n * vecs * f), kThreads, 0, s, y, pos, inv_freq, n, vecs, dl, f, inverse,
                round_bf16);
}

gpuError_t quant_blocks(float* y, const float* x, int64_t vecs, int64_t dl, int64_t cols, int64_t block, bool fp4,
                        gpuStream_t s) {
  const int64_t units = vecs * ((cols + block - 1) / block);
  if (units <= 0) return gpuGetLastError();
  return launch(quant_kernel, grid_for(units, kThreads / kWarp), kThreads, 0, s, y, x, vecs, dl, cols, block, fp4);
}

gpuError_t hadamard(float* y, int64_t vecs, int64_t n, bool round_bf16, gpuStream_t s) {
  if (vecs <= 0 || n <= 0) return gpuGetLastError();
  const unsigned grid = static_cast<unsigned>(vecs > kMaxBlocks ? kMaxBlocks : vecs);
  const int threads = n / 2 >= 512 ? 512 : (n / 2 >= kWarp ? static_cast<int>(n / 2) : kWarp);
  if (n <= kSharedMax) {
    const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
#ifdef PLUMB_CUDA
    if (bytes > 48 * 1024) {
      const gpuError_t e =
          cudaFuncSetAttribute(hadamard_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
      if (e != gpuSuccess) return e;
    }
#endif
    return launch(hadamard_shared, grid, threads, bytes, s, y, vecs, n, round_bf16);
  }
  return launch(hadamard_global, grid, threads, 0, s, y, vecs, n, round_bf16);
}

}  // namespace plumb::gpu::k

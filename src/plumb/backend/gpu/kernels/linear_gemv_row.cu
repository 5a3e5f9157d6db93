// linear() path (a), the 1-row FP8 form: gemv_row_kernel, and linear_gemvs, which gives two of
// its jobs one launch (PERF.md v13 and v33). The same sums as gemv_kernel (linear_gemv.cu's header).
#include <algorithm>

#include "plumb/backend/gpu/kernels/launch.h"
#include "plumb/backend/gpu/kernels/linear_gemv_shared.h"

namespace plumb::gpu::k {
using namespace gemv;
namespace {

constexpr int kPrefetchSteps = 4;  // warp steps of each row gemv_row_kernel prefetches before pdl_wait

// The 1-row FP8 launches of gemv_row_kernel: one job (a linear_gemv call), or two of the same
// template arguments (linear_gemvs) whose blocks follow each other: job j's tiles are blocks
// [first[j], first[j + 1]) of grid.x (grid.y: one job's groups; two jobs have one group each).
constexpr int kMaxRowJobs = 2;
struct RowJobs {
  LinearArgs a[kMaxRowJobs];
  WeightRef w[kMaxRowJobs];
  int splits[kMaxRowJobs] = {};
  bool x4[kMaxRowJobs] = {};
  unsigned first[kMaxRowJobs + 1] = {};
  int count = 0;
};

// The 1-row FP8 form in the probe's shape (scripts/device/probes/gemv_probe.cu; on the H200 it
// took 5-8% off every decode GEMV against gemv_kernel, PERF v13, e.g. wq_b 23.3 vs 24.6 us): whole
// segments only (vec_ok), RPW 4, one step a batch, the scale's type a template argument (no branch
// around each load), weights read with the streaming hint, a segment's 16 x values loaded before
// its rows' math, the column loop left to the compiler. The same products in the same order as
// gemv_rows (lane l of split s: segments s * per + l * 16 + m * kStep, one fmaf chain a row). A
// block's job and tile come from RowJobs; what it sums does not depend on the other job.
template <bool HW, bool QX, bool SF32>
__global__ void __launch_bounds__(kThreads, 3) gemv_row_kernel(RowJobs jobs) {
  constexpr int RPW = 4;
  __shared__ Partials<RPW, 1> part;
  PLUMB_DYNAMIC_SHARED(float4, qx_smem);
  float* xs = reinterpret_cast<float*>(qx_smem);
  const int job = jobs.count > 1 && blockIdx.x >= jobs.first[1] ? 1 : 0;
  const LinearArgs& a = jobs.a[job];
  const WeightRef& w = jobs.w[job];
  const int splits = jobs.splits[job];
  const int64_t tile = blockIdx.x - jobs.first[job];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, s = warp % splits;
  const int64_t g = blockIdx.y, R = a.R, K = a.K;
  const int64_t per = ((K + kStep - 1) / kStep + splits - 1) / splits * kStep;
  const int64_t ce = K < (s + 1) * per ? K : (s + 1) * per;
  const int64_t r0 = (tile * (kWarps / splits) + warp / splits) * RPW;
  const float* xr = QX ? xs : a.x + g * K;
  int64_t base[RPW], srow[RPW];  // each row's first byte and its row of scales
#pragma unroll
  for (int j = 0; j < RPW; ++j) {
    const int64_t r = g * R + (r0 + j < R ? r0 + j : R - 1);
    base[j] = r * w.cols;
    srow[j] = (r >> 7) * w.scale_cols;
  }
  // No kernel writes the weights: the lane's first kPrefetchSteps segments of each row head for
  // L2 while the previous kernel finishes (launch.h), everything else waits for it.
  if (r0 < R) {
#pragma unroll
    for (int m = 0; m < kPrefetchSteps; ++m) {
      const int64_t c = s * per + lane * kSeg + m * kStep;
#pragma unroll
      for (int j = 0; j < RPW; ++j)
        if (c < ce) prefetch_l2(w.data + base[j] + c);
    }
  }
  pdl_wait();
  pdl_release();
  if constexpr (QX) {
    stage_quant_x(a, jobs.x4[job], xs);
    __syncthreads();
  }
  float acc[RPW][1] = {};
  if (r0 < R) {
    for (int64_t c = s * per + lane * kSeg; c < ce; c += kStep) {
      WRaw<WFormat::FP8> raw[RPW];
#pragma unroll
      for (int j = 0; j < RPW; ++j) {
        raw[j].v[0] = load_stream(w.data + base[j] + c);
        raw[j].sbits = SF32 ? reinterpret_cast<const uint32_t*>(w.scale)[srow[j] + (c >> 7)] : w.scale[srow[j] + (c >> 7)];
      }
      float4 xv[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) xv[q] = xload4<QX>(xr, c, q);
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int j = 0; j < RPW; ++j) {
          float wv[4];
          wdecode4<WFormat::FP8, HW>(raw[j], w, q, wv);
          acc[j][0] = fma4(wv, xv[q], acc[j][0]);
        }
    }
  }
  finish<1, RPW>(a, r0, lane, warp, splits, acc, part);
}

int64_t row_tiles(const LinearArgs& a, int splits) {
  const int64_t rows_per_tile = static_cast<int64_t>(kWarps / splits) * 4;
  return (a.R + rows_per_tile - 1) / rows_per_tile;
}

// jobs.count jobs of the same quant_x and scale type; grid.y the first job's groups (one job
// only may have several).
template <bool HW>
gpuError_t launch_rows(RowJobs& jobs, gpuStream_t s) {
  for (int j = 0; j < jobs.count; ++j) jobs.first[j + 1] = jobs.first[j] + static_cast<unsigned>(row_tiles(jobs.a[j], jobs.splits[j]));
  const dim3 grid(jobs.first[jobs.count], static_cast<unsigned>(jobs.a[0].groups));
  const LinearArgs& a = jobs.a[0];
  int64_t K = 0;
  for (int j = 0; j < jobs.count; ++j) K = std::max(K, jobs.a[j].K);
  const std::size_t smem = a.quant_x ? static_cast<std::size_t>(qx_row(K)) * sizeof(float) : 0;
  const auto go = [&](auto kernel) {
#ifdef PLUMB_CUDA
    if (smem + sizeof(Partials<4, 1>) > 48 * 1024) {
      const gpuError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      if (e != gpuSuccess) return e;
    }
#endif
    return launch(kernel, grid, kThreads, smem, s, jobs);
  };
  const bool sf32 = jobs.w[0].scale_f32;
  if (a.quant_x) return sf32 ? go(gemv_row_kernel<HW, true, true>) : go(gemv_row_kernel<HW, true, false>);
  return sf32 ? go(gemv_row_kernel<HW, false, true>) : go(gemv_row_kernel<HW, false, false>);
}

template <bool HW>
gpuError_t run_row_jobs(std::span<const GemvJob> jobs, std::span<const Setup> setups, gpuStream_t s) {
  RowJobs r;
  r.count = static_cast<int>(jobs.size());
  for (int j = 0; j < r.count; ++j) {
    r.a[j] = jobs[j].a;
    r.w[j] = jobs[j].w;
    r.splits[j] = setups[j].plan.splits;
    r.x4[j] = setups[j].x_ok;
  }
  return launch_rows<HW>(r, s);
}
}  // namespace

namespace gemv {
// Whether the row form can take a launch: FP8, one x row, whole segments, no bf16 weight
// rounding. linear_gemv gives it those whose plan has 4 rows a warp (every other 1-row launch goes
// to gemv_kernel); linear_gemvs' pairs also those of 1 row a warp (a row's order is the plan's
// splits', not its rows a warp: the same bits, fewer warps).
bool row_form(const LinearArgs& a, const WeightRef& w, bool vec_ok) {
  return w.format == WFormat::FP8 && a.nrows == 1 && vec_ok && !a.round_w;
}

gpuError_t launch_row_jobs(std::span<const GemvJob> jobs, std::span<const Setup> setups, gpuStream_t s) {
#ifndef PLUMB_HIP
  if (fp8_hw_decode()) return run_row_jobs<true>(jobs, setups, s);
#endif
  return run_row_jobs<false>(jobs, setups, s);
}
}  // namespace gemv

namespace {
// Whether the two jobs take one gemv_row_kernel launch; if so, their setups in set.
bool pair_setups(std::span<const GemvJob> jobs, int64_t target_blocks, Setup (&set)[2]) {
  if (jobs.size() != 2 || jobs[0].a.quant_x != jobs[1].a.quant_x || jobs[0].w.scale_f32 != jobs[1].w.scale_f32)
    return false;
  for (std::size_t j = 0; j < 2; ++j) {
    const GemvJob& job = jobs[j];
    if (job.a.R <= 0 || job.a.groups != 1 || (job.a.quant_x && !gemv_quant_x_ok(job.a))) return false;
    set[j] = setup_for(job.a, job.w, target_blocks);
    if (!row_form(job.a, job.w, set[j].vec_ok)) return false;
  }
  return true;
}
}  // namespace

gpuError_t linear_gemvs(std::span<const GemvJob> jobs, int64_t target_blocks, gpuStream_t s, bool* one_launch) {
  Setup set[2];
  const bool paired = pair_setups(jobs, target_blocks, set);
  if (one_launch) *one_launch = paired;
  if (paired) {
    const gpuError_t e = launch_row_jobs(jobs, set, s);
    return e != gpuSuccess ? e : gpuGetLastError();
  }
  for (const GemvJob& j : jobs)
    if (const gpuError_t e = linear_gemv(j.a, j.w, target_blocks, s); e != gpuSuccess) return e;
  return gpuGetLastError();
}

}  // namespace plumb::gpu::k

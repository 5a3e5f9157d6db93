// The L2 warmer (kernels/prefetch.h). Why (PERF.md v38): a decode step's GEMVs of 20-35 MB run at
// a plain read's ceiling for their size (a 33.5 MB read: 18.6 us cold, 9.0 us from L2 on the
// H100), while the kernels between them (norms, mHC mixes, attention: ~40-50% of a B = 1 layer)
// leave HBM idle. Hopper's cp.async.bulk.prefetch.L2 moves a chunk into L2 with one instruction,
// holds no registers and has no completion to wait for, so 16 blocks of one warp warmed 33.5 MB
// in ~28 us beside a latency-bound kernel (scripts/device/probes/l2_prefetch_probe.sh).
//
// A thread issues chunks of kChunk bytes; chunk c of the ranges' concatenation goes to thread
// c mod (blocks x 32), so the first ranges (the weights read first) are issued first everywhere.
// Sizes are rounded down to 16 bytes (the instruction's unit; the tail of a range is left cold
// rather than a prefetch past an allocation's end).
#include "plumb/backend/gpu/kernels/launch.h"
#include "plumb/backend/gpu/kernels/prefetch.h"

namespace plumb::gpu::k {
namespace {

__global__ void __launch_bounds__(32) prefetch_kernel(PrefetchRanges r) {
  pdl_begin();  // reads nothing a kernel writes; waits only for the previous warmer of its stream
#if defined(PLUMB_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int64_t kChunk = 64 * 1024;
  const int64_t threads = int64_t{gridDim.x} * blockDim.x, me = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  int64_t base = 0;  // the first chunk of range i in the concatenation
  for (int i = 0; i < r.n; ++i) {
    const int64_t bytes = r.r[i].bytes / 16 * 16, chunks = (bytes + kChunk - 1) / kChunk;
    int64_t c = ((me - base) % threads + threads) % threads;  // this thread's first chunk of the range
    for (; c < chunks; c += threads) {
      const int64_t off = c * kChunk;
      const uint32_t n = static_cast<uint32_t>(bytes - off < kChunk ? bytes - off : kChunk);
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(r.r[i].data + off), "r"(n) : "memory");
    }
    base += chunks;
  }
#else
  (void)r;
#endif
}

}  // namespace

bool prefetch_l2_available(int major) {
#if defined(PLUMB_CUDA) && !defined(PLUMB_EMU)
  return major >= 9;
#else
  (void)major;
  return false;
#endif
}

gpuError_t prefetch_l2_ranges(const PrefetchRanges& r, int blocks, gpuStream_t s) {
  if (r.n <= 0 || blocks <= 0) return gpuSuccess;
  return launch(prefetch_kernel, static_cast<unsigned>(blocks), 32, 0, s, r);
}

}  // namespace plumb::gpu::k

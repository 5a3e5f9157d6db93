#pragma once
// Every kernel plumb launches goes through launch() (kernel files only; ctest kernel_launch_lint,
// tests/backend/kernel_launch_lint.py, checks that no file launches with <<< >>> and that every
// kernel waits).
//
// Programmatic dependent launch (PDL, CUDA on sm_90+): a decode step is ~130 dependent kernels of
// 2-25 us, and between two of them the GPU sat idle ~1.8 us (PERF.md v12: 1,480 us of kernels in
// a 1,709 us step), besides each kernel's ramp and tail, where its last blocks leave most SMs
// idle. launch() marks each kernel as allowed to start before the stream's previous kernel has
// finished; the previous kernel lets it start (pdl_release) once its own inputs are complete, so
// the next kernel's blocks take the SMs its tail frees and its launch latency is spent while the
// previous one still runs. Correctness rests on one rule: a kernel calls pdl_wait() before its
// first read of anything an earlier kernel wrote and before its first global write (an earlier
// kernel may still read what it overwrites). pdl_wait returns when the previous kernel has
// finished and its writes are visible; that kernel waited for its own predecessor before it
// released, so every earlier kernel has finished too. Only data no kernel writes (weights) may be
// read before it. Copies and memsets in the stream keep their full ordering (PDL relaxes only the
// edge between two kernels).
//
// Off (plain stream order) on HIP, on devices before sm_90, where the kernels were compiled for
// an older architecture than the device's (the compute_80 PTX a newer GPU compiles at load: its
// pdl_wait is empty, so PDL would race), and with PLUMB_GPU_PDL=off (the A/B switch).
#include <cstddef>
#include <utility>

#include "plumb/backend/gpu/gpu_compat.h"
#include "plumb/backend/gpu/kernels/pdl.h"

namespace plumb::gpu::k {

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(PLUMB_EMU)
// Waits until the earlier kernels of the stream have finished and their writes are visible.
__device__ __forceinline__ void pdl_wait() {
#if defined(PLUMB_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// Lets the stream's next kernel start its blocks (they wait in their pdl_wait until this grid has
// finished). Called after pdl_wait, so that at most one grid waits ahead of the running one.
__device__ __forceinline__ void pdl_release() {
#if defined(PLUMB_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}
// The prologue of a kernel with nothing to do before its inputs are ready.
__device__ __forceinline__ void pdl_begin() {
  pdl_wait();
  pdl_release();
}
// Starts fetching bytes no kernel writes (weights) into L2 before pdl_wait.
__device__ __forceinline__ void prefetch_l2(const void* p) {
#if defined(PLUMB_CUDA) && !defined(PLUMB_EMU)
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}
#endif

// kernel<<<grid, block, smem, s>>>(args...), with PDL where pdl_on() (pdl.h); the launch's error.
template <class... P, class... A>
gpuError_t launch(void (*kernel)(P...), dim3 grid, dim3 block, std::size_t smem, gpuStream_t s, A&&... args) {
#if defined(PLUMB_EMU)
  // At once, or later on a held stream (emu_cuda.h): the closure owns copies of the arguments.
  return static_cast<gpuError_t>(
      emu::launch_on(s, grid, block, smem, [kernel, ... a = std::forward<A>(args)] { kernel(a...); }));
#else
#ifdef PLUMB_CUDA
  if (pdl_on()) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
    const cudaError_t last = cudaGetLastError();  // read and cleared, as after <<< >>>
    return e != cudaSuccess ? e : last;
  }
#endif
  kernel<<<grid, block, smem, s>>>(std::forward<A>(args)...);
  return gpuGetLastError();
#endif
}

}  // namespace plumb::gpu::k

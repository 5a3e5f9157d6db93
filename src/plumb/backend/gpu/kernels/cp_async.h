#pragma once
// 16 bytes global -> shared that run while the thread goes on (kernel-only header): cp.async on
// CUDA sm_80+ (L2 only); zeros where !valid (src-size 0: nothing is read). Groups: cp_async_commit
// closes the thread's group, cp_async_wait<n> returns once at most n of its groups are in flight.
// Where there is no cp.async (HIP, CUDA before sm_80) the copy happens at once and commit / wait
// do nothing, so a kernel's stages are filled synchronously: the same values. The emulator runs
// the copies as late as the device may (emu_cuda.h): a missing wait or barrier shows there.
#include <cstdint>

#include "plumb/backend/gpu/gpu_compat.h"

namespace plumb::gpu::k {

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(PLUMB_EMU)
#if defined(PLUMB_CUDA) && !defined(PLUMB_EMU) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define PLUMB_CP_ASYNC 1
#endif

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
#if defined(PLUMB_CP_ASYNC)
  const auto dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0) : "memory");
#elif defined(PLUMB_EMU)
  emu::cp_async16(smem, gmem, valid);
#else
  *static_cast<uint4*>(smem) = valid ? *static_cast<const uint4*>(gmem) : make_uint4(0u, 0u, 0u, 0u);
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(PLUMB_CP_ASYNC)
  asm volatile("cp.async.commit_group;" ::: "memory");
#elif defined(PLUMB_EMU)
  emu::cp_async_commit();
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(PLUMB_CP_ASYNC)
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#elif defined(PLUMB_EMU)
  emu::cp_async_wait(N);
#endif
}
#endif

}  // namespace plumb::gpu::k

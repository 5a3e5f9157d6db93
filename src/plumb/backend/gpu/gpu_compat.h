#pragma once
// The one place where CUDA and HIP differ (ARCHITECTURE idea 7): kernels include this header and
// use the gpu* names below, so the same sources compile with nvcc (sm_80, sm_90a) and with
// Debian's hipcc for gfx90a. Nothing here assumes a 32-wide warp: use kWarp, warp_sum/warp_max
// (xor shuffles over the whole warp) and never a 32-bit ballot mask. PLUMB_EMU (cmake/emu.cmake):
// the CUDA names, served by the CPU emulator of emu/emu_cuda.h; with __HIP_PLATFORM_AMD__ too
// (PLUMB_GPU=EMU_HIP), the HIP names, served by the same emulator (emu/emu_hip.h).
#include <cstdint>

#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
#if defined(PLUMB_EMU)
#include "plumb/backend/gpu/emu/emu_hip.h"
#elif defined(__HIPCC__)
#include <hip/hip_runtime.h>
#else
#include <hip/hip_runtime_api.h>  // host-only files (compiled by g++) use the runtime API alone
#endif
#define PLUMB_HIP 1
using gpuError_t = hipError_t;
using gpuStream_t = hipStream_t;
#define gpuSuccess hipSuccess
#define gpuErrorNotSupported hipErrorNotSupported
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMemcpy hipMemcpy
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemcpy2DAsync hipMemcpy2DAsync
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuStreamCreateWithFlags hipStreamCreateWithFlags
#define gpuStreamNonBlocking hipStreamNonBlocking
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuStreamDestroy hipStreamDestroy
#define gpuGetLastError hipGetLastError
#define gpuGetErrorString hipGetErrorString
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuDeviceProp hipDeviceProp_t
#define gpuSetDevice hipSetDevice
#define gpuDriverGetVersion hipDriverGetVersion
#define gpuRuntimeGetVersion hipRuntimeGetVersion
#define gpuMemGetInfo hipMemGetInfo
#define gpuEvent_t hipEvent_t
#define gpuEventCreate hipEventCreate
#define gpuEventRecord hipEventRecord
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuEventDestroy hipEventDestroy
#define gpuEventQuery hipEventQuery
#define gpuEventCreateWithFlags hipEventCreateWithFlags
#define gpuEventDisableTiming hipEventDisableTiming
#define gpuStreamWaitEvent hipStreamWaitEvent
#define gpuHostMalloc(p, n) hipHostMalloc(p, n, hipHostMallocDefault)
#define gpuHostFree hipHostFree
#else
#if defined(PLUMB_EMU)
#include "plumb/backend/gpu/emu/emu_cuda.h"
#else
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#endif
#define PLUMB_CUDA 1
using gpuError_t = cudaError_t;
using gpuStream_t = cudaStream_t;
#define gpuSuccess cudaSuccess
#define gpuErrorNotSupported cudaErrorNotSupported
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMemcpy cudaMemcpy
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemcpy2DAsync cudaMemcpy2DAsync
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuStreamCreateWithFlags cudaStreamCreateWithFlags
#define gpuStreamNonBlocking cudaStreamNonBlocking
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuStreamDestroy cudaStreamDestroy
#define gpuGetLastError cudaGetLastError
#define gpuGetErrorString cudaGetErrorString
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuDeviceProp cudaDeviceProp
#define gpuSetDevice cudaSetDevice
#define gpuDriverGetVersion cudaDriverGetVersion
#define gpuRuntimeGetVersion cudaRuntimeGetVersion
#define gpuMemGetInfo cudaMemGetInfo
#define gpuEvent_t cudaEvent_t
#define gpuEventCreate cudaEventCreate
#define gpuEventRecord cudaEventRecord
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuEventDestroy cudaEventDestroy
#define gpuEventQuery cudaEventQuery
#define gpuEventCreateWithFlags cudaEventCreateWithFlags
#define gpuEventDisableTiming cudaEventDisableTiming
#define gpuStreamWaitEvent cudaStreamWaitEvent
#define gpuHostMalloc(p, n) cudaMallocHost(p, n)
#define gpuHostFree cudaFreeHost
#endif

namespace plumb::gpu {

// Threads per warp (wavefront): 32 on NVIDIA, 64 on CDNA (gfx90a). A compile-time constant in
// device code; host code asks the device (gpuDeviceProp::warpSize).
#if defined(__HIP_DEVICE_COMPILE__) && defined(__AMDGCN_WAVEFRONT_SIZE)
constexpr int kWarp = __AMDGCN_WAVEFRONT_SIZE;
#elif defined(PLUMB_HIP)
constexpr int kWarp = 64;
#else
constexpr int kWarp = 32;
#endif

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(PLUMB_EMU)
// Lane src's v (every lane of the warp calls it; src < kWarp).
__device__ __forceinline__ float shfl_from(float v, int src) {
#if defined(PLUMB_EMU)
  uint32_t u;
  __builtin_memcpy(&u, &v, 4);
  u = static_cast<uint32_t>(emu::warp_shuffle(u, src));
  __builtin_memcpy(&v, &u, 4);
  return v;
#elif defined(PLUMB_HIP)
  return __shfl(v, src, kWarp);
#else
  return __shfl_sync(0xffffffffu, v, src, kWarp);
#endif
}
__device__ __forceinline__ float shfl_xor(float v, int lane_mask) {
#if defined(PLUMB_EMU)
  return shfl_from(v, emu::lane_id() ^ lane_mask);
#elif defined(PLUMB_HIP)
  return __shfl_xor(v, lane_mask, kWarp);
#else
  return __shfl_xor_sync(0xffffffffu, v, lane_mask, kWarp);
#endif
}

// Sum / max over all lanes of the warp; every lane gets the result.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int m = kWarp / 2; m > 0; m >>= 1) v += shfl_xor(v, m);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int m = kWarp / 2; m > 0; m >>= 1) v = fmaxf(v, shfl_xor(v, m));
  return v;
}
#endif

}  // namespace plumb::gpu

// `extern __shared__ T name[]`: the launch's dynamic shared memory (16-byte aligned).
#if !defined(PLUMB_EMU)
#define PLUMB_DYNAMIC_SHARED(T, name) extern __shared__ __align__(16) T name[]
#endif

#pragma once
// The HIP flavour of the CUDA emulator (PLUMB_GPU=EMU_HIP, cmake/emu.cmake): the GPU backend
// compiled as hipcc compiles it for gfx90a (PLUMB_HIP, 64-lane wavefronts, HIP's host-side paths,
// linear_gemm.cu's MFMA tile) and run on the CPU emulator of emu_cuda.h. Why: the HIP build has
// never run anywhere (no AMD GPU), so its wave64 logic reached the device untested; here the GPU
// op harness runs it. gpu_compat.h includes this header where PLUMB_EMU and __HIP_PLATFORM_AMD__
// are both defined.
//
// The fibers, barriers and warp collectives are emu_cuda.h's, with kWarp = 64 (gpu_compat.h); the
// runtime is its CUDA one under HIP's spellings (below), plus a gfx90a-shaped device
// (emu_hip_runtime.cpp) and v_mfma_f32_16x16x16bf16_1k (emu_mfma.cpp). The CUDA names stay
// declared (one runtime serves both flavours): that no CUDA name is used under PLUMB_HIP is for
// the real HIP build (scripts/build-hip.sh) to prove, not this one.
#include <cstddef>
#include <cstdint>

#include "plumb/backend/gpu/emu/emu_cuda.h"

// ---- the runtime API under HIP's names (the subset plumb calls)
using hipError_t = cudaError_t;
constexpr hipError_t hipSuccess = cudaSuccess, hipErrorNotSupported = cudaErrorNotSupported;
using hipStream_t = cudaStream_t;
using hipEvent_t = cudaEvent_t;
using hipMemcpyKind = cudaMemcpyKind;
constexpr hipMemcpyKind hipMemcpyHostToDevice = cudaMemcpyHostToDevice, hipMemcpyDeviceToHost = cudaMemcpyDeviceToHost,
                        hipMemcpyDeviceToDevice = cudaMemcpyDeviceToDevice;
constexpr unsigned hipStreamNonBlocking = cudaStreamNonBlocking;
constexpr unsigned hipEventDisableTiming = cudaEventDisableTiming;
constexpr unsigned hipHostMallocDefault = 0;

// What plumb reads of a HIP device; gcnArchName is HIP's own (the target with its features).
struct hipDeviceProp_t {
  char name[256];
  char gcnArchName[256];
  int major, minor, multiProcessorCount, warpSize;
  std::size_t totalGlobalMem, sharedMemPerBlock;
};
enum hipDeviceAttribute_t {
  hipDeviceAttributeClockRate = cudaDevAttrClockRate,
  hipDeviceAttributeMemoryClockRate = cudaDevAttrMemoryClockRate,
  hipDeviceAttributeEccEnabled = cudaDevAttrEccEnabled,
};

hipError_t hipGetDeviceProperties(hipDeviceProp_t* p, int d);  // emu_hip_runtime.cpp

inline hipError_t hipGetLastError() { return cudaGetLastError(); }
inline const char* hipGetErrorString(hipError_t e) { return cudaGetErrorString(e); }
inline hipError_t hipGetDeviceCount(int* n) { return cudaGetDeviceCount(n); }
inline hipError_t hipSetDevice(int d) { return cudaSetDevice(d); }
inline hipError_t hipDeviceGetAttribute(int* v, hipDeviceAttribute_t a, int d) {
  return cudaDeviceGetAttribute(v, static_cast<cudaDeviceAttr>(a), d);
}
inline hipError_t hipDeviceGetPCIBusId(char* out, int len, int d) { return cudaDeviceGetPCIBusId(out, len, d); }
inline hipError_t hipDriverGetVersion(int* v) { return cudaDriverGetVersion(v); }
inline hipError_t hipRuntimeGetVersion(int* v) { return cudaRuntimeGetVersion(v); }
inline hipError_t hipMemGetInfo(std::size_t* free, std::size_t* total) { return cudaMemGetInfo(free, total); }
inline hipError_t hipMalloc(void** p, std::size_t bytes) { return cudaMalloc(p, bytes); }
inline hipError_t hipFree(void* p) { return cudaFree(p); }
inline hipError_t hipHostMalloc(void** p, std::size_t bytes, unsigned) { return cudaMallocHost(p, bytes); }
inline hipError_t hipHostFree(void* p) { return cudaFreeHost(p); }
inline hipError_t hipMemcpy(void* dst, const void* src, std::size_t bytes, hipMemcpyKind k) {
  return cudaMemcpy(dst, src, bytes, k);
}
inline hipError_t hipMemcpyAsync(void* dst, const void* src, std::size_t bytes, hipMemcpyKind k,
                                 hipStream_t s = nullptr) {
  return cudaMemcpyAsync(dst, src, bytes, k, s);
}
inline hipError_t hipMemcpy2DAsync(void* dst, std::size_t dpitch, const void* src, std::size_t spitch,
                                   std::size_t width, std::size_t height, hipMemcpyKind k, hipStream_t s = nullptr) {
  return cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, k, s);
}
inline hipError_t hipMemsetAsync(void* p, int value, std::size_t bytes, hipStream_t s = nullptr) {
  return cudaMemsetAsync(p, value, bytes, s);
}
inline hipError_t hipStreamCreateWithFlags(hipStream_t* s, unsigned flags) { return cudaStreamCreateWithFlags(s, flags); }
inline hipError_t hipStreamSynchronize(hipStream_t s) { return cudaStreamSynchronize(s); }
inline hipError_t hipStreamDestroy(hipStream_t s) { return cudaStreamDestroy(s); }
inline hipError_t hipEventCreate(hipEvent_t* e) { return cudaEventCreate(e); }
inline hipError_t hipEventCreateWithFlags(hipEvent_t* e, unsigned flags) { return cudaEventCreateWithFlags(e, flags); }
inline hipError_t hipStreamWaitEvent(hipStream_t s, hipEvent_t e, unsigned flags = 0) {
  return cudaStreamWaitEvent(s, e, flags);
}
inline hipError_t hipEventRecord(hipEvent_t e, hipStream_t s = nullptr) { return cudaEventRecord(e, s); }
inline hipError_t hipEventSynchronize(hipEvent_t e) { return cudaEventSynchronize(e); }
inline hipError_t hipEventQuery(hipEvent_t e) { return cudaEventQuery(e); }
inline hipError_t hipEventElapsedTime(float* ms, hipEvent_t start, hipEvent_t end) {
  return cudaEventElapsedTime(ms, start, end);
}
inline hipError_t hipEventDestroy(hipEvent_t e) { return cudaEventDestroy(e); }

// ---- the gfx90a matrix instruction plumb uses
namespace plumb::gpu::emu {

// clang's builtin takes and returns GCC-style vectors (linear_gemm.cu declares its operands so).
typedef short mfma_bf16x4 __attribute__((vector_size(8)));
typedef float mfma_f32x4 __attribute__((vector_size(16)));

// v_mfma_f32_16x16x16bf16_1k as a 64-lane warp collective (emu_mfma.cpp): d = a * b + d on the
// lane's 4 accumulators, from every lane's 4 + 4 bf16 operands. modifiers: cbsz | abid | blgp of
// the builtin, the broadcast controls, which plumb leaves 0 (anything else is refused).
void mfma_f32_16x16x16_bf16(float* d, const uint16_t* a, const uint16_t* b, int modifiers);

inline mfma_f32x4 mfma_f32_16x16x16bf16_1k(mfma_bf16x4 a, mfma_bf16x4 b, mfma_f32x4 c, int cbsz, int abid, int blgp) {
  uint16_t av[4], bv[4];
  float d[4];
  __builtin_memcpy(av, &a, sizeof av);
  __builtin_memcpy(bv, &b, sizeof bv);
  __builtin_memcpy(d, &c, sizeof d);
  mfma_f32_16x16x16_bf16(d, av, bv, cbsz | abid | blgp);
  __builtin_memcpy(&c, d, sizeof d);
  return c;
}

}  // namespace plumb::gpu::emu

#define __builtin_amdgcn_mfma_f32_16x16x16bf16_1k ::plumb::gpu::emu::mfma_f32_16x16x16bf16_1k

#pragma once
// The CUDA emulator (PLUMB_GPU=EMU, cmake/emu.cmake): the part of the CUDA runtime API and of the
// device built-ins that plumb's GPU backend uses, implemented on the CPU, so that the backend's
// own kernel sources run, unchanged, under g++ on a machine without a GPU. Why: device time is
// scarce (some sessions have none), and a kernel written without a device used to reach its first
// run untested; under the emulator the whole GPU op harness runs on the build machine.
//
// What it is: every launch runs synchronously on the calling thread (when it is issued, or on a
// held stream when something waits for it: emu_streams.cpp); a grid's blocks run one after
// another, and a block's threads are cooperative fibers (ucontext) that switch only at
// __syncthreads, at warp collectives (shuffles, the MMA fragments) and at exit. Warps are kWarp
// consecutive threads, as on the device, and run one at a time from one __syncthreads to the
// next (a warp's lanes round robin between its collectives), so a missing barrier between one
// warp's shared-memory write and another warp's read (or overwrite) of it shows. Each barrier
// waits for the threads of its block (or warp) that have not exited; a block whose threads wait
// at barriers that can never all be reached (a divergent __syncthreads or shuffle) is reported
// and the process aborts. cp.async copies land as late as they may (cp_async16 below).
// What it is not: a timing model, a memory model (within a warp, a missing __syncwarp between
// lanes can go unseen unless PLUMB_EMU_SHUFFLE reorders them), or the tensor cores' exact
// accumulation (the MMA fragments are summed exactly and rounded once to f32; the device's adder
// differs in the last bits, which the fast-order tolerances cover).
//
// PLUMB_EMU_SHUFFLE=<seed>: blocks, the warps of a block and the lanes of a warp run in a random
// order, so results that depend on any of them show up as a difference between seeds.
// PLUMB_EMU_MEMORY_MB: the device memory the emulator reports (default 4096).
// Its HIP flavour (PLUMB_GPU=EMU_HIP, wave64 and MFMA): emu_hip.h.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

// ---- the CUDA keywords: ordinary C++ here
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static  // one block runs at a time: a function's static is its block's shared array
#define __align__(n) __attribute__((aligned(n)))

// Dynamic shared memory: `extern __shared__ T name[]` has no C++ spelling, so kernels write
// PLUMB_DYNAMIC_SHARED(T, name) (gpu_compat.h), here the launch's buffer.
#define PLUMB_DYNAMIC_SHARED(T, name) T* const name = static_cast<T*>(::plumb::gpu::emu::dynamic_shared())

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }

namespace plumb::gpu::emu {

const uint3& thread_idx();
const uint3& block_idx();
const dim3& block_dim();
const dim3& grid_dim();
void* dynamic_shared();

// Runs body once per thread of a grid (above); an error when the configuration is one the device
// would refuse (block over 1,024 threads, more dynamic shared memory than 227 KB (HIP flavour:
// gfx90a's 64 KB of LDS), a zero grid).
int launch(dim3 grid, dim3 block, std::size_t smem, const std::function<void()>& body);
// launch()'s refusal of a configuration (cudaErrorInvalidConfiguration), or 0.
int config_error(dim3 grid, dim3 block, std::size_t smem);

void syncthreads();
int syncthreads_or(int p);
// Lane src's 8 bytes (every lane of the warp calls it).
uint64_t warp_shuffle(uint64_t v, int src);
// Every lane's `bytes` (<= 32) bytes of mine, lane by lane into all[kWarp * bytes].
void warp_gather(const void* mine, std::size_t bytes, void* all);
int lane_id();  // the calling thread's lane: its linear index in the block modulo kWarp
// cp.async (kernels/cp_async.h) as the device may run it: a copy's 16 destination bytes are
// garbage (all-ones) from its issue until the thread's cp_async_wait completes its group, which
// reads the source then; commit closes the thread's open group; copies never waited for are
// dropped. So a kernel that reads a stage before its own wait, or before the barrier after the
// other threads' waits, or that refills a stage other threads still read, sees NaN bytes there.
void cp_async16(void* smem, const void* gmem, bool valid);
void cp_async_commit();
void cp_async_wait(int pending);  // until at most `pending` of the thread's committed groups are open
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 and m16n8k32 ... e4m3.e4m3 (emu_mma.cpp).
void mma_m16n8k16_bf16(float* d, const uint32_t* a, const uint32_t* b);
void mma_m16n8k32_e4m3(float* d, const uint32_t* a, const uint32_t* b);
// ldmatrix.sync.aligned.m8n8.x4.shared.b16 (emu_mma.cpp; kernels/linear_common.h says what it does).
void ldmatrix_x4(uint32_t* r, const void* row);

}  // namespace plumb::gpu::emu

#define threadIdx (::plumb::gpu::emu::thread_idx())
#define blockIdx (::plumb::gpu::emu::block_idx())
#define blockDim (::plumb::gpu::emu::block_dim())
#define gridDim (::plumb::gpu::emu::grid_dim())

inline void __syncthreads() { plumb::gpu::emu::syncthreads(); }
inline int __syncthreads_or(int p) { return plumb::gpu::emu::syncthreads_or(p); }
// The lanes of the warp meet (as at any warp collective: a shuffle whose value is unused).
inline void __syncwarp(unsigned = 0xFFFFFFFFu) { (void)plumb::gpu::emu::warp_shuffle(0, 0); }

// Rounded arithmetic: plain IEEE f32 on the host (the emulator's sources are compiled with
// -ffp-contract=off, so nothing fuses into an FMA that the device would not).
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }  // one rounding, as the device
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }

template <class T>
inline T __ldcs(const T* p) {
  return *p;
}

// Fibers switch only at barriers, so a read-modify-write is atomic.
template <class T>
inline T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
template <class T>
inline T atomicMax(T* p, T v) {
  const T old = *p;
  if (v > old) *p = v;
  return old;
}
template <class T>
inline T atomicCAS(T* p, T compare, T v) {
  const T old = *p;
  if (old == compare) *p = v;
  return old;
}

// ---- the runtime API (the subset plumb calls)
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorNotSupported = 801,
};
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaDeviceAttr { cudaDevAttrClockRate, cudaDevAttrMemoryClockRate, cudaDevAttrEccEnabled };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
struct CUstream_st;
using cudaStream_t = CUstream_st*;
struct CUevent_st;
using cudaEvent_t = CUevent_st*;
constexpr unsigned cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDisableTiming = 2;

struct cudaDeviceProp {
  char name[256];
  int major, minor, multiProcessorCount, warpSize;
  std::size_t totalGlobalMem, sharedMemPerBlock;
};
struct cudaFuncAttributes {
  int ptxVersion, binaryVersion;
};

cudaError_t cudaGetLastError();
const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaGetDevice(int* d);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d);
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d);
cudaError_t cudaDeviceGetPCIBusId(char* out, int len, int d);
cudaError_t cudaDriverGetVersion(int* v);
cudaError_t cudaRuntimeGetVersion(int* v);
cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total);
cudaError_t cudaMalloc(void** p, std::size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocHost(void** p, std::size_t bytes);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind k, cudaStream_t s = nullptr);
cudaError_t cudaMemcpy2DAsync(void* dst, std::size_t dpitch, const void* src, std::size_t spitch, std::size_t width,
                              std::size_t height, cudaMemcpyKind k, cudaStream_t s = nullptr);
cudaError_t cudaMemsetAsync(void* p, int value, std::size_t bytes, cudaStream_t s = nullptr);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaProfilerStart();
cudaError_t cudaProfilerStop();

// No binary for any architecture: programmatic dependent launch stays off (launch.cu).
template <class F>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F*) {
  a->ptxVersion = a->binaryVersion = 0;
  return cudaSuccess;
}
template <class F>
cudaError_t cudaFuncSetAttribute(F*, cudaFuncAttribute, int) {
  return cudaSuccess;
}

namespace plumb::gpu::emu {
// Streams (emu_streams.cpp). Work on a stream runs at once, unless the stream is held (a test
// mode: GpuBackend's side chains under PLUMB_GPU_LANES=delayed): then its launches,
// host-to-device and device-to-device copies and memsets queue, and run in issue order when
// another stream waits for an event recorded on it (up to that event), when the host waits for it
// (cudaStreamSynchronize, an event's synchronize or query, a device-to-host copy on it, cudaFree)
// or when the hold ends. Work issued on a held stream so lands as late as a device may run it,
// and a reader that does not wait for it reads the values from before.
void hold_stream(cudaStream_t s, bool on);
// launch() on stream s: at once, or queued when s is held (its configuration checked now). body
// must own what it reads (launch.h copies the kernel's arguments into it).
int launch_on(cudaStream_t s, dim3 grid, dim3 block, std::size_t smem, std::function<void()> body);
// Runs every held stream's queue (cudaFree's wait for the device).
void run_held_streams();
}  // namespace plumb::gpu::emu

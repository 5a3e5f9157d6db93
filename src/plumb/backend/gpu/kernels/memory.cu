#include "plumb/backend/gpu/kernels/memory.h"

#include "plumb/backend/gpu/kernels/launch.h"

namespace plumb::gpu::k {
namespace {
template <typename T>
__global__ void fill(T* y, int64_t n, T v) {
  pdl_begin();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = v;
}
__global__ void spin_kernel(int64_t cycles) {
  pdl_begin();
#if !defined(PLUMB_EMU)
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
#else
  (void)cycles;
#endif
}
constexpr int kThreads = 256;
unsigned blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }
}  // namespace

gpuError_t fill_f32(float* y, int64_t n, float v, gpuStream_t s) {
  return n > 0 ? launch(fill<float>, blocks(n), kThreads, 0, s, y, n, v) : gpuGetLastError();
}
gpuError_t fill_i32(int32_t* y, int64_t n, int32_t v, gpuStream_t s) {
  return n > 0 ? launch(fill<int32_t>, blocks(n), kThreads, 0, s, y, n, v) : gpuGetLastError();
}

gpuError_t spin(int64_t cycles, gpuStream_t s) { return launch(spin_kernel, 1, 1, 0, s, cycles); }

}  // namespace plumb::gpu::k

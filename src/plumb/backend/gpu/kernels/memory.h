#pragma once
// Launchers of the memory kernels (fills). Kernel files include no plumb host headers (nvcc cannot
// compile fmt): they take raw pointers and sizes and return the launch's error code.
#include <cstdint>

#include "plumb/backend/gpu/gpu_compat.h"

namespace plumb::gpu::k {

gpuError_t fill_f32(float* y, int64_t n, float v, gpuStream_t s);
gpuError_t fill_i32(int32_t* y, int64_t n, int32_t v, gpuStream_t s);
// One thread that spins for about `cycles` clock cycles: holds a stream back (the side lane's
// test mode, GpuBackend::Lanes::Delayed). Nothing on the emulator, whose launches run at once.
gpuError_t spin(int64_t cycles, gpuStream_t s);

}  // namespace plumb::gpu::k

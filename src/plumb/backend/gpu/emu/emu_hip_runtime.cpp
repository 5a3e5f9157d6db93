// The HIP flavour's device (emu_hip.h): what hipGetDeviceProperties says of the emulator, an MI250
// GCD's shape (gfx90a, 104 compute units, 64-lane wavefronts, 64 KiB of LDS), so that the backend
// takes the paths and split counts it takes there. Its memory is the emulator's
// (PLUMB_EMU_MEMORY_MB, as in the CUDA flavour), not the GCD's 64 GiB: the emulator's allocations
// are host memory, and the backend sizes caches by what the device reports.
#include <cstdio>

#include "plumb/backend/gpu/gpu_compat.h"

hipError_t hipGetDeviceProperties(hipDeviceProp_t* p, int d) {
  cudaDeviceProp cuda{};  // the device index's check and the memory
  if (const cudaError_t e = cudaGetDeviceProperties(&cuda, d); e != cudaSuccess) return e;
  *p = hipDeviceProp_t{};
  std::snprintf(p->name, sizeof p->name, "plumb HIP emulator on the CPU (not a GPU; an MI250 GCD's shape)");
  std::snprintf(p->gcnArchName, sizeof p->gcnArchName, "gfx90a:sramecc+:xnack-");
  p->major = 9, p->minor = 0, p->multiProcessorCount = 104, p->warpSize = plumb::gpu::kWarp;
  p->totalGlobalMem = cuda.totalGlobalMem;
  p->sharedMemPerBlock = 64 * 1024;
  return hipSuccess;
}

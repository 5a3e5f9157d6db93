// pdl_on(): whether launch() marks kernels for programmatic dependent launch (launch.h).
#include "plumb/backend/gpu/kernels/launch.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace plumb::gpu::k {

#ifdef PLUMB_CUDA
namespace {

// Never launched; compiled like every kernel, so the code the driver picked for it on this device
// was built for the same architecture as theirs.
__global__ void pdl_probe_kernel() { pdl_begin(); }

constexpr int kMaxDevices = 64;

// Whether the device is sm_90+ and the kernels were compiled for sm_90+ (their pdl_wait is the
// griddepcontrol instruction): the code the driver picked for this device says both.
bool device_has_pdl() {
  cudaFuncAttributes fa{};
  if (cudaFuncGetAttributes(&fa, pdl_probe_kernel) != cudaSuccess) {
    (void)cudaGetLastError();  // a failed query is not the next launch's error
    return false;
  }
  return fa.ptxVersion >= 90 && fa.binaryVersion >= 90;
}

}  // namespace

bool pdl_on() {
  // PLUMB_GPU_PDL is read at each launch, so that a test can switch it (as PLUMB_GPU_FP8_DECODE).
  if (const char* e = std::getenv("PLUMB_GPU_PDL"); e && std::strcmp(e, "off") == 0) return false;
  // The device's answer, per device: 0 not asked yet, 1 yes, 2 no.
  static std::atomic<int> state[kMaxDevices];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
    (void)cudaGetLastError();
    return false;
  }
  int s = state[dev].load(std::memory_order_relaxed);
  if (s == 0) {
    s = device_has_pdl() ? 1 : 2;
    state[dev].store(s, std::memory_order_relaxed);
  }
  return s == 1;
}
#else
bool pdl_on() { return false; }
#endif

}  // namespace plumb::gpu::k

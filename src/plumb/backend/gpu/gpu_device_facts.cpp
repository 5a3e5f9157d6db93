// GPU backend: what the runtime says about itself and its devices (plumb doctor), and the
// backend's own device memory (the start-up memory table, /metrics).
#include <fmt/format.h>

#include "plumb/backend/device_facts.h"
#include "plumb/backend/gpu/gpu_backend.h"
#include "plumb/backend/gpu/kernels/pdl.h"

namespace plumb::backend {
namespace {

// The attribute queries the other host files do not need (so gpu_compat.h, which every kernel
// includes, stays as it is).
#ifdef PLUMB_HIP
using DeviceAttr = hipDeviceAttribute_t;
constexpr DeviceAttr kClockRate = hipDeviceAttributeClockRate, kMemoryClockRate = hipDeviceAttributeMemoryClockRate,
                     kEccEnabled = hipDeviceAttributeEccEnabled;
gpuError_t get_attribute(int* v, DeviceAttr a, int device) { return hipDeviceGetAttribute(v, a, device); }
gpuError_t pci_bus_id(char* out, int len, int device) { return hipDeviceGetPCIBusId(out, len, device); }
#else
using DeviceAttr = cudaDeviceAttr;
constexpr DeviceAttr kClockRate = cudaDevAttrClockRate, kMemoryClockRate = cudaDevAttrMemoryClockRate,
                     kEccEnabled = cudaDevAttrEccEnabled;
gpuError_t get_attribute(int* v, DeviceAttr a, int device) { return cudaDeviceGetAttribute(v, a, device); }
gpuError_t pci_bus_id(char* out, int len, int device) { return cudaDeviceGetPCIBusId(out, len, device); }
#endif

std::string runtime_error_text(gpuError_t e) {
  return fmt::format("{} (error {})", gpuGetErrorString(e), static_cast<int>(e));
}

int attribute(DeviceAttr attr, int device) {
  int v = -1;
  if (get_attribute(&v, attr, device) != gpuSuccess) {
    (void)gpuGetLastError();
    return -1;
  }
  return v;
}

GpuDeviceFacts device_facts(int i) {
  GpuDeviceFacts d;
  d.index = i;
  gpuDeviceProp prop{};
  if (const gpuError_t e = gpuGetDeviceProperties(&prop, i); e != gpuSuccess) {
    (void)gpuGetLastError();
    d.error = "reading its properties failed: " + runtime_error_text(e);
    return d;
  }
  d.name = prop.name;
#ifdef PLUMB_HIP
  d.arch = prop.gcnArchName;
#else
  d.arch = fmt::format("sm_{}{}", prop.major, prop.minor);
#endif
  d.multiprocessors = prop.multiProcessorCount;
  d.warp_size = prop.warpSize;
  d.memory_total = static_cast<std::int64_t>(prop.totalGlobalMem);
  const int clock_khz = attribute(kClockRate, i), memory_khz = attribute(kMemoryClockRate, i);
  d.clock_mhz = clock_khz > 0 ? clock_khz / 1000 : -1;
  d.memory_clock_mhz = memory_khz > 0 ? memory_khz / 1000 : -1;
  d.ecc = attribute(kEccEnabled, i);
  char bus[32] = {};
  if (pci_bus_id(bus, sizeof bus, i) == gpuSuccess)
    d.pci_bus_id = bus;
  else
    (void)gpuGetLastError();
  std::size_t free = 0, total = 0;
  const gpuError_t set = gpuSetDevice(i);
  const gpuError_t info = set == gpuSuccess ? gpuMemGetInfo(&free, &total) : set;
  if (info == gpuSuccess) {
    d.memory_free = static_cast<std::int64_t>(free);
    d.memory_total = static_cast<std::int64_t>(total);
    d.pdl = plumb::gpu::k::pdl_on();  // (of the current device: i)
  } else {
    (void)gpuGetLastError();
    d.error = "reading its free memory failed: " + runtime_error_text(info);
  }
  return d;
}

}  // namespace

GpuFacts query_gpu_facts() {
  GpuFacts f;
  f.platform = gpu_backend_name();
#ifdef PLUMB_GPU_TARGETS
  f.targets = PLUMB_GPU_TARGETS;
#endif
  int v = 0;
  if (gpuRuntimeGetVersion(&v) == gpuSuccess) f.runtime_version = gpu_version_text(f.platform, v);
  if (gpuDriverGetVersion(&v) == gpuSuccess && v > 0) f.driver_version = gpu_version_text(f.platform, v);
  (void)gpuGetLastError();
  int count = 0;
  if (const gpuError_t e = gpuGetDeviceCount(&count); e != gpuSuccess) {
    (void)gpuGetLastError();
    f.error = "the runtime lists no device: " + runtime_error_text(e);
    return f;
  }
  if (count == 0) f.error = "the runtime lists no device";
  for (int i = 0; i < count; ++i) f.devices.push_back(device_facts(i));
  if (count > 0) (void)gpuSetDevice(0);  // where the backend runs
  return f;
}

DeviceMemory device_memory(const Backend& b) {
  if (const auto* gpu = dynamic_cast<const gpu::GpuBackend*>(&b)) return gpu->memory();
  return host_memory_report();
}

}  // namespace plumb::backend

namespace plumb::gpu {

namespace {
std::int64_t device_bytes(const WeightRef& r) {
  const std::int64_t n = r.rows * r.cols;
  switch (r.format) {
    case WFormat::F32: return 4 * n;
    case WFormat::BF16: return 2 * n;
    case WFormat::FP8: return n + (r.rows + 127) / 128 * r.scale_cols * (r.scale_f32 ? 4 : 1);
    case WFormat::FP4: return n / 2 + r.rows * r.scale_cols;
  }
  return 0;
}
}  // namespace

std::size_t DeviceAllocator::cached() {
  std::lock_guard<std::mutex> lock(mu_);
  std::size_t n = 0;
  for (const auto& [bytes, blocks] : free_) n += bytes * blocks.size();
  return n;
}

backend::DeviceMemory GpuBackend::memory() const {
  backend::DeviceMemory m;
  m.device = fmt::format("{}:0 {}", name(), info_.name);
  std::size_t free = 0, total = 0;
  if (gpuMemGetInfo(&free, &total) == gpuSuccess) {
    m.free = static_cast<std::int64_t>(free);
    m.total = static_cast<std::int64_t>(total);
  } else {
    (void)gpuGetLastError();
  }
  m.weights = 0;
  for (const auto& [key, w] : weights_) m.weights += device_bytes(w.ref);
  m.workspace = static_cast<std::int64_t>(alloc_->in_use() + alloc_->cached());
  return m;
}

}  // namespace plumb::gpu

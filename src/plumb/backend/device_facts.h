#pragma once
// What the GPU runtime this build links says about itself and the devices it sees (plumb
// doctor), and what a backend holds in device memory (the start-up memory table, /metrics).
#include <cstdint>
#include <string>
#include <vector>

namespace plumb::backend {

struct GpuDeviceFacts {
  int index = 0;
  std::string name, arch;  // "NVIDIA H200", "sm_90" / "gfx90a:sramecc+:xnack-"
  std::string pci_bus_id;
  std::int64_t memory_total = -1, memory_free = -1;  // bytes; -1: not known
  int clock_mhz = -1, memory_clock_mhz = -1;         // peak, as the runtime reports them
  int multiprocessors = 0, warp_size = 0;
  int ecc = -1;       // 1 on, 0 off, -1 not reported
  bool pdl = false;   // plumb's kernels launch with programmatic dependent launch here (CUDA sm_90+)
  std::string error;  // a query of this device that failed (the rest is still filled)
};

struct GpuFacts {
  std::string platform;  // "cuda", "hip", or "" when plumb was built without a GPU backend
  std::string targets;   // the kernel targets compiled in ("80-real,90a-real,80-virtual", "gfx90a")
  std::string runtime_version, driver_version;  // "13.0", "5.2.21151"; empty when not known
  std::vector<GpuDeviceFacts> devices;
  std::string error;     // why no device is listed (no driver, no device, driver too old)
};

// Asks the runtime of this build (creates a context on each device for its free memory); an
// empty GpuFacts with platform "" in a build without a GPU backend. Never throws.
GpuFacts query_gpu_facts();

// A runtime version number in the platform's encoding as text: CUDA 12040 -> "12.4", HIP
// 50221151 -> "5.2.21151".
std::string gpu_version_text(const std::string& platform, int version);

// Device memory as a backend sees it; -1: not known to this backend.
struct DeviceMemory {
  std::string device;               // "host" for the CPU backend, "cuda:0 NVIDIA H200", ...
  std::int64_t total = -1, free = -1;
  std::int64_t weights = -1;        // weight bytes resident on the device
  std::int64_t workspace = -1;      // activations and scratch: tensors live or cached by the allocator
};

class Backend;
// What `backend` holds: the GPU backend's device memory, weights and allocator; for the CPU
// backend host memory only (its weights stay in the mapped checkpoint, tensors are not counted).
// Call it on the thread that runs the backend's ops.
DeviceMemory device_memory(const Backend& backend);
DeviceMemory host_memory_report();  // "host": MemTotal and MemAvailable

}  // namespace plumb::backend

// Backend selection by name. The GPU backend is linked in only when plumb was built with CUDA or
// HIP (PLUMB_WITH_GPU); otherwise asking for it is a clear error, never a silent CPU fallback.
#include <string>

#include "plumb/backend/backend.h"
#include "plumb/backend/cpu/cpu_backend.h"
#include "plumb/backend/device_facts.h"
#include "plumb/util/error.h"

namespace plumb::backend {

std::string gpu_backend_name() {
#if defined(PLUMB_WITH_HIP)
  return "hip";
#elif defined(PLUMB_WITH_CUDA)
  return "cuda";
#else
  return "";
#endif
}

#if !defined(PLUMB_WITH_CUDA) && !defined(PLUMB_WITH_HIP)
std::string gpu_unavailable_reason() { return "plumb was built without a GPU backend (configure with CUDA or HIP)"; }
std::unique_ptr<Backend> make_gpu_backend() { fail("the GPU backend is not available: {}", gpu_unavailable_reason()); }
GpuFacts query_gpu_facts() { return {}; }  // platform "": no GPU runtime is linked
DeviceMemory device_memory(const Backend&) { return host_memory_report(); }
#endif

std::unique_ptr<Backend> make_backend(const std::string& name, int threads) {
  if (name == "cpu") return make_cpu_backend(threads);
  // "cpu@<order>": the CPU backend with some sites summed in another order (cpu_backend.h), so
  // an experiment can compare two CPU runs that differ in that alone (plumb verify's library API).
  if (name.starts_with("cpu@")) return cpu::make_cpu_backend_in_order(threads, name.substr(4));
  const std::string gpu = gpu_backend_name();
  if (name == "gpu" || (!gpu.empty() && name == gpu)) return make_gpu_backend();
  if (name == "cuda" || name == "hip")
    fail("backend '{}' is not available: {}", name,
         gpu.empty() ? gpu_unavailable_reason() : fmt::format("this build has the '{}' GPU backend", gpu));
  fail("unknown backend '{}' (available: cpu{})", name, gpu.empty() ? "" : ", " + gpu);
}

}  // namespace plumb::backend

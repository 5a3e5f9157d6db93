#include "plumb/backend/device_facts.h"

#include <fmt/format.h>

#include "plumb/util/host_facts.h"

namespace plumb::backend {

std::string gpu_version_text(const std::string& platform, int version) {
  if (version <= 0) return {};
  if (platform == "hip")  // HIP_VERSION: major * 10^7 + minor * 10^5 + patch
    return fmt::format("{}.{}.{}", version / 10000000, version / 100000 % 100, version % 100000);
  return fmt::format("{}.{}", version / 1000, version % 1000 / 10);  // CUDA: major * 1000 + minor * 10
}

DeviceMemory host_memory_report() {
  const HostMemory host = read_host_memory();
  DeviceMemory m;
  m.device = "host";
  m.total = host.total;
  m.free = host.available;
  return m;
}

}  // namespace plumb::backend

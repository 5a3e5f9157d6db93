#pragma once
// What the engine's GPU tests share: the GPU backend's load options or why it cannot run here
// (the tests then skip, saying so), and PLUMB_GPU_ORDER=cpu while they make their backends.
#include <cstdlib>
#include <string>

#include "plumb/backend/backend.h"
#include "plumb/model/model.h"

namespace plumb::runtime::testing {

// PLUMB_GPU_ORDER=cpu while a test makes its backends (the GPU backend reads it at creation).
class CpuOrderOnGpu {
 public:
  CpuOrderOnGpu() {
    if (const char* v = std::getenv("PLUMB_GPU_ORDER")) saved_ = v, had_ = true;
    setenv("PLUMB_GPU_ORDER", "cpu", 1);
  }
  ~CpuOrderOnGpu() { had_ ? (void)setenv("PLUMB_GPU_ORDER", saved_.c_str(), 1) : (void)unsetenv("PLUMB_GPU_ORDER"); }
  CpuOrderOnGpu(const CpuOrderOnGpu&) = delete;
  CpuOrderOnGpu& operator=(const CpuOrderOnGpu&) = delete;

 private:
  std::string saved_;
  bool had_ = false;
};

// The GPU backend's load options, or the reason it cannot run here.
inline std::string gpu_or_skip_reason(LoadOptions& load, Numerics numerics) {
  load.backend = backend::gpu_backend_name();
  load.numerics = numerics;
  if (load.backend.empty()) return "plumb was built without a GPU backend";
  if (std::string why = backend::gpu_unavailable_reason(); !why.empty()) return "no usable GPU: " + why;
  return "";
}

}  // namespace plumb::runtime::testing

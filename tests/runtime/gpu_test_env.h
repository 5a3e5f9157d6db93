#pragma once
// What the engine's GPU tests share: the GPU backend's load options or why it cannot run here
// (the tests then skip, saying so), and PLUMB_GPU_ORDER=cpu while they make their backends.
#include <cstdlib>
#include <string>

#include "plumb/backend/backend.h"
#include "plumb/model/model.h"
#include "../util/scoped_env.h"

namespace plumb::runtime::testing {

// PLUMB_GPU_ORDER=cpu while a test makes its backends (the GPU backend reads it at creation).
class CpuOrderOnGpu : test::ScopedEnv {
 public:
  CpuOrderOnGpu() : ScopedEnv("PLUMB_GPU_ORDER", "cpu") {}
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

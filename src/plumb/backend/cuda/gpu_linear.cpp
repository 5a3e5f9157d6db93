// GPU backend: linear (being written).
#include "plumb/backend/cuda/gpu_backend.h"
#include "plumb/util/error.h"

namespace plumb::gpu {
Tensor GpuBackend::linear(const Tensor&, const WeightView&, const LinearOpts&) { fail("GPU op not implemented yet"); }
}  // namespace plumb::gpu

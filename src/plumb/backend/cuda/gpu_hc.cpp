// GPU backend: hyper-connections (being written).
#include "plumb/backend/cuda/gpu_backend.h"
#include "plumb/util/error.h"

namespace plumb::gpu {
HcPreResult GpuBackend::hc_pre(const Tensor&, const HcParams&, Round) { fail("GPU op not implemented yet"); }
Tensor GpuBackend::hc_post(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Round) { fail("GPU op not implemented yet"); }
Tensor GpuBackend::hc_head(const Tensor&, const HcParams&, Round) { fail("GPU op not implemented yet"); }
}  // namespace plumb::gpu

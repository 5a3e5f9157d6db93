// GPU backend: routing and experts (being written).
#include "plumb/backend/cuda/gpu_backend.h"
#include "plumb/util/error.h"

namespace plumb::gpu {
Routing GpuBackend::route(const Tensor&, const Tensor&, const RouteParams&) { fail("GPU op not implemented yet"); }
Tensor GpuBackend::moe(const Tensor&, const Routing&, std::span<const SwiGluWeights>, const SwiGluWeights&, const MoeParams&) { fail("GPU op not implemented yet"); }
}  // namespace plumb::gpu

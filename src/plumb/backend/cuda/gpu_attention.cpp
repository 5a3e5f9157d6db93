// GPU backend: attention (being written).
#include "plumb/backend/cuda/gpu_backend.h"
#include "plumb/util/error.h"

namespace plumb::gpu {
Tensor GpuBackend::sparse_attention(const Tensor&, const Tensor&, const Batch&, std::span<const Tensor>, std::span<const Tensor>, const Tensor*, const AttentionParams&) { fail("GPU op not implemented yet"); }
void GpuBackend::window_update(std::span<Tensor>, const Tensor&, const Batch&) { fail("GPU op not implemented yet"); }
Tensor GpuBackend::mla_attention(const Tensor&, const Tensor&, const Batch&, std::span<const Tensor>, std::span<const Tensor>, float) { fail("GPU op not implemented yet"); }
}  // namespace plumb::gpu

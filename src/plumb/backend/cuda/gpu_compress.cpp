// GPU backend: compressor and indexer (being written).
#include "plumb/backend/cuda/gpu_backend.h"
#include "plumb/util/error.h"

namespace plumb::gpu {
Tensor GpuBackend::compress(const Tensor&, const Tensor&, const Batch&, std::span<CompressorState>, const CompressorParams&, Round) { fail("GPU op not implemented yet"); }
Tensor GpuBackend::indexer_topk(const Tensor&, const Tensor&, const Batch&, std::span<const Tensor>, const IndexerParams&) { fail("GPU op not implemented yet"); }
}  // namespace plumb::gpu

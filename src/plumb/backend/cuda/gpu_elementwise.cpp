// GPU backend: elementwise ops (being written).
#include "plumb/backend/cuda/gpu_backend.h"
#include "plumb/util/error.h"

namespace plumb::gpu {
Tensor GpuBackend::embed(const WeightView&, const Tensor&) { fail("GPU op not implemented yet"); }
Tensor GpuBackend::repeat_rows(const Tensor&, int64_t) { fail("GPU op not implemented yet"); }
Tensor GpuBackend::rms_norm(const Tensor&, const WeightView*, float, NormMath, Round) { fail("GPU op not implemented yet"); }
Tensor GpuBackend::scale(const Tensor&, float, Round) { fail("GPU op not implemented yet"); }
Tensor GpuBackend::add(const Tensor&, const Tensor&, Round) { fail("GPU op not implemented yet"); }
Tensor GpuBackend::columns(const Tensor&, int64_t, int64_t) { fail("GPU op not implemented yet"); }
Tensor GpuBackend::rope(const Tensor&, const Tensor&, const Tensor&, bool, Round) { fail("GPU op not implemented yet"); }
Tensor GpuBackend::quant_fp8(const Tensor&, int64_t, int64_t) { fail("GPU op not implemented yet"); }
Tensor GpuBackend::quant_fp4(const Tensor&, int64_t) { fail("GPU op not implemented yet"); }
Tensor GpuBackend::hadamard(const Tensor&, Round) { fail("GPU op not implemented yet"); }
}  // namespace plumb::gpu

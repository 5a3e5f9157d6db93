// GPU backend: elementwise ops, norms, RoPE, simulated quantization and the Hadamard transform.
// Host side only: the same shape checks and errors as the CPU backend (cpu_backend.cpp), then a
// launcher of kernels/elementwise.cu.
#include <vector>

#include "plumb/backend/cuda/gpu_backend.h"
#include "plumb/backend/cuda/kernels/elementwise.h"
#include "plumb/util/error.h"

namespace plumb::gpu {

namespace {
bool rounds(Round r) { return r == Round::BF16; }
}  // namespace

Tensor GpuBackend::embed(const WeightView& table, const Tensor& ids) {
  const int32_t* id = dev_i32(ids, "token ids");
  const int64_t V = table.rows(), D = table.cols(), N = ids.numel();
  // The ids are checked on the host (one small copy back): embedding runs once per forward, and
  // an out-of-range id must be an error naming it, as on the CPU.
  std::vector<int32_t> host(static_cast<std::size_t>(N));
  if (N > 0) to_host(ids, host.data());
  for (int64_t n = 0; n < N; ++n)
    if (host[n] < 0 || host[n] >= V)
      fail("token id {} at position {} is outside the vocabulary [0, {})", host[n], n, V);
  Tensor y = alloc(ElemType::F32, {N, D});
  if (N == 0 || D == 0) return y;
  const WeightRef& w = weight(table);
  check_launch(k::embed(dev_f32(y), id, N, w, stream_), "embed");
  return y;
}

Tensor GpuBackend::repeat_rows(const Tensor& x, int64_t copies) {
  const int64_t N = x.rows(), D = x.row_size();
  if (copies < 0) fail("repeat_rows: {} copies", copies);
  Tensor y = alloc(ElemType::F32, {N, copies, D});
  check_launch(k::repeat_rows(dev_f32(y), dev_f32(x, "repeat_rows input"), N, copies, D, stream_), "repeat_rows");
  return y;
}

Tensor GpuBackend::rms_norm(const Tensor& x, const WeightView* weight, float eps, NormMath math, Round out) {
  const int64_t D = x.dim(-1), rows = D == 0 ? 0 : x.numel() / D;
  if (weight && weight->numel() != D)
    fail("rms_norm: weight '{}' has {} values, input last dim is {}", weight->name, weight->numel(), D);
  if (math == NormMath::BF16Steps && weight) fail("rms_norm: bf16-step math is only defined without a weight");
  const float* xp = dev_f32(x, "rms_norm input");
  const WeightRef* w = weight ? &this->weight(*weight) : nullptr;
  Tensor y = alloc(ElemType::F32, x.shape());
  check_launch(k::rms_norm(dev_f32(y), xp, rows, D, w, eps, math == NormMath::BF16Steps, rounds(out), cpu_order(kNorm),
                        stream_),
               "rms_norm");
  return y;
}

Tensor GpuBackend::scale(const Tensor& x, float s, Round out) {
  const float* xp = dev_f32(x, "scale input");
  Tensor y = alloc(ElemType::F32, x.shape());
  check_launch(k::scale(dev_f32(y), xp, x.numel(), s, rounds(out), stream_), "scale");
  return y;
}

Tensor GpuBackend::add(const Tensor& a, const Tensor& b, Round out) {
  if (a.shape() != b.shape()) fail("add: shapes {} and {}", a.shape_str(), b.shape_str());
  const float* ap = dev_f32(a, "add operand");
  const float* bp = dev_f32(b, "add operand");
  Tensor y = alloc(ElemType::F32, a.shape());
  check_launch(k::add(dev_f32(y), ap, bp, a.numel(), rounds(out), stream_), "add");
  return y;
}

Tensor GpuBackend::columns(const Tensor& x, int64_t begin, int64_t count) {
  const int64_t N = x.rows(), C = x.row_size();
  if (begin < 0 || count < 0 || begin + count > C) fail("columns: [{}, {}) of {}", begin, begin + count, x.shape_str());
  const float* xp = dev_f32(x, "columns input");
  Tensor y = alloc(ElemType::F32, {N, count});
  check_launch(k::columns(dev_f32(y), xp, N, C, begin, count, stream_), "columns");
  return y;
}

Tensor GpuBackend::rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, bool inverse, Round out) {
  const int64_t F = inv_freq.numel(), Dl = x.dim(-1), N = x.rows();
  if (2 * F > Dl) fail("rope: {} frequencies need {} dims, vectors have {}", F, 2 * F, Dl);
  if (positions.numel() != N) fail("rope: {} positions for {} rows", positions.numel(), N);
  const int32_t* pos = dev_i32(positions, "positions");
  const float* f = dev_f32(inv_freq, "inv_freq");
  const float* xp = dev_f32(x, "rope input");
  Tensor y = alloc(ElemType::F32, x.shape());
  const int64_t n = x.numel();
  if (n == 0) return y;
  // y = x, then the last 2F dims of every vector rotated in place (the rest stays unrounded).
  check(gpuMemcpyAsync(dev_f32(y), xp, static_cast<std::size_t>(n) * 4, gpuMemcpyDeviceToDevice, stream_), "rope copy");
  const int64_t vecs = Dl == 0 ? 0 : x.row_size() / Dl;
  check_launch(k::rope(dev_f32(y), pos, f, N, vecs, Dl, F, inverse, rounds(out), stream_), "rope");
  return y;
}

namespace {
void check_block(int64_t block) {
  if (block <= 0) fail("quantization block size must be positive, got {}", block);
}
}  // namespace

Tensor GpuBackend::quant_fp8(const Tensor& x, int64_t cols, int64_t block) {
  const int64_t Dl = x.dim(-1);
  if (cols < 0 || cols > Dl) fail("quant_fp8: {} columns of vectors of {}", cols, Dl);
  const float* xp = dev_f32(x, "quant_fp8 input");
  const int64_t vecs = Dl == 0 ? 0 : x.numel() / Dl;
  if (vecs > 0) check_block(block);  // as cpu::fp8_roundtrip, which runs once per vector
  Tensor y = alloc(ElemType::F32, x.shape());
  if (x.numel() == 0) return y;
  check(gpuMemcpyAsync(dev_f32(y), xp, static_cast<std::size_t>(x.numel()) * 4, gpuMemcpyDeviceToDevice, stream_),
        "quant_fp8 copy");
  check_launch(k::quant_blocks(dev_f32(y), vecs, Dl, cols, block, false, stream_), "quant_fp8");
  return y;
}

Tensor GpuBackend::quant_fp4(const Tensor& x, int64_t block) {
  const int64_t Dl = x.dim(-1);
  const float* xp = dev_f32(x, "quant_fp4 input");
  const int64_t vecs = Dl == 0 ? 0 : x.numel() / Dl;
  if (vecs > 0) check_block(block);
  Tensor y = alloc(ElemType::F32, x.shape());
  if (x.numel() == 0) return y;
  check(gpuMemcpyAsync(dev_f32(y), xp, static_cast<std::size_t>(x.numel()) * 4, gpuMemcpyDeviceToDevice, stream_),
        "quant_fp4 copy");
  check_launch(k::quant_blocks(dev_f32(y), vecs, Dl, Dl, block, true, stream_), "quant_fp4");
  return y;
}

Tensor GpuBackend::hadamard(const Tensor& x, Round out) {
  const int64_t Dl = x.dim(-1);
  const float* xp = dev_f32(x, "hadamard input");
  const int64_t vecs = Dl == 0 ? 0 : x.numel() / Dl;
  if (vecs > 0 && (Dl <= 0 || (Dl & (Dl - 1)) != 0)) fail("hadamard: length {} is not a power of two", Dl);
  Tensor y = alloc(ElemType::F32, x.shape());
  if (x.numel() == 0) return y;
  check(gpuMemcpyAsync(dev_f32(y), xp, static_cast<std::size_t>(x.numel()) * 4, gpuMemcpyDeviceToDevice, stream_),
        "hadamard copy");
  check_launch(k::hadamard(dev_f32(y), vecs, Dl, rounds(out), stream_), "hadamard");
  return y;
}

}  // namespace plumb::gpu

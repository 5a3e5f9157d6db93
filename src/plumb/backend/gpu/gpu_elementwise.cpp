// GPU backend: elementwise ops, norms, RoPE, simulated quantization and the Hadamard transform.
// Host side only: the op's checks (op_checks.h), then a launcher of kernels/elementwise.cu.
#include <vector>

#include "plumb/backend/gpu/gpu_backend.h"
#include "plumb/backend/gpu/kernels/elementwise.h"

namespace plumb::gpu {

namespace {
bool rounds(Round r) { return r == Round::BF16; }

// A device copy of x, which the op then rewrites in place; `input` names x in errors.
Tensor copy_of(GpuBackend& be, const Tensor& x, const char* input, const char* copy) {
  const float* xp = dev_f32(x, input);
  Tensor y = be.alloc(ElemType::F32, x.shape());
  if (x.numel() > 0)
    check(gpuMemcpyAsync(dev_f32(y), xp, static_cast<std::size_t>(x.numel()) * 4, gpuMemcpyDeviceToDevice,
                         be.stream()),
          copy);
  return y;
}

// Vectors along the last dim (none in an empty tensor, whatever its last dim).
int64_t vectors(const Tensor& x) { return x.numel() == 0 ? 0 : x.numel() / x.dim(-1); }
}  // namespace

Tensor GpuBackend::embed(const WeightView& table, const Tensor& ids, std::span<const int32_t> host_ids) {
  const int32_t* id = dev_i32(ids, "token ids");
  const int64_t D = table.cols(), N = ids.numel();
  // The ids are checked on the host, an out-of-range id being an error naming it, as on the CPU:
  // the caller's host copy when it gives one, else the ids copied back (the host waits for the
  // device there).
  check_embed_host_ids(host_ids, N);
  std::vector<int32_t> host;
  if (host_ids.empty() && N > 0) {
    host.resize(static_cast<std::size_t>(N));
    to_host(ids, host.data());
  }
  check_token_ids(host_ids.empty() ? std::span<const int32_t>(host) : host_ids, table.rows());
  Tensor y = alloc(ElemType::F32, {N, D});
  if (N == 0 || D == 0) return y;
  const WeightRef& w = weight(table);
  check_launch(k::embed(dev_f32(y), id, N, w, stream_), "embed");
  return y;
}

Tensor GpuBackend::repeat_rows(const Tensor& x, int64_t copies) {
  const int64_t N = x.rows(), D = x.row_size();
  check_repeat_rows(copies);
  Tensor y = alloc(ElemType::F32, {N, copies, D});
  check_launch(k::repeat_rows(dev_f32(y), dev_f32(x, "repeat_rows input"), N, copies, D, stream_), "repeat_rows");
  return y;
}

Tensor GpuBackend::norm_copy_buffer(int64_t rows, int64_t D, const WeightRef* weight, bool bf16_steps) {
  if (norm_act_fp8_ && rows > 0 && rows <= kNormActFp8Rows && k::rms_norm_act_fp8_ok(D, weight, bf16_steps))
    return alloc(ElemType::F32, {rows, D});
  return {};
}

Tensor GpuBackend::rms_norm(const Tensor& x, const WeightView* weight, float eps, NormMath math, Round out) {
  check_rms_norm(x, weight, math);
  const int64_t D = x.dim(-1), rows = D == 0 ? 0 : x.numel() / D;
  const float* xp = dev_f32(x, "rms_norm input");
  const WeightRef* w = weight ? &this->weight(*weight) : nullptr;
  Tensor y = alloc(ElemType::F32, x.shape());
  const bool steps = math == NormMath::BF16Steps;
  Tensor q = norm_copy_buffer(rows, D, w, steps);
  check_launch(k::rms_norm(dev_f32(y), xp, rows, D, w, eps, steps, rounds(out), cpu_order(kNorm),
                           q.defined() ? dev_f32(q) : nullptr, stream_),
               "rms_norm");
  static_cast<GpuStorage*>(y.storage())->act_fp8 = std::move(q);
  return y;
}

Tensor GpuBackend::scale(const Tensor& x, float s, Round out) {
  const float* xp = dev_f32(x, "scale input");
  Tensor y = alloc(ElemType::F32, x.shape());
  check_launch(k::scale(dev_f32(y), xp, x.numel(), s, rounds(out), stream_), "scale");
  return y;
}

Tensor GpuBackend::add(const Tensor& a, const Tensor& b, Round out) {
  check_add(a, b);
  const float* ap = dev_f32(a, "add operand");
  const float* bp = dev_f32(b, "add operand");
  Tensor y = alloc(ElemType::F32, a.shape());
  check_launch(k::add(dev_f32(y), ap, bp, a.numel(), rounds(out), stream_), "add");
  return y;
}

Tensor GpuBackend::columns(const Tensor& x, int64_t begin, int64_t count) {
  check_columns(x, begin, count);
  const int64_t N = x.rows(), C = x.row_size();
  const float* xp = dev_f32(x, "columns input");
  Tensor y = alloc(ElemType::F32, {N, count});
  check_launch(k::columns(dev_f32(y), xp, N, C, begin, count, stream_), "columns");
  return y;
}

Tensor GpuBackend::rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, bool inverse, Round out) {
  check_rope(x, positions, inv_freq);
  const int64_t F = inv_freq.numel(), Dl = x.dim(-1), N = x.rows();
  const int32_t* pos = dev_i32(positions, "positions");
  const float* f = dev_f32(inv_freq, "inv_freq");
  // y = x, then the last 2F dims of every vector rotated in place (the rest stays unrounded).
  Tensor y = copy_of(*this, x, "rope input", "rope copy");
  if (x.numel() == 0) return y;
  const int64_t vecs = x.row_size() / Dl;
  check_launch(k::rope(dev_f32(y), pos, f, N, vecs, Dl, F, inverse, rounds(out), stream_), "rope");
  return y;
}

Tensor GpuBackend::quant_fp8(const Tensor& x, int64_t cols, int64_t block) {
  check_quant_fp8(x, cols, block);
  Tensor y = copy_of(*this, x, "quant_fp8 input", "quant_fp8 copy");
  if (x.numel() == 0) return y;
  check_launch(k::quant_blocks(dev_f32(y), dev_f32(y), vectors(x), x.dim(-1), cols, block, false, stream_), "quant_fp8");
  return y;
}

// One launch where k::norm_rope takes the shape (else the three ops, as the base class).
Tensor GpuBackend::norm_rope(const Tensor& x, const WeightView* weight, float eps, NormMath math,
                             const Tensor& positions, const Tensor& inv_freq, Round out, int64_t quant_cols,
                             int64_t quant_block) {
  // Switched off: the three ops, which check their own arguments (no checks twice on the way).
  if (!norm_rope_) return Backend::norm_rope(x, weight, eps, math, positions, inv_freq, out, quant_cols, quant_block);
  check_rms_norm(x, weight, math);
  check_rope(x, positions, inv_freq);
  if (quant_cols > 0) check_quant_fp8(x, quant_cols, quant_block);
  const bool steps = math == NormMath::BF16Steps;
  const WeightRef* w = weight ? &this->weight(*weight) : nullptr;
  const int64_t D = x.dim(-1), F = inv_freq.numel();
  if (x.numel() == 0 || !k::norm_rope_ok(D, w, steps, F, quant_cols, quant_block))
    return Backend::norm_rope(x, weight, eps, math, positions, inv_freq, out, quant_cols, quant_block);
  const float* xp = dev_f32(x, "norm_rope input");
  const int32_t* pos = dev_i32(positions, "positions");
  const float* f = dev_f32(inv_freq, "inv_freq");
  Tensor y = alloc(ElemType::F32, x.shape());
  check_launch(k::norm_rope(dev_f32(y), xp, vectors(x), x.row_size() / D, D, w, eps, steps, rounds(out),
                            cpu_order(kNorm), pos, f, F, quant_cols, quant_block, stream_),
               "norm_rope");
  ++norm_rope_launches_;
  return y;
}

Tensor GpuBackend::quant_fp4(const Tensor& x, int64_t block) {
  check_quant_fp4(x, block);
  Tensor y = copy_of(*this, x, "quant_fp4 input", "quant_fp4 copy");
  if (x.numel() == 0) return y;
  check_launch(k::quant_blocks(dev_f32(y), dev_f32(y), vectors(x), x.dim(-1), x.dim(-1), block, true, stream_), "quant_fp4");
  return y;
}

Tensor GpuBackend::hadamard(const Tensor& x, Round out) {
  check_hadamard(x);
  Tensor y = copy_of(*this, x, "hadamard input", "hadamard copy");
  if (x.numel() == 0) return y;
  check_launch(k::hadamard(dev_f32(y), vectors(x), x.dim(-1), rounds(out), stream_), "hadamard");
  return y;
}

}  // namespace plumb::gpu

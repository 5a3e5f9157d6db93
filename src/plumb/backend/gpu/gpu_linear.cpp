// GPU backend: linear(). Host side: the op's checks (op_checks.h), the activation FP8
// round trip, and the choice of kernel (kernels/linear.h):
//   N == 1                       GEMV (decode; memory-bound, weight bytes read once)
//   N <= kGemvLoopMaxRows        GEMV, 8 rows a pass, unless FP8 tensor cores apply (below; from
//                                fp8_min_rows_)
//   reference (no act_fp8, f32)  SIMT f32 GEMM: exact f32 products like the CPU
//   faithful, act_fp8, FP8 weight FP8 tensor-core GEMM on sm_90 (Hopper), kernels/linear_fp8.h,
//                                when K % 128 == 0 and R % 64 == 0
//   f32 x, BF16 weight           3 to 64 rows: path (f), the exact three-part bf16 split of x on
//                                the tensor cores, the weight read once, for weights of at least
//                                one block a multiprocessor (the head; B = 32 2.95 -> 0.51 ms,
//                                PERF.md v14); kernels/linear_f32_mma.cu, CUDA only; a tall
//                                weight (the head) up to 256 rows in passes of 64 (PERF.md v42)
//   faithful (act_fp8 or bf16)   bf16 matrix-core GEMM, when bf16 holds the weight exactly
//                                (BF16, FP8 with ue8m0 scales, FP4) or bf16_weight rounds it
//                                there anyway (V3 faithful); else the SIMT GEMM. mma.sync on
//                                CUDA sm_80+; MFMA on HIP gfx90a only once it passed a one-time
//                                run-time self-check against the SIMT bf16 GEMM
//                                (gpu_mfma_check.cpp; a mismatch warns on stderr and SIMT runs
//                                from then on); the SIMT bf16 loop on other HIP targets
// set_linear_path() forces one (the bf16 GEMM then rounds F32 / f32-scaled weights to bf16);
// PLUMB_GPU_PATH=portable takes the FP8 tensor cores out of Auto (gpu_backend.h).
// act_fp8 (the FP8 round trip of x) is applied by the GEMV itself as it stages x in shared memory
// (LinearArgs::quant_x); on the other paths, or when x is too wide for that, by a quant_blocks
// launch writing a quantized copy first.
// With the reduction order "cpu" (gpu_backend.h) Auto always takes the CPU-order kernel.
#include <algorithm>

#include "plumb/backend/gpu/gpu_backend.h"
#include "plumb/backend/gpu/kernels/elementwise.h"
#include "plumb/backend/gpu/kernels/linear.h"
#include "plumb/backend/gpu/kernels/linear_fp8.h"
#include "plumb/util/error.h"

namespace plumb::gpu {

namespace {
// Up to this many rows the GEMV serves the GEMM paths too (except FP8 tensor cores), 8 rows a
// pass: the SIMT and bf16 GEMMs' 64 x 64 tiles give a 1024-row weight 16 blocks on 132 SMs
// (measured on the H200 at N = 32: the compressor's 1024 x 4096 bf16 weight 615 us and the
// router gate 585 us through SIMT, wo_a 1975 us through the bf16 GEMM; the GEMV at N = 8 23, 10
// and 94 us a pass, docs/PERF.md v4). Its products are exact f32 ones: for the bf16 GEMM's
// inputs (bf16-exact by then in faithful) the same values, summed in another order.
// (GpuBackend::kGemvLoopMaxRows = 64: gpu_moe.cpp's prefill asks past it too.)
// From fp8_min_rows_ rows (3; gpu_backend.h) FP8 act_fp8 linears take the FP8 tensor cores: the
// 8-row GEMV reads weights 3.5x slower per byte than the 1-row one (PERF.md v12), and with split
// K the tensor-core GEMM beat it on every decode shape at 8 rows (B = 8 step 4.18 -> 3.46 ms,
// PERF.md v15); at 2 rows the GEMV was faster (v42). One row keeps the 1-row GEMV (wkv 6.4 us
// against 13): a sequence's rows in the fast order differ between a step where it runs alone and
// one beside others (as they did past 8 rows); the CPU order is unchanged.

// Path (d) needs the FP8 tensor cores (GpuBackend::fp8_tensor_cores), an FP8 weight used as
// stored (no bf16_weight) and whole 128-wide K blocks and 64-row weight tiles.
bool fp8_eligible(const WeightRef& w, const LinearOpts& o, int64_t K, int64_t R) {
  return o.act_fp8 && !o.bf16_weight && w.format == WFormat::FP8 && K % 128 == 0 && R % 64 == 0;
}

bool bf16_exact(const WeightRef& w) {
  return w.format == WFormat::BF16 || w.format == WFormat::FP4 || (w.format == WFormat::FP8 && !w.scale_f32);
}

// Path (g) (kernels/linear.h): a bf16-exact weight used as stored, x as it is (no act_fp8: the
// product's x would be quantized), one group, the segment tiles' K.
bool x_parts_eligible(const WeightRef& w, const LinearOpts& o, int64_t K, int64_t G) {
  return bf16_exact(w) && !o.bf16_weight && !o.act_fp8 && G == 1 && w.cols == K && k::mma_takes_bf16_x(w.format, K);
}
}  // namespace

// The sm_90a kernel is the only code object holding path (d)'s body.
bool GpuBackend::fp8_tensor_cores() const {
  return fp8_tensor_cores_ && k::fp8_mma_built() && info_.arch.rfind("sm_9", 0) == 0;
}

GpuBackend::LinearPath GpuBackend::resolve_linear_path(LinearPath path, int64_t N, const WeightRef& wr,
                                                       const LinearOpts& o, int64_t K, int64_t R) const {
  if (path == LinearPath::Auto && cpu_order(kLinear)) return LinearPath::CpuOrder;
  if (path != LinearPath::Auto) return path;
  const bool faithful = o.act_fp8 || o.out == Round::BF16;
  if (N >= fp8_min_rows_ && fp8_tensor_cores() && fp8_eligible(wr, o, K, R)) return LinearPath::Fp8;
  if (N <= kGemvLoopMaxRows) return LinearPath::Gemv;
  return faithful && (bf16_exact(wr) || o.bf16_weight) ? LinearPath::Mma : LinearPath::Simt;
}

Tensor GpuBackend::linear(const Tensor& x, const WeightView& w, const LinearOpts& o) { return linear_on(x, w, o, linear_path_); }

// Each weight through linear_on's host side; the GEMVs of the two, deferred, go to linear_gemvs,
// which gives them one launch where its 1-row FP8 kernel takes both (else one each, as linear()).
std::pair<Tensor, Tensor> GpuBackend::linear_pair(const Tensor& x, const WeightView& a, const WeightView& b,
                                                  const LinearOpts& o) {
  if (!linear_pairs_) return Backend::linear_pair(x, a, b, o);
  PendingGemv pa, pb;
  std::pair<Tensor, Tensor> y{linear_on(x, a, o, linear_path_, &pa), linear_on(x, b, o, linear_path_, &pb)};
  std::vector<k::GemvJob> jobs;
  for (const PendingGemv* p : {&pa, &pb})
    if (p->deferred) jobs.push_back(p->job);
  const int64_t target = 2 * static_cast<int64_t>(info_.multiprocessors);
  bool one_launch = false;
  if (!jobs.empty()) check_launch(k::linear_gemvs(jobs, target, stream_, &one_launch), "linear pair (gemv)");
  linear_pair_launches_ += one_launch;
  return y;
}

Tensor GpuBackend::linear_on(const Tensor& x, const WeightView& w, const LinearOpts& o, LinearPath path,
                             PendingGemv* pending) {
  const LinearDims d = check_linear(x, w, o);
  const int64_t G = d.groups, K = d.K, R = d.rows_per_group, in = d.in, N = d.N;
  const float* src = dev_f32(x, "linear input");
  const WeightRef& wr = weight(w);

  if (K == 0) return full(ElemType::F32, d.out, 0.f);  // empty sums
  Tensor y = alloc(ElemType::F32, d.out);
  if (N == 0 || G * R == 0) return y;

  k::LinearArgs a;
  a.y = dev_f32(y);
  a.ldy = G * R;
  a.x = src;
  a.ldx = in;
  a.nrows = N;
  a.groups = G;
  a.R = R;
  a.K = K;
  a.round_bf16 = o.out == Round::BF16;
  a.round_w = o.bf16_weight;
  a.pipe = gemm_pipe_;

  // Split K's partial sums (paths (d) and (f)): splits x N x G*R floats, none when not split.
  Tensor part;
  auto partials = [&](int splits) -> float* {
    if (splits <= 1) return nullptr;
    part = alloc(ElemType::F32, {splits, N, G * R});
    return dev_f32(part);
  };
  const bool fp8_ok = fp8_tensor_cores() && fp8_eligible(wr, o, K, R);
  const LinearPath asked = path;
  path = resolve_linear_path(path, N, wr, o, K, R);
  // Path (f): forced (a test), or in Auto for f32_mma_min_rows_ (3) to 64 x rows where its blocks
  // (one per 256 weight rows, times its splits of K) are at least f32_mma_min_blocks_ (default 16:
  // the head, the compressor and the router gate); the GEMV keeps fewer rows. Its eligibility is
  // asked only then, not on every call.
  if (path == LinearPath::F32Mma && (o.act_fp8 || !k::f32_mma_ok(a, wr)))
    fail("linear: path (f) (f32 x bf16 on the tensor cores) needs a CUDA build, a BF16 weight or an FP8 one with ue8m0 "
         "scales, no act_fp8 or bf16_weight, K % 32 == 0, at most {} x rows and 16-byte aligned x rows (weight '{}' [{}, "
         "{}], {} x rows)",
         k::kF32MmaMaxRows, w.name, w.rows(), K, N);
  // FP8 weights and bf16 outputs too (wo_a at B > 8 took 4 passes of the 8-row GEMV, 725 us of a
  // B = 32 step, PERF.md v15) unless PLUMB_GPU_F32_MMA_FP8=off (v19).
  const bool f32_mma_kind = (wr.format == WFormat::BF16 && !a.round_bf16) || f32_mma_fp8_;
  if (asked == LinearPath::Auto && N >= f32_mma_min_rows_ && (path == LinearPath::Gemv || path == LinearPath::Simt) &&
      !o.act_fp8 && f32_mma_kind && k::f32_mma_ok(a, wr) &&
      k::f32_mma_blocks(a) * k::f32_mma_splits(a, info_.multiprocessors) >=
          (f32_mma_min_blocks_ > 0 ? f32_mma_min_blocks_ : info_.multiprocessors))
    path = LinearPath::F32Mma;
  // Past path (f)'s 64 rows, a tall weight (a block a multiprocessor or more: the head) takes it
  // in passes of 64 up to kF32MmaPassesMaxRows rows: each pass reads the weight once, where path
  // (g)'s GEMM of 3 N rows ran B = 128's head in 3.5 ms (10% of its bytes floor, PERF.md v42).
  k::LinearArgs first = a;
  first.nrows = std::min<int64_t>(N, k::kF32MmaMaxRows);
  const bool f32_passes = asked == LinearPath::Auto && f32_mma_passes_ && N > k::kF32MmaMaxRows &&
                          N <= kF32MmaPassesMaxRows && path == LinearPath::Simt &&
                          !o.act_fp8 && f32_mma_kind && k::f32_mma_ok(first, wr) &&
                          k::f32_mma_blocks(a) >= info_.multiprocessors;
  // Path (g) in Auto where the SIMT GEMM would run (many rows; f32 products of an f32 x).
  if (asked == LinearPath::Auto && path == LinearPath::Simt && !f32_passes && x_parts_ &&
      x_parts_eligible(wr, o, K, G))
    path = LinearPath::XParts;
  if (path == LinearPath::XParts && !x_parts_eligible(wr, o, K, G))
    fail("linear: path (g) (x's bf16 parts on the bf16 GEMM) needs a BF16 weight, an FP4 one or an FP8 one with "
         "ue8m0 scales, no act_fp8 or bf16_weight, one group and K % 16 == 0 (weight '{}' [{}, {}], {} group(s))",
         w.name, w.rows(), K, G);
  if (path == LinearPath::F32Mma || f32_passes) {
    for (int64_t n0 = 0; n0 < N; n0 += k::kF32MmaMaxRows) {  // one pass below 65 rows
      k::LinearArgs p = a;
      p.x += n0 * a.ldx;
      p.y += n0 * a.ldy;
      p.nrows = std::min<int64_t>(N - n0, k::kF32MmaMaxRows);
      const int splits = k::f32_mma_splits(p, info_.multiprocessors);
      check_launch(k::linear_f32_mma(p, wr, splits, partials(splits), stream_), "linear (f32 mma)");
      f32_mma_calls_ += 1;
    }
    return y;
  }
  if (path == LinearPath::Fp8) {
    if (!fp8_ok)
      fail("linear: the FP8 tensor-core path needs an sm_90 device (this is {}), act_fp8 without bf16_weight, an FP8 "
           "weight, K % 128 == 0 and R % 64 == 0 (weight '{}' [{}, {}], {} group(s))",
           info_.arch, w.name, w.rows(), K, G);
    Tensor q = alloc(ElemType::I32, {(N * in + 3) / 4});  // e4m3 codes, row stride `in`
    Tensor sx = alloc(ElemType::F32, {N, in / 128});
    auto* codes = static_cast<uint8_t*>(dev_ptr(q));
    check_launch(k::act_quant_fp8(src, in, N, in, codes, in, dev_f32(sx), stream_), "linear act_fp8 (fp8)");
    const k::Fp8Tiles tiles = k::fp8_mma_tiles(a, fp8_large_tiles_);
    const int splits = k::fp8_mma_splits(a, tiles, info_.multiprocessors);
    check_launch(k::linear_fp8_mma(a, codes, in, dev_f32(sx), wr, tiles, splits, partials(splits), stream_),
                 "linear (fp8 mma)");
    return y;
  }
  // The product sees the FP8 round trip of x, per group's K blocks: x's copy where its producer
  // wrote one (set_norm_act_fp8: the groups' blocks are its rows' when K % 128 == 0); else the GEMV
  // applies it while it stages x (no launch, no copy), where x fits its shared memory; else a
  // quantized copy first.
  Tensor quantized;
  const float* copy = o.act_fp8 && (G == 1 || K % 128 == 0) ? act_fp8_copy(x, in) : nullptr;
  if (copy) {
    a.x = copy;
  } else if (o.act_fp8 && N > 0 && K > 0) {
    a.quant_x = path == LinearPath::Gemv && fused_act_quant_ && k::gemv_quant_x_ok(a);
    if (!a.quant_x) {
      quantized = alloc(ElemType::F32, {N, in});
      check_launch(k::quant_blocks(dev_f32(quantized), src, N * G, K, K, 128, false, stream_), "linear act_fp8");
      a.x = dev_f32(quantized);
    }
  }

  switch (path) {
    case LinearPath::Gemv:
      if (pending) {  // linear_pair launches it (after quant_blocks, if any: quantized stays alive)
        *pending = {{a, wr}, quantized, true};
        break;
      }
      check_launch(k::linear_gemv(a, wr, 2 * static_cast<int64_t>(info_.multiprocessors), stream_), "linear (gemv)");
      break;
    case LinearPath::XParts:  // (g): x as its three bf16 parts, 3K columns a row (eligibility checked above)
    case LinearPath::Mma: {  // on HIP, MFMA only once it passed its self-check (gpu_mfma_check.cpp)
      // x rounded to bf16 once, not once per weight tile (PERF.md v18), where the tiles take it
      a.x_parts = path == LinearPath::XParts ? 3 : 1;
      const bool copy = a.x_parts == 3 || (k::mma_takes_bf16_x(wr.format, K) && wr.cols == K);
      const Tensor xb = copy ? bf16_copy(a.x, a.ldx, N, in, &a.xb, a.x_parts) : Tensor();
      a.ldxb = in * a.x_parts;
      x_parts_calls_ += a.x_parts == 3;
      check_launch(mma_matrix_ok() ? k::linear_mma(a, wr, stream_) : k::linear_mma_simt(a, wr, stream_),
                   "linear (bf16 mma)");
      gemm_pipe_calls_ += a.pipe && k::mma_pipelined(a, wr);
      break;
    }
    case LinearPath::CpuOrder: check_launch(k::linear_cpu_order(a, wr, stream_), "linear (cpu order)"); break;
    case LinearPath::Auto:
    case LinearPath::Fp8:     // handled above
    case LinearPath::F32Mma:  // handled above
    case LinearPath::Simt: check_launch(k::linear_simt(a, wr, stream_), "linear (simt)"); break;
  }
  return y;
}

Tensor GpuBackend::bf16_copy(const float* x, int64_t ldx, int64_t rows, int64_t cols, const uint16_t** out, int parts) {
  Tensor xb = alloc(ElemType::F32, {(rows * cols * parts + 1) / 2});
  auto* bits = static_cast<uint16_t*>(dev_ptr(xb));
  check_launch(parts == 3 ? k::bf16_parts_rows(x, ldx, rows, cols, bits, stream_)
                          : k::bf16_rows(x, ldx, rows, cols, bits, stream_),
               "x to bf16 (bf16 mma)");
  *out = bits;
  return xb;
}

}  // namespace plumb::gpu

// GPU backend: mHC hc_pre / hc_post / hc_head (MODEL-SPEC 3.2); kernels in kernels/hc.cu; the
// op's checks in op_checks.h.
#include "plumb/backend/gpu/gpu_backend.h"
#include "plumb/backend/gpu/kernels/hc.h"
#include "plumb/util/error.h"

namespace plumb::gpu {
namespace {

// base and scale are read by flat index (as the CPU's decode_all does), whatever their shape.
WeightRef flat(WeightRef w) {
  if (w.format == WFormat::F32 || w.format == WFormat::BF16) w.rows *= w.cols, w.cols = 1;
  return w;
}

struct HcSite {
  WeightRef fn, base, scale;
};

// The device copies of one site's parameters (check_hc_pre / check_hc_head have checked them)
// and the kernel's own limit.
HcSite load_site(GpuBackend& be, const HcParams& p, int64_t n_out, const char* op) {
  if (n_out > k::kHcMaxOut)
    fail("{}: {} mixes per token exceed the GPU kernel's limit of {} (too many streams)", op, n_out, k::kHcMaxOut);
  return {be.weight(*p.fn), flat(be.weight(*p.base)), flat(be.weight(*p.scale))};
}

}  // namespace

HcPreResult GpuBackend::hc_pre(const Tensor& X, const HcParams& p, Round out) {
  const HcDims d = check_hc_pre(X, p);
  const int64_t N = d.N, hc = d.hc, D = d.D;
  const HcSite s = load_site(*this, p, (2 + hc) * hc, "hc_pre");
  const float* x = dev_f32(X, "hc_pre streams");
  HcPreResult r{alloc(ElemType::F32, {N, D}), alloc(ElemType::F32, {N, hc}), alloc(ElemType::F32, {N, hc, hc})};
  Tensor scratch = alloc(ElemType::F32, {k::hc_mix_scratch_floats(N, hc, D, k::kHcSlice)});
  check_launch(k::hc_mix(x, N, hc, D, s.fn, s.base, s.scale, p.sinkhorn_iters, p.hc_eps, p.norm_eps,
                         out == Round::BF16, cpu_order(kHc), k::kHcSlice, dev_f32(r.y), dev_f32(r.post), dev_f32(r.comb),
                         dev_f32(scratch), stream()),
               "hc_pre");
  return r;
}

bool GpuBackend::hc_mix_norm_applies(const HcDims& d, const WeightRef* w, NormMath math) {
  return hc_norm_ && d.N > 0 && !cpu_order(kHc) && !cpu_order(kNorm) &&
         k::hc_mix_norm_ok(d.hc, d.D, w, math == NormMath::BF16Steps);
}

Tensor GpuBackend::hc_mix_norm(const Tensor& X, const HcDims& d, const HcParams& p, const WeightView* weight,
                               const WeightRef* w, float eps, NormMath math, Round out, float* post, float* comb,
                               const char* op) {
  const int64_t N = d.N, hc = d.hc, D = d.D;
  const bool steps = math == NormMath::BF16Steps;
  const HcSite s = load_site(*this, p, post ? (2 + hc) * hc : hc, op);
  Tensor y = alloc(ElemType::F32, {N, D});
  check_rms_norm(y, weight, math);
  Tensor scratch = alloc(ElemType::F32, {k::hc_mix_scratch_floats(N, hc, D, k::kHcSlice)});
  Tensor q = norm_copy_buffer(N, D, w, steps);  // as rms_norm writes it
  check_launch(k::hc_mix_norm(dev_f32(X, "hc streams"), N, hc, D, s.fn, s.base, s.scale, p.sinkhorn_iters, p.hc_eps,
                              p.norm_eps, out == Round::BF16, k::kHcSlice, post, comb, dev_f32(scratch), w, eps, steps,
                              out == Round::BF16, dev_f32(y), q.defined() ? dev_f32(q) : nullptr, stream()),
               op);
  static_cast<GpuStorage*>(y.storage())->act_fp8 = std::move(q);
  ++hc_norm_launches_;
  return y;
}

HcPreResult GpuBackend::hc_pre_norm(const Tensor& X, const HcParams& p, const WeightView* weight, float eps,
                                    NormMath math, Round out) {
  const HcDims d = check_hc_pre(X, p);
  const WeightRef* w = weight ? &this->weight(*weight) : nullptr;
  if (!hc_mix_norm_applies(d, w, math)) return Backend::hc_pre_norm(X, p, weight, eps, math, out);
  HcPreResult r{Tensor{}, alloc(ElemType::F32, {d.N, d.hc}), alloc(ElemType::F32, {d.N, d.hc, d.hc})};
  r.y = hc_mix_norm(X, d, p, weight, w, eps, math, out, dev_f32(r.post), dev_f32(r.comb), "hc_pre_norm");
  return r;
}

Tensor GpuBackend::hc_head_norm(const Tensor& X, const HcParams& p, const WeightView* weight, float eps, NormMath math,
                                Round out) {
  const HcDims d = check_hc_head(X, p);
  const WeightRef* w = weight ? &this->weight(*weight) : nullptr;
  if (!hc_mix_norm_applies(d, w, math)) return Backend::hc_head_norm(X, p, weight, eps, math, out);
  return hc_mix_norm(X, d, p, weight, w, eps, math, out, nullptr, nullptr, "hc_head_norm");
}

Tensor GpuBackend::hc_post(const Tensor& out, const Tensor& X, const Tensor& post, const Tensor& comb, Round rnd) {
  const HcDims d = check_hc_post(out, X, post, comb);
  const int64_t N = d.N, hc = d.hc, D = d.D;
  Tensor y = alloc(ElemType::F32, {N, hc, D});
  check_launch(k::hc_post(dev_f32(out, "hc_post output"), dev_f32(X, "hc_post streams"), dev_f32(post, "hc_post post"),
                          dev_f32(comb, "hc_post comb"), N, hc, D, rnd == Round::BF16, dev_f32(y), stream()),
               "hc_post");
  return y;
}

Tensor GpuBackend::hc_head(const Tensor& X, const HcParams& p, Round out) {
  const HcDims d = check_hc_head(X, p);
  const int64_t N = d.N, hc = d.hc, D = d.D;
  const HcSite s = load_site(*this, p, hc, "hc_head");
  const float* x = dev_f32(X, "hc_head streams");
  Tensor y = alloc(ElemType::F32, {N, D});
  Tensor scratch = alloc(ElemType::F32, {k::hc_mix_scratch_floats(N, hc, D, k::kHcSlice)});
  check_launch(k::hc_mix(x, N, hc, D, s.fn, s.base, s.scale, 0, p.hc_eps, p.norm_eps, out == Round::BF16, cpu_order(kHc),
                         k::kHcSlice, dev_f32(y), nullptr, nullptr, dev_f32(scratch), stream()),
               "hc_head");
  return y;
}

}  // namespace plumb::gpu

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
  WeightRef w[3];  // fn, base, scale
};

// The device copies of one site's parameters (check_hc_pre / check_hc_head have checked them)
// and the kernel's own limit.
HcSite load_site(GpuBackend& be, const HcParams& p, int64_t n_out, const char* op) {
  if (n_out > k::kHcMaxOut)
    fail("{}: {} mixes per token exceed the GPU kernel's limit of {} (too many streams)", op, n_out, k::kHcMaxOut);
  return {be.weight(*p.fn), flat(be.weight(*p.base)), flat(be.weight(*p.scale))};
}

}  // namespace

// With before.out: hc_post(before) into X first. One launch where k::hc_mix_one_launch takes the
// call (the switch on, the fast order, a decode step's few tokens), else hc_post's and hc_mix's.
void GpuBackend::hc_mix_launch(const k::HcPostInputs& before, float* X, int64_t N, int64_t hc, int64_t D,
                               const WeightRef (&site)[3], const HcParams& p, int64_t iters, Round out, float* y,
                               float* post, float* comb, const char* op) {
  Tensor scratch = alloc(ElemType::F32, {k::hc_mix_scratch_floats(N, hc, D, k::kHcSlice)});
  const bool bf16 = out == Round::BF16;
  if (hc_one_launch_ && !cpu_order(kHc) && k::hc_mix_one_launch_ok(N, post ? hc * (2 + hc) : hc)) {
    if (!hc_counts_.defined()) {
      const std::vector<unsigned> zero(static_cast<std::size_t>(k::kHcGroupFrom), 0u);
      hc_counts_ = upload(zero.data(), zero.size() * sizeof(unsigned));
    }
    check_launch(k::hc_mix_one_launch(before, X, N, hc, D, site[0], site[1], site[2], iters, p.hc_eps, p.norm_eps, bf16,
                                      k::kHcSlice, y, post, comb, dev_f32(scratch),
                                      static_cast<unsigned*>(dev_ptr(hc_counts_)), stream()),
                 op);
    ++hc_one_launches_;
    return;
  }
  if (before.out)
    check_launch(k::hc_post(before.out, before.X, before.post, before.comb, N, hc, D, before.bf16_out, X, stream()), op);
  check_launch(k::hc_mix(X, N, hc, D, site[0], site[1], site[2], iters, p.hc_eps, p.norm_eps, bf16, cpu_order(kHc),
                         k::kHcSlice, y, post, comb, dev_f32(scratch), stream()),
               op);
}

HcPreResult GpuBackend::hc_pre(const Tensor& X, const HcParams& p, Round out) {
  const HcDims d = check_hc_pre(X, p);
  const int64_t N = d.N, hc = d.hc, D = d.D;
  const HcSite s = load_site(*this, p, (2 + hc) * hc, "hc_pre");
  float* x = dev_f32(X, "hc_pre streams");
  HcPreResult r{alloc(ElemType::F32, {N, D}), alloc(ElemType::F32, {N, hc}), alloc(ElemType::F32, {N, hc, hc})};
  hc_mix_launch({}, x, N, hc, D, s.w, p, p.sinkhorn_iters, out, dev_f32(r.y), dev_f32(r.post), dev_f32(r.comb),
                "hc_pre");
  return r;
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

HcPostPreResult GpuBackend::hc_post_pre(const Tensor& out, const Tensor& X, const Tensor& post, const Tensor& comb,
                                        const HcParams& p, Round r) {
  const HcDims d = check_hc_post(out, X, post, comb);
  check_hc_pre(X, p);  // the streams after have X's shape
  const int64_t N = d.N, hc = d.hc, D = d.D;
  const HcSite s = load_site(*this, p, (2 + hc) * hc, "hc_post_pre");
  const k::HcPostInputs before{dev_f32(out, "hc_post output"), dev_f32(X, "hc_post streams"),
                               dev_f32(post, "hc_post post"), dev_f32(comb, "hc_post comb"), r == Round::BF16};
  HcPostPreResult res{alloc(ElemType::F32, {N, hc, D}),
                      {alloc(ElemType::F32, {N, D}), alloc(ElemType::F32, {N, hc}), alloc(ElemType::F32, {N, hc, hc})}};
  hc_mix_launch(before, dev_f32(res.X), N, hc, D, s.w, p, p.sinkhorn_iters, r, dev_f32(res.pre.y),
                dev_f32(res.pre.post), dev_f32(res.pre.comb), "hc_post_pre");
  return res;
}

Tensor GpuBackend::hc_head(const Tensor& X, const HcParams& p, Round out) {
  const HcDims d = check_hc_head(X, p);
  const int64_t N = d.N, hc = d.hc, D = d.D;
  const HcSite s = load_site(*this, p, hc, "hc_head");
  Tensor y = alloc(ElemType::F32, {N, D});
  hc_mix_launch({}, dev_f32(X, "hc_head streams"), N, hc, D, s.w, p, 0, out, dev_f32(y), nullptr, nullptr, "hc_head");
  return y;
}

}  // namespace plumb::gpu

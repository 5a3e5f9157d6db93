#include "op_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "bench_probe.h"
#include "op_cases.h"
#include "op_weights.h"
#include "paged_util.h"
#include "plumb/util/error.h"
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
#include "plumb/backend/gpu/gpu_backend.h"
#endif

namespace plumb::bench {
namespace {

using namespace plumb::test;  // the case lists and the weight builders
using backend::Backend;
using backend::Batch;
using backend::ElemType;
using backend::Round;
using backend::Shape;
using backend::Tensor;

// One timed call of an op bound to its inputs (inputs live as long as the closure).
using Bound = std::function<void()>;
// A case: its printable name and how to build its inputs on a backend (built only when selected).
struct TimedCase {
  std::string op, params;
  std::function<Bound(Backend&, std::mt19937_64&)> bind;
  int64_t passes = 1;       // the call runs this many passes over the op: the time reported is per pass
  double pass_bytes = 0.0;  // memory a pass must read at least (0: none stated): printed as GB/s
};

Tensor up(Backend& be, const std::vector<float>& v, Shape s) { return be.from_host(v.data(), std::move(s)); }
Tensor up(Backend& be, const std::vector<int32_t>& v, Shape s) { return be.from_host(v.data(), std::move(s)); }
Tensor rand_tensor(Backend& be, std::mt19937_64& rng, Shape s, float stddev = 1.f) {
  const std::vector<float> v = randn(rng, backend::element_count(s), stddev);
  return up(be, v, std::move(s));
}

// Weights must outlive the calls: each bound case keeps its own (deques: views stay put).
struct Weights {
  std::deque<OwnedWeight> owned;
  std::deque<WeightView> views;
  const WeightView* add(OwnedWeight w, bool f32_scales = false) {
    owned.push_back(std::move(w));
    views.push_back(f32_scales ? f32_scaled_view(owned.back()) : owned.back().view());
    return &views.back();
  }
};

void add_linear(std::vector<TimedCase>& out) {
  struct Variant {
    const char* name;
    bool fp4, fp8, act_fp8;
    Round round;
  };
  const Variant variants[] = {{"bf16 reference", false, false, false, Round::None},
                              {"fp8 faithful", false, true, true, Round::BF16},
                              {"fp4 faithful", true, false, true, Round::BF16}};
  for (const LinearCase& c : linear_cases())
    for (const Variant& v : variants) {
      if (v.fp4 && c.K % 2 != 0) continue;
      out.push_back({"linear", c.name() + " " + v.name, [c, v](Backend& be, std::mt19937_64& rng) -> Bound {
                       const std::vector<float> wv = randn(rng, c.G * c.R * c.K, 0.05f);
                       auto w = std::make_shared<Weights>();
                       const WeightView* view = w->add(v.fp4   ? fp4_weight(c.G * c.R, c.K, wv)
                                                       : v.fp8 ? fp8_weight(c.G * c.R, c.K, wv)
                                                               : bf16_weight({c.G * c.R, c.K}, wv));
                       const Tensor x = rand_tensor(be, rng, {c.N, c.G * c.K});
                       const backend::LinearOpts o{c.G, v.act_fp8, v.round};
                       return [&be, w, view, x, o] { be.linear(x, *view, o); };
                     }});
    }
}

// The linear() shapes of one V4-Flash decode step (MODEL-SPEC 2.3 and 6; bench/configs) at the
// decode bench's batch sizes, with the step's options (FP8: act-quant + bf16 out; bf16 weights in
// f32). Each weight comes in as many copies as exceed 160 MB (the H200's L2 is 50 MB) and one
// timed call runs every copy once, back to back as in a step: "us" is per weight pass, and the
// weight bytes over it are the bandwidth reached (`--filter linear_decode`).
void add_linear_decode(std::vector<TimedCase>& out) {
  struct Shape4 {
    const char* what;
    int64_t R, K, G;
    bool fp8;
  };
  const Shape4 shapes[] = {{"wq_a", 1024, 4096, 1, true},           {"wkv", 512, 4096, 1, true},
                           {"wq_b", 32768, 1024, 1, true},          {"wo_a", 1024, 4096, 8, true},
                           {"wo_b", 4096, 8192, 1, true},           {"shared w1", 2048, 4096, 1, true},
                           {"shared w2", 4096, 2048, 1, true},      {"indexer wq_b", 8192, 1024, 1, true},
                           {"compressor wkv", 1024, 4096, 1, false}, {"router gate", 256, 4096, 1, false},
                           {"head", 129280, 4096, 1, false}};
  for (const int64_t n : {1, 8, 32})
    for (const Shape4& c : shapes) {
      if (n > 1 && c.R > 100000) continue;  // the head (1 GB): N = 1 only, its 530M random values take seconds
      const int64_t bytes = c.G * c.R * c.K * (c.fp8 ? 1 : 2);
      const int64_t copies = std::max<int64_t>(1, (160'000'000 + bytes - 1) / bytes);
      char name[160];
      std::snprintf(name, sizeof name, "%s N=%lld R=%lld K=%lld G=%lld %s x%lld (%.1f MB)", c.what,
                    static_cast<long long>(n), static_cast<long long>(c.R), static_cast<long long>(c.K),
                    static_cast<long long>(c.G), c.fp8 ? "fp8" : "bf16", static_cast<long long>(copies), bytes / 1e6);
      out.push_back({"linear_decode", name, [c, n, copies](Backend& be, std::mt19937_64& rng) -> Bound {
                       auto w = std::make_shared<Weights>();
                       const std::vector<float> wv = randn(rng, c.G * c.R * c.K, 0.05f);
                       const OwnedWeight one = c.fp8 ? fp8_weight(c.G * c.R, c.K, wv) : bf16_weight({c.G * c.R, c.K}, wv);
                       std::vector<const WeightView*> views;  // same values, separate memory
                       for (int64_t i = 0; i < copies; ++i) views.push_back(w->add(one));
                       const Tensor x = rand_tensor(be, rng, {n, c.G * c.K});
                       const backend::LinearOpts o{c.G, c.fp8, c.fp8 ? Round::BF16 : Round::None};
                       return [&be, w, views, x, o] {
                         for (const WeightView* v : views) be.linear(x, *v, o);
                       };
                     },
                     copies, static_cast<double>(bytes)});
    }
}

void add_elementwise(std::vector<TimedCase>& out) {
  for (const Shape& s : norm_shapes())
    out.push_back({"rms_norm", shape_name(s) + " weighted", [s](Backend& be, std::mt19937_64& rng) -> Bound {
                     auto w = std::make_shared<Weights>();
                     const WeightView* view = w->add(bf16_weight({s.back()}, randn(rng, s.back(), 0.1f, 1.f)));
                     const Tensor x = rand_tensor(be, rng, s);
                     return [&be, w, view, x] { be.rms_norm(x, view, 1e-6f, backend::NormMath::F32, Round::None); };
                   }});
  for (const RopeCase& c : rope_cases())
    out.push_back({"rope", c.name(), [c](Backend& be, std::mt19937_64& rng) -> Bound {
                     std::vector<float> f(static_cast<std::size_t>(c.F));
                     for (int64_t i = 0; i < c.F; ++i) f[i] = static_cast<float>(std::pow(10000.0, -1.0 * i / c.F));
                     std::vector<int32_t> pos(static_cast<std::size_t>(c.N));
                     std::iota(pos.begin(), pos.end(), 1000);
                     const Tensor x = rand_tensor(be, rng, {c.N, c.H, c.Dh}), p = up(be, pos, {c.N}), fr = up(be, f, {c.F});
                     return [&be, x, p, fr] { be.rope(x, p, fr, false, Round::None); };
                   }});
  for (const QuantFp8Case& c : quant_fp8_cases())
    out.push_back({"quant_fp8", c.name(), [c](Backend& be, std::mt19937_64& rng) -> Bound {
                     const Tensor x = rand_tensor(be, rng, {c.N, c.D}, 3.f);
                     return [&be, x, c] { be.quant_fp8(x, c.cols, c.block); };
                   }});
  for (const Shape& s : quant_fp4_shapes())
    out.push_back({"quant_fp4", shape_name(s) + " block 32", [s](Backend& be, std::mt19937_64& rng) -> Bound {
                     const Tensor x = rand_tensor(be, rng, s, 2.f);
                     return [&be, x] { be.quant_fp4(x, 32); };
                   }});
  for (const Shape& s : hadamard_shapes())
    out.push_back({"hadamard", shape_name(s), [s](Backend& be, std::mt19937_64& rng) -> Bound {
                     const Tensor x = rand_tensor(be, rng, s);
                     return [&be, x] { be.hadamard(x, Round::None); };
                   }});
}

void add_hc(std::vector<TimedCase>& out) {
  constexpr int64_t hc = 4;
  for (const HcCase& c : hc_cases()) {
    // hc_pre (the site, 20 Sinkhorn iterations) and hc_head share the stream tensor's shape.
    for (const bool head : {false, true})
      out.push_back({head ? "hc_head" : "hc_pre", c.name(), [c, head](Backend& be, std::mt19937_64& rng) -> Bound {
                       const int64_t W = hc * c.D, n_out = head ? hc : (2 + hc) * hc;
                       auto w = std::make_shared<Weights>();
                       const WeightView* fn = w->add(f32_weight({n_out, W}, randn(rng, n_out * W, 0.02f)));
                       const WeightView* base = w->add(f32_weight({n_out}, randn(rng, n_out, 0.5f)));
                       const WeightView* scale = w->add(f32_weight({head ? 1 : 3}, randn(rng, head ? 1 : 3, 0.2f)));
                       const backend::HcParams p{fn, base, scale, head ? 0 : 20, 1e-6f, 1e-6f};
                       const Tensor X = rand_tensor(be, rng, {c.N, hc, c.D});
                       if (head) return [&be, w, p, X] { be.hc_head(X, p, Round::None); };
                       return [&be, w, p, X] { be.hc_pre(X, p, Round::None); };
                     }});
    out.push_back({"hc_post", c.name(), [c](Backend& be, std::mt19937_64& rng) -> Bound {
                     const Tensor o = rand_tensor(be, rng, {c.N, c.D}), X = rand_tensor(be, rng, {c.N, hc, c.D}),
                                  post = rand_tensor(be, rng, {c.N, hc}), comb = rand_tensor(be, rng, {c.N, hc, hc});
                     return [&be, o, X, post, comb] { be.hc_post(o, X, post, comb, Round::None); };
                   }});
  }
}

void add_compress_and_indexer(std::vector<TimedCase>& out) {
  for (const CompressCase& c : compress_cases())
    out.push_back({"compress", c.name() + " prefill of 2 windows + 3", [c](Backend& be, std::mt19937_64& rng) -> Bound {
                     const int64_t cm = c.ratio == 4 ? 2 : 1, C = cm * c.d, len = 2 * c.ratio + 3;
                     auto w = std::make_shared<Weights>();
                     const WeightView* ape = w->add(f32_weight({c.ratio, C}, randn(rng, c.ratio * C, 0.5f)));
                     auto states = std::make_shared<std::vector<backend::CompressorState>>();
                     states->push_back({be.full(ElemType::F32, {cm * c.ratio, C}, 0.f),
                                        be.full(ElemType::F32, {cm * c.ratio, C}, -INFINITY)});
                     const Tensor kv = rand_tensor(be, rng, {len, C}), score = rand_tensor(be, rng, {len, C}, 2.f);
                     const Batch b = make_batch({0}, {len});
                     const backend::CompressorParams p{c.ratio, c.d, ape};
                     return [&be, w, states, kv, score, b, p] { be.compress(kv, score, b, *states, p, Round::None); };
                   }});
  for (const IndexerCase& c : indexer_cases())
    out.push_back({"indexer_topk", c.name(), [c](Backend& be, std::mt19937_64& rng) -> Bound {
                     const Batch b = make_batch(c.starts, c.lens);
                     std::vector<std::vector<float>> keys;
                     for (std::size_t s = 0; s < c.starts.size(); ++s)
                       keys.push_back(randn(rng, ((c.starts[s] + c.lens[s]) / c.ratio + 2) * c.di));
                     const Paged k = paged(be, keys, c.di, c.per_block, 7);
                     const Tensor q = rand_tensor(be, rng, {b.rows, c.H, c.di}), w = rand_tensor(be, rng, {b.rows, c.H});
                     const backend::IndexerParams p{c.ratio, c.top_k, 0.5f, c.round};
                     return [&be, q, w, b, k, p] { be.indexer_topk(q, w, b, k.cache, k.tables, p); };
                   }});
}

void add_attention(std::vector<TimedCase>& out) {
  for (const AttentionCase& c : sparse_attention_cases())
    out.push_back({"sparse_attention", c.name(), [c](Backend& be, std::mt19937_64& rng) -> Bound {
                     const Batch b = make_batch(c.starts, c.lens);
                     auto w = std::make_shared<Weights>();
                     const WeightView* sink = w->add(f32_weight({c.H}, randn(rng, c.H)));
                     std::vector<Tensor> rings;
                     std::vector<std::vector<float>> entries;
                     std::vector<int32_t> sel;
                     for (std::size_t s = 0; s < c.starts.size(); ++s) {
                       rings.push_back(rand_tensor(be, rng, {c.W, c.Dh}));
                       const int64_t nc = c.ratio ? (c.starts[s] + c.lens[s]) / c.ratio + 1 : 1;
                       entries.push_back(randn(rng, nc * c.Dh));
                       for (int64_t i = 0; c.sel_k > 0 && i < c.lens[s]; ++i) {
                         const int64_t visible = (c.starts[s] + i + 1) / c.ratio;
                         for (int64_t k = 0; k < c.sel_k; ++k) sel.push_back(k < visible ? static_cast<int32_t>(k) : -1);
                       }
                     }
                     const Paged comp = paged(be, entries, c.Dh, c.per_block, 7);
                     const Tensor q = rand_tensor(be, rng, {b.rows, c.H, c.Dh}), kv = rand_tensor(be, rng, {b.rows, c.Dh});
                     const Tensor st = c.sel_k > 0 ? up(be, sel, {b.rows, c.sel_k}) : Tensor();
                     const backend::AttentionParams p{c.W, c.ratio, sink, 1.f / std::sqrt(static_cast<float>(c.Dh)),
                                                      c.bf16p, c.prob_block, c.out};
                     return [&be, w, q, kv, b, rings, comp, st, p, c] {
                       backend::AttentionParams call = p;
                       call.prefill = c.prefill;  // (a span: into this lambda's own copy of the case)
                       be.sparse_attention(q, kv, b, rings, comp.cache, comp.tables, st.defined() ? &st : nullptr, call);
                     };
                   }});
  for (const MlaCase& c : mla_cases())
    for (const Round r : {Round::None, Round::BF16})
      out.push_back({"mla_attention", c.name() + (r == Round::BF16 ? " bf16" : ""),
                     [c, r](Backend& be, std::mt19937_64& rng) -> Bound {
                       const Batch b = make_batch(c.starts, c.lens);
                       std::vector<std::vector<float>> lat, kpe;
                       for (std::size_t s = 0; s < c.starts.size(); ++s) {
                         lat.push_back(randn(rng, (c.starts[s] + c.lens[s]) * c.R));
                         kpe.push_back(randn(rng, (c.starts[s] + c.lens[s]) * c.P));
                       }
                       const PagedMla caches = paged_mla(be, lat, c.R, kpe, c.P, c.per_block, 7);
                       const Tensor ql = rand_tensor(be, rng, {b.rows, c.H, c.R}, 0.1f),
                                    qp = rand_tensor(be, rng, {b.rows, c.H, c.P}, 0.1f);
                       const backend::MlaParams p{0.0722f, r};
                       return [&be, ql, qp, b, caches, p] {
                         be.mla_attention(ql, qp, b, caches.latent, caches.k_pe, caches.tables, p);
                       };
                     }});
}

// K distinct experts per row (rotations of a random start), as route() returns them.
std::vector<int32_t> distinct_experts(std::mt19937_64& rng, int64_t N, int64_t E, int64_t K) {
  std::vector<int32_t> ex;
  std::uniform_int_distribution<int64_t> first(0, E - 1);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t f = first(rng);
    for (int64_t k = 0; k < K; ++k) ex.push_back(static_cast<int32_t>((f + k) % E));
  }
  return ex;
}

void add_moe(std::vector<TimedCase>& out) {
  for (const RouteCase& c : route_cases())
    out.push_back({"route", c.name(), [c](Backend& be, std::mt19937_64& rng) -> Bound {
                     constexpr int64_t vocab = 1000;
                     auto w = std::make_shared<Weights>();
                     const WeightView* gate = w->add(bf16_weight({c.E, c.D}, randn(rng, c.E * c.D, 0.3f)));
                     const WeightView* bias = w->add(f32_weight({c.E}, randn(rng, c.E, 0.3f)));
                     OwnedWeight t2e = f32_weight({vocab, c.K}, std::vector<float>(static_cast<std::size_t>(vocab * c.K)));
                     t2e.dtype = DType::I32;  // [vocab, K] expert ids
                     const std::vector<int32_t> table = distinct_experts(rng, vocab, c.E, c.K);
                     std::memcpy(t2e.data.data(), table.data(), t2e.data.size());
                     const WeightView* hash = w->add(std::move(t2e));
                     backend::RouteParams p;
                     p.gate = gate;
                     p.bias = c.bias ? bias : nullptr;
                     p.tid2eid = c.hash ? hash : nullptr;
                     p.top_k = c.K;
                     p.route_scale = c.scale;
                     p.scoring = c.scoring;
                     p.n_group = c.groups;
                     p.topk_group = c.topk_groups;
                     std::vector<int32_t> ids(static_cast<std::size_t>(c.N));
                     std::iota(ids.begin(), ids.end(), 7);
                     const Tensor x = rand_tensor(be, rng, {c.N, c.D}), id = up(be, ids, {c.N});
                     return [&be, w, x, id, p] { be.route(x, id, p); };
                   }});
  std::vector<MoeCase> cases = moe_small_cases();
  for (const MoeCase& c : moe_real_cases()) cases.push_back(c);
  for (const MoeCase& c : cases)
    out.push_back({"moe", c.name() + " faithful", [c](Backend& be, std::mt19937_64& rng) -> Bound {
                     const std::string f = c.format;
                     auto w = std::make_shared<Weights>();
                     auto make = [&](int64_t R, int64_t K) {
                       const std::vector<float> v = randn(rng, R * K, 0.05f);
                       if (f == "fp4") return w->add(fp4_weight(R, K, v));
                       if (f == "fp8") return w->add(fp8_weight(R, K, v));
                       if (f == "fp8f32") return w->add(fp8_weight_f32_scales(R, K, v, rng), true);
                       return w->add(bf16_weight({R, K}, v));
                     };
                     std::vector<backend::SwiGluWeights> sets;
                     for (int64_t s = 0; s <= c.distinct; ++s) {
                       const WeightView *w1 = make(c.I, c.D), *w2 = make(c.D, c.I), *w3 = make(c.I, c.D);
                       sets.push_back({w1, w2, w3});
                     }
                     std::vector<backend::SwiGluWeights> experts;
                     for (int64_t e = 0; e < c.E; ++e) experts.push_back(sets[static_cast<std::size_t>(e % c.distinct)]);
                     std::vector<float> wt(static_cast<std::size_t>(c.N * c.K), 0.3f);
                     const backend::Routing r{up(be, distinct_experts(rng, c.N, c.E, c.K), {c.N, c.K}),
                                              up(be, wt, {c.N, c.K})};
                     backend::MoeParams p{10.f, true, true, Round::BF16};  // V4's faithful experts
                     if (f == "fp8f32") {                                // V3's
                       p = {0.f, true, false, Round::BF16};
                       p.bf16_weight = true, p.silu_out = Round::BF16, p.weight_after = true;
                       p.accumulate = Round::BF16;
                     }
                     const Tensor x = rand_tensor(be, rng, {c.N, c.D}, 2.f);
                     return [&be, w, x, r, experts, shared = sets.back(), p] { be.moe(x, r, experts, shared, p); };
                   }});
}

// Median microseconds of `reps` calls after `warmup`: device events on the backend's stream when
// it is a GPU backend, else the host clock around the call and a synchronize.
class OpTimer {
 public:
  explicit OpTimer(Backend& be) : be_(be) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
    gpu_ = dynamic_cast<gpu::GpuBackend*>(&be);
    if (gpu_) {
      gpu::check(gpuEventCreate(&start_), "bench event");
      gpu::check(gpuEventCreate(&stop_), "bench event");
    }
#endif
  }
  ~OpTimer() {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
    if (gpu_) (void)gpuEventDestroy(start_), (void)gpuEventDestroy(stop_);
#endif
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;
  bool device_events() const {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
    return gpu_ != nullptr;
#else
    return false;
#endif
  }

  double median_us(const Bound& call, int64_t warmup, int64_t reps) {
    for (int64_t i = 0; i < warmup; ++i) call();
    be_.synchronize();
    std::vector<double> us;
    for (int64_t i = 0; i < reps; ++i) us.push_back(time_one(call));
    return median(us);
  }

 private:
  double time_one(const Bound& call) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
    if (gpu_) {
      gpu::check(gpuEventRecord(start_, gpu_->stream()), "bench event record");
      call();
      gpu::check(gpuEventRecord(stop_, gpu_->stream()), "bench event record");
      gpu::check(gpuEventSynchronize(stop_), "bench event synchronize");
      float ms = 0;
      gpu::check(gpuEventElapsedTime(&ms, start_, stop_), "bench event elapsed");
      return ms * 1e3;
    }
#endif
    const auto t0 = std::chrono::steady_clock::now();
    call();
    be_.synchronize();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }

  Backend& be_;
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
  gpu::GpuBackend* gpu_ = nullptr;
  gpuEvent_t start_{}, stop_{};
#endif
};

}  // namespace

nlohmann::json run_op_bench(Backend& be, const OpBenchOptions& o) {
  if (o.reps <= 0 || o.warmup < 0) fail("--ops: needs a positive number of repetitions and no negative warm-up");
  std::vector<TimedCase> cases;
  add_linear(cases);
  add_linear_decode(cases);
  add_elementwise(cases);
  add_hc(cases);
  add_compress_and_indexer(cases);
  add_attention(cases);
  add_moe(cases);
  OpTimer timer(be);
  std::printf("| op | case | median us | GB/s |\n|---|---|---|---|\n");
  nlohmann::json rec = nlohmann::json::array();
  std::mt19937_64 rng(1);
  int64_t selected = 0;
  for (const TimedCase& c : cases) {
    const std::string name = c.op + " " + c.params;
    if (name.find(o.filter) == std::string::npos) continue;
    ++selected;
    const double us = timer.median_us(c.bind(be, rng), o.warmup, o.reps) / static_cast<double>(c.passes);
    const double gbs = c.pass_bytes > 0 ? c.pass_bytes / (us * 1e3) : 0.0;
    std::printf("| %s | %s | %.1f | %s |\n", c.op.c_str(), c.params.c_str(), us,
                gbs > 0 ? std::to_string(static_cast<int64_t>(gbs)).c_str() : "");
    std::fflush(stdout);
    rec.push_back({{"op", c.op}, {"case", c.params}, {"median_us", us}, {"reps", o.reps},
                   {"clock", timer.device_events() ? "device events" : "host"}});
    if (gbs > 0) rec.back()["gb_per_s"] = gbs;
  }
  if (selected == 0) fail("--ops: no op case matches the filter '{}'", o.filter);
  return rec;
}

}  // namespace plumb::bench

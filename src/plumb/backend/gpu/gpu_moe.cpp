// GPU backend: MoE routing and the SwiGLU experts (MODEL-SPEC 3.8); kernels in kernels/moe.cu.
// The same function as cpu/cpu_moe.cpp; the op's checks in op_checks.h. route() runs the gate
// product and the per-token selection on the device (hash routing looks tid2eid up on the host,
// where the checkpoint's table lives, through the CPU's hash_experts(), on RouteParams::host_ids
// when the caller gives them, else on the ids copied back). moe() copies the small routing to the
// host, groups the token slots by expert exactly as the CPU does, runs each used expert on its
// gathered rows through linear() (which applies act_fp8 and the rounding like the CPU's GEMMs),
// and accumulates the expert outputs into one f32 sum per token in expert-id order, then adds the
// shared expert. For few tokens (decode) in the fast order it runs the grouped kernels instead
// (kernels/moe_grouped.cu; FP4 experts under act_fp8 on the bf16 tensor cores, kernels/moe_mma.cu):
// the same function with the routing read on the device. For many
// (prefill), the experts whose linear() calls would all take the bf16 GEMM (path (c)) run as one
// grouped GEMM launch per projection (moe_prefill, k::linear_mma_grouped), bitwise the same.
#include <algorithm>
#include <cstring>
#include <vector>

#include "plumb/backend/gpu/gpu_backend.h"
#include "plumb/backend/gpu/kernels/elementwise.h"
#include "plumb/backend/gpu/kernels/linear.h"
#include "plumb/backend/gpu/kernels/memory.h"
#include "plumb/backend/gpu/kernels/moe.h"
#include "plumb/backend/gpu/kernels/moe_grouped.h"
#include "plumb/util/error.h"

namespace plumb::gpu {
namespace {

constexpr int64_t kMaxSelectShared = 48 * 1024;  // static limit of dynamic shared memory per block

}  // namespace

Routing GpuBackend::route(const Tensor& x, const Tensor& ids, const RouteParams& p) {
  const RouteDims d = check_route(x, ids, p);
  const int64_t N = d.N, E = d.E, K = d.K, G = d.G, TG = d.TG;
  if (k::route_select_shared_bytes(E, G, K) > kMaxSelectShared)
    fail("route: {} experts exceed the GPU selection kernel's shared memory", E);
  WeightRef bias = p.bias ? weight(*p.bias) : WeightRef{};
  if (bias.format == WFormat::F32 || bias.format == WFormat::BF16) bias.rows = E, bias.cols = 1;  // flat, as decode_all
  Routing r{alloc(ElemType::I32, {N, K}), alloc(ElemType::F32, {N, K})};
  if (p.tid2eid) {  // hash routing: the table is host memory (the mapped checkpoint)
    std::vector<int32_t> id;
    if (p.host_ids.empty()) {  // (a copy back: the host waits for the device here)
      id.resize(static_cast<std::size_t>(N));
      to_host(ids, id.data());
    }
    const std::vector<int32_t> ex = hash_experts(*p.tid2eid, p.host_ids.empty() ? std::span<const int32_t>(id) : p.host_ids, K, E);
    if (N > 0) {
      copy_in(dev_i32(r.experts), ex.data(), ex.size() * 4, "route: uploading hashed experts");
    }
  }
  // The gate product is the CPU's linear() (a GEMV at decode sizes), in the CPU's order when the
  // gate site asks for it: bf16 rounds the weights and the logits, the V3 release's Gate on bf16
  // tensors.
  const bool bf16 = p.round == Round::BF16;
  LinearOpts lo;
  lo.out = p.round;
  lo.bf16_weight = bf16;
  const Tensor logits = linear_on(x, *p.gate, lo, cpu_order(kGate) ? LinearPath::CpuOrder : linear_path_);
  check_launch(k::route_select(dev_f32(logits), N, E, bias, p.bias != nullptr, p.scoring == Scoring::Sigmoid, G, TG, K,
                               p.route_scale, p.tid2eid != nullptr, bf16, dev_i32(r.experts), dev_f32(r.weights),
                               stream()),
               "route select");
  return r;
}

namespace {

// One SwiGLU expert (intermediate size I, from check_swiglu) on M rows xs [M, D]:
// w2(bf16?(weight * silu(min(g, L)) * clamp(u, -L, L))), each GEMM act-quantized and rounded by
// linear() as the CPU's swiglu() does; the weight is applied after w2 instead (by the
// accumulation) under MoeParams::weight_after, and silu(.) is rounded under silu_out.
Tensor swiglu(GpuBackend& be, const SwiGluWeights& w, int64_t I, const Tensor& xs, int64_t M, const float* row_weight,
              float limit, const MoeParams& p) {
  LinearOpts lo;
  lo.act_fp8 = p.act_fp8;
  lo.bf16_weight = p.bf16_weight;
  lo.out = p.round;
  const auto [g, u] = be.linear_pair(xs, *w.w1, *w.w3, lo);
  Tensor h = be.alloc(ElemType::F32, {M, I});
  be.check_launch(k::swiglu(dev_f32(g, "moe gate product"), dev_f32(u, "moe up product"), M, I,
                            p.weight_after ? nullptr : row_weight, limit, p.silu_out == Round::BF16,
                            p.round == Round::BF16, dev_f32(h), be.stream()),
                  "moe swiglu");
  return be.linear(h, *w.w2, lo);
}

// The views' addresses, shapes and formats, which a cached table must match (callers may pass a
// temporary span, so the span's address alone identifies nothing).
std::vector<uintptr_t> expert_key(std::span<const SwiGluWeights> experts) {
  std::vector<uintptr_t> key;
  key.reserve(experts.size() * 12);
  for (const SwiGluWeights& e : experts)
    for (const WeightView* w : {e.w1, e.w3, e.w2}) {
      if (!w) return {};
      key.insert(key.end(), {reinterpret_cast<uintptr_t>(w->data), reinterpret_cast<uintptr_t>(w->scale),
                             static_cast<uintptr_t>(w->format), static_cast<uintptr_t>(w->numel())});
    }
  return key;
}

}  // namespace

const GpuBackend::ExpertTable& GpuBackend::expert_table(std::span<const SwiGluWeights> experts, int64_t D) {
  // weight() re-uploads a view whose bytes changed under the same address, and then drops every
  // table; a set is rewritten as a whole, so its first weight stands for it.
  weight(*experts.front().w1);
  std::vector<uintptr_t> key = expert_key(experts);
  for (const ExpertTable& t : expert_tables_)
    if (t.key == key) return t;
  ExpertTable t;
  t.key = std::move(key);
  t.experts = static_cast<int64_t>(experts.size());
  std::vector<WeightRef> refs;
  refs.reserve(3 * experts.size());
  for (std::size_t e = 0; e < experts.size(); ++e) {
    const int64_t I = check_swiglu(experts[e], D, fmt::format("routed expert {}", e));
    for (const WeightView* w : {experts[e].w1, experts[e].w3, experts[e].w2}) {
      refs.push_back(weight(*w));
      t.aligned = t.aligned && reinterpret_cast<uintptr_t>(refs.back().data) % 16 == 0 &&
                  reinterpret_cast<uintptr_t>(refs.back().scale) % 16 == 0;
    }
    if (e == 0) t.width = I, t.format = refs.back().format;
    // One kernel instantiation serves all experts: a mixed set keeps the per-expert path.
    if (I != t.width || refs[3 * e].format != t.format || refs[3 * e + 1].format != t.format ||
        refs[3 * e + 2].format != t.format)
      t.uniform = false;
  }
  t.table = upload(refs.data(), refs.size() * sizeof(WeightRef));
  expert_tables_.push_back(std::move(t));
  return expert_tables_.back();
}

// Few tokens: the grouped kernels (kernels/moe_grouped.cu) read the routing on the device, so
// the layer makes no host round trip and three launches for all its routed experts.
const GpuBackend::ExpertTable* GpuBackend::grouped_table(int64_t N, int64_t K, int64_t D,
                                                         std::span<const SwiGluWeights> experts) {
  if (cpu_order(kLinear) || moe_path_ != MoePath::Auto || experts.empty()) return nullptr;
  if (N * K > kGroupedMoeMaxSlots || D > k::kGroupedMoeMaxVector) return nullptr;
  for (const SwiGluWeights& e : experts)  // an absent expert (allowed while no row selects it)
    if (!e.w1 || !e.w2 || !e.w3) return nullptr;
  const ExpertTable& t = expert_table(experts, D);
  return t.uniform && t.width <= k::kGroupedMoeMaxVector ? &t : nullptr;
}

Tensor GpuBackend::moe_grouped(const Tensor& x, const Routing& r, const ExpertTable& t, const MoeDims& d,
                               const Tensor& sh, backend::SideChain& side, const MoeParams& p) {
  const int64_t N = d.N, D = d.D, K = d.K;
  k::GroupedMoeArgs a;
  a.N = N, a.K = K, a.D = D, a.I = t.width, a.E = t.experts;
  a.format = t.format;
  a.table = static_cast<const WeightRef*>(dev_ptr(t.table));
  a.experts = dev_i32(r.experts);
  a.weights = dev_f32(r.weights);
  a.limit = p.swiglu_limit;
  a.round_bf16 = p.round == Round::BF16;
  a.silu_bf16 = p.silu_out == Round::BF16;
  a.round_w = p.bf16_weight;
  a.weight_after = p.weight_after;
  a.accumulate_bf16 = p.accumulate == Round::BF16;
  // The FP8 round trips (1x128 blocks) that linear() gives each expert's w1 and w3 (of x) and w2
  // (of h): applied by the kernels as they stage x and h, or by separate launches (A/B).
  // x's act_fp8 copy where its producer wrote one (set_norm_act_fp8).
  const Tensor x2 = x.reshaped({N, D});
  const float* copy = p.act_fp8 ? act_fp8_copy(x2, D) : nullptr;
  const bool separate = p.act_fp8 && !fused_act_quant_;
  a.quant_x = p.act_fp8 && fused_act_quant_ && !copy;
  a.quant_h = p.act_fp8;
  a.quant_h_launch = separate;
  const Tensor xq = separate && !copy ? quant_fp8(x2, D, 128) : Tensor();
  a.x = copy ? copy : separate ? dev_f32(xq) : dev_f32(x2, "moe input");
  Tensor h = alloc(ElemType::F32, {N * K, t.width});
  Tensor ys = alloc(ElemType::F32, {N * K, D});
  a.h = dev_f32(h);
  a.ys = dev_f32(ys);
  const bool mma = moe_mma_ == MoeMma::On || (moe_mma_ == MoeMma::Auto && N >= kMoeMmaMinTokens);
  if (mma && t.aligned && k::grouped_moe_mma_ok(a)) {  // the tensor-core form; its bf16 scratch as f32 pairs
    const Tensor xb = alloc(ElemType::F32, {(N * D + 1) / 2}), hb = alloc(ElemType::F32, {(N * K * t.width + 1) / 2});
    const Tensor groups = alloc(ElemType::I32, {k::grouped_moe_mma_group_ints(N * K, t.experts)});
    a.xb = static_cast<uint16_t*>(dev_ptr(xb));
    a.hb = static_cast<uint16_t*>(dev_ptr(hb));
    a.groups = dev_i32(groups);
    a.mma_tiles = moe_mma_tiles_, a.mma_depth = moe_mma_depth_;
    check_launch(k::grouped_moe_mma_experts(a, stream_), "moe grouped experts (tensor cores)");
    ++moe_mma_calls_;
  } else {
    check_launch(k::grouped_moe_experts(a, stream_), "moe grouped experts");
  }
  side.join();
  Tensor y = alloc(ElemType::F32, {N, D});
  check_launch(k::grouped_moe_combine(a, dev_f32(sh, "shared expert output"), dev_f32(y), stream_), "moe combine");
  return y;
}

// The routing grouped on the host (moe()): slots of expert e are [begin[e], begin[e+1]), (token,
// k) ascending within an expert; device copies of each slot's token row and routing weight, and of
// each token's slots in accumulation order.
struct GpuBackend::SlotGroups {
  int64_t N = 0, K = 0, E = 0, T = 0;
  std::vector<int64_t> begin;      // [E + 1]
  const int32_t* rows = nullptr;   // device [T]: token of each slot
  const float* weights = nullptr;  // device [T]: routing weight of each slot
  const int32_t* order = nullptr;  // device [N, K]: the token's slots by ascending (expert, k), -1 after
};

namespace {

// Scratch of one pass of the grouped experts: x rows and outputs [slots, D], g, u, h [slots, I],
// the bf16 copies of x and h (bf16_copy).
// A prefill's slots beyond this many bytes of it run in several passes, each over whole experts.
constexpr int64_t kPrefillPassBytes = int64_t{1} << 30;
constexpr int64_t kTileRows = k::kGroupedTileRows;  // the grouped GEMM's row tile

}  // namespace

// The grouped form of the per-expert loop below (issue 17): an expert with rows is grouped when
// its linear() calls at more rows than the GEMV takes would take the bf16 GEMM
// (resolve_linear_path: the faithful profile, a weight bf16 holds exactly, no FP8 tensor cores for
// it, or the path forced to Mma); the others keep their per-expert GEMMs. An expert of up to 64
// rows is grouped too, where linear() would give it the 8-row GEMV pass after pass: in a 4,096-token
// prefill of the 3-layer synthetic those GEMVs were 213 ms of 590 (ncu, PERF.md v22). Its sums are
// then path (c)'s, not the GEMV's (another order: fast-order values; with the path forced to Mma
// the grouped and the per-expert forms agree bitwise). Per pass over a range of experts:
// one gather of every slot's x row (after the act_fp8 round trip of x, which quantizes each row on
// its own exactly as linear() quantizes the gathered rows), one w1+w3 launch, one SwiGLU over all
// slots (elementwise per slot, with the slot's routing weight), the act_fp8 round trip of h (per
// row), one w2 launch, the ungrouped experts one by one (their output rows copied into the pass's
// buffer), and one accumulation of the pass's slots into acc in expert-id order. Each step but the
// small experts' GEMMs computes every value with the same operations on the same inputs as the
// per-expert path.
bool GpuBackend::moe_prefill(const float* xp, const SlotGroups& sg, std::span<const SwiGluWeights> experts,
                             const MoeDims& d, const MoeParams& p, Tensor& acc) {
  const int64_t N = d.N, D = d.D, K = sg.K, E = sg.E;
  if (moe_path_ == MoePath::PerExpert || sg.T == 0 || cpu_order(kLinear)) return false;
  if (linear_path_ != LinearPath::Auto && linear_path_ != LinearPath::Mma) return false;
  for (const SwiGluWeights& e : experts)
    if (!e.w1 || !e.w2 || !e.w3) return false;
  const ExpertTable& t = expert_table(experts, D);
  if (!t.uniform || t.width == 0) return false;
  const int64_t I = t.width;
  const Tensor table = t.table;  // kept alive: the per-expert linear() calls below may drop t
  const auto* table_d = static_cast<const WeightRef*>(dev_ptr(table));
  const WFormat format = t.format;
  const bool aligned = t.aligned;
  LinearOpts lo;
  lo.act_fp8 = p.act_fp8;
  lo.bf16_weight = p.bf16_weight;
  lo.out = p.round;
  std::vector<uint8_t> grouped(static_cast<std::size_t>(E), 0);
  bool any = false;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t M = sg.begin[e + 1] - sg.begin[e];
    if (M == 0) continue;
    const SwiGluWeights& w = experts[static_cast<std::size_t>(e)];
    const int64_t tall = std::max(M, kGemvLoopMaxRows + 1);
    const bool g = resolve_linear_path(linear_path_, tall, weight(*w.w1), lo, D, I) == LinearPath::Mma &&
                   resolve_linear_path(linear_path_, tall, weight(*w.w3), lo, D, I) == LinearPath::Mma &&
                   resolve_linear_path(linear_path_, tall, weight(*w.w2), lo, I, D) == LinearPath::Mma;
    grouped[static_cast<std::size_t>(e)] = g;
    any = any || g;
  }
  if (!any) return false;
  const bool matrix = mma_matrix_ok();  // as linear()'s path Mma: MFMA only after its self-check

  // Passes over whole experts, and each grouped expert's row tiles ({e, first, end} relative to
  // its pass's first slot), all uploaded at once.
  struct Pass {
    int64_t e_lo, e_hi, tile_lo, tile_hi;
  };
  std::vector<Pass> passes;
  std::vector<int32_t> tiles;
  const int64_t slot_bytes = (2 * D + 3 * I) * 4 + (D + I) * 2, pass_slots = std::max<int64_t>(kPrefillPassBytes / slot_bytes, 1);
  for (int64_t e = 0; e < E;) {
    Pass ps{e, e, static_cast<int64_t>(tiles.size() / 3), 0};
    while (ps.e_hi < E && (ps.e_hi == ps.e_lo || sg.begin[ps.e_hi + 1] - sg.begin[ps.e_lo] <= pass_slots)) ++ps.e_hi;
    for (int64_t x = ps.e_lo; x < ps.e_hi; ++x) {
      if (!grouped[static_cast<std::size_t>(x)]) continue;
      for (int64_t r = sg.begin[x]; r < sg.begin[x + 1]; r += kTileRows)
        tiles.insert(tiles.end(), {static_cast<int32_t>(x), static_cast<int32_t>(r - sg.begin[ps.e_lo]),
                                   static_cast<int32_t>(std::min(r + kTileRows, sg.begin[x + 1]) - sg.begin[ps.e_lo])});
    }
    ps.tile_hi = static_cast<int64_t>(tiles.size() / 3);
    if (sg.begin[ps.e_hi] > sg.begin[ps.e_lo]) passes.push_back(ps);
    e = ps.e_hi;
  }
  const Tensor tiles_t = upload(tiles.data(), tiles.size() * 4);
  const int32_t* tiles_d = dev_i32(tiles_t);

  // The FP8 round trip of x (1x128 blocks per row), as linear() gives each expert's w1 and w3.
  Tensor xq;
  const float* xsrc = xp;
  if (p.act_fp8) {
    xq = alloc(ElemType::F32, {N, D});
    check_launch(k::quant_blocks(dev_f32(xq), xp, N, D, D, 128, false, stream_), "moe act_fp8 (x)");
    xsrc = dev_f32(xq);
  }
  const bool round = p.round == Round::BF16;
  for (const Pass& ps : passes) {
    const int64_t s_lo = sg.begin[ps.e_lo], s_hi = sg.begin[ps.e_hi], S = s_hi - s_lo;
    Tensor ys = alloc(ElemType::F32, {S, D});
    if (ps.tile_hi > ps.tile_lo) {
      Tensor h = alloc(ElemType::F32, {S, I});
      {
        Tensor xs = alloc(ElemType::F32, {S, D});
        check_launch(k::gather_rows(xsrc, D, sg.rows + s_lo, S, dev_f32(xs), stream_), "moe gather (grouped)");
        Tensor g = alloc(ElemType::F32, {S, I}), u = alloc(ElemType::F32, {S, I});
        k::GroupedGemmArgs a;
        a.x = dev_f32(xs), a.ldx = D;
        const Tensor xb = k::mma_takes_bf16_x(format, D) ? bf16_copy(dev_f32(xs), D, S, D, &a.xb) : Tensor();
        a.ldxb = D;
        a.y0 = dev_f32(g), a.y1 = dev_f32(u), a.ldy = I;
        a.table = table_d, a.table_stride = 3, a.which0 = 0, a.which1 = 1, a.projections = 2;
        a.tiles = tiles_d + 3 * ps.tile_lo, a.tile_count = ps.tile_hi - ps.tile_lo;
        a.R = I, a.K = D, a.round_bf16 = round, a.pipe = gemm_pipe_, a.aligned = aligned;
        check_launch(k::linear_mma_grouped(a, format, matrix, stream_), "moe w1, w3 (grouped bf16 mma)");
        gemm_pipe_calls_ += a.pipe && k::mma_grouped_pipelined(a, format);
        // Rows of ungrouped experts hold garbage here; their h rows are never read.
        check_launch(k::swiglu(dev_f32(g), dev_f32(u), S, I, p.weight_after ? nullptr : sg.weights + s_lo,
                               p.swiglu_limit, p.silu_out == Round::BF16, round, dev_f32(h), stream_),
                     "moe swiglu (grouped)");
      }
      if (p.act_fp8)  // linear()'s round trip of w2's input, per row, in place
        check_launch(k::quant_blocks(dev_f32(h), dev_f32(h), S, I, I, 128, false, stream_), "moe act_fp8 (h)");
      k::GroupedGemmArgs a;
      a.x = dev_f32(h), a.ldx = I;
      const Tensor hb = k::mma_takes_bf16_x(format, I) ? bf16_copy(dev_f32(h), I, S, I, &a.xb) : Tensor();
      a.ldxb = I;
      a.y0 = dev_f32(ys), a.ldy = D;
      a.table = table_d, a.table_stride = 3, a.which0 = 2, a.projections = 1;
      a.tiles = tiles_d + 3 * ps.tile_lo, a.tile_count = ps.tile_hi - ps.tile_lo;
      a.R = D, a.K = I, a.round_bf16 = round, a.pipe = gemm_pipe_, a.aligned = aligned;
      check_launch(k::linear_mma_grouped(a, format, matrix, stream_), "moe w2 (grouped bf16 mma)");
      gemm_pipe_calls_ += a.pipe && k::mma_grouped_pipelined(a, format);
    }
    for (int64_t e = ps.e_lo; e < ps.e_hi; ++e) {  // the others through linear(), as the per-expert path
      const int64_t M = sg.begin[e + 1] - sg.begin[e];
      if (M == 0 || grouped[static_cast<std::size_t>(e)]) continue;
      Tensor xs = alloc(ElemType::F32, {M, D});
      check_launch(k::gather_rows(xp, D, sg.rows + sg.begin[e], M, dev_f32(xs), stream_), "moe gather");
      const SwiGluWeights& w = experts[static_cast<std::size_t>(e)];
      const Tensor y = swiglu(*this, w, I, xs, M, sg.weights + sg.begin[e], p.swiglu_limit, p);
      copy_rows(ys, sg.begin[e] - s_lo, y, 0, M);
    }
    check_launch(k::accumulate_slots(dev_f32(acc), dev_f32(ys), sg.order, p.weight_after ? sg.weights : nullptr,
                                     p.accumulate == Round::BF16, N, K, D, s_lo, s_hi, stream_),
                 "moe accumulate (grouped)");
  }
  return true;
}

Tensor GpuBackend::moe(const Tensor& x, const Routing& r, std::span<const SwiGluWeights> experts,
                       const SwiGluWeights& shared, const MoeParams& p) {
  const MoeDims d = check_moe(x, r, shared);
  const int64_t N = d.N, D = d.D, K = d.K, E = static_cast<int64_t>(experts.size());
  dev_i32(r.experts, "routed experts");
  dev_f32(r.weights, "routing weights");
  const float* xp = dev_f32(x, "moe input");
  if (N == 0 || D == 0) return alloc(ElemType::F32, {N, D});
  const Tensor x2 = x.reshaped({N, D});
  // The shared expert reads only x: at decode batches a side chain beside the routed experts
  // (gpu_lanes.cpp), joined before its output is added. Issued first, so that its weight() calls
  // (which may drop the expert tables when a view's bytes changed) come before the table lookup.
  backend::SideChain side(*this, N);
  const Tensor sh = swiglu(*this, shared, d.shared_I, x2, N, nullptr, p.clamp_shared ? p.swiglu_limit : 0.f, p);
  side.end();
  if (const ExpertTable* t = grouped_table(N, K, D, experts)) return moe_grouped(x, r, *t, d, sh, side, p);
  Tensor y = alloc(ElemType::F32, {N, D});
  std::vector<int32_t> ex(static_cast<std::size_t>(N * K));
  std::vector<float> wt(ex.size());
  to_host(r.experts, ex.data());
  to_host(r.weights, wt.data());

  // Slots grouped by expert id, (token, k) ascending within an expert: the CPU's order. Ids
  // outside [0, E) are skipped, as the CPU's loop over expert ids skips them.
  SlotGroups sg;
  sg.N = N, sg.K = K, sg.E = E;
  std::vector<int64_t>& begin = sg.begin;
  begin.assign(static_cast<std::size_t>(E + 1), 0);
  for (const int32_t e : ex)
    if (e >= 0 && e < E) ++begin[e + 1];
  for (int64_t e = 0; e < E; ++e) begin[e + 1] += begin[e];
  const int64_t T = sg.T = begin[E];
  // One upload: T row indices, the T routing weights' bits, then per token its slots in the
  // accumulation order (ascending expert id, then k; -1 after the last), which moe_prefill's
  // accumulation reads.
  std::vector<int32_t> packed(static_cast<std::size_t>(2 * T + N * K), -1);
  {
    std::vector<int64_t> next(begin.begin(), begin.end() - 1);
    std::vector<std::pair<int32_t, int32_t>> mine;  // (expert, slot) of one token
    for (int64_t n = 0; n < N; ++n) {
      mine.clear();
      for (int64_t k = 0; k < K; ++k) {
        const int32_t e = ex[n * K + k];
        if (e < 0 || e >= E) continue;
        const int64_t at = next[e]++;
        packed[at] = static_cast<int32_t>(n);
        std::memcpy(&packed[T + at], &wt[n * K + k], 4);
        mine.emplace_back(e, static_cast<int32_t>(at));  // slots of one expert grow with k
      }
      std::sort(mine.begin(), mine.end());
      for (std::size_t j = 0; j < mine.size(); ++j) packed[2 * T + n * K + static_cast<int64_t>(j)] = mine[j].second;
    }
  }
  const Tensor index = upload(packed.data(), packed.size() * 4);
  const int32_t* rows_d = T > 0 ? dev_i32(index) : nullptr;
  const float* ws_d = T > 0 ? reinterpret_cast<const float*>(rows_d + T) : nullptr;
  sg.rows = rows_d, sg.weights = ws_d, sg.order = packed.empty() ? nullptr : dev_i32(index) + 2 * T;

  Tensor acc = alloc(ElemType::F32, {N, D});
  check_launch(k::fill_f32(dev_f32(acc), N * D, 0.f, stream()), "moe zero");
  // Expert by expert in id order (one stream: each accumulation follows the previous one).
  if (!moe_prefill(xp, sg, experts, d, p, acc))
    for (int64_t e = 0; e < E; ++e) {
      const int64_t M = begin[e + 1] - begin[e];
      if (M == 0) continue;
      Tensor xs = alloc(ElemType::F32, {M, D});
      check_launch(k::gather_rows(xp, D, rows_d + begin[e], M, dev_f32(xs), stream()), "moe gather");
      const SwiGluWeights& w = experts[static_cast<std::size_t>(e)];
      const Tensor ys = swiglu(*this, w, check_swiglu(w, D, fmt::format("routed expert {}", e)), xs, M,
                               ws_d + begin[e], p.swiglu_limit, p);
      check_launch(k::accumulate_rows(dev_f32(acc), dev_f32(ys, "expert output"), rows_d + begin[e],
                                      p.weight_after ? ws_d + begin[e] : nullptr, p.accumulate == Round::BF16, M, D,
                                      stream()),
                   "moe accumulate");
    }
  side.join();
  check_launch(k::add_round(dev_f32(acc), dev_f32(sh, "shared expert output"), N * D, p.round == Round::BF16,
                            dev_f32(y), stream()),
               "moe sum");
  return y;
}

}  // namespace plumb::gpu

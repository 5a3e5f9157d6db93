// GPU backend against the CPU reference for the attention path: the compressor state machine
// over several decode steps of a ragged batch, the Lightning indexer's top-k (ties included),
// sparse attention (window / selected / all compressed, sinks, bf16 probabilities, rings),
// window_update and absorbed MLA attention. Harness: gpu_test_util.h; cases: op_cases.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <vector>

#include "gpu_test_util.h"
#include "paged_util.h"
#include "plumb/backend/cpu/cpu_backend.h"
#include "plumb/util/error.h"

namespace plumb::test {
namespace {

using backend::Batch;
using backend::ElemType;
using backend::Round;

// Fresh compressor scores are -inf: map them to a finite sentinel on both sides so the
// comparison still fails on NaN (poison) but not on an untouched slot.
std::vector<float> finite_inf(std::vector<float> v) {
  for (float& x : v)
    if (std::isinf(x) && x < 0) x = -1e30f;
  return v;
}

TEST_F(GpuOps, CompressMultiStepRaggedDecode) {
  // V4-Flash: main KV ratio 4 (overlap) and 128 at head_dim 512, indexer keys ratio 4 at 128;
  // ratio 16 as in the tiny models; d = 6 as an odd edge.
  for (const CompressCase& c : compress_cases()) {
    const int64_t cm = c.ratio == 4 ? 2 : 1, C = cm * c.d;
    const OwnedWeight ape = f32_weight({c.ratio, C}, rnd(c.ratio * C, 0.5f));
    const WeightView apev = ape.view();
    const backend::CompressorParams p{c.ratio, c.d, &apev};
    std::vector<backend::CompressorState> sg, sc;
    for (int s = 0; s < 3; ++s) {
      sg.push_back(
          {gpu->full(ElemType::F32, {cm * c.ratio, C}, 0.f), gpu->full(ElemType::F32, {cm * c.ratio, C}, -INFINITY)});
      sc.push_back(
          {cpu->full(ElemType::F32, {cm * c.ratio, C}, 0.f), cpu->full(ElemType::F32, {cm * c.ratio, C}, -INFINITY)});
    }
    // Three sequences: a prefill of different lengths, then decode steps, then a chunk; each
    // step closes some windows and leaves others open.
    const std::vector<std::vector<int64_t>> steps = {
        {2 * c.ratio + 3, 5, c.ratio - 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {c.ratio, 1, 7}, {1, 2 * c.ratio + 1, 1}};
    int64_t pos[3] = {0, 0, 0};
    for (std::size_t st = 0; st < steps.size(); ++st) {
      const Batch b = make_batch({pos[0], pos[1], pos[2]}, steps[st]);
      const std::vector<float> kv = rnd(b.rows * C), score = rnd(b.rows * C, 2.f);
      for (Round r : {Round::None}) {
        const Tensor g = gpu->compress(up(*gpu, kv, {b.rows, C}), up(*gpu, score, {b.rows, C}), b, sg, p, r);
        const Tensor ref = cpu->compress(up(*cpu, kv, {b.rows, C}), up(*cpu, score, {b.rows, C}), b, sc, p, r);
        const std::string what =
            "compress ratio " + std::to_string(c.ratio) + " d " + std::to_string(c.d) + " step " + std::to_string(st);
        ASSERT_EQ(g.shape(), ref.shape()) << ctx(what);
        expect_close(what + " entries", host(*gpu, g), host(*cpu, ref), ref.shape(), kF32);
        for (int s = 0; s < 3; ++s) {
          expect_close(what + " state kv seq " + std::to_string(s), host(*gpu, sg[s].kv), host(*cpu, sc[s].kv),
                       sc[s].kv.shape(), kF32);
          expect_close(what + " state score seq " + std::to_string(s), finite_inf(host(*gpu, sg[s].score)),
                       finite_inf(host(*cpu, sc[s].score)), sc[s].score.shape(), kF32);
        }
      }
      for (int s = 0; s < 3; ++s) pos[s] += steps[st][s];
    }
    // Round::BF16 on fresh states (one prefill).
    std::vector<backend::CompressorState> fg, fc;
    fg.push_back(
        {gpu->full(ElemType::F32, {cm * c.ratio, C}, 0.f), gpu->full(ElemType::F32, {cm * c.ratio, C}, -INFINITY)});
    fc.push_back(
        {cpu->full(ElemType::F32, {cm * c.ratio, C}, 0.f), cpu->full(ElemType::F32, {cm * c.ratio, C}, -INFINITY)});
    const Batch b = make_batch({0}, {3 * c.ratio});
    const std::vector<float> kv = rnd(b.rows * C), score = rnd(b.rows * C);
    const Tensor g = gpu->compress(up(*gpu, kv, {b.rows, C}), up(*gpu, score, {b.rows, C}), b, fg, p, Round::BF16);
    const Tensor ref = cpu->compress(up(*cpu, kv, {b.rows, C}), up(*cpu, score, {b.rows, C}), b, fc, p, Round::BF16);
    expect_close("compress bf16 ratio " + std::to_string(c.ratio), host(*gpu, g), host(*cpu, ref), ref.shape(),
                 with_round(kF32, Round::BF16));
  }
}

// Indexer scores on the host (double), to tell a genuine near-tie from a wrong selection.
std::vector<double> host_scores(const std::vector<float>& q, const std::vector<float>& w,
                                const std::vector<float>& keys, int64_t row, int64_t H, int64_t di, int64_t n,
                                float relu_scale) {
  std::vector<double> s(static_cast<std::size_t>(n));
  for (int64_t e = 0; e < n; ++e)
    for (int64_t h = 0; h < H; ++h) {
      double dot = 0;
      for (int64_t k = 0; k < di; ++k) dot += double(q[(row * H + h) * di + k]) * keys[e * di + k];
      s[e] += w[row * H + h] * std::max(dot, 0.0) * relu_scale;
    }
  return s;
}

TEST_F(GpuOps, IndexerTopKWithTies) {
  for (const IndexerCase& c : indexer_cases()) {
    const Batch b = make_batch(c.starts, c.lens);
    const int64_t N = b.rows;
    auto values = [&](int64_t n, float sd) {
      std::vector<float> v = rnd(n, sd);
      if (c.integer)  // small integers times 1/4: every dot product and sum is exact in f32
        for (float& x : v) x = std::round(std::clamp(x * 2.f, -3.f, 3.f)) * 0.25f;
      return v;
    };
    const std::vector<float> q = values(N * c.H * c.di, 1.f), w = values(N * c.H, 1.f);
    std::vector<std::vector<float>> keys;
    for (std::size_t s = 0; s < c.starts.size(); ++s) {
      const int64_t n = (c.starts[s] + c.lens[s]) / c.ratio + 2;  // caches may hold more rows
      keys.push_back(values(n * c.di, 1.f));
      for (int64_t e = 1; e < n; e += 5)  // exact duplicates: ties that must go to the lower index
        std::copy(keys.back().begin(), keys.back().begin() + c.di, keys.back().begin() + e * c.di);
    }
    backend::IndexerParams p;
    p.ratio = c.ratio;
    p.top_k = c.top_k;
    p.relu_scale = 0.5f;
    p.round = c.round;
    for (const backend::KvRowSpec& spec : key_formats()) {  // each backend encodes its own pool
    auto run = [&](Backend& be) {
      const Paged kt = paged(be, keys, c.di, c.per_block, 7, spec);  // the same scattered tables on both
      return be.indexer_topk(up(be, q, {N, c.H, c.di}), up(be, w, {N, c.H}), b, kt.cache, kt.tables, p);
    };
    const Tensor g = run(*gpu), r = run(*cpu);
    const std::string what = std::string("indexer_topk ") + c.what + " keys " + format_name(spec);
    if (c.integer || c.round == Round::BF16) {  // scores are exact (or rounded from exact values)
      expect_equal_i32(what, g, r);
      continue;
    }
    // Random f32 scores: the summation order may flip two scores within f32 rounding; any other
    // difference is a failure.
    ASSERT_EQ(g.shape(), r.shape()) << ctx(what);
    const std::vector<int32_t> gi = host_i32(*gpu, g), ri = host_i32(*cpu, r);
    for (std::size_t s = 0; s < c.starts.size(); ++s)
      for (int64_t i = 0; i < c.lens[s]; ++i) {
        const int64_t row = b.seqs[s].row + i, n = static_cast<int64_t>(keys[s].size()) / c.di;
        std::vector<double> sc;
        for (int64_t k = 0; k < c.top_k; ++k) {
          const int32_t a = gi[row * c.top_k + k], e = ri[row * c.top_k + k];
          if (a == e) continue;
          if (sc.empty()) sc = host_scores(q, w, stored_values(keys[s], c.di, spec), row, c.H, c.di, n, 0.5f);
          const bool near_tie = a >= 0 && e >= 0 && a < n && std::fabs(sc[a] - sc[e]) <= 1e-5 * (1 + std::fabs(sc[e]));
          EXPECT_TRUE(near_tie) << ctx(what) << ": row " << row << " slot " << k << " got " << a << " want " << e;
        }
      }
    }
  }
}

// One sparse_attention case's random inputs (op_cases.h), run on either backend in a storage
// format of the compressed entries.
struct AttentionInputs {
  AttentionInputs(GpuOps& t, const AttentionCase& c) : c(c), b(make_batch(c.starts, c.lens)) {
    const int64_t N = b.rows;
    q = t.rnd(N * c.H * c.Dh), kv = t.rnd(N * c.Dh);
    // The sink is required by the op; "no sink" is a sink logit far below every score.
    std::vector<float> sinks = t.rnd(c.H);
    if (!c.sink) std::fill(sinks.begin(), sinks.end(), -60.f);
    sink = f32_weight({c.H}, sinks);
    for (std::size_t s = 0; s < c.starts.size(); ++s) {
      rings.push_back(t.rnd(c.W * c.Dh));
      const int64_t nc = c.ratio ? (c.starts[s] + c.lens[s]) / c.ratio + 1 : 0;
      comp.push_back(t.rnd(std::max<int64_t>(nc, 1) * c.Dh));
    }
    if (c.sel_k > 0)
      for (std::size_t s = 0; s < c.starts.size(); ++s)
        for (int64_t i = 0; i < c.lens[s]; ++i) {
          const int64_t valid = (c.starts[s] + i + 1) / c.ratio;
          std::vector<int32_t> all(static_cast<std::size_t>(valid));
          std::iota(all.begin(), all.end(), 0);
          std::shuffle(all.begin(), all.end(), t.rng);
          if (c.sel_slots.empty()) {
            for (int k = 0; k < c.sel_k; ++k) sel.push_back(k < valid && k % 7 != 3 ? all[k] : -1);  // gaps too
          } else {
            std::size_t n = 0;
            for (int k = 0; k < c.sel_k; ++k) {
              const bool slot = std::find(c.sel_slots.begin(), c.sel_slots.end(), k) != c.sel_slots.end();
              sel.push_back(slot && n < all.size() ? all[n++] : -1);
            }
          }
        }
  }
  // Compressed entries in every storage format (window-only cases read none: f32 only).
  std::vector<backend::KvRowSpec> formats() const {
    return c.ratio > 0 ? entry_formats(c.Dh >= 128 ? 64 : c.Dh / 3) : std::vector<backend::KvRowSpec>{{}};
  }
  Tensor run(GpuOps& t, Backend& be, const backend::KvRowSpec& spec, std::optional<backend::Round> out = {}) const {
    const WeightView sv = sink.view();
    backend::AttentionParams p;
    p.window = c.W;
    p.ratio = c.ratio;
    p.sink = &sv;
    p.scale = 1.f / std::sqrt(static_cast<float>(c.Dh));
    p.bf16_probs = c.bf16p;
    p.prob_block = c.prob_block;
    p.out = out.value_or(c.out);
    p.prefill = c.prefill;
    std::vector<Tensor> rt;
    for (const auto& r : rings) rt.push_back(t.up(be, r, {c.W, c.Dh}));
    const Paged ct = paged(be, comp, c.Dh, c.per_block, 7, spec);
    const Tensor st = c.sel_k > 0 ? t.up(be, sel, {b.rows, c.sel_k}) : Tensor();
    return be.sparse_attention(t.up(be, q, {b.rows, c.H, c.Dh}), t.up(be, kv, {b.rows, c.Dh}), b, rt, ct.cache, ct.tables,
                               c.sel_k > 0 ? &st : nullptr, p);
  }
  // q and every KV value rounded to bf16 (the faithful profile's: bf16-exact activations and cache).
  void round_to_bf16() {
    for (std::vector<float>* v : {&q, &kv})
      for (float& x : *v) x = bf16(x);
    for (auto* vs : {&rings, &comp})
      for (auto& v : *vs)
        for (float& x : v) x = bf16(x);
  }
  const AttentionCase& c;
  Batch b;
  std::vector<float> q, kv;
  OwnedWeight sink;
  std::vector<std::vector<float>> rings, comp;
  std::vector<int32_t> sel;
};

// Sparse attention in the CPU's order (the default for every batch the P.V on the matrix unit
// does not take, and for all of them with the attn site in the CPU's order): its kernels sum in the
// CPU's order (sparse_attention.cu, sparse_attention_split.cu), so every case must be bitwise the
// CPU's, in the split form (the default: P.V blocks of as many heads as the batch's size gives), the split
// form with P.V blocks of up to 8 heads and scores blocks of 4 candidate tiles
// (PLUMB_GPU_PV_HEADS=8 PLUMB_GPU_SCORES_SPAN=4), the split form with each row's selected entries
// decoded once (the default since PERF.md v32), and the one-kernel form (PLUMB_GPU_ATTN=one-kernel).
TEST_F(GpuCpuOrder, SparseAttentionEveryCaseBitwise) {
  CaseShare share;
  // entry_reuse: the encoded pools' entries decoded once a call from the default reuse (some cases
  // do, some not), always (0), or never (read from the pool at every read); selected: the rows'
  // selected entries decoded once where the whole entries are not; the same bits.
  struct Form {
    bool split;
    int pv_heads, scores_span;
    int64_t entry_reuse;
    bool selected;
    const char* what;
  };
  const int64_t decoded0 = set_entry_reuse(-1), selected0 = set_selected_entries(false);
  int64_t always_runs = 0, selected_runs = 0;
  for (const Form form :
       {Form{true, 0, 0, -1, false, ""},
        Form{true, 8, 4, 0, false, "P.V blocks of up to 8 heads, scores blocks of 4 tiles, entries decoded once a call, "},
        Form{true, 0, 0, INT64_MAX, true, "selected entries decoded once a call, "},
        Form{false, 0, 0, INT64_MAX, false, "one-kernel form, entries decoded at every read, "}})
  for (const AttentionCase& c : sparse_attention_cases()) {
    if (!share.take()) continue;
    set_split_attention(form.split);
    set_split_shapes(form.pv_heads, form.scores_span);
    set_entry_reuse(form.entry_reuse);
    set_selected_entries(form.selected);
    always_runs += form.entry_reuse == 0 && c.ratio > 0;
    selected_runs += form.selected && c.ratio > 0 && c.sel_k > 0;
    const AttentionInputs in(*this, c);
    for (const backend::KvRowSpec& spec : in.formats())
      check_bitwise(std::string("sparse_attention ") + form.what + c.what + " entries " + format_name(spec),
                    [&](Backend& be) { return in.run(*this, be, spec); });
  }
  // (the decoding ran whenever this share held a case with entries in the 'always' form, and the
  // selected entries' whenever it held one with a selection in the 'selected' form: every case's
  // formats include encoded ones)
  const int64_t decoded = set_entry_reuse(-1) - decoded0, selected = set_selected_entries(false) - selected0;
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
  if (dev) EXPECT_EQ(decoded > 0, always_runs > 0) << decoded << " calls decoded the entries";
  if (dev) EXPECT_EQ(selected > 0, selected_runs > 0) << selected << " calls decoded the selected entries";
#endif
  (void)decoded, (void)selected;
}

// The P.V on the matrix unit (kernels/sparse_attention_pv_mma.cu: from 128 query rows in the fast
// order with bf16 probabilities; forced here at every row count) adds exact products in the matrix
// unit's order: every case it takes (bf16 probabilities, head dims a multiple of 64) must stay
// within kPvMmaBar of the CPU. The bar sits just above the floor of the order alone: the CPU with
// its attention sums reversed (CpuBackend::SumOrders) against the canonical CPU, printed beside
// each case with PLUMB_TEST_SCORES=1 (docs/CORRECTNESS.md, "The P.V on the matrix unit").
TEST_F(GpuOps, SparseAttentionPvMmaWithinTheOrderFloor) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
  if (!dev) GTEST_SKIP() << "the GPU ops run on the CPU backend (PLUMB_GPU_OPS_ON_CPU=1)";
  dev->set_pv_mma_rows(1);
  dev->set_scores_mma(false);  // (the scores in the CPU's order: this is the P.V's order alone)
  set_entry_reuse(0);  // (the kernel reads an encoded pool's entries decoded once a call only)
  cpu::CpuBackend reversed(1, {cpu::CpuBackend::kPv, cpu::SumOrder::Reversed});
  CaseShare share;
  int taken = 0;
  for (const AttentionCase& c : sparse_attention_cases()) {
    // Up to 512 query rows: each block is one row's, so the cases of 1,100 and more rows (there for
    // the other kernels' launch shapes) would add only time (3 of the 4.5 minutes on the emulator).
    if (!c.bf16p || c.Dh % 64 != 0 || make_batch(c.starts, c.lens).rows > 512) continue;
    ++taken;
    if (!share.take()) continue;
    const AttentionInputs in(*this, c);
    // f32 outputs in every entry format (each decoded its own way): the tight comparison; the
    // case's bf16 outputs in the first.
    const std::vector<backend::KvRowSpec> formats = in.formats();
    std::vector<std::pair<backend::KvRowSpec, Round>> runs;
    for (const backend::KvRowSpec& spec : formats) runs.push_back({spec, Round::None});
    if (c.out != Round::None) runs.push_back({formats.front(), c.out});
    for (const auto& [spec, out] : runs) {
      const std::string what = std::string("sparse_attention P.V on the matrix unit, ") + c.what + " entries " +
                               format_name(spec) + (out == Round::BF16 ? " out bf16" : "");
      const Tensor r = in.run(*this, *cpu, spec, out), f = in.run(*this, reversed, spec, out);
      const int64_t before = dev->pv_mma_calls();
      const Tensor g = in.run(*this, *gpu, spec, out);
      EXPECT_GT(dev->pv_mma_calls(), before) << ctx(what + ": the P.V on the matrix unit did not run");
      const double bar = with_round(kPvMmaBar, out);
      expect_close(what + " (floor: the CPU's order reversed)", host(reversed, f), host(*cpu, r), r.shape(), bar);
      expect_close(what, host(*gpu, g), host(*cpu, r), r.shape(), bar);
    }
  }
  EXPECT_GT(taken, 3) << "op_cases.h lost the cases with bf16 probabilities";
  dev->set_pv_mma_rows(plumb::gpu::GpuBackend::kPvMmaRowsFrom);
  dev->set_scores_mma(true);
  set_entry_reuse(-1);
#else
  GTEST_SKIP() << "plumb was built without a GPU backend";
#endif
}

// The scores on the matrix unit (kernels/sparse_attention_scores_mma.cu: from 128 query rows in the
// fast order, with the P.V's on the matrix unit where the probabilities are bf16; forced here at
// every row count) sum exact products in the matrix unit's order. A score's last bit moves its exp
// and can flip bf16(e), so the floor is the CPU with the whole attn site reversed (the scores' dots
// too) against the canonical CPU, printed beside each case with PLUMB_TEST_SCORES=1; the bars sit
// just above it (docs/CORRECTNESS.md). Inputs: each case's f32 q and KV (three bf16 parts each), and
// the same rounded to bf16 (the faithful profile's: one part); f32 outputs (a bf16 output's
// rounding would hide the order's effect).
TEST_F(GpuOps, SparseAttentionMmaWithinTheOrderFloor) {
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
  if (!dev) GTEST_SKIP() << "the GPU ops run on the CPU backend (PLUMB_GPU_OPS_ON_CPU=1)";
  dev->set_pv_mma_rows(1);
  set_entry_reuse(0);  // (the kernels read an encoded pool's entries decoded once a call only)
  cpu::CpuBackend reversed(1, {cpu::CpuBackend::kAttn, cpu::SumOrder::Reversed});
  CaseShare share;
  int taken = 0;
  for (const AttentionCase& c : sparse_attention_cases()) {
    if (c.Dh % 64 != 0 || make_batch(c.starts, c.lens).rows > 512) continue;  // (as the P.V's test)
    ++taken;
    if (!share.take()) continue;
    AttentionInputs in(*this, c);
    for (const bool exact : {false, true}) {
      if (exact) in.round_to_bf16();
      // The kernel reads f32 rows only (an encoded pool's entries decoded first): f32 entries
      // (three parts) in the f32 pass, the last format's (fp8, decoded: exact) in the exact one.
      const std::vector<backend::KvRowSpec> formats = in.formats();
      const backend::KvRowSpec spec = exact ? formats.back() : formats.front();
      const std::string what = std::string("sparse_attention scores on the matrix unit, ") + c.what + " entries " +
                               format_name(spec) + (exact ? ", bf16-exact q and KV" : "");
      const Tensor r = in.run(*this, *cpu, spec, Round::None), f = in.run(*this, reversed, spec, Round::None);
      const int64_t scores_before = dev->scores_mma_calls(), pv_before = dev->pv_mma_calls();
      const Tensor g = in.run(*this, *gpu, spec, Round::None);
      EXPECT_GT(dev->scores_mma_calls(), scores_before) << ctx(what + ": the scores on the matrix unit did not run");
      EXPECT_EQ(dev->pv_mma_calls() > pv_before, c.bf16p) << ctx(what + ": the P.V on the matrix unit");
      const double bar = c.bf16p ? kAttnMmaBf16pBar : exact ? kAttnMmaBar : kAttnMmaPartsBar;
      expect_close(what + " (floor: the CPU's attn order reversed)", host(reversed, f), host(*cpu, r), r.shape(), bar);
      expect_close(what, host(*gpu, g), host(*cpu, r), r.shape(), bar);
    }
  }
  EXPECT_GT(taken, 3) << "op_cases.h lost the cases with head dims a multiple of 64";
  dev->set_pv_mma_rows(plumb::gpu::GpuBackend::kPvMmaRowsFrom);
  set_entry_reuse(-1);
#else
  GTEST_SKIP() << "plumb was built without a GPU backend";
#endif
}

// --kv-bf16-recent on the GPU: recent entries from the fresh rows and the rings, older ones from
// the fp8 pool, as the CPU reads them (real dims: a prefill, decode steps past a ring wrap, a
// chunk; selected top-512 and all-compressed ratio 128).
TEST_F(GpuOps, SparseAttentionBf16Recent) {
  for (const auto& [ratio, sel_k] : std::vector<std::pair<int64_t, int64_t>>{{4, 512}, {128, 0}}) {
    const int64_t H = 8, Dh = 512, W = 128, N_recent = 1024;  // 8 heads keep the CPU side quick
    const Batch b = make_batch({0, 3000, 2049}, {300, 1, 7});
    const int64_t N = b.rows, R = backend::kv_recent_ring_rows(N_recent, ratio);
    const std::vector<float> q = rnd(N * H * Dh), kv = rnd(N * Dh);
    const OwnedWeight sink = f32_weight({H}, rnd(H));
    const WeightView sv = sink.view();
    std::vector<std::vector<float>> rings, comp, recent;
    std::vector<float> fresh;
    std::vector<int64_t> fresh_row;
    std::vector<int32_t> sel;
    for (const auto& s : b.seqs) {
      rings.push_back(rnd(W * Dh));
      comp.push_back(rnd((s.start + s.len) / ratio * Dh));
      recent.push_back(stored_values(rnd(R * Dh), Dh, {backend::KvRowFormat::BF16, 0, 0}));
      fresh_row.push_back(static_cast<int64_t>(fresh.size()) / Dh);
      const std::vector<float> f = rnd(((s.start + s.len) / ratio - s.start / ratio) * Dh);
      fresh.insert(fresh.end(), f.begin(), f.end());
      for (int64_t i = 0; i < s.len && sel_k > 0; ++i) {
        const int64_t valid = (s.start + i + 1) / ratio;
        for (int64_t k = 0; k < sel_k; ++k) sel.push_back(k < valid ? static_cast<int32_t>(valid - 1 - k) : -1);
      }
    }
    backend::AttentionParams p;
    p.window = W;
    p.ratio = ratio;
    p.sink = &sv;
    p.scale = 1.f / std::sqrt(static_cast<float>(Dh));
    check("sparse_attention bf16 recent ratio " + std::to_string(ratio), f32_tol(Dh * 4), [&](Backend& be) {
      std::vector<Tensor> rt, rr;
      for (const auto& r : rings) rt.push_back(up(be, r, {W, Dh}));
      for (const auto& r : recent) rr.push_back(up(be, r, {R, Dh}));
      const Paged ct = paged(be, comp, Dh, 256 / ratio, 7, {backend::KvRowFormat::FP8, 0, 64});
      backend::RecentEntries re;
      re.positions = N_recent;
      re.rings = rr;
      re.fresh = up(be, fresh, {static_cast<int64_t>(fresh.size()) / Dh, Dh});
      re.fresh_row = fresh_row;
      backend::AttentionParams pr = p;
      pr.recent = &re;
      const Tensor st = sel_k > 0 ? up(be, sel, {N, sel_k}) : Tensor();
      return be.sparse_attention(up(be, q, {N, H, Dh}), up(be, kv, {N, Dh}), b, rt, ct.cache, ct.tables,
                                 sel_k > 0 ? &st : nullptr, pr);
    });
  }
}

// A selection naming an entry the query cannot see is refused on both backends: the CPU in the
// call, the GPU at the next synchronization (the kernel flags it without making the call wait);
// on the GPU by the scores kernel in the CPU's order and (Dh 64, forced) by the matrix unit's.
TEST_F(GpuOps, SparseAttentionInvisibleSelectionIsRefused) {
  for (const int64_t Dh : {6, 64}) {
    const int64_t H = 2, W = 8, m = 4;
    const Batch b = make_batch({3}, {1});  // position 3: one complete entry visible
    const OwnedWeight sink = f32_weight({H}, rnd(H));
    const WeightView sv = sink.view();
    backend::AttentionParams p;
    p.window = W;
    p.ratio = m;
    p.sink = &sv;
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
    const bool mma = dev && Dh % 64 == 0;
    if (mma) dev->set_pv_mma_rows(1);
    const int64_t mma_before = dev ? dev->scores_mma_calls() : 0;
#endif
    for (Backend* be : {cpu.get(), gpu.get()}) {
      const std::vector<Tensor> rings = {up(*be, rnd(W * Dh), {W, Dh})};
      const Paged comp = paged(*be, {rnd(2 * Dh)}, Dh, 2, 0);
      const Tensor sel = up(*be, std::vector<int32_t>{0, 1}, {1, 2});
      try {
        const Tensor out = be->sparse_attention(up(*be, rnd(H * Dh), {1, H, Dh}), up(*be, rnd(Dh), {1, Dh}), b, rings,
                                                comp.cache, comp.tables, &sel, p);
        be->synchronize();
        ADD_FAILURE() << be->name() << " accepted a selection of an invisible entry";
      } catch (const plumb::Error& e) {
        EXPECT_NE(std::string(e.what()).find("selects entry 1 of 1 visible"), std::string::npos) << e.what();
      }
      be->synchronize();  // the report was consumed: the backend works on
    }
#if defined(PLUMB_WITH_CUDA) || defined(PLUMB_WITH_HIP)
    if (mma) {
      EXPECT_GT(dev->scores_mma_calls(), mma_before) << "Dh 64: the scores on the matrix unit did not run";
      dev->set_pv_mma_rows(plumb::gpu::GpuBackend::kPvMmaRowsFrom);
    }
#endif
  }
}

// paged_write on the GPU writes the CPU's pool bitwise (scattered tables, blocks of 1, 3, 64 and
// 256), f32 rows and every encoded format (their bytes compared as words), special values
// among the random ones.
TEST_F(GpuOps, PagedWriteEncoded) {
  const int64_t D = 512;
  std::vector<backend::KvRowSpec> specs = entry_formats(64);
  specs.push_back({backend::KvRowFormat::FP4, 0, 0});
  for (backend::KvRowSpec spec : specs) {
    if (spec.format == backend::KvRowFormat::F32) continue;  // an f32 pool: GpuOps.PagedWrite
    for (const int64_t per_block : {1, 3, 256}) {
      spec.values = D;
      const std::vector<backend::CacheRun> runs = {{2, 70}, {0, 0}, {5, 1}, {0, 9}};
      const std::vector<std::vector<int32_t>> ids = block_ids({72, 0, 6, 9}, per_block, 78);
      int64_t blocks = 0, rows = 0;
      for (const auto& t : ids)
        for (int32_t id : t) blocks = std::max<int64_t>(blocks, int64_t{id} + 1);
      for (const auto& r : runs) rows += r.count;
      std::vector<float> src = rnd(rows * D);
      for (int64_t i = 0; i < rows * D; i += 97) src[i] *= 1e-30f;  // tiny values: subnormal codes
      for (int64_t i = 0; i < D; ++i) src[3 * D + i] = 0.f;           // an all-zero row: the amax floor
      // what a block's amax skips or takes whatever the order: -0, NaN, an infinity
      src[5] = -0.f, src[D + 7] = std::numeric_limits<float>::quiet_NaN(), src[2 * D + 9] = -INFINITY;
      std::vector<int32_t> pools[2];
      Backend* bes[2] = {gpu.get(), cpu.get()};
      for (int i = 0; i < 2; ++i) {
        backend::PagedCache c{bes[i]->full(ElemType::I32, {blocks * per_block, backend::kv_row_words(spec)}, -1.f),
                              per_block, spec};
        bes[i]->paged_write(c, backend::make_block_tables(*bes[i], ids), up(*bes[i], src, {rows, D}), runs);
        pools[i] = host_i32(*bes[i], c.pool);
      }
      EXPECT_EQ(pools[0], pools[1]) << "paged_write " << format_name(spec) << " blocks of " << per_block;
    }
  }
}

// copy_row_runs (KvPool::fork_blocks) on the GPU: the CPU's result bitwise, f32 and i32 rows.
TEST_F(GpuOps, CopyRowRuns) {
  const std::vector<int64_t> from = {0, 12, 40}, to = {20, 4, 28};
  for (ElemType type : {ElemType::F32, ElemType::I32}) {
    std::vector<int32_t> got[2];
    Backend* bes[2] = {gpu.get(), cpu.get()};
    const std::vector<float> init = rnd(48 * 7);
    std::vector<int32_t> words(init.size());
    std::memcpy(words.data(), init.data(), words.size() * 4);
    for (int i = 0; i < 2; ++i) {
      Tensor t = type == ElemType::F32 ? up(*bes[i], init, {48, 7}) : up(*bes[i], words, {48, 7});
      bes[i]->copy_row_runs(t, from, to, 4);
      if (type == ElemType::F32) {
        const std::vector<float> f = host(*bes[i], t);
        got[i].resize(f.size());
        std::memcpy(got[i].data(), f.data(), f.size() * 4);
      } else {
        got[i] = host_i32(*bes[i], t);
      }
    }
    EXPECT_EQ(got[0], got[1]);
  }
}

// paged_write on the GPU writes the CPU's pool bitwise (scattered tables, blocks of 1, 3 and 64).
TEST_F(GpuOps, PagedWrite) {
  for (const int64_t per_block : {1, 3, 64}) {
    const int64_t D = 512;
    const std::vector<backend::CacheRun> runs = {{2, 70}, {0, 0}, {5, 1}, {0, 9}};
    const std::vector<std::vector<int32_t>> ids = block_ids({72, 0, 6, 9}, per_block, 77);
    int64_t blocks = 0, rows = 0;
    for (const auto& t : ids)
      for (int32_t id : t) blocks = std::max<int64_t>(blocks, int64_t{id} + 1);
    for (const auto& r : runs) rows += r.count;
    const std::vector<float> before = rnd(blocks * per_block * D), src = rnd(rows * D);
    std::vector<float> pools[2];
    Backend* bes[2] = {gpu.get(), cpu.get()};
    for (int i = 0; i < 2; ++i) {
      backend::PagedCache c{up(*bes[i], before, {blocks * per_block, D}), per_block, {}};
      bes[i]->paged_write(c, backend::make_block_tables(*bes[i], ids), up(*bes[i], src, {rows, D}), runs);
      pools[i] = host(*bes[i], c.pool);
    }
    expect_close("paged_write blocks of " + std::to_string(per_block), pools[0], pools[1], {blocks * per_block, D}, 0);
  }
}

TEST_F(GpuOps, WindowUpdate) {
  for (const auto& [W, Dh] : std::vector<std::pair<int64_t, int64_t>>{{128, 512}, {8, 6}}) {
    const Batch b = make_batch({0, 300, 5, 17}, {3, 1, W + 2, W});
    const std::vector<float> kv = rnd(b.rows * Dh);
    std::vector<std::vector<float>> init;
    for (int s = 0; s < 4; ++s) init.push_back(rnd(W * Dh));
    std::vector<Tensor> rg, rc;
    for (int s = 0; s < 4; ++s) rg.push_back(up(*gpu, init[s], {W, Dh})), rc.push_back(up(*cpu, init[s], {W, Dh}));
    gpu->window_update(rg, up(*gpu, kv, {b.rows, Dh}), b);
    cpu->window_update(rc, up(*cpu, kv, {b.rows, Dh}), b);
    for (int s = 0; s < 4; ++s)
      expect_close("window_update W " + std::to_string(W) + " seq " + std::to_string(s), host(*gpu, rg[s]),
                   host(*cpu, rc[s]), rc[s].shape(), 0);
  }
}

// Every MLA case (op_cases.h); `compare(what, case, round, op)` judges one (a tolerance or bitwise).
template <class Compare>
void run_mla_cases(GpuOps& t, Compare&& compare) {
  CaseShare share;
  for (const MlaCase& c : mla_cases()) {
    const Batch b = make_batch(c.starts, c.lens);
    const int64_t N = b.rows;
    const std::vector<float> ql = t.rnd(N * c.H * c.R, 0.1f), qp = t.rnd(N * c.H * c.P, 0.1f);
    std::vector<std::vector<float>> lat, kpe;
    for (std::size_t s = 0; s < c.starts.size(); ++s) {
      const int64_t T = c.starts[s] + c.lens[s] + 2;  // caches may be larger than needed
      lat.push_back(t.rnd(T * c.R));
      kpe.push_back(t.rnd(T * c.P));
    }
    for (Round r : {Round::None, Round::BF16})
      for (const backend::KvRowSpec& spec : entry_formats(0)) {  // fp8 latents keep bf16 rope keys
        // A share is one (case, rounding, format): the 200-row case outlasts racecheck's limit.
        if (!share.take()) continue;
        const backend::MlaParams p{0.0722f, r};
        const std::string what =
            "mla_attention " + c.name() + (r == Round::BF16 ? " bf16" : "") + " latents " + format_name(spec);
        compare(what, c, r, [&](Backend& be) {
          const PagedMla caches = paged_mla(be, lat, c.R, kpe, c.P, c.per_block, 7, spec);
          return be.mla_attention(t.up(be, ql, {N, c.H, c.R}), t.up(be, qp, {N, c.H, c.P}), b, caches.latent,
                                  caches.k_pe, caches.tables, p);
        });
      }
  }
}

TEST_F(GpuOps, MlaAttention) {
  run_mla_cases(*this, [&](const std::string& what, const MlaCase& c, Round r, auto&& op) {
    check(what, c.tolerance(r), op);
  });
}

TEST_F(GpuCpuOrder, MlaAttention) {
  run_mla_cases(*this, [&](const std::string& what, const MlaCase&, Round, auto&& op) { check_bitwise(what, op); });
}

}  // namespace
}  // namespace plumb::test

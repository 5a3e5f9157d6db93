// CPU backend ops of the attention and MoE paths against naive loops: the compressor state
// machine vs whole-window pooling, indexer top-k, sparse attention with sink, routing, experts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "op_test_util.h"
#include "paged_util.h"
#include "plumb/backend/backend.h"
#include "plumb/backend/cpu/simquant.h"
#include "plumb/util/error.h"

namespace plumb::test {
namespace {

using backend::Round;
using backend::Tensor;

using CpuAttnOps = CpuOpTest<7>;

// Entry w of one sequence pooled from the whole token series at once (HF's prefill view).
std::vector<double> naive_entry(const std::vector<float>& a, const std::vector<float>& z, const std::vector<float>& ape,
                                int64_t m, int64_t d, int64_t w) {
  const bool overlap = m == 4;
  const int64_t C = (overlap ? 2 : 1) * d;
  std::vector<double> out(static_cast<std::size_t>(d));
  for (int64_t ch = 0; ch < d; ++ch) {
    std::vector<std::pair<double, double>> slots;  // (logit, value)
    if (overlap && w > 0)
      for (int64_t t = (w - 1) * m; t < w * m; ++t) slots.push_back({z[t * C + ch] + ape[(t % m) * C + ch], a[t * C + ch]});
    const int64_t off = overlap ? d : 0;
    for (int64_t t = w * m; t < (w + 1) * m; ++t)
      slots.push_back({z[t * C + off + ch] + ape[(t % m) * C + off + ch], a[t * C + off + ch]});
    double mx = -1e300, s = 0, acc = 0;
    for (auto& [l, v] : slots) mx = std::max(mx, l);
    for (auto& [l, v] : slots) s += std::exp(l - mx);
    for (auto& [l, v] : slots) acc += std::exp(l - mx) / s * v;
    out[ch] = acc;
  }
  return out;
}

TEST_F(CpuAttnOps, CompressorStateMachineMatchesWholeWindowPooling) {
  for (int64_t m : {4, 8}) {
    const int64_t d = 6, C = (m == 4 ? 2 : 1) * d, T0 = 37, T1 = 29;
    const std::vector<float> ape = randn(rng, m * C, 0.5f);
    const OwnedWeight apew = f32_weight({m, C}, ape);
    const WeightView apev = apew.view();
    std::vector<float> a[2] = {randn(rng, T0 * C), randn(rng, T1 * C)}, z[2] = {randn(rng, T0 * C), randn(rng, T1 * C)};
    const int64_t T[2] = {T0, T1};
    std::vector<backend::CompressorState> st;
    for (int s = 0; s < 2; ++s)
      st.push_back({be->full(backend::ElemType::F32, {C / d * m, C}, 0.f),
                    be->full(backend::ElemType::F32, {C / d * m, C}, -INFINITY)});
    // Feed both sequences together in uneven chunks, as a ragged batch.
    std::vector<std::vector<float>> got(2);
    int64_t done[2] = {0, 0};
    const int64_t chunks[] = {1, 3, 2, 7, 4, 1, 9, 5, 6, 13, 17};
    for (int step = 0; done[0] < T0 || done[1] < T1; ++step) {
      backend::Batch b;
      std::vector<float> ab, zb;
      std::vector<backend::CompressorState> sts;
      std::vector<int> which;
      for (int s = 0; s < 2; ++s) {
        const int64_t n = std::min(chunks[(step + 3 * s) % 11], T[s] - done[s]);
        if (n == 0) continue;
        b.seqs.push_back({b.rows, n, done[s]});
        b.rows += n;
        ab.insert(ab.end(), a[s].begin() + done[s] * C, a[s].begin() + (done[s] + n) * C);
        zb.insert(zb.end(), z[s].begin() + done[s] * C, z[s].begin() + (done[s] + n) * C);
        sts.push_back(st[s]);
        which.push_back(s);
      }
      const std::vector<float> e = host(*be, be->compress(upload(ab, {b.rows, C}), upload(zb, {b.rows, C}), b, sts, {m, d, &apev}, Round::None));
      int64_t off = 0;
      for (std::size_t i = 0; i < which.size(); ++i) {
        const int s = which[i];
        const int64_t n_new = (b.seqs[i].start + b.seqs[i].len) / m - b.seqs[i].start / m;
        got[s].insert(got[s].end(), e.begin() + off * d, e.begin() + (off + n_new) * d);
        off += n_new;
        done[s] += b.seqs[i].len;
      }
    }
    for (int s = 0; s < 2; ++s) {
      std::vector<double> ref;
      for (int64_t w = 0; w < T[s] / m; ++w) {
        const std::vector<double> e = naive_entry(a[s], z[s], ape, m, d, w);
        ref.insert(ref.end(), e.begin(), e.end());
      }
      EXPECT_LT(rel_diff(got[s], ref), 1e-6) << "ratio " << m << " seq " << s;
    }
  }
}

// paged_write puts each run's rows at the pool rows its table maps them to (written out here from
// the ids) and leaves every other row as it was, at block sizes 1, 3 and 4.
TEST_F(CpuAttnOps, PagedWriteLandsAtTableMappedRows) {
  const int64_t D = 5;
  for (const int64_t per_block : {1, 3, 4}) {
    // Three sequences: entries 2..6, none, 0..3 (7 and 4 entries in all).
    const std::vector<backend::CacheRun> runs = {{2, 5}, {0, 0}, {0, 4}};
    const std::vector<std::vector<int32_t>> ids = block_ids({7, 0, 4}, per_block, 41 + static_cast<uint64_t>(per_block));
    int64_t blocks = 0;
    for (const auto& t : ids)
      for (int32_t id : t) blocks = std::max<int64_t>(blocks, int64_t{id} + 1);
    const std::vector<float> before = randn(rng, blocks * per_block * D), src = randn(rng, 9 * D);
    backend::PagedCache c{upload(before, {blocks * per_block, D}), per_block, {}};
    be->paged_write(c, backend::make_block_tables(*be, ids), upload(src, {9, D}), runs);
    std::vector<float> want = before;
    int64_t r = 0;
    for (std::size_t s = 0; s < runs.size(); ++s)
      for (int64_t w = runs[s].first; w < runs[s].first + runs[s].count; ++w, ++r) {
        const int64_t row = int64_t{ids[s][static_cast<std::size_t>(w / per_block)]} * per_block + w % per_block;
        std::copy_n(src.begin() + r * D, D, want.begin() + row * D);
      }
    EXPECT_EQ(host(*be, c.pool), want) << "blocks of " << per_block;
  }
}

TEST_F(CpuAttnOps, IndexerTopKWithCausalityAndTies) {
  const int64_t H = 3, di = 8, m = 4, K = 3;
  // one sequence, queries at positions 2..13: visible entries floor((t+1)/4) = 0..3
  const int64_t start = 2, len = 12, n_keys = (start + len) / m;
  std::vector<float> keys = randn(rng, n_keys * di);
  std::copy(keys.begin(), keys.begin() + di, keys.begin() + 2 * di);  // entries 0 and 2 tie exactly
  const std::vector<float> q = randn(rng, len * H * di), w = randn(rng, len * H);
  backend::Batch b;
  b.seqs.push_back({0, len, start});
  b.rows = len;
  const Paged kt = paged(*be, {keys}, di, 2, 11);  // blocks of 2 keys, scattered
  backend::IndexerParams p;
  p.ratio = m;
  p.top_k = K;
  p.relu_scale = 0.5f;
  const std::vector<int32_t> got =
      host_i32(*be, be->indexer_topk(upload(q, {len, H, di}), upload(w, {len, H}), b, kt.cache, kt.tables, p));
  for (int64_t i = 0; i < len; ++i) {
    const int64_t t = start + i, nv = (t + 1) / m;
    std::vector<double> sc(static_cast<std::size_t>(nv));
    for (int64_t e = 0; e < nv; ++e)
      for (int64_t h = 0; h < H; ++h) {
        double dot = 0;
        for (int64_t k = 0; k < di; ++k) dot += double(q[(i * H + h) * di + k]) * keys[e * di + k];
        sc[e] += w[i * H + h] * std::max(dot, 0.0) * 0.5;
      }
    std::vector<int32_t> order(static_cast<std::size_t>(nv));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return sc[x] > sc[y]; });
    for (int64_t k = 0; k < K; ++k) EXPECT_EQ(got[i * K + k], k < nv ? order[k] : -1) << "query " << t << " slot " << k;
  }
}

TEST_F(CpuAttnOps, IndexerBf16ZeroScoresTieToTheLowerIndex) {
  // Every q.k is negative, so every score is a (signed) zero: the first k entries win.
  const int64_t di = 4, n_keys = 6;
  std::vector<float> keys(n_keys * di, 1.f), q = {-1.f, -1.f, -1.f, -1.f}, w = {-2.f};
  backend::Batch b;
  b.seqs.push_back({0, 1, 4 * n_keys - 1});
  b.rows = 1;
  const Paged kt = paged(*be, {keys}, di, 4, 0);
  backend::IndexerParams p;
  p.top_k = 4;
  p.round = Round::BF16;
  const std::vector<int32_t> got =
      host_i32(*be, be->indexer_topk(upload(q, {1, 1, di}), upload(w, {1, 1}), b, kt.cache, kt.tables, p));
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2, 3}));
}

TEST_F(CpuAttnOps, SparseAttentionWindowRingCompressedAndSink) {
  const int64_t H = 2, Dh = 6, W = 8, m = 4;
  const float scale = 0.4f;
  // Sequence A: positions 0..4 (new). Sequence B: positions 20..22 (new), 12..19 in its ring.
  const int64_t TB = 23;
  const std::vector<float> kvA = randn(rng, 5 * Dh), kvB_all = randn(rng, TB * Dh), q = randn(rng, 8 * H * Dh);
  const std::vector<float> sinks = {0.3f, -1.2f};
  const OwnedWeight sink = f32_weight({H}, sinks);
  const WeightView sv = sink.view();
  std::vector<float> ringA(W * Dh, 7.f), ringB(W * Dh);  // A's ring must not be read
  for (int64_t t = 12; t < 20; ++t) std::copy(kvB_all.begin() + t * Dh, kvB_all.begin() + (t + 1) * Dh, ringB.begin() + (t % W) * Dh);
  std::vector<float> kv(kvA);
  kv.insert(kv.end(), kvB_all.begin() + 20 * Dh, kvB_all.end());
  const std::vector<float> compA = randn(rng, 1 * Dh), compB = randn(rng, 5 * Dh);
  backend::Batch b;
  b.seqs = {{0, 5, 0}, {5, 3, 20}};
  b.rows = 8;
  const std::vector<Tensor> rings = {upload(ringA, {W, Dh}), upload(ringB, {W, Dh})};
  const Paged comp = paged(*be, {compA, compB}, Dh, 2, 5);  // B's 5 entries in 3 scattered blocks
  // CSA-style selection, 3 per row (-1 = unused): A's queries at 3, 4 see entry 0; B's see 0..4.
  const std::vector<int32_t> sel = {-1, -1, -1, -1, -1, -1, -1, -1, -1, 0, -1, -1, -1, 0, -1, 4, 1, -1, 3, -1, 2, 0, 4, 2};

  for (bool selected : {false, true}) {
    backend::AttentionParams p;
    p.window = W;
    p.ratio = m;
    p.sink = &sv;
    p.scale = scale;
    const Tensor st = be->from_host(sel.data(), {8, 3});
    const std::vector<float> got =
        host(*be, be->sparse_attention(upload(q, {8, H, Dh}), upload(kv, {8, Dh}), b, rings, comp.cache, comp.tables,
                                       selected ? &st : nullptr, p));
    std::vector<double> ref;
    for (int64_t row = 0; row < 8; ++row) {
      const bool isA = row < 5;
      const int64_t t = isA ? row : 20 + row - 5;
      std::vector<const float*> cand;
      for (int64_t j = std::max<int64_t>(0, t - W + 1); j <= t; ++j) cand.push_back(isA ? &kvA[j * Dh] : &kvB_all[j * Dh]);
      const std::vector<float>& cp = isA ? compA : compB;
      if (selected) {
        for (int k = 0; k < 3; ++k)
          if (sel[row * 3 + k] >= 0) cand.push_back(&cp[sel[row * 3 + k] * Dh]);
      } else {
        for (int64_t e = 0; e < (t + 1) / m; ++e) cand.push_back(&cp[e * Dh]);
      }
      for (int64_t h = 0; h < H; ++h) {
        std::vector<double> s;
        double mx = sinks[h];
        for (const float* c : cand) {
          double d = 0;
          for (int64_t k = 0; k < Dh; ++k) d += double(q[(row * H + h) * Dh + k]) * c[k];
          s.push_back(d * scale);
          mx = std::max(mx, s.back());
        }
        double den = std::exp(sinks[h] - mx);
        for (double v : s) den += std::exp(v - mx);
        for (int64_t k = 0; k < Dh; ++k) {
          double o = 0;
          for (std::size_t j = 0; j < cand.size(); ++j) o += std::exp(s[j] - mx) / den * cand[j][k];
          ref.push_back(o);
        }
      }
    }
    EXPECT_LT(rel_diff(got, ref), 1e-5) << (selected ? "selected" : "all causal");
  }
  // The ring takes each sequence's last min(len, W) rows at slot pos % W.
  std::vector<Tensor> rw = {rings[0], rings[1]};
  be->window_update(rw, upload(kv, {8, Dh}), b);
  const std::vector<float> rb = host(*be, rw[1]), ra = host(*be, rw[0]);
  for (int64_t t = 15; t < 23; ++t)
    for (int64_t k = 0; k < Dh; ++k) EXPECT_EQ(rb[(t % W) * Dh + k], kvB_all[t * Dh + k]);
  for (int64_t t = 0; t < 5; ++t) EXPECT_EQ(ra[t * Dh], kvA[t * Dh]);
  EXPECT_EQ(ra[5 * Dh], 7.f);
}

// AttentionParams::prob_block against a transcription of the release kernel (inference/kernel.py
// sparse_attn_kernel, 276-352) that walks the release's own index row (model.py
// get_window_topk_idxs + the selection, -1 kept in place) in blocks of 64 slots. Inputs are
// multiples of 1/2 (q, kv) and the scale is 1/2, so every score is exact in f32 whatever the
// summation order; the rest is the kernel's f32 recurrence, so the two must agree to rounding.
TEST_F(CpuAttnOps, SparseAttentionFollowsTheReleaseOnlineSoftmaxBlocks) {
  const int64_t H = 2, Dh = 16, W = 72, m = 4, K = 40, B = 64;
  auto halves = [&](int64_t n) {
    std::vector<float> v(static_cast<std::size_t>(n));
    std::uniform_int_distribution<int> d(-4, 4);
    for (float& x : v) x = 0.5f * static_cast<float>(d(rng));
    return v;
  };
  // One prefill of 100 tokens (window part 72 slots wide) and one decode step at position 150.
  const int64_t L = 100, TD = 150;
  const std::vector<float> kvP = halves(L * Dh), kvD_all = halves((TD + 1) * Dh), q = halves((L + 1) * H * Dh);
  const std::vector<float> compP = halves((L / m) * Dh), compD = halves(((TD + 1) / m) * Dh);
  const std::vector<float> sinks = {0.25f, 2.5f};
  const OwnedWeight sink = f32_weight({H}, sinks);
  const WeightView sv = sink.view();
  std::vector<float> ringP(W * Dh, 9.f), ringD(W * Dh);
  for (int64_t t = TD - W; t < TD; ++t)
    std::copy(kvD_all.begin() + t * Dh, kvD_all.begin() + (t + 1) * Dh, ringD.begin() + (t % W) * Dh);
  std::vector<float> kv(kvP);
  kv.insert(kv.end(), kvD_all.begin() + TD * Dh, kvD_all.end());
  std::vector<int32_t> sel;  // a shuffled choice among the visible entries, with -1 gaps inside
  for (int64_t r = 0; r <= L; ++r) {
    const int64_t t = r < L ? r : TD, valid = (t + 1) / m;
    std::vector<int32_t> all(static_cast<std::size_t>(valid));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    for (int64_t k = 0; k < K; ++k) sel.push_back(k < valid && k % 5 != 2 ? all[k] : -1);
  }
  backend::Batch b;
  b.seqs = {{0, L, 0}, {L, 1, TD}};
  b.rows = L + 1;
  const std::vector<Tensor> rings = {upload(ringP, {W, Dh}), upload(ringD, {W, Dh})};
  const Paged comp = paged(*be, {compP, compD}, Dh, 8, 17);
  backend::AttentionParams p;
  p.window = W;
  p.ratio = m;
  p.sink = &sv;
  p.scale = 0.5f;
  p.bf16_probs = true;
  p.prob_block = B;
  const Tensor st = be->from_host(sel.data(), {L + 1, K});
  const std::vector<float> got = host(*be, be->sparse_attention(upload(q, {L + 1, H, Dh}), upload(kv, {L + 1, Dh}), b,
                                                                rings, comp.cache, comp.tables, &st, p));

  std::vector<double> want, global;  // global: one softmax max per row (the rule before issue 13)
  for (int64_t r = 0; r <= L; ++r) {
    const bool prefill = r < L;
    const int64_t t = prefill ? r : TD;
    const std::vector<float>& kvs = prefill ? kvP : kvD_all;
    const std::vector<float>& cp = prefill ? compP : compD;
    std::vector<const float*> row;  // the index row: window part, then the selection (null = -1)
    const int64_t wslots = prefill ? std::min(L, W) : W;
    for (int64_t j = 0; j < wslots; ++j) {
      const int64_t pos = std::max<int64_t>(0, t - W + 1) + j;
      row.push_back(pos <= t ? &kvs[pos * Dh] : nullptr);
    }
    for (int64_t k = 0; k < K; ++k) row.push_back(sel[r * K + k] >= 0 ? &cp[sel[r * K + k] * Dh] : nullptr);
    for (int64_t h = 0; h < H; ++h) {
      const float* qh = &q[(r * H + h) * Dh];
      auto score = [&](const float* kj) {
        float d = 0.f;
        for (int64_t k = 0; k < Dh; ++k) d += qh[k] * kj[k];
        return d * 0.5f;
      };
      for (const int64_t blk : {B, static_cast<int64_t>(row.size())}) {
        float mx = -INFINITY, l = 0.f;
        std::vector<float> acc(static_cast<std::size_t>(Dh), 0.f);
        for (std::size_t s0 = 0; s0 < row.size(); s0 += static_cast<std::size_t>(blk)) {
          const std::size_t s1 = std::min(row.size(), s0 + static_cast<std::size_t>(blk));
          float bm = mx;
          for (std::size_t s = s0; s < s1; ++s)
            if (row[s]) bm = std::max(bm, score(row[s]));
          const float alpha = static_cast<float>(std::exp(static_cast<double>(mx - bm)));
          float bs = 0.f;
          std::vector<float> part(static_cast<std::size_t>(Dh), 0.f);
          for (std::size_t s = s0; s < s1; ++s) {
            if (!row[s]) continue;
            const float e = static_cast<float>(std::exp(static_cast<double>(score(row[s]) - bm)));
            bs += e;
            for (int64_t k = 0; k < Dh; ++k) part[k] += cpu::round_bf16(e) * row[s][k];
          }
          l = l * alpha + bs;
          for (int64_t k = 0; k < Dh; ++k) acc[k] = acc[k] * alpha + part[k];
          mx = bm;
        }
        l += static_cast<float>(std::exp(static_cast<double>(sinks[h] - mx)));
        for (int64_t k = 0; k < Dh; ++k) (blk == B ? want : global).push_back(acc[k] / l);
      }
    }
  }
  EXPECT_LT(rel_diff(got, want), 1e-6);
  // The test can tell the two rules apart: the two-pass softmax misses by far more.
  EXPECT_GT(rel_diff(got, global), 1e-4);
}

// A prefill of P = 12 positions (window part 12 slots of a 16-wide window, softmax blocks of 8, so
// a row's compressed candidates share its last window block) fed in three chunks: given the
// prefill length, every row is bitwise the one-call prefill's; without it, each chunk after the
// first lays its rows out as decode steps (window part 16) and some row comes out different.
TEST_F(CpuAttnOps, SparseAttentionGivenThePrefillDoesNotDependOnTheChunking) {
  const int64_t H = 2, Dh = 8, W = 16, m = 4, P = 12;
  const std::vector<float> q = randn(rng, P * H * Dh), kv = randn(rng, P * Dh), comp = randn(rng, (P / m) * Dh);
  const OwnedWeight sink = f32_weight({H}, {0.5f, -1.f});
  const WeightView sv = sink.view();
  const Paged cache = paged(*be, {comp}, Dh, 2, 5);
  backend::AttentionParams p;
  p.window = W;
  p.ratio = m;
  p.sink = &sv;
  p.scale = 0.35f;
  p.bf16_probs = true;
  p.prob_block = 8;
  // Rows [start, start + len) in one call, the ring holding the positions before start.
  auto call = [&](int64_t start, int64_t len, std::span<const int64_t> prefill) {
    std::vector<float> ring(W * Dh, 0.f);
    for (int64_t t = 0; t < start; ++t) std::copy_n(kv.begin() + t * Dh, Dh, ring.begin() + (t % W) * Dh);
    backend::Batch b;
    b.seqs = {{0, len, start}};
    b.rows = len;
    const std::vector<Tensor> rings = {upload(ring, {W, Dh})};
    const std::vector<float> qs(q.begin() + start * H * Dh, q.begin() + (start + len) * H * Dh);
    const std::vector<float> kvs(kv.begin() + start * Dh, kv.begin() + (start + len) * Dh);
    p.prefill = prefill;
    return host(*be, be->sparse_attention(upload(qs, {len, H, Dh}), upload(kvs, {len, Dh}), b, rings, cache.cache,
                                          cache.tables, nullptr, p));
  };
  const std::vector<float> whole = call(0, P, {});
  const int64_t given[] = {P};
  std::vector<float> with_prefill, without;
  for (auto [start, len] : {std::pair<int64_t, int64_t>{0, 5}, {5, 4}, {9, 3}}) {
    const std::vector<float> a = call(start, len, given), b = call(start, len, {});
    with_prefill.insert(with_prefill.end(), a.begin(), a.end());
    without.insert(without.end(), b.begin(), b.end());
  }
  EXPECT_EQ(with_prefill, whole);
  EXPECT_NE(without, whole);
}

// RouteParams::host_ids: the same routing as the ids alone; ids that differ from them are an error.
TEST_F(CpuAttnOps, RouteHostIdsMustEqualTheIds) {
  const int64_t N = 3, D = 8, E = 6, K = 2;
  const OwnedWeight gw = bf16_weight({E, D}, randn(rng, E * D, 0.5f));
  OwnedWeight t2e = f32_weight({4, K}, randn(rng, 4 * K));
  t2e.dtype = DType::I32;
  const int32_t table[] = {0, 1, 2, 3, 4, 5, 1, 0};
  std::memcpy(t2e.data.data(), table, sizeof table);
  const WeightView gv = gw.view(), tv = t2e.view();
  const std::vector<float> x = randn(rng, N * D);
  const std::vector<int32_t> ids = {3, 0, 2}, other = {3, 1, 2};
  backend::RouteParams rp;
  rp.gate = &gv, rp.tid2eid = &tv, rp.top_k = K;
  const backend::Routing plain = be->route(upload(x, {N, D}), be->from_host(ids.data(), {N}), rp);
  rp.host_ids = ids;
  const backend::Routing with = be->route(upload(x, {N, D}), be->from_host(ids.data(), {N}), rp);
  EXPECT_EQ(host_i32(*be, with.experts), host_i32(*be, plain.experts));
  EXPECT_EQ(host_i32(*be, with.experts), (std::vector<int32_t>{1, 0, 0, 1, 4, 5}));
  rp.host_ids = other;
  EXPECT_THROW(be->route(upload(x, {N, D}), be->from_host(ids.data(), {N}), rp), Error);
}

TEST_F(CpuAttnOps, RoutingAndExperts) {
  const int64_t N = 6, D = 16, E = 5, K = 2, I = 12;
  const float limit = 1.0f, scale = 1.5f;
  const std::vector<float> x = randn(rng, N * D), gate = randn(rng, E * D, 0.5f), bias = randn(rng, E, 0.3f);
  const OwnedWeight gw = bf16_weight({E, D}, gate), bw = f32_weight({E}, bias);
  const WeightView gv = gw.view(), bv = bw.view();
  const std::vector<int32_t> ids(N, 0);
  const std::vector<float> gd = decode_all(gv);
  backend::RouteParams rp;
  rp.gate = &gv, rp.bias = &bv, rp.top_k = K, rp.route_scale = scale;
  const backend::Routing r = be->route(upload(x, {N, D}), be->from_host(ids.data(), {N}), rp);
  const std::vector<int32_t> ex = host_i32(*be, r.experts);
  const std::vector<float> wt = host(*be, r.weights);
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> sc(E), sel(E);
    for (int64_t e = 0; e < E; ++e) {
      double l = 0;
      for (int64_t d = 0; d < D; ++d) l += double(x[n * D + d]) * gd[e * D + d];
      sc[e] = std::sqrt(std::log1p(std::exp(l)));
      sel[e] = sc[e] + bias[e];
    }
    std::vector<int32_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return sel[a] > sel[b]; });
    const double sum = sc[order[0]] + sc[order[1]];
    for (int64_t k = 0; k < K; ++k) {
      EXPECT_EQ(ex[n * K + k], order[k]);
      EXPECT_NEAR(wt[n * K + k], sc[order[k]] / sum * scale, 1e-5);
    }
  }

  // experts: three small SwiGLU FFNs (bf16) + a shared one; inputs scaled so the clamp bites.
  std::vector<OwnedWeight> own;
  std::vector<std::vector<float>> wf;
  for (int e = 0; e < 2 * (E + 1); ++e) {
    const bool down = e % 2 == 1;
    wf.push_back(randn(rng, I * D, 0.6f));
    own.push_back(bf16_weight(down ? std::vector<int64_t>{D, I} : std::vector<int64_t>{I, D}, wf.back()));
  }
  std::vector<OwnedWeight> up;
  for (int e = 0; e < E + 1; ++e) up.push_back(bf16_weight({I, D}, randn(rng, I * D, 0.6f)));
  std::vector<WeightView> views;
  for (int e = 0; e < E + 1; ++e) views.push_back(own[2 * e].view()), views.push_back(own[2 * e + 1].view()), views.push_back(up[e].view());
  std::vector<backend::SwiGluWeights> experts;
  for (int e = 0; e < E; ++e) experts.push_back({&views[3 * e], &views[3 * e + 1], &views[3 * e + 2]});
  const backend::SwiGluWeights shared{&views[3 * E], &views[3 * E + 1], &views[3 * E + 2]};
  for (bool clamp_shared : {true, false}) {
    backend::MoeParams mp;
    mp.swiglu_limit = limit;
    mp.clamp_shared = clamp_shared;
    const std::vector<float> got = host(*be, be->moe(upload(x, {N, D}), r, experts, shared, mp));
    auto ffn = [&](const backend::SwiGluWeights& s, int64_t n, double weight, bool clamp) {
      const std::vector<float> w1 = decode_all(*s.w1), w2 = decode_all(*s.w2), w3 = decode_all(*s.w3);
      std::vector<double> h(I), y(D);
      for (int64_t i = 0; i < I; ++i) {
        double g = 0, u = 0;
        for (int64_t d = 0; d < D; ++d) g += double(w1[i * D + d]) * x[n * D + d], u += double(w3[i * D + d]) * x[n * D + d];
        if (clamp) g = std::min<double>(g, limit), u = std::clamp<double>(u, -limit, limit);
        h[i] = weight * g / (1 + std::exp(-g)) * u;
      }
      for (int64_t d = 0; d < D; ++d)
        for (int64_t i = 0; i < I; ++i) y[d] += w2[d * I + i] * h[i];
      return y;
    };
    std::vector<double> ref;
    for (int64_t n = 0; n < N; ++n) {
      std::vector<double> y = ffn(shared, n, 1.0, clamp_shared);
      for (int64_t k = 0; k < K; ++k) {
        const std::vector<double> ye = ffn(experts[ex[n * K + k]], n, wt[n * K + k], true);
        for (int64_t d = 0; d < D; ++d) y[d] += ye[d];
      }
      ref.insert(ref.end(), y.begin(), y.end());
    }
    EXPECT_LT(rel_diff(got, ref), 1e-5) << "clamp_shared " << clamp_shared;
  }
}

}  // namespace
}  // namespace plumb::test

// Sparse attention with sink over the window + compressed candidates (MODEL-SPEC 3.6), and the
// window ring update.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "plumb/backend/cpu/cpu_backend.h"
#include "plumb/backend/cr_math.h"
#include "plumb/backend/cpu/cpu_tensor.h"
#include "plumb/backend/cpu/paged_rows.h"
#include "plumb/backend/cpu/simquant.h"
#include "plumb/backend/cpu/weight_decode.h"

namespace plumb::cpu {
namespace {

// The release kernel's softmax blocks (AttentionParams::prob_block): slot[j] is where candidate j
// sits in its index row; block 0 = one block for the whole row.
struct SlotLayout {
  std::vector<int64_t> slot;
  int64_t block = 0;
  int64_t block_of(int64_t j) const { return slot[static_cast<std::size_t>(j)] / block; }
};

// o = (sum_j p_j v_j) / (sum_j e_j + e^{sink - m}) over the candidates' scores sc, one softmax
// block after another (a single block when L.block == 0): per block, with m its running max,
// e_j = exp(s_j - m), l = l * alpha + sum e_j and acc = acc * alpha + sum p_j v_j, where alpha =
// exp(m_prev - m) and p_j = e_j (bf16(e_j) with bf16_probs). acc and part hold Dh floats.
// `reversed` sums each block's terms last first (an experiment: CpuBackend::SumOrders).
void attend(const std::vector<const float*>& cand, const std::vector<float>& sc, float sink, int64_t Dh,
            bool bf16_probs, const SlotLayout& L, bool reversed, float* o, std::vector<float>& acc,
            std::vector<float>& part) {
  const int64_t n = static_cast<int64_t>(cand.size());
  float m = -std::numeric_limits<float>::infinity(), l = 0.f;
  std::fill(acc.begin(), acc.end(), 0.f);
  for (int64_t j0 = 0, j1 = 0; j0 < n; j0 = j1) {
    j1 = j0 + 1;
    if (L.block > 0) {
      while (j1 < n && L.block_of(j1) == L.block_of(j0)) ++j1;
    } else {
      j1 = n;
    }
    float bm = m;
    for (int64_t j = j0; j < j1; ++j) bm = std::max(bm, sc[j]);
    const float alpha = exp_cr(m - bm);  // 0 for the first block (m = -inf)
    float bs = 0.f;
    std::fill(part.begin(), part.end(), 0.f);
    for (int64_t k = j0; k < j1; ++k) {
      const int64_t j = reversed ? j0 + j1 - 1 - k : k;
      const float e = exp_cr(sc[j] - bm);
      bs += e;
      const float pv = bf16_probs ? round_bf16(e) : e;  // the release multiplies V by bf16 P
      for (int64_t d = 0; d < Dh; ++d) part[d] += pv * cand[j][d];
    }
    l = l * alpha + bs;
    for (int64_t d = 0; d < Dh; ++d) acc[d] = acc[d] * alpha + part[d];
    m = bm;
  }
  l += exp_cr(sink - m);  // the sink: an extra logit with a zero value vector
  for (int64_t d = 0; d < Dh; ++d) o[d] = acc[d] / l;
}

}  // namespace

Tensor CpuBackend::sparse_attention(const Tensor& q, const Tensor& kv, const Batch& b, std::span<const Tensor> rings,
                                    const PagedCache& compressed, const BlockTables& tables, const Tensor* selected,
                                    const AttentionParams& p) {
  const AttentionDims d = check_sparse_attention(q, kv, b, rings, compressed, tables, selected, p);
  const int64_t N = d.N, H = d.H, Dh = d.Dh, K = d.K, W = p.window, m = p.ratio;
  const std::vector<float> sink = decode_all(*p.sink);
  const int32_t* sel = selected ? i32(*selected, "selected entries") : nullptr;
  const float* qp = f32(q, "q");
  const float* kvp = f32(kv, "kv");
  Tensor out = new_f32({N, H, Dh});
  float* op = f32(out);

  for (std::size_t si = 0; si < b.seqs.size(); ++si) {
    const SeqSlice& s = b.seqs[si];
    const float* ring = f32(rings[si], "window ring");
    const int64_t n_comp = m > 0 ? (s.start + s.len) / m : 0;
    // The entries this sequence's rows read: the selected ones, or every visible one.
    std::vector<uint8_t> wanted;
    if (sel && compressed.encoded() && n_comp > 0) {
      wanted.assign(static_cast<std::size_t>(n_comp), 0);
      for (int64_t r = s.row; r < s.row + s.len; ++r)
        for (int64_t k = 0; k < K; ++k)
          if (const int32_t e = sel[r * K + k]; e >= 0 && e < n_comp) wanted[static_cast<std::size_t>(e)] = 1;
    }
    const PagedRows comp_rows(compressed, tables, si, n_comp, wanted, pool());
    // --kv-bf16-recent: recent entries from this call's new entries or the sequence's ring.
    const RecentEntries* rec = m > 0 ? p.recent : nullptr;
    const int64_t first_new = m > 0 ? s.start / m : 0, R = rec ? rec->rings[si].rows() : 0;
    const float* ring_r = rec ? f32(rec->rings[si], "recent ring") : nullptr;
    const float* fresh = rec && n_comp > first_new ? f32(rec->fresh, "fresh entries") + rec->fresh_row[si] * Dh : nullptr;
    auto entry = [&](int64_t e, int64_t t) -> const float* {
      if (!rec || e < kv_recent_first(t, rec->positions, m)) return comp_rows[e];
      if (e >= first_new) return fresh + (e - first_new) * Dh;
      // e >= first_new - R: a query at t >= start needs entries from floor((start + 1 - N) / m),
      // at most ceil(N / m) + 1 <= R before first_new (check_sparse_attention checked R).
      return ring_r + (e % R) * Dh;
    };

    const int64_t prefill = prefill_of(p, si, s);  // the index row's window part (index_row.h)
    // The softmax's and P.V's sums in another order: the attn site (with the scores) or pv alone.
    const bool reversed = order(kAttn) != SumOrder::Canonical || order(kPv) != SumOrder::Canonical;
    pool().parallel_for(s.len, 1, [&](int64_t i0, int64_t i1) {
      std::vector<const float*> cand;
      std::vector<float> sc, acc(static_cast<std::size_t>(Dh)), part(acc.size());
      SlotLayout layout{{}, p.prob_block};
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t t = s.start + i, row = s.row + i, wslots = index_row_window_slots(t, prefill, W);
        cand.clear();
        layout.slot.clear();
        for (int64_t j = std::max<int64_t>(0, t - W + 1); j <= t; ++j) {
          layout.slot.push_back(static_cast<int64_t>(cand.size()));
          cand.push_back(j >= s.start ? kvp + (s.row + j - s.start) * Dh : ring + (j % W) * Dh);
        }
        if (m > 0) {
          const int64_t visible = (t + 1) / m;  // entries closed at or before t
          if (sel) {
            for (int64_t k = 0; k < K; ++k) {
              const int32_t e = sel[row * K + k];
              if (e < 0) continue;
              if (e >= visible) fail_invisible_entry(t, e, visible);
              layout.slot.push_back(wslots + k);
              cand.push_back(entry(e, t));
            }
          } else {
            for (int64_t e = 0; e < visible; ++e) {
              layout.slot.push_back(wslots + e);
              cand.push_back(entry(e, t));
            }
          }
        }
        sc.resize(cand.size());
        for (int64_t h = 0; h < H; ++h) {
          const float* qh = qp + (row * H + h) * Dh;
          for (std::size_t j = 0; j < cand.size(); ++j) sc[j] = dot(qh, cand[j], Dh, order(kAttn)) * p.scale;
          float* o = op + (row * H + h) * Dh;
          attend(cand, sc, sink[h], Dh, p.bf16_probs, layout, reversed, o, acc, part);
          apply_round(o, Dh, p.out);
        }
      }
    });
  }
  return out;
}

void CpuBackend::window_update(std::span<Tensor> rings, const Tensor& kv, const Batch& b) {
  check_window_update(rings, kv, b);
  for (std::size_t si = 0; si < b.seqs.size(); ++si) {
    const SeqSlice& s = b.seqs[si];
    const int64_t W = rings[si].rows();
    for (int64_t i = std::max<int64_t>(0, s.len - W); i < s.len; ++i) copy_rows(rings[si], (s.start + i) % W, kv, s.row + i, 1);
  }
}

}  // namespace plumb::cpu

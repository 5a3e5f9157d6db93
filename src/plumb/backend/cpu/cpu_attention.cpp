// Sparse attention with sink over the window + compressed candidates (MODEL-SPEC 3.6), and the
// window ring update.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "plumb/backend/cpu/cpu_backend.h"
#include "plumb/backend/cr_math.h"
#include "plumb/backend/cpu/cpu_tensor.h"
#include "plumb/backend/cpu/simquant.h"
#include "plumb/backend/cpu/weight_decode.h"

namespace plumb::cpu {

Tensor CpuBackend::sparse_attention(const Tensor& q, const Tensor& kv, const Batch& b, std::span<const Tensor> rings,
                                    std::span<const Tensor> compressed, const Tensor* selected,
                                    const AttentionParams& p) {
  const AttentionDims d = check_sparse_attention(q, kv, b, rings, compressed, selected, p);
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
    const float* comp = n_comp > 0 ? f32(compressed[si], "compressed cache") : nullptr;

    pool().parallel_for(s.len, 1, [&](int64_t i0, int64_t i1) {
      std::vector<const float*> cand;
      std::vector<float> sc, acc(static_cast<std::size_t>(Dh));
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t t = s.start + i, row = s.row + i;
        cand.clear();
        for (int64_t j = std::max<int64_t>(0, t - W + 1); j <= t; ++j)
          cand.push_back(j >= s.start ? kvp + (s.row + j - s.start) * Dh : ring + (j % W) * Dh);
        if (m > 0) {
          const int64_t visible = (t + 1) / m;  // entries closed at or before t
          if (sel) {
            for (int64_t k = 0; k < K; ++k) {
              const int32_t e = sel[row * K + k];
              if (e < 0) continue;
              if (e >= visible) fail_invisible_entry(t, e, visible);
              cand.push_back(comp + e * Dh);
            }
          } else {
            for (int64_t e = 0; e < visible; ++e) cand.push_back(comp + e * Dh);
          }
        }
        sc.resize(cand.size());
        for (int64_t h = 0; h < H; ++h) {
          const float* qh = qp + (row * H + h) * Dh;
          float mx = -std::numeric_limits<float>::infinity();
          for (std::size_t j = 0; j < cand.size(); ++j) mx = std::max(mx, sc[j] = dot(qh, cand[j], Dh) * p.scale);
          float sum = 0.f;
          std::fill(acc.begin(), acc.end(), 0.f);
          for (std::size_t j = 0; j < cand.size(); ++j) {
            const float e = exp_cr(sc[j] - mx);
            sum += e;
            const float pv = p.bf16_probs ? round_bf16(e) : e;  // the release multiplies V by bf16 P
            for (int64_t d = 0; d < Dh; ++d) acc[d] += pv * cand[j][d];
          }
          sum += exp_cr(sink[h] - mx);  // the sink: an extra logit with a zero value vector
          float* o = op + (row * H + h) * Dh;
          for (int64_t d = 0; d < Dh; ++d) o[d] = acc[d] / sum;
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

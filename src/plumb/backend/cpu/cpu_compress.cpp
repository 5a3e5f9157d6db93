// The KV compressor state machine (MODEL-SPEC 3.4) and the Lightning indexer's top-k (3.5).
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "plumb/backend/cpu/cpu_backend.h"
#include "plumb/backend/cr_math.h"
#include "plumb/backend/cpu/cpu_tensor.h"
#include "plumb/backend/cpu/paged_rows.h"
#include "plumb/backend/cpu/simquant.h"
#include "plumb/backend/cpu/weight_decode.h"

namespace plumb::cpu {

// Prefill and decode both run this token-by-token machine, so a window's entry is computed from
// the same slot values in the same order however the tokens were split into calls.
//   overlap (ratio 4, c = 2): slots [0, m) hold the previous window, [m, 2m) the current one;
//     an entry softmaxes channel ch over the A-half (channel ch) of slots [0, m) and the B-half
//     (channel d + ch) of slots [m, 2m); then the current window becomes the previous one.
//   plain (c = 1): slot t mod m; an entry softmaxes over the m slots.
Tensor CpuBackend::compress(const Tensor& kv, const Tensor& score, const Batch& b, std::span<CompressorState> states,
                            const CompressorParams& p, Round out) {
  const CompressDims cd = check_compress(kv, score, b, states, p);
  const int64_t m = p.ratio, d = p.head_dim, C = cd.C;
  const bool overlap = cd.overlap;
  const std::vector<float> ape = decode_all(*p.ape);
  Tensor pooled = new_f32({cd.entries, d});
  float* dst = f32(pooled);
  const float* a_in = f32(kv, "compressor kv");
  const float* z_in = f32(score, "compressor score");
  std::vector<float> a(static_cast<std::size_t>(2 * m)), z(static_cast<std::size_t>(2 * m));

  for (std::size_t si = 0; si < b.seqs.size(); ++si) {
    const SeqSlice& s = b.seqs[si];
    float* skv = f32(states[si].kv, "compressor kv state");
    float* ssc = f32(states[si].score, "compressor score state");
    for (int64_t i = 0; i < s.len; ++i) {
      const int64_t t = s.start + i, r = t % m;
      const int64_t slot = overlap ? m + r : r;
      for (int64_t ch = 0; ch < C; ++ch) {
        skv[slot * C + ch] = a_in[(s.row + i) * C + ch];
        ssc[slot * C + ch] = z_in[(s.row + i) * C + ch] + ape[r * C + ch];
      }
      if ((t + 1) % m != 0) continue;
      for (int64_t ch = 0; ch < d; ++ch) {
        int64_t n = 0;
        if (overlap) {
          for (int64_t j = 0; j < m; ++j, ++n) a[n] = skv[j * C + ch], z[n] = ssc[j * C + ch];
          for (int64_t j = m; j < 2 * m; ++j, ++n) a[n] = skv[j * C + d + ch], z[n] = ssc[j * C + d + ch];
        } else {
          for (int64_t j = 0; j < m; ++j, ++n) a[n] = skv[j * C + ch], z[n] = ssc[j * C + ch];
        }
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < n; ++j) mx = std::max(mx, z[j]);
        float sum = 0.f;
        for (int64_t j = 0; j < n; ++j) sum += (z[j] = exp_cr(z[j] - mx));
        float acc = 0.f;
        for (int64_t j = 0; j < n; ++j) acc += a[j] * (z[j] / sum);
        dst[ch] = acc;
      }
      apply_round(dst, d, out);
      dst += d;
      if (overlap) {
        std::copy(skv + m * C, skv + 2 * m * C, skv);
        std::copy(ssc + m * C, ssc + 2 * m * C, ssc);
      }
    }
  }
  return pooled;
}

namespace {

// Orders floats with -0 below +0 (the release's top-k ranks +0.0 above -0.0).
int32_t order_key(float x) {
  const int32_t i = std::bit_cast<int32_t>(x);
  return i >= 0 ? i : i ^ 0x7FFFFFFF;  // negatives: larger magnitude -> smaller key; -0 -> -1
}

}  // namespace

Tensor CpuBackend::indexer_topk(const Tensor& q, const Tensor& w, const Batch& b, const PagedCache& keys,
                                const BlockTables& tables, const IndexerParams& p) {
  const IndexerDims d = check_indexer_topk(q, w, b, keys, tables, p);
  const int64_t N = d.N, H = d.H, di = d.di, K = p.top_k, m = p.ratio;
  Tensor out = new_i32({N, K}, -1);
  const float* qp = f32(q, "indexer q");
  const float* wp = f32(w, "indexer weights");
  int32_t* op = i32(out);
  const bool bf16 = p.round == Round::BF16;
  auto rnd = [&](float x) { return bf16 ? round_bf16(x) : x; };
  const SumOrder score_order = order(kAttn);  // Canonical unless an experiment asks (SumOrders)
  for (std::size_t si = 0; si < b.seqs.size(); ++si) {
    const SeqSlice& s = b.seqs[si];
    const int64_t n_total = (s.start + s.len) / m;
    const PagedRows key_rows(keys, tables, si, n_total, {}, pool());
    pool().parallel_for(s.len, 1, [&](int64_t i0, int64_t i1) {
      std::vector<float> score;
      std::vector<int32_t> order;
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t row = s.row + i, n_valid = (s.start + i + 1) / m;
        score.assign(static_cast<std::size_t>(n_valid), 0.f);
        for (int64_t e = 0; e < n_valid; ++e) {
          const float* kp = key_rows[e];
          float acc = 0.f;
          for (int64_t h = 0; h < H; ++h) {
            const float qk = rnd(dot(qp + (row * H + h) * di, kp, di, score_order));
            acc += rnd(rnd(std::max(qk, 0.f) * p.relu_scale) * wp[row * H + h]);
          }
          score[e] = rnd(acc);
        }
        order.resize(static_cast<std::size_t>(n_valid));
        std::iota(order.begin(), order.end(), 0);
        const int64_t k = std::min(K, n_valid);
        // stable descending: a higher score first, equal scores by lower index
        std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t x, int32_t y) {
          const int32_t kx = order_key(score[x]), ky = order_key(score[y]);
          return kx != ky ? kx > ky : x < y;
        });
        std::copy(order.begin(), order.begin() + k, op + row * K);
      }
    });
  }
  return out;
}

}  // namespace plumb::cpu

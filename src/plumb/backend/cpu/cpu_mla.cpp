// Multi-head latent attention in the absorbed form (MODEL-SPEC 7): every head attends over the
// sequence's cached latents and shared rope keys; V is applied by the caller. MlaParams::round
// BF16 reproduces the V3 release's bf16 einsums (each product rounded to bf16, softmax in f32).
#include <algorithm>
#include <cmath>
#include <vector>

#include "plumb/backend/cpu/cpu_backend.h"
#include "plumb/backend/cr_math.h"
#include "plumb/backend/cpu/cpu_tensor.h"
#include "plumb/backend/cpu/paged_rows.h"
#include "plumb/backend/cpu/simquant.h"

namespace plumb::cpu {

Tensor CpuBackend::mla_attention(const Tensor& q_lat, const Tensor& q_pe, const Batch& b, const PagedCache& latent,
                                 const PagedCache& k_pe, const BlockTables& tables, const MlaParams& p) {
  const float scale = p.scale;
  const bool bf16 = p.round == Round::BF16;
  const MlaDims d = check_mla_attention(q_lat, q_pe, b, latent, k_pe, tables);
  const int64_t N = d.N, H = d.H, R = d.R, P = d.P;
  const float* ql = f32(q_lat, "q_lat");
  const float* qp = f32(q_pe, "q_pe");
  Tensor out = new_f32({N, H, R});
  float* op = f32(out);
  for (std::size_t si = 0; si < b.seqs.size(); ++si) {
    const SeqSlice& s = b.seqs[si];
    const int64_t T = s.start + s.len;
    // Position j's rows, through the block table.
    const PagedRows lat_rows(latent, tables, si, T, {}, pool()), pe_rows(k_pe, tables, si, T, {}, pool());
    std::vector<const float*> c(static_cast<std::size_t>(T)), kp(c.size());
    for (int64_t j = 0; j < T; ++j) {
      c[j] = lat_rows[j];
      kp[j] = pe_rows[j];
    }
    const SumOrder other = order(kMla);  // Canonical unless an experiment asks (SumOrders)
    pool().parallel_for(s.len * H, 1, [&](int64_t i0, int64_t i1) {
      std::vector<float> sc(static_cast<std::size_t>(T));
      for (int64_t ih = i0; ih < i1; ++ih) {
        const int64_t i = ih / H, h = ih % H, row = s.row + i, t = s.start + i;
        const float* qlh = ql + (row * H + h) * R;
        const float* qph = qp + (row * H + h) * P;
        float mx = -INFINITY;
        for (int64_t j = 0; j <= t; ++j) {
          if (bf16) {  // two bf16 einsums, their bf16 sum, then the bf16 product with the scale
            float dl = 0.f, dp = 0.f;
            if (other != SumOrder::Canonical) {
              dl = dot_other(qlh, c[j], R, other), dp = dot_other(qph, kp[j], P, other);
            } else {
              for (int64_t r = 0; r < R; ++r) dl += qlh[r] * c[j][r];
              for (int64_t r = 0; r < P; ++r) dp += qph[r] * kp[j][r];
            }
            sc[j] = round_bf16(round_bf16(round_bf16(dl) + round_bf16(dp)) * scale);
          } else {
            float dot = 0.f;
            if (other != SumOrder::Canonical) {
              dot = dot_other(qlh, c[j], R, other, dot_other(qph, kp[j], P, other));
            } else {
              for (int64_t r = 0; r < R; ++r) dot += qlh[r] * c[j][r];
              for (int64_t r = 0; r < P; ++r) dot += qph[r] * kp[j][r];
            }
            sc[j] = dot * scale;
          }
          mx = std::max(mx, sc[j]);
        }
        float sum = 0.f;
        for (int64_t j = 0; j <= t; ++j) sum += sc[j] = exp_cr(sc[j] - mx);
        float* o = op + (row * H + h) * R;
        std::fill(o, o + R, 0.f);
        for (int64_t j = 0; j <= t; ++j) {
          const float pj = bf16 ? round_bf16(sc[j] / sum) : sc[j] / sum;  // softmax(f32).type_as(x)
          for (int64_t r = 0; r < R; ++r) o[r] += pj * c[j][r];
        }
        if (bf16) round_bf16(o, R);
      }
    });
  }
  return out;
}

}  // namespace plumb::cpu

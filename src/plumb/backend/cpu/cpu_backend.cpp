// CPU backend: memory, embedding, norms, RoPE and the simulated-quantization ops.
#include "plumb/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "plumb/backend/cpu/cpu_tensor.h"
#include "plumb/backend/cpu/simquant.h"
#include "plumb/backend/cpu/weight_decode.h"
#include "plumb/util/error.h"

namespace plumb::cpu {

void apply_round(float* x, int64_t n, Round r) {
  if (r == Round::BF16) round_bf16(x, n);
}

namespace {
// Vectors along the last dim (none in an empty tensor, whatever its last dim).
int64_t vectors(const Tensor& x) { return x.numel() == 0 ? 0 : x.numel() / x.dim(-1); }

Tensor clone(const Tensor& x) {
  Tensor y = new_f32(x.shape());
  if (x.numel()) std::memcpy(f32(y), f32(x), static_cast<std::size_t>(x.numel()) * sizeof(float));  // empty: null data
  return y;
}
}  // namespace

// ---- memory

Tensor CpuBackend::full(ElemType type, Shape shape, float value) {
  return type == ElemType::F32 ? new_f32(std::move(shape), value) : new_i32(std::move(shape), static_cast<int32_t>(value));
}

Tensor CpuBackend::from_host(const float* data, Shape shape) {
  Tensor t = new_f32(std::move(shape));
  if (t.numel()) std::memcpy(f32(t), data, static_cast<std::size_t>(t.numel()) * sizeof(float));
  return t;
}

Tensor CpuBackend::from_host(const int32_t* data, Shape shape) {
  Tensor t = new_i32(std::move(shape));
  if (t.numel()) std::memcpy(i32(t), data, static_cast<std::size_t>(t.numel()) * sizeof(int32_t));
  return t;
}

void CpuBackend::to_host(const Tensor& t, float* out) {
  if (t.numel()) std::memcpy(out, f32(t), static_cast<std::size_t>(t.numel()) * sizeof(float));
}

void CpuBackend::to_host(const Tensor& t, int32_t* out) {
  if (t.numel()) std::memcpy(out, i32(t), static_cast<std::size_t>(t.numel()) * sizeof(int32_t));
}

void CpuBackend::copy_rows(Tensor& dst, int64_t dst_row, const Tensor& src, int64_t src_row, int64_t n) {
  check_copy_rows(dst, dst_row, src, src_row, n);
  const int64_t rs = dst.row_size();
  if (n * rs == 0) return;  // an empty tensor has no data pointer (memmove of null is UB even for 0 bytes)
  std::memmove(static_cast<char*>(bytes(dst)) + dst_row * rs * 4, static_cast<const char*>(bytes(src)) + src_row * rs * 4,
               static_cast<std::size_t>(n * rs) * 4);
}

void CpuBackend::copy_row_runs(Tensor& t, std::span<const int64_t> from, std::span<const int64_t> to, int64_t n) {
  check_copy_row_runs(t, from, to, n);
  const int64_t run = n * t.row_size() * 4;
  if (run == 0) return;
  auto* p = static_cast<char*>(bytes(t));
  for (std::size_t i = 0; i < from.size(); ++i)
    if (from[i] != to[i]) std::memcpy(p + to[i] * t.row_size() * 4, p + from[i] * t.row_size() * 4, static_cast<std::size_t>(run));
}

void CpuBackend::paged_write(PagedCache& cache, const BlockTables& tables, const Tensor& src,
                             std::span<const CacheRun> runs) {
  check_paged_write(cache, tables, src, runs);
  const int64_t rs = src.row_size();
  if (src.rows() == 0 || rs == 0) return;
  const float* from = f32(src, "paged_write source");
  if (!cache.encoded()) {
    float* to = f32(cache.pool, "paged cache");
    for (std::size_t s = 0; s < runs.size(); ++s)
      for (int64_t i = 0; i < runs[s].count; ++i, from += rs)
        std::memcpy(to + cache.row(tables, s, runs[s].first + i) * rs, from, static_cast<std::size_t>(rs) * sizeof(float));
    return;
  }
  auto* to = static_cast<uint8_t*>(bytes(cache.pool, "paged cache"));
  const int64_t stride = cache.pool.row_size() * 4;
  for (std::size_t s = 0; s < runs.size(); ++s)
    for (int64_t i = 0; i < runs[s].count; ++i, from += rs)
      kv_encode_row(cache.spec, from, to + cache.row(tables, s, runs[s].first + i) * stride);
}

// ---- elementwise

Tensor CpuBackend::embed(const WeightView& table, const Tensor& ids, std::span<const int32_t> host_ids) {
  const int64_t D = table.cols(), N = ids.numel();
  const int32_t* id = i32(ids, "token ids");
  check_embed_host_ids(host_ids, N);
  if (!host_ids.empty() && !std::equal(host_ids.begin(), host_ids.end(), id))
    fail("embed: the host token ids differ from the token ids");
  check_token_ids({id, static_cast<std::size_t>(N)}, table.rows());
  Tensor y = new_f32({N, D});
  for (int64_t n = 0; n < N; ++n) decode_weight_rows(table, id[n], id[n] + 1, f32(y) + n * D);
  return y;
}

Tensor CpuBackend::repeat_rows(const Tensor& x, int64_t copies) {
  check_repeat_rows(copies);
  const int64_t N = x.rows(), D = x.row_size();
  Tensor y = new_f32({N, copies, D});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < copies; ++c)
      std::memcpy(f32(y) + (n * copies + c) * D, f32(x) + n * D, static_cast<std::size_t>(D) * sizeof(float));
  return y;
}

Tensor CpuBackend::rms_norm(const Tensor& x, const WeightView* weight, float eps, NormMath math, Round out) {
  check_rms_norm(x, weight, math);
  const int64_t D = x.dim(-1), rows = D == 0 ? 0 : x.numel() / D;
  const std::vector<float> w = weight ? decode_all(*weight) : std::vector<float>{};
  Tensor y = clone(x);
  float* p = f32(y);
  for (int64_t r = 0; r < rows; ++r) {
    float* v = p + r * D;
    if (math == NormMath::F32) {
      float ss = 0.f;
      if (order(kNorm) != SumOrder::Canonical) ss = dot_other(v, v, D, order(kNorm));
      else
        for (int64_t i = 0; i < D; ++i) ss += v[i] * v[i];
      // mean as torch computes it: sum times 1/D
      const float inv = 1.0f / std::sqrt(ss * (1.0f / static_cast<float>(D)) + eps);
      for (int64_t i = 0; i < D; ++i) v[i] = weight ? w[i] * (v[i] * inv) : v[i] * inv;
    } else {  // each tensor op of the release's bf16 code rounds its result to bf16
      float ss = 0.f;
      if (order(kNorm) != SumOrder::Canonical) {  // an experiment (SumOrders): the same terms, another order
        std::vector<float> sq(static_cast<std::size_t>(D)), ones(sq.size(), 1.f);
        for (int64_t i = 0; i < D; ++i) sq[i] = round_bf16(v[i] * v[i]);
        ss = dot_other(sq.data(), ones.data(), D, order(kNorm));
      } else {
        for (int64_t i = 0; i < D; ++i) ss += round_bf16(v[i] * v[i]);
      }
      const float var = round_bf16(round_bf16(ss * (1.0f / static_cast<float>(D))) + eps);
      const float inv = round_bf16(1.0f / std::sqrt(var));
      for (int64_t i = 0; i < D; ++i) v[i] = round_bf16(v[i] * inv);
    }
  }
  apply_round(p, x.numel(), out);
  return y;
}

Tensor CpuBackend::scale(const Tensor& x, float s, Round out) {
  Tensor y = clone(x);
  float* p = f32(y);
  for (int64_t i = 0; i < x.numel(); ++i) p[i] *= s;
  apply_round(p, x.numel(), out);
  return y;
}

Tensor CpuBackend::add(const Tensor& a, const Tensor& b, Round out) {
  check_add(a, b);
  Tensor y = clone(a);
  float* p = f32(y);
  const float* q = f32(b, "add operand");
  for (int64_t i = 0; i < a.numel(); ++i) p[i] += q[i];
  apply_round(p, a.numel(), out);
  return y;
}

Tensor CpuBackend::columns(const Tensor& x, int64_t begin, int64_t count) {
  check_columns(x, begin, count);
  const int64_t N = x.rows(), C = x.row_size();
  Tensor y = new_f32({N, count});
  const float* xp = f32(x, "columns input");
  float* yp = f32(y);
  for (int64_t n = 0; n < N; ++n) std::copy_n(xp + n * C + begin, count, yp + n * count);
  return y;
}

Tensor CpuBackend::rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, bool inverse, Round out) {
  check_rope(x, positions, inv_freq);
  const int64_t F = inv_freq.numel(), Dl = x.dim(-1), N = x.rows();
  const int32_t* pos = i32(positions, "positions");
  const float* f = f32(inv_freq, "inv_freq");
  Tensor y = clone(x);
  const int64_t vecs = Dl == 0 ? 0 : x.row_size() / Dl;
  std::vector<float> c(static_cast<std::size_t>(F)), s(static_cast<std::size_t>(F));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = 0; i < F; ++i) {
      // f32 angle as the release computes it; cos/sin correctly rounded from it.
      const float angle = static_cast<float>(pos[n]) * f[i];
      c[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      s[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
      if (inverse) s[i] = -s[i];
    }
    for (int64_t v = 0; v < vecs; ++v) {
      float* r = f32(y) + (n * vecs + v) * Dl + (Dl - 2 * F);
      for (int64_t i = 0; i < F; ++i) {
        const float a = r[2 * i], b = r[2 * i + 1];
        r[2 * i] = a * c[i] - b * s[i];
        r[2 * i + 1] = a * s[i] + b * c[i];
      }
      apply_round(r, 2 * F, out);
    }
  }
  return y;
}

// ---- simulated quantization

Tensor CpuBackend::quant_fp8(const Tensor& x, int64_t cols, int64_t block) {
  check_quant_fp8(x, cols, block);
  const int64_t Dl = x.dim(-1);
  Tensor y = clone(x);
  for (int64_t v = 0; v < vectors(x); ++v) fp8_roundtrip(f32(y) + v * Dl, cols, block);
  return y;
}

Tensor CpuBackend::quant_fp4(const Tensor& x, int64_t block) {
  check_quant_fp4(x, block);
  const int64_t Dl = x.dim(-1);
  Tensor y = clone(x);
  for (int64_t v = 0; v < vectors(x); ++v) fp4_roundtrip(f32(y) + v * Dl, Dl, block);
  return y;
}

Tensor CpuBackend::hadamard(const Tensor& x, Round out) {
  check_hadamard(x);
  const int64_t Dl = x.dim(-1);
  Tensor y = clone(x);
  for (int64_t v = 0; v < vectors(x); ++v) cpu::hadamard(f32(y) + v * Dl, Dl);
  apply_round(f32(y), y.numel(), out);
  return y;
}

CpuBackend::SumOrders CpuBackend::parse_order(const std::string& order) {
  const auto bad = [&](const std::string& part) {
    fail("PLUMB_CPU_ORDER is '{}': expected 'canonical', or '[reversed:|blocked:]' and a comma list of the sites "
         "that sum in that other order (linear, gate, norm, hc, mla, attn, or all); '{}' is none of them",
         order, part);
  };
  SumOrders o;
  o.spec = order;
  if (order.empty() || order == "canonical") return o;
  std::string list = order;
  if (const std::size_t colon = order.find(':'); colon != std::string::npos) {
    const std::string name = order.substr(0, colon);
    if (name == "reversed") o.other = SumOrder::Reversed;
    else if (name == "blocked") o.other = SumOrder::Blocked32;
    else bad(name);
    list = order.substr(colon + 1);
  }
  static constexpr std::pair<const char*, OrderSite> kSites[] = {{"linear", kLinear}, {"gate", kGate}, {"norm", kNorm},
                                                                 {"hc", kHc},         {"mla", kMla},   {"attn", kAttn},
                                                                 {"pv", kPv},         {"all", kAllSites}};
  for (std::size_t at = 0; at <= list.size();) {
    const std::size_t end = std::min(list.find(',', at), list.size());
    const std::string site = list.substr(at, end - at);
    const auto* hit = std::find_if(std::begin(kSites), std::end(kSites), [&](const auto& s) { return site == s.first; });
    if (hit == std::end(kSites)) bad(site);
    o.sites |= hit->second;
    at = end + 1;
  }
  return o;
}

std::vector<std::pair<std::string, std::string>> CpuBackend::facts() const {
  if (orders_.sites == 0) return Backend::facts();
  return {{"backend", name()}, {"reduction_order", orders_.spec}};
}

std::unique_ptr<Backend> make_cpu_backend_in_order(int threads, const std::string& order) {
  return std::make_unique<CpuBackend>(threads, CpuBackend::parse_order(order));
}

}  // namespace plumb::cpu

namespace plumb::backend {

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  const char* order = std::getenv("PLUMB_CPU_ORDER");
  return cpu::make_cpu_backend_in_order(threads, order ? order : "");
}

}  // namespace plumb::backend

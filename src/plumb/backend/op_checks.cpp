#include "plumb/backend/op_checks.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "plumb/format/dtype.h"
#include "plumb/util/error.h"

namespace plumb::backend {

namespace {
void expect_rank(const Tensor& t, int64_t rank, const char* op, const char* what) {
  if (t.rank() != rank) fail("{}: {} must have rank {}, got {}", op, what, rank, t.shape_str());
}
}  // namespace

// ---- memory

void check_copy_rows(const Tensor& dst, int64_t dst_row, const Tensor& src, int64_t src_row, int64_t n) {
  if (dst.row_size() != src.row_size())
    fail("copy_rows: row sizes differ ({} vs {})", dst.shape_str(), src.shape_str());
  if (dst.type() != src.type()) {
    auto name = [](ElemType t) { return t == ElemType::F32 ? "f32" : "i32"; };
    fail("copy_rows: element types differ (destination {}, source {})", name(dst.type()), name(src.type()));
  }
  if (n < 0 || dst_row < 0 || src_row < 0 || dst_row + n > dst.rows() || src_row + n > src.rows())
    fail("copy_rows: rows [{}, +{}) of {} into [{}, +{}) of {} out of range", src_row, n, src.shape_str(), dst_row, n,
         dst.shape_str());
}

void check_copy_row_runs(const Tensor& t, std::span<const int64_t> from, std::span<const int64_t> to, int64_t n) {
  if (from.size() != to.size()) fail("copy_row_runs: {} source runs for {} destination runs", from.size(), to.size());
  if (n < 0) fail("copy_row_runs: runs of {} rows", n);
  std::vector<std::pair<int64_t, int64_t>> dst;
  for (std::size_t i = 0; i < from.size(); ++i) {
    if (from[i] < 0 || to[i] < 0 || from[i] + n > t.rows() || to[i] + n > t.rows())
      fail("copy_row_runs: rows [{}, +{}) into [{}, +{}) of {} out of range", from[i], n, to[i], n, t.shape_str());
    dst.emplace_back(to[i], i);
  }
  // A destination run may overlap no other run of the call (the copies run in parallel).
  std::sort(dst.begin(), dst.end());
  for (std::size_t k = 0; k < dst.size() && n > 0; ++k) {
    const std::size_t i = static_cast<std::size_t>(dst[k].second);
    if (k + 1 < dst.size() && dst[k + 1].first < to[i] + n)
      fail("copy_row_runs: destination runs at rows {} and {} overlap", to[i], dst[k + 1].first);
    for (int64_t f : from)
      if (f < to[i] + n && to[i] < f + n && !(f == to[i] && from[i] == to[i]))
        fail("copy_row_runs: destination rows [{}, +{}) overlap source rows [{}, +{})", to[i], n, f, n);
  }
}

// ---- paged caches

void check_block_tables(const BlockTables& t, std::size_t seqs, const char* op) {
  if (t.seqs != static_cast<int64_t>(seqs) || t.width < 0 || t.ids.size() != seqs * static_cast<std::size_t>(t.width))
    fail("{}: block tables for {} sequences ({} ids of width {}) given for {} sequences", op, t.seqs, t.ids.size(),
         t.width, seqs);
  if (t.width > 0 && (!t.device.defined() || t.device.type() != ElemType::I32 ||
                      t.device.numel() != static_cast<int64_t>(t.ids.size())))
    fail("{}: the block tables' device copy does not hold their {} ids", op, t.ids.size());
}

void check_paged(const PagedCache& c, const BlockTables& t, std::size_t seq, int64_t entries, int64_t row_size,
                 const char* op, const char* what) {
  if (entries <= 0) return;
  if (c.per_block < 1) fail("{}: the {} cache has {} entries per block, at least 1 expected", op, what, c.per_block);
  if (c.values() != row_size) fail("{}: the {} cache holds rows of {} values, {} expected", op, what, c.values(), row_size);
  if (c.encoded()) {
    const KvRowSpec& f = c.spec;
    if (f.rope < 0 || f.rope > f.values || (f.format != KvRowFormat::FP8 && f.rope != 0) ||
        (f.format == KvRowFormat::FP4 && f.values % 2 != 0))
      fail("{}: the {} cache's row format (format {}, {} values, {} rope) is invalid: fp4 rows need an even length, "
           "only fp8 rows have rope dims, at most all of them",
           op, what, static_cast<int>(f.format), f.values, f.rope);
    if (!c.pool.defined() || c.pool.type() != ElemType::I32 || c.pool.rows() % c.per_block != 0 ||
        c.pool.row_size() != kv_row_words(f))
      fail("{}: the {} pool {} must be i32 [blocks * {}, {}] (encoded rows of {} values)", op, what,
           c.pool.defined() ? c.pool.shape_str() : "(none)", c.per_block, kv_row_words(f), row_size);
  } else if (!c.pool.defined() || c.pool.type() != ElemType::F32 || c.pool.rows() % c.per_block != 0 ||
             c.pool.row_size() != row_size) {
    fail("{}: the {} pool {} must be f32 [blocks * {}, {}]", op, what, c.pool.defined() ? c.pool.shape_str() : "(none)",
         c.per_block, row_size);
  }
  const int64_t need = (entries + c.per_block - 1) / c.per_block, blocks = c.pool.rows() / c.per_block;
  if (need > t.width)
    fail("{}: the {} entries 0..{} of sequence {} need {} blocks of {}; its block table has {}", op, what, entries - 1,
         seq, need, c.per_block, t.width);
  for (int64_t i = 0; i < need; ++i) {
    const int32_t id = t.id(seq, i);
    if (id < 0 || id >= blocks)
      fail("{}: block {} of sequence {}'s table is {}, outside the {} pool of {} blocks", op, i, seq, id, what, blocks);
  }
}

void check_paged_write(const PagedCache& c, const BlockTables& t, const Tensor& src, std::span<const CacheRun> runs) {
  check_block_tables(t, runs.size(), "paged_write");
  int64_t rows = 0;
  for (std::size_t s = 0; s < runs.size(); ++s) {
    if (runs[s].first < 0 || runs[s].count < 0)
      fail("paged_write: sequence {} writes {} entries from entry {}", s, runs[s].count, runs[s].first);
    check_paged(c, t, s, runs[s].first + runs[s].count, src.row_size(), "paged_write", "destination");
    rows += runs[s].count;
  }
  if (rows != src.rows()) fail("paged_write: the runs take {} rows, the source {} holds {}", rows, src.shape_str(), src.rows());
  if (rows > 0 && src.type() != ElemType::F32) fail("paged_write: the source must be f32");
}

// ---- elementwise and normalization

void check_token_ids(std::span<const int32_t> ids, int64_t vocab) {
  for (std::size_t n = 0; n < ids.size(); ++n)
    if (ids[n] < 0 || ids[n] >= vocab)
      fail("token id {} at position {} is outside the vocabulary [0, {})", ids[n], n, vocab);
}

void check_embed_host_ids(std::span<const int32_t> host_ids, int64_t n) {
  if (!host_ids.empty() && static_cast<int64_t>(host_ids.size()) != n)
    fail("embed: {} host token ids for {} ids", host_ids.size(), n);
}

void check_repeat_rows(int64_t copies) {
  if (copies < 0) fail("repeat_rows: the number of copies must not be negative, got {}", copies);
}

void check_rms_norm(const Tensor& x, const WeightView* weight, NormMath math) {
  const int64_t D = x.dim(-1);
  if (weight && weight->numel() != D)
    fail("rms_norm: weight '{}' has {} values, input last dim is {}", weight->name, weight->numel(), D);
  if (math == NormMath::BF16Steps && weight) fail("rms_norm: bf16-step math is only defined without a weight");
}

void check_add(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) fail("add: shapes {} and {} differ", a.shape_str(), b.shape_str());
}

void check_columns(const Tensor& x, int64_t begin, int64_t count) {
  if (begin < 0 || count < 0 || begin + count > x.row_size())
    fail("columns: [{}, {}) is not inside the {} columns of {}", begin, begin + count, x.row_size(), x.shape_str());
}

// ---- projections

LinearDims check_linear(const Tensor& x, const WeightView& w, const LinearOpts& o) {
  if (w.shape.size() != 2) fail("linear: weight '{}' must be 2-D", w.name);
  LinearDims d;
  d.groups = o.groups;
  d.K = w.cols();
  if (d.groups <= 0 || w.rows() % d.groups != 0)
    fail("linear: weight '{}' rows {} do not split into {} groups", w.name, w.rows(), d.groups);
  d.rows_per_group = w.rows() / d.groups;
  d.in = x.dim(-1);
  if (d.in != d.groups * d.K)
    fail("linear: input {} has last dim {}, weight '{}' [{}, {}] with {} group(s) needs {}", x.shape_str(), d.in,
         w.name, w.rows(), d.K, d.groups, d.groups * d.K);
  if (w.format == WeightFormat::FP4Block32 && d.K % 2 != 0)
    fail("linear: FP4 weight '{}' has an odd number of columns ({}): its rows are not byte-aligned", w.name, d.K);
  d.N = d.in == 0 ? 0 : x.numel() / d.in;
  d.out = x.shape();
  d.out.back() = d.groups * d.rows_per_group;
  return d;
}

// ---- rotary embedding and simulated quantization

void check_rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq) {
  const int64_t F = inv_freq.numel(), Dl = x.dim(-1);
  if (2 * F > Dl) fail("rope: {} frequencies need {} dims, vectors have {}", F, 2 * F, Dl);
  if (positions.numel() != x.rows()) fail("rope: {} positions for {} rows", positions.numel(), x.rows());
}

namespace {
// A block size is used once per vector, so a call without vectors never reads it.
void check_block(const Tensor& x, int64_t block, const char* op) {
  if (x.numel() > 0 && block <= 0) fail("{}: quantization block size must be positive, got {}", op, block);
}
}  // namespace

void check_quant_fp8(const Tensor& x, int64_t cols, int64_t block) {
  const int64_t Dl = x.dim(-1);
  if (cols < 0 || cols > Dl) fail("quant_fp8: {} columns of vectors of {}", cols, Dl);
  check_block(x, block, "quant_fp8");
}

void check_quant_fp4(const Tensor& x, int64_t block) { check_block(x, block, "quant_fp4"); }

void check_hadamard(const Tensor& x) {
  const int64_t Dl = x.dim(-1);
  if (x.numel() > 0 && (Dl & (Dl - 1)) != 0) fail("hadamard: length {} is not a power of two", Dl);
}

// ---- mHC

namespace {
HcDims check_site(const Tensor& X, const HcParams& p, bool head, const char* op) {
  expect_rank(X, 3, op, "streams");
  const HcDims d{X.dim(0), X.dim(1), X.dim(2)};
  const int64_t width = d.hc * d.D, n_out = head ? d.hc : (2 + d.hc) * d.hc, n_scale = head ? 1 : 3;
  if (!p.fn || !p.base || !p.scale) fail("{}: missing mHC parameters", op);
  if (p.fn->rows() != n_out || p.fn->cols() != width || p.base->numel() != n_out || p.scale->numel() != n_scale)
    fail("{}: '{}' must be [{}, {}] with {} base and {} scale values", op, p.fn->name, n_out, width, n_out, n_scale);
  return d;
}
}  // namespace

HcDims check_hc_pre(const Tensor& X, const HcParams& p) { return check_site(X, p, false, "hc_pre"); }
HcDims check_hc_head(const Tensor& X, const HcParams& p) { return check_site(X, p, true, "hc_head"); }

HcDims check_hc_post(const Tensor& out, const Tensor& X, const Tensor& post, const Tensor& comb) {
  expect_rank(X, 3, "hc_post", "streams");
  const HcDims d{X.dim(0), X.dim(1), X.dim(2)};
  if (out.numel() != d.N * d.D || post.numel() != d.N * d.hc || comb.numel() != d.N * d.hc * d.hc)
    fail("hc_post: shapes out {} streams {} post {} comb {} disagree", out.shape_str(), X.shape_str(), post.shape_str(),
         comb.shape_str());
  return d;
}

// ---- ragged batches

void check_batch(const Batch& b, int64_t N, const char* op) {
  for (std::size_t si = 0; si < b.seqs.size(); ++si) {
    const SeqSlice& s = b.seqs[si];
    if (s.len < 0 || s.start < 0 || (s.len > 0 && (s.row < 0 || s.row + s.len > N)))
      fail("{}: sequence {} (rows [{}, +{}) at position {}) lies outside the {} rows of the batch", op, si, s.row,
           s.len, s.start, N);
  }
}

// ---- compressor and indexer

CompressDims check_compress(const Tensor& kv, const Tensor& score, const Batch& b,
                            std::span<const CompressorState> states, const CompressorParams& p) {
  const int64_t m = p.ratio, d = p.head_dim;
  if (m <= 0 || !p.ape) fail("compress: needs a positive ratio and the ape bias");
  CompressDims r;
  r.overlap = m == 4;
  const int64_t c = r.overlap ? 2 : 1;
  r.C = c * d;
  r.slots = c * m;
  if (kv.dim(-1) != r.C || score.dim(-1) != r.C || kv.rows() != b.rows || score.rows() != b.rows)
    fail("compress: kv {} / score {} must be [{}, {}]", kv.shape_str(), score.shape_str(), b.rows, r.C);
  if (states.size() != b.seqs.size()) fail("compress: {} states for {} sequences", states.size(), b.seqs.size());
  if (p.ape->numel() != m * r.C) fail("compress: ape '{}' must be [{}, {}]", p.ape->name, m, r.C);
  check_batch(b, b.rows, "compress");
  for (std::size_t si = 0; si < states.size(); ++si) {
    const CompressorState& st = states[si];
    if (st.kv.numel() != r.slots * r.C || st.score.numel() != r.slots * r.C)
      fail("compress: state of sequence {} (kv {}, score {}) must be [{}, {}]", si, st.kv.shape_str(),
           st.score.shape_str(), r.slots, r.C);
    const SeqSlice& s = b.seqs[si];
    r.entries += (s.start + s.len) / m - s.start / m;
  }
  return r;
}

IndexerDims check_indexer_topk(const Tensor& q, const Tensor& w, const Batch& b, const PagedCache& keys,
                               const BlockTables& tables, const IndexerParams& p) {
  expect_rank(q, 3, "indexer_topk", "q");
  const IndexerDims d{q.dim(0), q.dim(1), q.dim(2)};
  if (w.numel() != d.N * d.H) fail("indexer_topk: weights {} for q {}", w.shape_str(), q.shape_str());
  check_block_tables(tables, b.seqs.size(), "indexer_topk");
  if (p.ratio <= 0) fail("indexer_topk: ratio must be positive, got {}", p.ratio);
  if (p.top_k < 0) fail("indexer_topk: top_k must not be negative, got {}", p.top_k);
  check_batch(b, d.N, "indexer_topk");
  for (std::size_t si = 0; si < b.seqs.size(); ++si)
    check_paged(keys, tables, si, (b.seqs[si].start + b.seqs[si].len) / p.ratio, d.di, "indexer_topk", "key");
  return d;
}

// ---- attention

AttentionDims check_sparse_attention(const Tensor& q, const Tensor& kv, const Batch& b, std::span<const Tensor> rings,
                                     const PagedCache& compressed, const BlockTables& tables, const Tensor* selected,
                                     const AttentionParams& p) {
  expect_rank(q, 3, "sparse_attention", "q");
  AttentionDims d{q.dim(0), q.dim(1), q.dim(2)};
  const int64_t W = p.window, m = p.ratio;
  if (kv.rows() != d.N || kv.row_size() != d.Dh) fail("sparse_attention: kv {} for q {}", kv.shape_str(), q.shape_str());
  if (rings.size() != b.seqs.size()) fail("sparse_attention: {} window rings for {} sequences", rings.size(), b.seqs.size());
  if (m > 0) check_block_tables(tables, b.seqs.size(), "sparse_attention");
  if (!p.sink || p.sink->numel() != d.H) fail("sparse_attention: sink must hold {} values", d.H);
  if (selected && selected->rank() != 2)
    fail("sparse_attention: selection {} must be [{}, K]", selected->shape_str(), d.N);
  if (selected && selected->rows() != d.N)
    fail("sparse_attention: selection {} for {} queries", selected->shape_str(), d.N);
  d.K = selected ? selected->dim(1) : 0;
  check_batch(b, d.N, "sparse_attention");
  if (!p.prefill.empty() && p.prefill.size() != b.seqs.size())
    fail("sparse_attention: {} prefill lengths for {} sequences", p.prefill.size(), b.seqs.size());
  for (const int64_t P : p.prefill)
    if (P < 0) fail("sparse_attention: a prefill of {} positions", P);
  for (std::size_t si = 0; si < rings.size(); ++si) {
    const SeqSlice& s = b.seqs[si];
    if (rings[si].rows() != W || rings[si].row_size() != d.Dh)
      fail("sparse_attention: window ring {} must be [{}, {}]", rings[si].shape_str(), W, d.Dh);
    if (m > 0) check_paged(compressed, tables, si, (s.start + s.len) / m, d.Dh, "sparse_attention", "compressed");
  }
  if (const RecentEntries* r = p.recent) {
    if (r->positions < 1 || m < 1)
      fail("sparse_attention: bf16 recent entries of {} positions for a cache of ratio {}", r->positions, m);
    if (r->rings.size() != b.seqs.size() || r->fresh_row.size() != b.seqs.size())
      fail("sparse_attention: {} recent rings and {} fresh offsets for {} sequences", r->rings.size(), r->fresh_row.size(),
           b.seqs.size());
    const int64_t R = kv_recent_ring_rows(r->positions, m);
    for (std::size_t si = 0; si < b.seqs.size(); ++si) {
      const SeqSlice& s = b.seqs[si];
      if (r->rings[si].rows() < R || r->rings[si].row_size() != d.Dh || r->rings[si].type() != ElemType::F32)
        fail("sparse_attention: recent ring {} must be f32 [>= {}, {}]", r->rings[si].shape_str(), R, d.Dh);
      const int64_t fresh = (s.start + s.len) / m - s.start / m;
      if (fresh > 0 && (!r->fresh.defined() || r->fresh.row_size() != d.Dh || r->fresh_row[si] < 0 ||
                        r->fresh_row[si] + fresh > r->fresh.rows()))
        fail("sparse_attention: sequence {}'s {} new entries from row {} are not in the fresh entries {}", si, fresh,
             r->fresh_row[si], r->fresh.defined() ? r->fresh.shape_str() : "(none)");
    }
  }
  return d;
}

void fail_invisible_entry(int64_t pos, int64_t entry, int64_t visible) {
  fail("sparse_attention: query at position {} selects entry {} of {} visible", pos, entry, visible);
}

void check_window_update(std::span<const Tensor> rings, const Tensor& kv, const Batch& b) {
  if (rings.size() != b.seqs.size()) fail("window_update: {} rings for {} sequences", rings.size(), b.seqs.size());
  check_batch(b, kv.rows(), "window_update");
  for (std::size_t si = 0; si < rings.size(); ++si) {
    if (b.seqs[si].len == 0) continue;  // an untouched ring may be anything
    if (rings[si].rows() <= 0) fail("window_update: window ring {} has no rows", rings[si].shape_str());
    if (rings[si].row_size() != kv.row_size() || rings[si].type() != kv.type())
      fail("window_update: window ring {} does not hold rows of kv {}", rings[si].shape_str(), kv.shape_str());
  }
}

MlaDims check_mla_attention(const Tensor& q_lat, const Tensor& q_pe, const Batch& b, const PagedCache& latent,
                            const PagedCache& k_pe, const BlockTables& tables) {
  expect_rank(q_lat, 3, "mla_attention", "q_lat");
  expect_rank(q_pe, 3, "mla_attention", "q_pe");
  const MlaDims d{q_lat.dim(0), q_lat.dim(1), q_lat.dim(2), q_pe.dim(2)};
  if (q_pe.dim(0) != d.N || q_pe.dim(1) != d.H)
    fail("mla_attention: q_pe {} for q_lat {}", q_pe.shape_str(), q_lat.shape_str());
  check_block_tables(tables, b.seqs.size(), "mla_attention");
  check_batch(b, d.N, "mla_attention");
  for (std::size_t si = 0; si < b.seqs.size(); ++si) {
    const int64_t T = b.seqs[si].start + b.seqs[si].len;
    check_paged(latent, tables, si, T, d.R, "mla_attention", "latent");
    check_paged(k_pe, tables, si, T, d.P, "mla_attention", "rope key");
  }
  return d;
}

// ---- mixture of experts

RouteDims check_route(const Tensor& x, const Tensor& ids, const RouteParams& p) {
  if (!p.gate) fail("route: no gate weight");
  RouteDims d{x.rows(), x.row_size(), p.gate->rows(), p.top_k};
  if (p.gate->cols() != d.D)
    fail("route: gate '{}' is [{}, {}], input {}", p.gate->name, d.E, p.gate->cols(), x.shape_str());
  if (d.K <= 0 || d.K > d.E) fail("route: top_k {} with {} experts", d.K, d.E);
  d.G = std::max<int64_t>(p.n_group, 1);
  d.TG = d.G > 1 ? p.topk_group : d.G;
  if (d.E % d.G != 0 || d.TG < 1 || d.TG > d.G || (d.G > 1 && d.E / d.G < 2) || d.K > d.TG * (d.E / d.G))
    fail("route: {} experts in {} groups keeping {} cannot give top-{}", d.E, d.G, d.TG, d.K);
  if (p.bias && p.bias->numel() != d.E)
    fail("route: bias '{}' has {} values for {} experts", p.bias->name, p.bias->numel(), d.E);
  if (p.tid2eid) {
    if (ids.numel() != d.N) fail("route: {} token ids for {} rows", ids.numel(), d.N);
    if (!p.host_ids.empty() && static_cast<int64_t>(p.host_ids.size()) != d.N)
      fail("route: {} host token ids for {} rows", p.host_ids.size(), d.N);
    if (p.tid2eid->cols() < d.K)
      fail("route: tid2eid '{}' has {} experts per token, top_k is {}", p.tid2eid->name, p.tid2eid->cols(), d.K);
    if (p.tid2eid->dtype != DType::I32 && p.tid2eid->dtype != DType::I64)
      fail("route: tid2eid '{}' must hold I32 or I64 expert ids, not {}", p.tid2eid->name, dtype_name(p.tid2eid->dtype));
  }
  return d;
}

std::vector<int32_t> hash_experts(const WeightView& t, std::span<const int32_t> ids, int64_t top_k, int64_t n_experts) {
  std::vector<int32_t> out(ids.size() * static_cast<std::size_t>(top_k));
  for (std::size_t n = 0; n < ids.size(); ++n) {
    const int64_t id = ids[n];
    if (id < 0 || id >= t.rows()) fail("route: token id {} outside tid2eid", id);
    for (int64_t k = 0; k < top_k; ++k) {
      const int64_t idx = id * t.cols() + k;
      int64_t e;
      if (t.dtype == DType::I64) {
        std::memcpy(&e, t.data + idx * 8, 8);
      } else {
        int32_t v;
        std::memcpy(&v, t.data + idx * 4, 4);
        e = v;
      }
      if (e < 0 || e >= n_experts) fail("route: tid2eid[{}] names expert {} of {}", id, e, n_experts);
      out[n * top_k + k] = static_cast<int32_t>(e);
    }
  }
  return out;
}

MoeDims check_moe_routing(const Tensor& x, const Routing& r) {
  MoeDims d{x.rows(), x.row_size(), r.experts.rank() == 2 ? r.experts.dim(1) : 0};
  if (r.experts.rank() != 2 || r.experts.dim(0) != d.N || r.weights.numel() != r.experts.numel())
    fail("moe: routing experts {} and weights {} do not fit input {}", r.experts.shape_str(), r.weights.shape_str(),
         x.shape_str());
  return d;
}

MoeDims check_moe(const Tensor& x, const Routing& r, const SwiGluWeights& shared) {
  MoeDims d = check_moe_routing(x, r);
  d.shared_I = check_swiglu(shared, d.D, "shared expert");
  return d;
}

int64_t check_swiglu(const SwiGluWeights& w, int64_t D, const std::string& which) {
  if (!w.w1 || !w.w2 || !w.w3) fail("moe: {} has missing weights", which);
  const int64_t I = w.w1->rows();
  if (w.w1->cols() != D || w.w3->rows() != I || w.w3->cols() != D || w.w2->rows() != D || w.w2->cols() != I)
    fail("moe: {} weights '{}' [{}, {}], '{}' [{}, {}], '{}' [{}, {}] do not form a SwiGLU over {} inputs",
         which, w.w1->name, w.w1->rows(), w.w1->cols(), w.w3->name, w.w3->rows(), w.w3->cols(), w.w2->name,
         w.w2->rows(), w.w2->cols(), D);
  return I;
}

}  // namespace plumb::backend

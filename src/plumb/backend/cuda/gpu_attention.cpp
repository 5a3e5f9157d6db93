// GPU backend: sparse attention with sink over the window + compressed candidates (MODEL-SPEC
// 3.6), the window ring update, and absorbed MLA (MODEL-SPEC 7). Host side: the same checks and
// messages as the CPU reference (cpu_attention.cpp, cpu_mla.cpp), per-sequence pointer tables,
// launches of kernels/attention.cu.
#include <algorithm>
#include <cstring>
#include <vector>

#include "plumb/backend/cuda/gpu_backend.h"
#include "plumb/backend/cuda/kernels/attention.h"
#include "plumb/util/error.h"

namespace plumb::gpu {

namespace {

void expect_rank(const Tensor& t, int64_t rank, const char* op, const char* what) {
  if (t.rank() != rank) fail("{}: {} must have rank {}, got {}", op, what, rank, t.shape_str());
}

// One device buffer holding a per-sequence table followed by the sequence of every batch row
// (-1 for a row no sequence covers), so a call pays for one upload.
template <class Seq>
struct SeqTable {
  Tensor buf;
  const Seq* seqs = nullptr;
  const int32_t* row_seq = nullptr;
};

template <class Seq>
SeqTable<Seq> upload_table(GpuBackend& g, const std::vector<Seq>& seqs, const Batch& b, int64_t N) {
  std::vector<int32_t> row_seq(static_cast<std::size_t>(N), -1);
  for (std::size_t si = 0; si < b.seqs.size(); ++si) {
    const SeqSlice& s = b.seqs[si];
    if (s.row < 0 || s.len < 0 || s.row + s.len > N)
      fail("batch sequence {} (rows [{}, +{})) lies outside the {} rows of the batch", si, s.row, s.len, N);
    for (int64_t i = 0; i < s.len; ++i) row_seq[static_cast<std::size_t>(s.row + i)] = static_cast<int32_t>(si);
  }
  const std::size_t seq_bytes = (seqs.size() * sizeof(Seq) + 15) / 16 * 16;
  std::vector<std::byte> host(seq_bytes + row_seq.size() * sizeof(int32_t));
  if (!seqs.empty()) std::memcpy(host.data(), seqs.data(), seqs.size() * sizeof(Seq));
  if (!row_seq.empty()) std::memcpy(host.data() + seq_bytes, row_seq.data(), row_seq.size() * sizeof(int32_t));
  SeqTable<Seq> t;
  t.buf = g.upload(host.data(), host.size());
  auto* base = static_cast<std::byte*>(dev_ptr(t.buf));
  t.seqs = reinterpret_cast<const Seq*>(base);
  t.row_seq = reinterpret_cast<const int32_t*>(base + seq_bytes);
  return t;
}

// Query rows per launch: all of them when the scores fit in shared memory, else as many as keep
// the global score scratch ([rows * H, max_cand] floats) within a fixed budget.
int64_t rows_per_launch(int64_t N, int64_t H, int64_t max_cand, bool scratch) {
  constexpr int64_t kScratchBytes = int64_t{1} << 30;
  if (!scratch) return N;
  return std::clamp<int64_t>(kScratchBytes / (H * max_cand * 4), 1, N);
}

}  // namespace

Tensor GpuBackend::sparse_attention(const Tensor& q, const Tensor& kv, const Batch& b, std::span<const Tensor> rings,
                                    std::span<const Tensor> compressed, const Tensor* selected,
                                    const AttentionParams& p) {
  expect_rank(q, 3, "sparse_attention", "q");
  const int64_t N = q.dim(0), H = q.dim(1), Dh = q.dim(2), W = p.window, m = p.ratio;
  if (kv.rows() != N || kv.row_size() != Dh) fail("sparse_attention: kv {} for q {}", kv.shape_str(), q.shape_str());
  if (rings.size() != b.seqs.size() || (m > 0 && compressed.size() != b.seqs.size()))
    fail("sparse_attention: per-sequence state for {} sequences expected", b.seqs.size());
  if (!p.sink || p.sink->numel() != H) fail("sparse_attention: sink must hold {} values", H);
  if (selected && selected->rank() != 2)
    fail("sparse_attention: selection {} must be [{}, K]", selected->shape_str(), N);
  const int64_t K = selected ? selected->dim(1) : 0;
  if (selected && selected->rows() != N) fail("sparse_attention: selection {} for {} queries", selected->shape_str(), N);
  const int32_t* sel = selected ? dev_i32(*selected, "selected entries") : nullptr;
  k::SparseAttnArgs a;
  a.q = dev_f32(q, "q");
  a.kv = dev_f32(kv, "kv");
  if (k::sparse_attention_smem_cands(Dh) < 0) fail("sparse_attention: head dim {} is too large for the GPU kernel", Dh);

  std::vector<k::AttnSeq> seqs(b.seqs.size());
  int64_t max_cand = 0;
  for (std::size_t si = 0; si < b.seqs.size(); ++si) {
    const SeqSlice& s = b.seqs[si];
    if (rings[si].rows() != W || rings[si].row_size() != Dh)
      fail("sparse_attention: window ring {} must be [{}, {}]", rings[si].shape_str(), W, Dh);
    seqs[si].ring = dev_f32(rings[si], "window ring");
    const int64_t n_comp = m > 0 ? (s.start + s.len) / m : 0;
    if (n_comp > 0 && (compressed[si].rows() < n_comp || compressed[si].row_size() != Dh))
      fail("sparse_attention: compressed cache {} holds fewer than {} entries", compressed[si].shape_str(), n_comp);
    seqs[si].comp = n_comp > 0 ? dev_f32(compressed[si], "compressed cache") : nullptr;
    seqs[si].row = s.row;
    seqs[si].start = s.start;
    seqs[si].len = s.len;
    if (s.len > 0) {
      const int64_t nwin = std::min(W, s.start + s.len);
      max_cand = std::max(max_cand, nwin + (m > 0 ? (sel ? K : n_comp) : 0));
    }
  }

  Tensor out = alloc(ElemType::F32, {N, H, Dh});
  if (N == 0 || H == 0 || Dh == 0) return out;
  const SeqTable<k::AttnSeq> table = upload_table(*this, seqs, b, N);
  // Scores stay in shared memory unless a row has too many candidates (long contexts without a
  // selection): then a global scratch of [N * H, max_cand] floats.
  const bool use_scratch = max_cand > k::sparse_attention_smem_cands(Dh);
  const int64_t chunk = rows_per_launch(N, H, max_cand, use_scratch);
  Tensor scratch;
  if (use_scratch) scratch = alloc(ElemType::F32, {chunk * H * max_cand});
  Tensor err;
  if (sel && m > 0) {
    const k::AttnError zero{};
    err = upload(&zero, sizeof zero);
  }

  a.seqs = table.seqs;
  a.row_seq = table.row_seq;
  a.selected = m > 0 ? sel : nullptr;
  a.sink = weight(*p.sink);
  a.out = dev_f32(out);
  a.scratch = scratch.defined() ? dev_f32(scratch) : nullptr;
  a.err = err.defined() ? static_cast<k::AttnError*>(dev_ptr(err)) : nullptr;
  a.N = N;
  a.H = H;
  a.Dh = Dh;
  a.W = W;
  a.ratio = m;
  a.K = K;
  a.max_cand = max_cand;
  a.scale = p.scale;
  a.bf16_probs = p.bf16_probs;
  a.prob_block = p.prob_block;
  if (p.prob_block > 0 && (W + max_cand) / p.prob_block + 1 > k::sparse_attention_max_prob_blocks())
    fail("sparse_attention: {} candidates in blocks of {} exceed the kernel's {} softmax blocks", max_cand,
         p.prob_block, k::sparse_attention_max_prob_blocks());
  a.round_out = p.out == Round::BF16;
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    a.row0 = r0;
    a.rows = std::min(chunk, N - r0);
    check_launch(k::sparse_attention(a, stream()), "sparse_attention");
  }
  if (err.defined()) {  // a selected entry the query cannot see is the caller's bug: say so
    k::AttnError e;
    check(gpuMemcpyAsync(&e, dev_ptr(err), sizeof e, gpuMemcpyDeviceToHost, stream()), "sparse_attention check");
    sync();
    if (e.flag) fail("sparse_attention: query at position {} selects entry {} of {} visible", e.pos, e.entry, e.visible);
  }
  return out;
}

void GpuBackend::window_update(std::span<Tensor> rings, const Tensor& kv, const Batch& b) {
  if (rings.size() != b.seqs.size()) fail("window_update: {} rings for {} sequences", rings.size(), b.seqs.size());
  const float* src = dev_f32(kv, "kv");
  const int64_t rs = kv.row_size();
  std::vector<k::RowCopy> jobs;
  for (std::size_t si = 0; si < b.seqs.size(); ++si) {
    const SeqSlice& s = b.seqs[si];
    const int64_t W = rings[si].rows();
    if (s.len <= 0) continue;
    if (rings[si].row_size() != rs)
      fail("copy_rows: row sizes differ ({} vs {})", rings[si].shape_str(), kv.shape_str());
    if (W <= 0) fail("window_update: window ring {} has no rows", rings[si].shape_str());
    if (s.row < 0 || s.row + s.len > kv.rows())
      fail("window_update: rows [{}, +{}) of sequence {} out of range of kv {}", s.row, s.len, si, kv.shape_str());
    float* ring = dev_f32(rings[si], "window ring");
    // The last min(len, W) rows land in distinct slots, so the copies never race.
    for (int64_t i = std::max<int64_t>(0, s.len - W); i < s.len; ++i)
      jobs.push_back({ring + ((s.start + i) % W) * rs, s.row + i});
  }
  if (jobs.empty() || rs == 0) return;
  Tensor table = upload(jobs.data(), jobs.size() * sizeof(k::RowCopy));
  check_launch(k::copy_rows_to(static_cast<const k::RowCopy*>(dev_ptr(table)), static_cast<int64_t>(jobs.size()), src,
                               rs, stream()),
               "window_update");
}

Tensor GpuBackend::mla_attention(const Tensor& q_lat, const Tensor& q_pe, const Batch& b,
                                 std::span<const Tensor> latent, std::span<const Tensor> k_pe, const MlaParams& p) {
  expect_rank(q_lat, 3, "mla_attention", "q_lat");
  expect_rank(q_pe, 3, "mla_attention", "q_pe");
  const int64_t N = q_lat.dim(0), H = q_lat.dim(1), R = q_lat.dim(2), P = q_pe.dim(2);
  if (q_pe.dim(0) != N || q_pe.dim(1) != H) fail("mla_attention: q_pe {} for q_lat {}", q_pe.shape_str(), q_lat.shape_str());
  if (latent.size() != b.seqs.size() || k_pe.size() != b.seqs.size())
    fail("mla_attention: caches for {} sequences expected", b.seqs.size());
  k::MlaArgs a;
  a.q_lat = dev_f32(q_lat, "q_lat");
  a.q_pe = dev_f32(q_pe, "q_pe");
  if (k::mla_attention_smem_cands(R, P) < 0) fail("mla_attention: head dims {} + {} are too large for the GPU kernel", R, P);
  std::vector<k::MlaSeq> seqs(b.seqs.size());
  int64_t max_cand = 0;
  for (std::size_t si = 0; si < b.seqs.size(); ++si) {
    const SeqSlice& s = b.seqs[si];
    const int64_t T = s.start + s.len;
    if (latent[si].rows() < T || latent[si].row_size() != R || k_pe[si].rows() < T || k_pe[si].row_size() != P)
      fail("mla_attention: caches {} / {} must hold {} rows of {} / {}", latent[si].shape_str(), k_pe[si].shape_str(),
           T, R, P);
    seqs[si].latent = dev_f32(latent[si], "latent cache");
    seqs[si].k_pe = dev_f32(k_pe[si], "rope key cache");
    seqs[si].row = s.row;
    seqs[si].start = s.start;
    seqs[si].len = s.len;
    if (s.len > 0) max_cand = std::max(max_cand, T);
  }
  Tensor out = alloc(ElemType::F32, {N, H, R});
  if (N == 0 || H == 0 || R == 0) return out;
  const SeqTable<k::MlaSeq> table = upload_table(*this, seqs, b, N);
  const bool use_scratch = max_cand > k::mla_attention_smem_cands(R, P);
  const int64_t chunk = rows_per_launch(N, H, max_cand, use_scratch);
  Tensor scratch;
  if (use_scratch) scratch = alloc(ElemType::F32, {chunk * H * max_cand});
  a.seqs = table.seqs;
  a.row_seq = table.row_seq;
  a.out = dev_f32(out);
  a.scratch = scratch.defined() ? dev_f32(scratch) : nullptr;
  a.N = N;
  a.H = H;
  a.R = R;
  a.P = P;
  a.max_cand = max_cand;
  a.scale = p.scale;
  a.bf16 = p.round == Round::BF16;
  a.cpu_order = cpu_order();
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    a.row0 = r0;
    a.rows = std::min(chunk, N - r0);
    check_launch(k::mla_attention(a, stream()), "mla_attention");
  }
  return out;
}

}  // namespace plumb::gpu

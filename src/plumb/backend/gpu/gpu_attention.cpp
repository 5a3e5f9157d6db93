// GPU backend: sparse attention with sink over the window + compressed candidates (MODEL-SPEC
// 3.6), the window ring update, and absorbed MLA (MODEL-SPEC 7). Host side: the op's checks
// (op_checks.h), per-sequence pointer tables, launches of kernels/attention.cu.
#include <algorithm>
#include <cstring>
#include <vector>

#include "plumb/backend/gpu/gpu_backend.h"
#include "plumb/backend/gpu/kernels/attention.h"
#include "plumb/util/error.h"

namespace plumb::gpu {

namespace {

// One device buffer holding a per-sequence table followed by the sequence of every batch row
// (-1 for a row no sequence covers), so a call pays for one upload. The batch has passed
// check_batch.
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

// Sequence si's block table row on the device (the tables were uploaded once for the forward).
const int32_t* device_blocks(const BlockTables& t, std::size_t si) {
  return t.width > 0 ? dev_i32(t.device, "block tables") + si * static_cast<std::size_t>(t.width) : nullptr;
}

// Query rows per launch: all of them when the scores fit in shared memory, else as many as keep
// the global score scratch ([rows * H, per_head] floats) within a fixed budget.
int64_t rows_per_launch(int64_t N, int64_t H, int64_t per_head, bool scratch) {
  constexpr int64_t kScratchBytes = int64_t{1} << 30;
  if (!scratch) return N;
  return std::clamp<int64_t>(kScratchBytes / (H * per_head * 4), 1, N);
}

}  // namespace

Tensor GpuBackend::sparse_attention(const Tensor& q, const Tensor& kv, const Batch& b, std::span<const Tensor> rings,
                                    const PagedCache& compressed, const BlockTables& tables, const Tensor* selected,
                                    const AttentionParams& p) {
  const AttentionDims d = check_sparse_attention(q, kv, b, rings, compressed, tables, selected, p);
  const int64_t N = d.N, H = d.H, Dh = d.Dh, K = d.K, W = p.window, m = p.ratio;
  const int32_t* sel = selected ? dev_i32(*selected, "selected entries") : nullptr;
  k::SparseAttnArgs a;
  a.q = dev_f32(q, "q");
  a.kv = dev_f32(kv, "kv");
  if (k::sparse_attention_smem_cands(Dh) < 0) fail("sparse_attention: head dim {} is too large for the GPU kernel", Dh);

  std::vector<k::AttnSeq> seqs(b.seqs.size());
  int64_t max_cand = 0, entries = 0;
  for (std::size_t si = 0; si < b.seqs.size(); ++si) {
    const SeqSlice& s = b.seqs[si];
    seqs[si].ring = dev_f32(rings[si], "window ring");
    const int64_t n_comp = m > 0 ? (s.start + s.len) / m : 0;
    seqs[si].blocks = n_comp > 0 ? device_blocks(tables, si) : nullptr;
    entries += n_comp;
    seqs[si].row = s.row;
    seqs[si].start = s.start;
    seqs[si].len = s.len;
    seqs[si].prefill = prefill_of(p, si, s);
    if (m > 0 && p.recent) {
      seqs[si].recent = dev_f32(p.recent->rings[si], "recent ring");
      seqs[si].recent_rows = p.recent->rings[si].rows();
      if (n_comp > s.start / m) seqs[si].fresh = dev_f32(p.recent->fresh, "fresh entries") + p.recent->fresh_row[si] * Dh;
    }
    if (s.len > 0) {
      const int64_t nwin = std::min(W, s.start + s.len);
      max_cand = std::max(max_cand, nwin + (m > 0 ? (sel ? K : n_comp) : 0));
    }
  }

  Tensor out = alloc(ElemType::F32, {N, H, Dh});
  if (N == 0 || H == 0 || Dh == 0) return out;
  // An encoded pool's entries decoded once into f32 rows when the rows read them many times over
  // (a prefill chunk: each entry thousands of times) instead of at every read; the same values.
  // Up to 256 MiB of them (a 4,096-row chunk at 128K positions takes 64 MiB); past that, the pool.
  constexpr int64_t kDecodedMaxBytes = int64_t{256} << 20;
  Tensor decoded;
  if (m > 0 && compressed.encoded() && entries > 0 && N * (sel ? K : max_cand) / entries >= entry_reuse_ &&
      entries * Dh * 4 <= kDecodedMaxBytes) {
    decoded = alloc(ElemType::F32, {entries, Dh});
    float* next = dev_f32(decoded);
    for (std::size_t si = 0; si < b.seqs.size(); ++si) {
      const int64_t n_comp = (b.seqs[si].start + b.seqs[si].len) / m;
      if (n_comp > 0) seqs[si].decoded = next;
      next += n_comp * Dh;
    }
  }
  // Else, with a selection (a decode step), each row's selected entries decoded once into
  // [N * K, Dh] f32 rows: the split P.V's one-head blocks would each decode them again
  // (selected_entries_, the default since PERF.md v32; PLUMB_GPU_ATTN_ENTRIES=chunks: off).
  Tensor selected_rows;
  if (selected_entries_ && !decoded.defined() && m > 0 && sel && K > 0 && compressed.encoded() && entries > 0 &&
      N * K * Dh * 4 <= kDecodedMaxBytes)
    selected_rows = alloc(ElemType::F32, {N * K, Dh});
  const SeqTable<k::AttnSeq> table = upload_table(*this, seqs, b, N);
  // Scores stay in shared memory unless a row has too many candidates (long contexts without a
  // selection) or the split kernels run (they pass them, and the softmax's results, between
  // launches): then a global scratch of [N * H, head_stride] floats.
  a.split = split_attention_ && k::sparse_attention_split(Dh, max_cand);
  const bool use_scratch = a.split || max_cand > k::sparse_attention_smem_cands(Dh);
  a.max_prob_blocks = p.prob_block > 0 ? (W + max_cand) / p.prob_block + 1 : 0;
  a.head_stride = k::sparse_attention_scratch_floats(max_cand, a.max_prob_blocks, a.split);
  const int64_t chunk = rows_per_launch(N, H, a.head_stride, use_scratch);
  Tensor scratch;
  if (use_scratch) scratch = alloc(ElemType::F32, {chunk * H * a.head_stride});

  a.seqs = table.seqs;
  a.row_seq = table.row_seq;
  a.selected = m > 0 ? sel : nullptr;
  a.comp = paged_ref(compressed, entries > 0, "compressed cache");
  a.sink = weight(*p.sink);
  a.out = dev_f32(out);
  a.scratch = scratch.defined() ? dev_f32(scratch) : nullptr;
  a.err = sel && m > 0 ? attention_error_flag() : nullptr;
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
  a.recent_positions = m > 0 && p.recent ? p.recent->positions : 0;
  if (a.max_prob_blocks > k::sparse_attention_max_prob_blocks())
    fail("sparse_attention: {} candidates in blocks of {} exceed the kernel's {} softmax blocks", max_cand,
         p.prob_block, k::sparse_attention_max_prob_blocks());
  a.round_out = p.out == Round::BF16;
  a.pv_heads = pv_heads_;
  // The matrix unit's scores and P.V: the fast order, from pv_mma_rows_ query rows (their staging
  // reads f32 rows only: the window's, an f32 pool's or the decoded entries).
  const bool mma = a.split && !cpu_order(kAttn) && k::sparse_attention_mma(Dh) && N >= pv_mma_rows_ &&
                   (entries == 0 || !compressed.encoded() || decoded.defined() || selected_rows.defined());
  a.pv_mma = mma && p.bf16_probs;
  a.scores_mma = mma && scores_mma_;
  a.mma_matrix = (a.scores_mma || a.pv_mma) && mma_matrix_ok();  // (HIP: MFMA once its self-check passed)
  a.scores_span = scores_span_;
  if (decoded.defined()) {
    check_launch(k::decode_attention_entries(a, static_cast<int64_t>(b.seqs.size()), stream()),
                 "sparse_attention (decoding the compressed entries)");
    decoded_entry_calls_ += 1;
  }
  if (selected_rows.defined()) {
    a.selected_rows = dev_f32(selected_rows);
    check_launch(k::decode_selected_entries(a, stream()), "sparse_attention (decoding the selected entries)");
    selected_entry_calls_ += 1;
  }
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    a.row0 = r0;
    a.rows = std::min(chunk, N - r0);
    check_launch(k::sparse_attention(a, stream()), "sparse_attention");
    pv_mma_calls_ += a.pv_mma;
    scores_mma_calls_ += a.scores_mma;
  }
  return out;
}

// A selected entry the query cannot see is the caller's bug: the kernel flags the first one in a
// device word that the next synchronization reads (sync()), so no call waits for the device.
k::AttnError* GpuBackend::attention_error_flag() {
  if (!attn_err_.defined()) {
    const k::AttnError zero{};
    attn_err_ = upload(&zero, sizeof zero);
  }
  attn_err_pending_ = true;
  return static_cast<k::AttnError*>(dev_ptr(attn_err_));
}

void GpuBackend::check_attention_errors() {
  attn_err_pending_ = false;
  k::AttnError e;
  check(gpuMemcpy(&e, dev_ptr(attn_err_), sizeof e, gpuMemcpyDeviceToHost), "sparse_attention check");
  if (!e.flag) return;
  const k::AttnError zero{};
  copy_in(dev_ptr(attn_err_), &zero, sizeof zero, "sparse_attention check reset");  // ordered on stream_
  fail_invisible_entry(e.pos, e.entry, e.visible);
}

void GpuBackend::window_update(std::span<Tensor> rings, const Tensor& kv, const Batch& b) {
  check_window_update(rings, kv, b);
  const float* src = dev_f32(kv, "kv");
  const int64_t rs = kv.row_size();
  std::vector<k::RowCopy> jobs;
  for (std::size_t si = 0; si < b.seqs.size(); ++si) {
    const SeqSlice& s = b.seqs[si];
    const int64_t W = rings[si].rows();
    if (s.len <= 0) continue;
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

void GpuBackend::paged_write(PagedCache& cache, const BlockTables& tables, const Tensor& src,
                             std::span<const CacheRun> runs) {
  check_paged_write(cache, tables, src, runs);
  const int64_t rs = src.row_size();
  if (src.rows() == 0 || rs == 0) return;
  auto* pool = static_cast<uint8_t*>(dev_ptr(cache.pool, "paged cache"));
  const int64_t stride = cache.pool.row_size() * 4;
  // Distinct entries of distinct tables: no two jobs write the same row.
  std::vector<k::RowCopy> copies;
  std::vector<k::RowEncode> encodes;
  int64_t row = 0;
  for (std::size_t s = 0; s < runs.size(); ++s)
    for (int64_t i = 0; i < runs[s].count; ++i, ++row) {
      uint8_t* dst = pool + cache.row(tables, s, runs[s].first + i) * stride;
      if (cache.encoded()) {
        encodes.push_back({dst, row});
      } else {
        copies.push_back({reinterpret_cast<float*>(dst), row});
      }
    }
  const float* from = dev_f32(src, "paged_write source");
  if (cache.encoded()) {
    Tensor table = upload(encodes.data(), encodes.size() * sizeof(k::RowEncode));
    check_launch(k::encode_rows(static_cast<const k::RowEncode*>(dev_ptr(table)), static_cast<int64_t>(encodes.size()),
                                from, paged_ref(cache, true, "paged cache").spec, stream()),
                 "paged_write");
    return;
  }
  Tensor table = upload(copies.data(), copies.size() * sizeof(k::RowCopy));
  check_launch(k::copy_rows_to(static_cast<const k::RowCopy*>(dev_ptr(table)), static_cast<int64_t>(copies.size()), from,
                               rs, stream()),
               "paged_write");
}

void GpuBackend::copy_row_runs(Tensor& t, std::span<const int64_t> from, std::span<const int64_t> to, int64_t n) {
  check_copy_row_runs(t, from, to, n);
  const int64_t rs = t.row_size();
  if (n == 0 || rs == 0) return;
  auto* base = static_cast<float*>(dev_ptr(t, "copy_row_runs tensor"));  // any 4-byte elements, copied bitwise
  static_cast<GpuStorage*>(t.storage())->act_fp8 = Tensor();  // its values change
  std::vector<k::RowCopy> jobs;
  for (std::size_t i = 0; i < from.size(); ++i)
    if (from[i] != to[i])
      for (int64_t r = 0; r < n; ++r) jobs.push_back({base + (to[i] + r) * rs, from[i] + r});
  if (jobs.empty()) return;
  Tensor table = upload(jobs.data(), jobs.size() * sizeof(k::RowCopy));
  check_launch(k::copy_rows_to(static_cast<const k::RowCopy*>(dev_ptr(table)), static_cast<int64_t>(jobs.size()), base,
                               rs, stream()),
               "copy_row_runs");
}

Tensor GpuBackend::mla_attention(const Tensor& q_lat, const Tensor& q_pe, const Batch& b, const PagedCache& latent,
                                 const PagedCache& k_pe, const BlockTables& tables, const MlaParams& p) {
  const MlaDims d = check_mla_attention(q_lat, q_pe, b, latent, k_pe, tables);
  const int64_t N = d.N, H = d.H, R = d.R, P = d.P;
  k::MlaArgs a;
  a.q_lat = dev_f32(q_lat, "q_lat");
  a.q_pe = dev_f32(q_pe, "q_pe");
  if (k::mla_attention_smem_cands(R, P) < 0) fail("mla_attention: head dims {} + {} are too large for the GPU kernel", R, P);
  std::vector<k::MlaSeq> seqs(b.seqs.size());
  int64_t max_cand = 0;
  for (std::size_t si = 0; si < b.seqs.size(); ++si) {
    const SeqSlice& s = b.seqs[si];
    const int64_t T = s.start + s.len;
    seqs[si].blocks = T > 0 ? device_blocks(tables, si) : nullptr;
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
  a.latent = paged_ref(latent, max_cand > 0, "latent cache");
  a.k_pe = paged_ref(k_pe, max_cand > 0, "rope key cache");
  a.out = dev_f32(out);
  a.scratch = scratch.defined() ? dev_f32(scratch) : nullptr;
  a.N = N;
  a.H = H;
  a.R = R;
  a.P = P;
  a.max_cand = max_cand;
  a.scale = p.scale;
  a.bf16 = p.round == Round::BF16;
  a.cpu_order = cpu_order(kMla);
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    a.row0 = r0;
    a.rows = std::min(chunk, N - r0);
    check_launch(k::mla_attention(a, stream()), "mla_attention");
  }
  return out;
}

}  // namespace plumb::gpu

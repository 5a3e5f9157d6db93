// GPU backend: the KV compressor state machine (MODEL-SPEC 3.4) and the Lightning indexer's
// top-k (3.5). Host side: the op's checks (op_checks.h), per-sequence tables, launches of
// kernels/compress.cu.
#include <algorithm>
#include <cstring>
#include <vector>

#include "plumb/backend/gpu/gpu_backend.h"
#include "plumb/backend/gpu/kernels/compress.h"
#include "plumb/util/error.h"

namespace plumb::gpu {

Tensor GpuBackend::compress(const Tensor& kv, const Tensor& score, const Batch& b, std::span<CompressorState> states,
                            const CompressorParams& p, Round out) {
  const CompressDims cd = check_compress(kv, score, b, states, p);
  const int64_t m = p.ratio, d = p.head_dim;

  k::CompressArgs a;
  a.kv = dev_f32(kv, "compressor kv");
  a.score = dev_f32(score, "compressor score");
  std::vector<k::CompSeq> seqs(b.seqs.size());
  int64_t entries = 0;
  for (std::size_t si = 0; si < b.seqs.size(); ++si) {
    const SeqSlice& s = b.seqs[si];
    seqs[si].kv = dev_f32(states[si].kv, "compressor kv state");
    seqs[si].score = dev_f32(states[si].score, "compressor score state");
    seqs[si].row = s.row;
    seqs[si].start = s.start;
    seqs[si].len = s.len;
    seqs[si].out_base = entries;
    entries += (s.start + s.len) / m - s.start / m;
  }
  Tensor pooled = alloc(ElemType::F32, {cd.entries, d});
  if (seqs.empty() || d == 0) return pooled;
  // The table must stay alive until the kernel has read it: `table` lives to the end of this
  // call, and the allocator only hands its memory out again to later work on the same stream.
  Tensor table = upload(seqs.data(), seqs.size() * sizeof(k::CompSeq));
  a.seqs = static_cast<const k::CompSeq*>(dev_ptr(table));
  a.n_seqs = static_cast<int64_t>(seqs.size());
  a.ape = weight(*p.ape);
  a.out = dev_f32(pooled);
  a.m = m;
  a.d = d;
  a.overlap = cd.overlap;
  a.round_out = out == Round::BF16;
  // A chunk of many tokens (prefill): every window pooled by its own threads (k::compress_chunks);
  // a decode step's one token a sequence: the walk, one launch.
  const bool chunks = std::any_of(b.seqs.begin(), b.seqs.end(), [](const SeqSlice& s) { return s.len > 1; });
  if (!chunks) {
    check_launch(k::compress(a, stream()), "compress");
    return pooled;
  }
  std::vector<int32_t> entry_seq(static_cast<std::size_t>(entries));
  for (std::size_t si = 0; si < seqs.size(); ++si)
    std::fill_n(entry_seq.begin() + seqs[si].out_base, (b.seqs[si].start + b.seqs[si].len) / m - b.seqs[si].start / m,
                static_cast<int32_t>(si));
  const Tensor es = entries > 0 ? upload(entry_seq.data(), entry_seq.size() * sizeof(int32_t)) : Tensor();
  check_launch(k::compress_chunks(a, entries > 0 ? dev_i32(es) : nullptr, entries, stream()), "compress (chunks)");
  return pooled;
}

Tensor GpuBackend::indexer_topk(const Tensor& q, const Tensor& w, const Batch& b, const PagedCache& keys,
                                const BlockTables& tables, const IndexerParams& p) {
  const IndexerDims d = check_indexer_topk(q, w, b, keys, tables, p);
  const int64_t N = d.N, H = d.H, di = d.di, K = p.top_k, m = p.ratio;
  if (!k::indexer_topk_supported(K, H, di))
    fail("indexer_topk: top_k {} with {} heads of {} dims is too large for the GPU kernels' shared memory", K, H, di);
  k::IndexerArgs a;
  a.q = dev_f32(q, "indexer q");
  a.w = dev_f32(w, "indexer weights");

  std::vector<k::IdxSeq> seqs(b.seqs.size());
  std::vector<int32_t> row_seq(static_cast<std::size_t>(N), -1);
  int64_t max_n = 0;
  for (std::size_t si = 0; si < b.seqs.size(); ++si) {
    const SeqSlice& s = b.seqs[si];
    const int64_t n_total = (s.start + s.len) / m;
    seqs[si].blocks = n_total > 0 ? dev_i32(tables.device, "block tables") + si * static_cast<std::size_t>(tables.width)
                                  : nullptr;
    seqs[si].row = s.row;
    seqs[si].start = s.start;
    seqs[si].len = s.len;
    if (s.len <= 0) continue;
    for (int64_t i = 0; i < s.len; ++i) row_seq[static_cast<std::size_t>(s.row + i)] = static_cast<int32_t>(si);
    max_n = std::max(max_n, n_total);
  }

  Tensor out = alloc(ElemType::I32, {N, K});
  if (N == 0 || K == 0) return out;
  // One upload: the sequence table, then the sequence of every row (-1: no sequence, all -1 out).
  const std::size_t seq_bytes = (seqs.size() * sizeof(k::IdxSeq) + 15) / 16 * 16;
  std::vector<std::byte> host(seq_bytes + row_seq.size() * sizeof(int32_t));
  if (!seqs.empty()) std::memcpy(host.data(), seqs.data(), seqs.size() * sizeof(k::IdxSeq));
  std::memcpy(host.data() + seq_bytes, row_seq.data(), row_seq.size() * sizeof(int32_t));
  Tensor table = upload(host.data(), host.size());
  auto* base = static_cast<std::byte*>(dev_ptr(table));
  // Scores of every (row, visible entry): the top-k's radix passes read them back.
  Tensor scores;
  if (max_n > 0) scores = alloc(ElemType::F32, {N, max_n});

  a.seqs = reinterpret_cast<const k::IdxSeq*>(base);
  a.row_seq = reinterpret_cast<const int32_t*>(base + seq_bytes);
  a.scores = scores.defined() ? dev_f32(scores) : nullptr;
  a.keys = paged_ref(keys, max_n > 0, "indexer keys");
  a.out = dev_i32(out);
  a.N = N;
  a.H = H;
  a.di = di;
  a.K = K;
  a.m = m;
  a.max_n = max_n;
  a.relu_scale = p.relu_scale;
  a.bf16 = p.round == Round::BF16;
  check_launch(k::indexer_topk(a, stream()), "indexer_topk");
  return out;
}

}  // namespace plumb::gpu

// decode_attention_entries (attention.h): a call's compressed entries decoded once into f32 rows;
// decode_selected_entries: each query row's selected entries (decode steps).
// The sparse attention kernels otherwise decode a value (kv_value: a byte load, the code's
// conversion and its block scale) at every read, and a prefill chunk's rows read each entry's
// values thousands of times: at 4,096 rows the P.V on the matrix unit spent most of its 4.4
// billion instructions of a CSA layer there (PERF.md v26). The values are the same either way.
#include "plumb/backend/gpu/kernels/attention.h"
#include "plumb/backend/gpu/kernels/launch.h"
#include "plumb/backend/gpu/kernels/sparse_attention_common.h"

namespace plumb::gpu::k {
namespace {

constexpr int kThreads = 128;
constexpr unsigned kBlocksPerSeq = 256;  // blocks of a sequence (grid x), each striding over entries

// grid (kBlocksPerSeq, sequences): block x of sequence y decodes entries x, x + kBlocksPerSeq, ...
__global__ void __launch_bounds__(kThreads) decode_entries_kernel(SparseAttnArgs a) {
  pdl_begin();
  const AttnSeq sq = a.seqs[blockIdx.y];
  if (!sq.decoded) return;
  const int64_t n = (sq.start + sq.len) / a.ratio;
  for (int64_t e = blockIdx.x; e < n; e += gridDim.x) {
    const uint8_t* row = paged_entry(a.comp, sq.blocks, e);
    for (int64_t i = threadIdx.x; i < a.Dh; i += kThreads)
      sq.decoded[e * a.Dh + i] = backend::kv_value(a.comp.spec, row, i);
  }
}

constexpr int64_t kMaxSelectedBlocks = 4096;

// grid (min(N * K, kMaxSelectedBlocks)): block x takes selection slots x, x + gridDim.x, ... of
// the [N, K] list; a slot with a visible entry gets that entry's values from where a kernel's read
// would take them (compressed_cand: the recent ring, the fresh entries, or the pool, decoded).
// Skipped slots and invisible entries get nothing: candidate() never points at them.
__global__ void __launch_bounds__(kThreads) decode_selected_kernel(SparseAttnArgs a) {
  pdl_begin();
  for (int64_t slot = blockIdx.x; slot < a.N * a.K; slot += gridDim.x) {
    const int64_t row = slot / a.K, e = a.selected[slot];
    if (a.row_seq[row] < 0 || e < 0) continue;
    const attn::RowCtx c = attn::row_ctx(a, row);
    if (e >= c.visible) continue;  // (the scores kernel reports it)
    const attn::Cand src = attn::compressed_cand(a, c, e);
    float* dst = a.selected_rows + slot * a.Dh;
    for (int64_t i = threadIdx.x; i < a.Dh; i += kThreads)
      dst[i] = src.f ? src.f[i] : backend::kv_value(a.comp.spec, src.enc, i);
  }
}

}  // namespace

gpuError_t decode_selected_entries(const SparseAttnArgs& a, gpuStream_t s) {
  const int64_t slots = a.N * a.K;
  if (slots == 0) return gpuGetLastError();
  return launch(decode_selected_kernel, static_cast<unsigned>(slots < kMaxSelectedBlocks ? slots : kMaxSelectedBlocks),
                kThreads, 0, s, a);
}

gpuError_t decode_attention_entries(const SparseAttnArgs& a, int64_t n_seqs, gpuStream_t s) {
  if (n_seqs == 0) return gpuGetLastError();
  return launch(decode_entries_kernel, dim3(kBlocksPerSeq, static_cast<unsigned>(n_seqs)), kThreads, 0, s, a);
}

}  // namespace plumb::gpu::k

// decode_attention_entries (attention.h): a call's compressed entries decoded once into f32 rows.
// The sparse attention kernels otherwise decode a value (kv_value: a byte load, the code's
// conversion and its block scale) at every read, and a prefill chunk's rows read each entry's
// values thousands of times: at 4,096 rows the P.V on the matrix unit spent most of its 4.4
// billion instructions of a CSA layer there (PERF.md v26). The values are the same either way.
#include "plumb/backend/gpu/kernels/attention.h"
#include "plumb/backend/gpu/kernels/launch.h"

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

}  // namespace

gpuError_t decode_attention_entries(const SparseAttnArgs& a, int64_t n_seqs, gpuStream_t s) {
  if (n_seqs == 0) return gpuGetLastError();
  return launch(decode_entries_kernel, dim3(kBlocksPerSeq, static_cast<unsigned>(n_seqs)), kThreads, 0, s, a);
}

}  // namespace plumb::gpu::k

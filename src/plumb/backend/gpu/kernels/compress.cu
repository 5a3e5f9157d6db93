// The compressor state machine (MODEL-SPEC 3.4) and the Lightning indexer (3.5).
//
// Both reproduce the CPU reference (cpu_compress.cpp) operation by operation: products and sums
// use __fmul_rn/__fadd_rn (no FMA contraction, which the CPU build does not do either) in the
// CPU's order, so the indexer's scores are bitwise those of the CPU (its top-k then agrees
// exactly) and the compressor differs only where exp_cr and glibc's expf round differently (rare).
#include "plumb/backend/gpu/kernels/compress.h"
#include "plumb/backend/gpu/kernels/cpu_order.h"
#include "plumb/backend/gpu/kernels/paged.h"

namespace plumb::gpu::k {
namespace {

constexpr int kThreads = 256;
constexpr std::size_t kSmemBytes = 48 * 1024;  // dynamic shared memory usable without an opt-in
constexpr int64_t kMaxSortBytes = 40 * 1024;  // the top-k sort buffer's share of it

// Element i of a weight in row-major order, whatever its logical 1-D / 2-D shape.
__device__ float flat_at(const WeightRef& w, int64_t i) { return weight_at(w, i / w.cols, i % w.cols); }

// ---- compressor
// Thread ch owns output channel ch and the state channels it reads: ch, plus d + ch with
// overlap. Every step of the CPU's per-token machine (write the slot, pool a closed window, shift
// the current window into the previous one) touches only those channels, so threads run the
// sequence's tokens in order independently, with no barrier.
__global__ void compress_kernel(CompressArgs a) {
  const int64_t ch = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (ch >= a.d) return;
  const CompSeq s = a.seqs[blockIdx.y];
  const int64_t m = a.m, d = a.d, C = a.overlap ? 2 * d : d;
  const int n_own = a.overlap ? 2 : 1;
  int64_t entry = s.out_base;
  for (int64_t i = 0; i < s.len; ++i) {
    const int64_t t = s.start + i, r = t % m;
    const int64_t slot = a.overlap ? m + r : r;
    for (int k = 0; k < n_own; ++k) {
      const int64_t cc = ch + k * d;
      s.kv[slot * C + cc] = a.kv[(s.row + i) * C + cc];
      s.score[slot * C + cc] = a.score[(s.row + i) * C + cc] + flat_at(a.ape, r * C + cc);
    }
    if ((t + 1) % m != 0) continue;
    // Slots in the CPU's order: overlap takes channel ch of [0, m) then d + ch of [m, 2m).
    const int64_t n = a.overlap ? 2 * m : m;
    auto at = [&](int64_t j) { return j * C + (j < m ? ch : d + ch); };
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      const float z = s.score[at(j)];
      mx = mx < z ? z : mx;  // std::max(mx, z)
    }
    float sum = 0.f;
    for (int64_t j = 0; j < n; ++j) sum = __fadd_rn(sum, exp_cr(s.score[at(j)] - mx));
    float acc = 0.f;
    for (int64_t j = 0; j < n; ++j)
      acc = __fadd_rn(acc, __fmul_rn(s.kv[at(j)], exp_cr(s.score[at(j)] - mx) / sum));
    a.out[entry * d + ch] = a.round_out ? round_bf16(acc) : acc;
    ++entry;
    if (a.overlap) {  // the current window becomes the previous one
      for (int64_t j = 0; j < m; ++j)
        for (int k = 0; k < n_own; ++k) {
          const int64_t cc = ch + k * d;
          s.kv[j * C + cc] = s.kv[(m + j) * C + cc];
          s.score[j * C + cc] = s.score[(m + j) * C + cc];
        }
    }
  }
}

// ---- indexer

// Order-preserving unsigned key of a float (the CPU's order_key shifted to unsigned): larger
// floats get larger keys and +0 ranks above -0.
__device__ uint32_t float_key(float x) {
  const uint32_t u = f32_bits(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Entry e's rank key: score first, then the lower index. All keys differ, so "the k largest keys"
// is exactly the CPU's stable descending order. Every real key is > 0 (the index part is
// 0xFFFFFFFF - e > 0), so 0 pads the sort buffer.
__device__ uint64_t rank_key(float score, int64_t e) {
  return (static_cast<uint64_t>(float_key(score)) << 32) | static_cast<uint64_t>(0xFFFFFFFFu - static_cast<uint32_t>(e));
}

int64_t pow2_at_least(int64_t k) {
  int64_t p = 1;
  while (p < k) p <<= 1;
  return p;
}

// One block per query row: scores of its visible entries into the scratch row, then a radix
// select (8 passes of 8 bits over the 64-bit rank keys) finds the k-th largest key, the k keys at
// or above it are gathered into shared memory and bitonic-sorted in descending order.
__global__ void __launch_bounds__(kThreads) indexer_kernel(IndexerArgs a, int64_t sort_n, bool q_in_smem) {
  extern __shared__ uint64_t sbuf[];  // sort buffer [sort_n], then q [H * di] when q_in_smem
  __shared__ uint32_t hist[256];
  __shared__ uint64_t prefix;
  __shared__ int64_t k_rem;
  __shared__ uint32_t n_sel;
  const int64_t row = blockIdx.x, K = a.K;
  int32_t* out = a.out + row * K;
  const int32_t si = a.row_seq[row];
  const int64_t n = si < 0 ? 0 : (a.seqs[si].start + (row - a.seqs[si].row) + 1) / a.m;
  const int64_t k = n < K ? n : K;
  for (int64_t r = k + threadIdx.x; r < K; r += blockDim.x) out[r] = -1;
  if (k == 0) return;

  const int64_t H = a.H, di = a.di;
  const float* q = a.q + row * H * di;
  if (q_in_smem) {
    float* qs = reinterpret_cast<float*>(sbuf + sort_n);
    for (int64_t i = threadIdx.x; i < H * di; i += blockDim.x) qs[i] = q[i];
    q = qs;
    __syncthreads();
  }
  const float* w = a.w + row * H;
  const int32_t* blocks = a.seqs[si].blocks;
  float* score = a.scores + row * a.max_n;
  auto rnd = [&](float x) { return a.bf16 ? round_bf16(x) : x; };
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
    const uint8_t* key = paged_entry(a.keys, blocks, e);
    float acc = 0.f;
    for (int64_t h = 0; h < H; ++h) {
      const float qk = rnd(a.keys.spec.format == backend::KvRowFormat::F32
                               ? cpu_dot(q + h * di, reinterpret_cast<const float*>(key), di)
                               : cpu_dot_at(q + h * di, [&](int64_t i) { return backend::kv_value(a.keys.spec, key, i); }, di));
      const float relu = qk < 0.f ? 0.f : qk;  // std::max(qk, 0.f), sign of zero included
      acc = __fadd_rn(acc, rnd(__fmul_rn(rnd(__fmul_rn(relu, a.relu_scale)), w[h])));
    }
    score[e] = rnd(acc);
  }
  __syncthreads();  // the block's score writes are visible to all its threads

  // Radix select of the k-th largest rank key, most significant digit first.
  if (threadIdx.x == 0) {
    prefix = 0;
    k_rem = k;
  }
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    const uint64_t hi_mask = shift == 56 ? 0 : ~((uint64_t{1} << (shift + 8)) - 1);
    const uint64_t pre = prefix;
    for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
      const uint64_t key = rank_key(score[e], e);
      if ((key & hi_mask) == pre) atomicAdd(&hist[(key >> shift) & 0xFFu], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int64_t above = 0;  // keys matching the prefix with a larger digit
      for (int dgt = 255; dgt >= 0; --dgt) {
        if (above + hist[dgt] >= k_rem) {
          prefix = pre | (static_cast<uint64_t>(dgt) << shift);
          k_rem -= above;
          break;
        }
        above += hist[dgt];
      }
    }
    __syncthreads();
  }
  const uint64_t kth = prefix;  // the k-th largest key itself: exactly k keys are >= it

  if (threadIdx.x == 0) n_sel = 0;
  for (int64_t i = threadIdx.x; i < sort_n; i += blockDim.x) sbuf[i] = 0;
  __syncthreads();
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
    const uint64_t key = rank_key(score[e], e);
    if (key >= kth) sbuf[atomicAdd(&n_sel, 1u)] = key;
  }
  __syncthreads();
  // Bitonic sort, descending.
  for (int64_t size = 2; size <= sort_n; size <<= 1) {
    for (int64_t stride = size >> 1; stride > 0; stride >>= 1) {
      for (int64_t i = threadIdx.x; i < sort_n; i += blockDim.x) {
        const int64_t j = i ^ stride;
        if (j > i) {
          const uint64_t x = sbuf[i], y = sbuf[j];
          const bool desc = (i & size) == 0;
          if (desc ? x < y : x > y) {
            sbuf[i] = y;
            sbuf[j] = x;
          }
        }
      }
      __syncthreads();
    }
  }
  for (int64_t r = threadIdx.x; r < k; r += blockDim.x)
    out[r] = static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(sbuf[r]));
}

}  // namespace

gpuError_t compress(const CompressArgs& a, gpuStream_t s) {
  constexpr int kCh = 128;
  if (a.n_seqs > 0 && a.d > 0) {
    const dim3 grid(static_cast<unsigned>((a.d + kCh - 1) / kCh), static_cast<unsigned>(a.n_seqs));
    compress_kernel<<<grid, kCh, 0, s>>>(a);
  }
  return gpuGetLastError();
}

bool indexer_topk_supported(int64_t K) { return K >= 0 && pow2_at_least(K) * 8 <= kMaxSortBytes; }

gpuError_t indexer_topk(const IndexerArgs& a, gpuStream_t s) {
  if (a.N > 0 && a.K > 0) {
    const int64_t sort_n = pow2_at_least(a.K);
    const std::size_t sort_bytes = static_cast<std::size_t>(sort_n) * sizeof(uint64_t);
    const std::size_t q_bytes = static_cast<std::size_t>(a.H * a.di) * sizeof(float);
    const bool q_in_smem = sort_bytes + q_bytes <= kSmemBytes;
    indexer_kernel<<<static_cast<unsigned>(a.N), kThreads, sort_bytes + (q_in_smem ? q_bytes : 0), s>>>(a, sort_n,
                                                                                                     q_in_smem);
  }
  return gpuGetLastError();
}

}  // namespace plumb::gpu::k

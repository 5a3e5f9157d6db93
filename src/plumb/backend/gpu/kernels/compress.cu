// The compressor state machine (MODEL-SPEC 3.4) and the Lightning indexer (3.5).
//
// Both reproduce the CPU reference (cpu_compress.cpp) operation by operation: products and sums
// use __fmul_rn/__fadd_rn (no FMA contraction, which the CPU build does not do either) in the
// CPU's order, so the indexer's scores are bitwise those of the CPU (its top-k then agrees
// exactly) and the compressor differs only where exp_cr and glibc's expf round differently (rare).
#include "plumb/backend/gpu/kernels/compress.h"
#include "plumb/backend/gpu/kernels/launch.h"

#include <algorithm>

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
// A window's slots are read kSlotChunk at a time, all loads of a chunk before any use of them:
// each serial loop below (max, sum, pooled sum, the shift) was one global round trip a slot, and
// a decode step's closing CSA window took 10.9-11.9 us (ncu, PERF.md v37). The uses run in slot
// order, so every value is the one the slot-at-a-time loops computed.
constexpr int kSlotChunk = 8;
template <class Load, class Use>
__device__ __forceinline__ void for_slots(int64_t n, Load load, Use use) {
  using V = decltype(load(int64_t{0}));
  for (int64_t j0 = 0; j0 < n; j0 += kSlotChunk) {
    V v[kSlotChunk];
#pragma unroll
    for (int u = 0; u < kSlotChunk; ++u)
      if (j0 + u < n) v[u] = load(j0 + u);
#pragma unroll
    for (int u = 0; u < kSlotChunk; ++u)
      if (j0 + u < n) use(j0 + u, v[u]);
  }
}

// Thread ch owns output channel ch and the state channels it reads: ch, plus d + ch with
// overlap. Every step of the CPU's per-token machine (write the slot, pool a closed window, shift
// the current window into the previous one) touches only those channels, so threads run the
// sequence's tokens in order independently, with no barrier.
__global__ void compress_kernel(CompressArgs a) {
  pdl_begin();
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
    auto score = [&](int64_t j) { return s.score[at(j)]; };
    float mx = -INFINITY;
    for_slots(n, score, [&](int64_t, float z) { mx = mx < z ? z : mx; });  // std::max(mx, z)
    float sum = 0.f;
    for_slots(n, score, [&](int64_t, float z) { sum = __fadd_rn(sum, exp_cr(z - mx)); });
    float acc = 0.f;
    for_slots(n, [&](int64_t j) { return float2{s.score[at(j)], s.kv[at(j)]}; },
              [&](int64_t, float2 zv) { acc = __fadd_rn(acc, __fmul_rn(zv.y, exp_cr(zv.x - mx) / sum)); });
    a.out[entry * d + ch] = a.round_out ? round_bf16(acc) : acc;
    ++entry;
    if (a.overlap)  // the current window becomes the previous one (rows m.. to rows ..m: disjoint)
      for (int k = 0; k < n_own; ++k) {
        const int64_t cc = ch + k * d;
        for_slots(m, [&](int64_t j) { return float2{s.kv[(m + j) * C + cc], s.score[(m + j) * C + cc]}; },
                  [&](int64_t j, float2 v) {
                    s.kv[j * C + cc] = v.x;
                    s.score[j * C + cc] = v.y;
                  });
      }
  }
}

// The same machine over a chunk of many tokens, in two launches (a prefill): compress_kernel walks a
// sequence's tokens one after another, one thread a channel, 4-8 blocks for a whole prefill (27 ms
// of a 4,096-token one, ncu, PERF.md v22). Here every closed window is pooled by its own threads
// from its slots' values as they are when it closes, read from where the machine would have put
// them (the chunk's rows, or the state as the chunk found it); then the state is brought to where
// the walk leaves it. The values and the operations are compress_kernel's, so the entries and the
// state are bitwise its.
//
// Window w's slot values at its close (position c = w m + m - 1): slot m + r (overlap) or r holds
// position w m + r; with overlap, slot r holds window w - 1's position (w - 1) m + r, copied there
// when w - 1 closed, or still in slot m + r when w - 1 was open at the chunk's start. A position
// below the chunk's start comes from the state, the others from the chunk's rows (the score plus
// the ape, as written).
struct SlotValue {
  float kv, score;
};
__device__ SlotValue window_slot(const CompressArgs& a, const CompSeq& s, int64_t w, int64_t j, int64_t ch) {
  const int64_t m = a.m, d = a.d, C = a.overlap ? 2 * d : d;
  const bool prev = a.overlap && j < m;  // window w - 1's half (channel ch), else window w's (overlap: d + ch)
  const int64_t r = a.overlap ? j % m : j, cc = a.overlap && !prev ? d + ch : ch;
  const int64_t p = (prev ? w - 1 : w) * m + r;
  if (p >= s.start) {
    const int64_t row = (s.row + p - s.start) * C + cc;
    return {a.kv[row], a.score[row] + flat_at(a.ape, r * C + cc)};
  }
  // In the state: window w's own half and a window closed before the chunk at their own slot j; a
  // window w - 1 still open at the chunk's start in the current-window slot m + r.
  const int64_t slot = prev && w * m > s.start ? m + r : j;
  return {s.kv[slot * C + cc], s.score[slot * C + cc]};
}

// grid (ceil(d / kCh), min(entries, 65535)); entry_seq [entries]: each entry's sequence.
__global__ void compress_entries_kernel(CompressArgs a, const int32_t* entry_seq, int64_t entries) {
  pdl_begin();
  const int64_t ch = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (ch >= a.d) return;
  const int64_t n = a.overlap ? 2 * a.m : a.m;
  for (int64_t e = blockIdx.y; e < entries; e += gridDim.y) {
    const CompSeq s = a.seqs[entry_seq[e]];
    const int64_t w = s.start / a.m + (e - s.out_base);  // the window this entry closes
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      const float z = window_slot(a, s, w, j, ch).score;
      mx = mx < z ? z : mx;  // std::max(mx, z)
    }
    float sum = 0.f;
    for (int64_t j = 0; j < n; ++j) sum = __fadd_rn(sum, exp_cr(window_slot(a, s, w, j, ch).score - mx));
    float acc = 0.f;
    for (int64_t j = 0; j < n; ++j) {
      const SlotValue v = window_slot(a, s, w, j, ch);
      acc = __fadd_rn(acc, __fmul_rn(v.kv, exp_cr(v.score - mx) / sum));
    }
    a.out[e * a.d + ch] = a.round_out ? round_bf16(acc) : acc;
  }
}

// grid (ceil(C / kCh), m, n_seqs): the state after the chunk, one thread a (sequence, r, channel
// cc) for slot m + r and, with overlap, slot r (which the last close in the chunk copies slot m + r
// into; read before slot m + r is rewritten, by the same thread).
__global__ void compress_state_kernel(CompressArgs a) {
  pdl_begin();
  const int64_t m = a.m, C = a.overlap ? 2 * a.d : a.d;
  const int64_t cc = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x, r = blockIdx.y;
  if (cc >= C) return;
  const CompSeq s = a.seqs[blockIdx.z];
  if (s.len == 0) return;
  const int64_t end = s.start + s.len, cur = a.overlap ? m + r : r;  // end: one past the chunk
  auto from_chunk = [&](int64_t p) -> SlotValue {
    const int64_t row = (s.row + p - s.start) * C + cc;
    return {a.kv[row], a.score[row] + flat_at(a.ape, r * C + cc)};
  };
  SlotValue now{s.kv[cur * C + cc], s.score[cur * C + cc]};
  if (a.overlap && end / m > s.start / m) {  // a close in the chunk: slot r takes that window's r
    const int64_t p = (end / m - 1) * m + r;
    const SlotValue v = p >= s.start ? from_chunk(p) : now;
    s.kv[r * C + cc] = v.kv;
    s.score[r * C + cc] = v.score;
  }
  const int64_t last = (end - 1 - r) / m * m + r;  // the chunk's last position at slot r (end - 1 >= r here or below)
  if (end - 1 >= r && last >= s.start) {
    now = from_chunk(last);
    s.kv[cur * C + cc] = now.kv;
    s.score[cur * C + cc] = now.score;
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

// Visible entries of query row `row`: (t + 1) / m for the row's position t; 0 for a row no
// sequence covers.
__device__ int64_t visible_entries(const IndexerArgs& a, int64_t row) {
  const int32_t si = a.row_seq[row];
  return si < 0 ? 0 : (a.seqs[si].start + (row - a.seqs[si].row) + 1) / a.m;
}

// Scores, pass 1: block (row, y) scores entries [y * EP, (y + 1) * EP) of the row, then every
// gridDim.y * EP-th group after them, one thread per (entry, head). The row's q is staged in shared
// memory once (rows of di + 1 floats: a warp's 32 heads read 32 banks), each group's keys are
// decoded once into shared memory (fp4 / bf16 pools: exact values, kv_value), each thread forms
// its head's term as one thread of the CPU does (cpu_dot, ReLU, the scale, the weight), and one
// thread per entry sums the terms over the heads in order (rows of H + 1): the CPU's bits, with
// every head of every entry in flight at once (one thread per entry, as before, left a decode
// step's 64 heads x 128 dims of each entry to one thread: ~300 us for one query over 128 entries).
// q was read from global memory by every block, a warp's lanes 512 bytes apart, and a block took 4
// entries: a 4,096-token prefill's scores were 69 ms (ncu, PERF.md v22).
__global__ void __launch_bounds__(kThreads) indexer_score_kernel(IndexerArgs a, int64_t per_block) {
  pdl_begin();
  PLUMB_DYNAMIC_SHARED(float, ssc);  // q [H, di + 1], the keys [per_block, di], the terms [per_block, H + 1]
  const int64_t row = blockIdx.x, n = visible_entries(a, row), H = a.H, di = a.di;
  if (n == 0 || static_cast<int64_t>(blockIdx.y) * per_block >= n) return;
  const int32_t* blocks = a.seqs[a.row_seq[row]].blocks;
  const float* w = a.w + row * H;
  float* qs = ssc;
  float* keys = qs + H * (di + 1);
  float* terms = keys + per_block * di;
  for (int64_t x = threadIdx.x; x < H * di; x += blockDim.x) qs[x / di * (di + 1) + x % di] = a.q[row * H * di + x];
  auto rnd = [&](float x) { return a.bf16 ? round_bf16(x) : x; };
  // Blocks stride over the row's entries (e0 is uniform over the block); the first stride's
  // barrier after the keys also makes q visible.
  const int64_t stride = static_cast<int64_t>(gridDim.y) * per_block;
  for (int64_t e0 = static_cast<int64_t>(blockIdx.y) * per_block; e0 < n; e0 += stride) {
    const int64_t ents = n - e0 < per_block ? n - e0 : per_block;
    for (int64_t x = threadIdx.x; x < ents * di; x += blockDim.x) {
      const int64_t le = x / di, i = x % di;
      const uint8_t* key = paged_entry(a.keys, blocks, e0 + le);
      keys[x] = a.keys.spec.format == backend::KvRowFormat::F32 ? reinterpret_cast<const float*>(key)[i]
                                                                : backend::kv_value(a.keys.spec, key, i);
    }
    __syncthreads();
    for (int64_t x = threadIdx.x; x < ents * H; x += blockDim.x) {
      const int64_t le = x / H, h = x % H;
      const float qk = rnd(cpu_dot(qs + h * (di + 1), keys + le * di, di));
      const float relu = qk < 0.f ? 0.f : qk;  // std::max(qk, 0.f), sign of zero included
      terms[le * (H + 1) + h] = rnd(__fmul_rn(rnd(__fmul_rn(relu, a.relu_scale)), w[h]));
    }
    __syncthreads();
    for (int64_t le = threadIdx.x; le < ents; le += blockDim.x)
      a.scores[row * a.max_n + e0 + le] = rnd(fold_in_order(0.f, terms + le * (H + 1), 0, H, sum_fold));
    __syncthreads();  // the keys and terms are rewritten by the next stride
  }
}

// The digit of the k_rem-th largest key among those counted in hist (256 bins): the digit dgt with
// above(dgt) < k_rem <= above(dgt) + hist[dgt], where above(dgt) counts the keys of larger digits.
// The block (kThreads >= 256 threads) forms every bin's above() at once, a suffix sum in 8
// doubling steps (a serial walk of the 256 bins by one thread was ~4 us a radix pass, 8 passes a
// row: PERF.md v37), and the bin that holds the key sets prefix and k_rem.
__device__ void pick_digit(const uint32_t* hist, uint32_t (&scan)[2][256], int shift, uint64_t pre, uint64_t& prefix,
                           int64_t& k_rem) {
  const int t = threadIdx.x;
  int cur = 0;
  if (t < 256) scan[0][t] = t < 255 ? hist[t + 1] : 0;  // the bins above t, summed below
  __syncthreads();
  for (int o = 1; o < 256; o <<= 1) {
    if (t < 256) scan[cur ^ 1][t] = scan[cur][t] + (t + o < 256 ? scan[cur][t + o] : 0);
    cur ^= 1;
    __syncthreads();
  }
  const int64_t want = k_rem;
  __syncthreads();  // every thread has read k_rem before the one below writes it
  if (t < 256) {
    const int64_t above = scan[cur][t];
    if (above < want && want <= above + hist[t]) {
      prefix = pre | (static_cast<uint64_t>(t) << shift);
      k_rem = want - above;
    }
  }
  __syncthreads();
}

// Pass 2, one block per query row: the k largest rank keys, in descending order. When the row
// has at most K entries every one is selected (the k-th largest key is the smallest: any key is
// > 0); otherwise a radix select (8 passes of 8 bits over the 64-bit keys) finds the k-th largest.
// The k keys at or above it are gathered into shared memory and bitonic-sorted, descending, over
// the next power of two at or above k (the pads are 0, below every key).
static_assert(kThreads >= 256, "pick_digit takes a thread a bin");
__global__ void __launch_bounds__(kThreads) indexer_select_kernel(IndexerArgs a) {
  pdl_begin();
  PLUMB_DYNAMIC_SHARED(uint64_t, sbuf);  // sort buffer [the power of two at or above K]
  __shared__ uint32_t hist[256];
  __shared__ uint32_t scan[2][256];
  __shared__ uint64_t prefix;
  __shared__ int64_t k_rem;
  __shared__ uint32_t n_sel;
  const int64_t row = blockIdx.x, K = a.K;
  int32_t* out = a.out + row * K;
  const int64_t n = visible_entries(a, row);
  const int64_t k = n < K ? n : K;
  for (int64_t r = k + threadIdx.x; r < K; r += blockDim.x) out[r] = -1;
  if (k == 0) return;
  const float* score = a.scores + row * a.max_n;

  // Radix select of the k-th largest rank key, most significant digit first.
  if (threadIdx.x == 0) {
    prefix = 0;
    k_rem = k;
  }
  for (int shift = 56; k < n && shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    const uint64_t hi_mask = shift == 56 ? 0 : ~((uint64_t{1} << (shift + 8)) - 1);
    const uint64_t pre = prefix;
    for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
      const uint64_t key = rank_key(score[e], e);
      if ((key & hi_mask) == pre) atomicAdd(&hist[(key >> shift) & 0xFFu], 1u);
    }
    __syncthreads();
    pick_digit(hist, scan, shift, pre, prefix, k_rem);
  }
  __syncthreads();
  const uint64_t kth = prefix;  // the k-th largest key itself (0 when all are taken): exactly k keys are >= it

  int64_t sn = 1;  // the sort's length: the power of two at or above k (<= sbuf's)
  while (sn < k) sn <<= 1;
  if (threadIdx.x == 0) n_sel = 0;
  for (int64_t i = threadIdx.x; i < sn; i += blockDim.x) sbuf[i] = 0;
  __syncthreads();
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
    const uint64_t key = rank_key(score[e], e);
    if (key >= kth) sbuf[atomicAdd(&n_sel, 1u)] = key;
  }
  __syncthreads();
  // Bitonic sort, descending.
  for (int64_t size = 2; size <= sn; size <<= 1) {
    for (int64_t stride = size >> 1; stride > 0; stride >>= 1) {
      for (int64_t i = threadIdx.x; i < sn; i += blockDim.x) {
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
    return launch(compress_kernel, grid, kCh, 0, s, a);
  }
  return gpuGetLastError();
}

gpuError_t compress_chunks(const CompressArgs& a, const int32_t* entry_seq, int64_t entries, gpuStream_t s) {
  constexpr int kCh = 128;
  if (a.n_seqs <= 0 || a.d <= 0) return gpuGetLastError();
  if (a.n_seqs > 65535 || a.m > 65535) return gpuErrorNotSupported;
  if (entries > 0) {
    const dim3 grid(static_cast<unsigned>((a.d + kCh - 1) / kCh), static_cast<unsigned>(std::min<int64_t>(entries, 65535)));
    const gpuError_t e = launch(compress_entries_kernel, grid, kCh, 0, s, a, entry_seq, entries);
    if (e != gpuSuccess) return e;
  }
  const int64_t C = a.overlap ? 2 * a.d : a.d;
  const dim3 grid(static_cast<unsigned>((C + kCh - 1) / kCh), static_cast<unsigned>(a.m), static_cast<unsigned>(a.n_seqs));
  return launch(compress_state_kernel, grid, kCh, 0, s, a);
}

namespace {
// The scoring kernel's shared memory: the row's q, then per entry its key and its heads' terms.
int64_t indexer_q_bytes(int64_t H, int64_t di) { return H * (di + 1) * static_cast<int64_t>(sizeof(float)); }
int64_t indexer_entry_bytes(int64_t H, int64_t di) { return (di + H + 1) * static_cast<int64_t>(sizeof(float)); }
constexpr int64_t kIndexerMaxEntries = 16;   // entries a scoring block takes at once
constexpr int64_t kIndexerTargetBlocks = 1024;  // rows x entry groups that keep the device busy
}  // namespace

bool indexer_topk_supported(int64_t K, int64_t H, int64_t di) {
  return K >= 0 && pow2_at_least(K) * 8 <= kMaxSortBytes &&
         indexer_q_bytes(H, di) + indexer_entry_bytes(H, di) <= static_cast<int64_t>(kSmemBytes);
}

gpuError_t indexer_topk(const IndexerArgs& a, gpuStream_t s) {
  if (a.N > 0 && a.K > 0) {
    if (a.max_n > 0) {
      // Entries per scoring group: up to kIndexerMaxEntries beside the row's q (the host checks one
      // fits); fewer when the rows' entries are few, down to those whose heads give each thread a
      // dot (a decode step's 129 entries in 9 groups of 16 left each thread 4 dots in a row and
      // the device 9 blocks: 25 us, ncu, PERF.md v37). Groups a row: all of them in one block at a
      // prefill's many rows, side by side at a decode step's few (about kIndexerTargetBlocks
      // blocks in all).
      const int64_t q_bytes = indexer_q_bytes(a.H, a.di), entry_bytes = indexer_entry_bytes(a.H, a.di);
      const int64_t fit = std::min(kIndexerMaxEntries, (static_cast<int64_t>(kSmemBytes) - q_bytes) / entry_bytes);
      const int64_t spread = (a.N * a.max_n + kIndexerTargetBlocks - 1) / kIndexerTargetBlocks;
      const int64_t per_block = std::max<int64_t>(1, std::min(fit, std::max(spread, kThreads / std::max<int64_t>(1, a.H))));
      const int64_t groups = (a.max_n + per_block - 1) / per_block;
      const int64_t ys = std::min({groups, std::max<int64_t>(1, (kIndexerTargetBlocks + a.N - 1) / a.N), int64_t{65535}});
      const dim3 grid(static_cast<unsigned>(a.N), static_cast<unsigned>(ys));
      const std::size_t smem = static_cast<std::size_t>(q_bytes + per_block * entry_bytes);
      const gpuError_t e = launch(indexer_score_kernel, grid, kThreads, smem, s, a, per_block);
      if (e != gpuSuccess) return e;
    }
    return launch(indexer_select_kernel, static_cast<unsigned>(a.N), kThreads,
                  static_cast<std::size_t>(pow2_at_least(a.K)) * sizeof(uint64_t), s, a);
  }
  return gpuGetLastError();
}

}  // namespace plumb::gpu::k

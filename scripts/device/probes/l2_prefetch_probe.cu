// Whether a decode step could read its next GEMV's weights into L2 while latency-bound kernels
// (attention, norms, routing) leave HBM idle: a probe for docs/PERF.md, not part of the build.
// Compiled and run on the GPU machine by l2_prefetch_probe.sh (nvcc there; no plumb code linked).
// A weight is stood in for by a 16-byte streaming read over S bytes (the GEMV's access pattern,
// the GEMV's ceiling). For S of a V4-Flash decode step's big weights, median of 20 (us):
//   cold     the read of one of enough copies to exceed 256 MB (nothing of it in L2)
//   warm     the read right after a warming kernel read the same copy (L2 holds what fits)
//   warm P   the warming kernel's own time with P blocks (how few SMs can fill L2 at HBM rate)
//   overlap  a 1-block latency-bound kernel of ~30 us on one stream beside the warming kernel (P
//            blocks) on another, then the read: the pair's time and the read's after it
//   bulk     the read after a spin of 10 / 20 / 40 us beside cp.async.bulk.prefetch.L2 from 1-16
//            blocks of 32 threads (Hopper's bulk prefetch: no registers held, nothing to wait for)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { std::printf("%s: %s\n", #x, cudaGetErrorString(e)); std::exit(1); } } while (0)

constexpr int kThreads = 256;

// The consumer: every 16 bytes once, streaming (plumb's GEMV loads its weights with __ldcs too).
__global__ void read_kernel(const uint4* w, int64_t n16, uint32_t* sink) {
  uint32_t acc = 0;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n16; i += int64_t{gridDim.x} * kThreads) {
    const uint4 v = __ldcs(w + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345679u) *sink = acc;
}

// The warmer: reads the range into L2 (not L1), 4 loads of 16 bytes a thread in flight.
__global__ void warm_kernel(const uint4* w, int64_t n16, uint32_t* sink) {
  uint32_t acc = 0;
  const int64_t stride = int64_t{gridDim.x} * kThreads;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n16; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int64_t j = i + u * stride;
      v[u] = j < n16 ? __ldcg(w + j) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x12345679u) *sink = acc;
}

// The Hopper warmer: cp.async.bulk.prefetch.L2 (one instruction a chunk of `chunk` bytes, no
// registers held, no completion to wait for), the range split over the grid's threads.
__global__ void bulk_prefetch_kernel(const uint8_t* w, int64_t bytes, int64_t chunk) {
  const int64_t threads = int64_t{gridDim.x} * blockDim.x;
  for (int64_t off = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * chunk; off < bytes; off += threads * chunk) {
    const uint32_t n = static_cast<uint32_t>(bytes - off < chunk ? bytes - off : chunk);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(w + off), "r"(n) : "memory");
  }
}

// A latency-bound stand-in: one block that waits about `ns` nanoseconds.
__global__ void spin_kernel(int64_t ns, uint32_t* sink) {
  const uint64_t t0 = clock64();
  uint32_t n = 0;
  while (clock64() - t0 < static_cast<uint64_t>(ns) * 2) ++n;  // ~2 cycles a ns at ~2 GHz
  if (n == 0x12345679u) *sink = n;
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  int l2 = 0;
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs, L2 %d MB\n\n", prop.name, sms, l2 >> 20);
  const int64_t pool = int64_t{256} << 20;
  uint8_t* buf = nullptr;
  CK(cudaMalloc(&buf, pool + (int64_t{80} << 20)));
  CK(cudaMemset(buf, 1, pool + (int64_t{80} << 20)));
  uint32_t* sink = nullptr;
  CK(cudaMalloc(&sink, 4));
  cudaStream_t s0, s1;
  CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  cudaEvent_t e0, e1, e2, j1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventCreate(&e2));
  CK(cudaEventCreate(&j1));
  const int read_blocks = 4 * sms;
  struct Shape {
    const char* name;
    int64_t bytes;
  };
  const Shape shapes[] = {{"wq_b / wo_a / wo_b (33.5 MB)", 4096LL * 8192},
                          {"shared w1+w3 (16.8 MB)", 2LL * 2048 * 4096},
                          {"wq_a + wkv (6.3 MB)", 4096LL * 1536},
                          {"wo_a + wo_b (67 MB)", 2LL * 4096 * 8192}};
  const int pblocks[] = {8, 16, 32, 66, 132};
  std::printf("| weight | cold read us | GB/s | warm read us | GB/s |");
  for (int p : pblocks) std::printf(" warm P=%d us |", p);
  std::printf(" overlap P=16: pair us / read us |\n|---|---:|---:|---:|---:|");
  for (int i = 0; i < 5; ++i) std::printf("---:|");
  std::printf("---:|\n");
  for (const Shape& sh : shapes) {
    const int64_t n16 = sh.bytes / 16, copies = std::max<int64_t>(2, pool / sh.bytes);
    auto copy = [&](int64_t k) { return reinterpret_cast<const uint4*>(buf + (k % copies) * sh.bytes); };
    std::vector<float> cold, warm, pf[5], pair, after;
    float ms = 0;
    for (int it = 0; it < 23; ++it) {
      const uint4* w = copy(it);
      CK(cudaEventRecord(e0, s0));
      read_kernel<<<read_blocks, kThreads, 0, s0>>>(w, n16, sink);
      CK(cudaEventRecord(e1, s0));
      CK(cudaEventSynchronize(e1));
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (it >= 3) cold.push_back(ms * 1e3f);
      for (int p = 0; p < 5; ++p) {
        const uint4* v = copy(it + 1 + p);
        CK(cudaEventRecord(e0, s0));
        warm_kernel<<<pblocks[p], kThreads, 0, s0>>>(v, n16, sink);
        CK(cudaEventRecord(e1, s0));
        read_kernel<<<read_blocks, kThreads, 0, s0>>>(v, n16, sink);
        CK(cudaEventRecord(e2, s0));
        CK(cudaEventSynchronize(e2));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (it >= 3) pf[p].push_back(ms * 1e3f);
        CK(cudaEventElapsedTime(&ms, e1, e2));
        if (it >= 3 && p == 2) warm.push_back(ms * 1e3f);
      }
      // The overlap: spin on s0 beside the warmer (16 blocks) on s1, then the read on s0.
      const uint4* v = copy(it + 7);
      CK(cudaEventRecord(e0, s0));
      CK(cudaStreamWaitEvent(s1, e0));
      spin_kernel<<<1, 32, 0, s0>>>(30000, sink);
      warm_kernel<<<16, kThreads, 0, s1>>>(v, n16, sink);
      CK(cudaEventRecord(j1, s1));
      CK(cudaStreamWaitEvent(s0, j1));
      CK(cudaEventRecord(e1, s0));
      read_kernel<<<read_blocks, kThreads, 0, s0>>>(v, n16, sink);
      CK(cudaEventRecord(e2, s0));
      CK(cudaEventSynchronize(e2));
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (it >= 3) pair.push_back(ms * 1e3f);
      CK(cudaEventElapsedTime(&ms, e1, e2));
      if (it >= 3) after.push_back(ms * 1e3f);
    }
    const float c = median(cold), w = median(warm);
    std::printf("| %s | %.1f | %.0f | %.1f | %.0f |", sh.name, c, sh.bytes / c / 1e3, w, sh.bytes / w / 1e3);
    for (int p = 0; p < 5; ++p) std::printf(" %.1f |", median(pf[p]));
    std::printf(" %.1f / %.1f |\n", median(pair), median(after));
  }
  std::printf("\n(warm read: after the P=%d warmer; spin alone is ~30 us)\n", pblocks[2]);
  // Bulk prefetch (B blocks of 32 threads, 64 KB a chunk) beside a spin of T us, then the read.
  const int bblocks[] = {1, 4, 16};
  const int spins[] = {10, 20, 40};
  std::printf("\n| weight | bulk prefetch blocks | read after it beside a spin of 10 / 20 / 40 us (us) | spin+prefetch pair at 20 us |\n|---|---:|---|---:|\n");
  for (const Shape& sh : shapes) {
    const int64_t n16 = sh.bytes / 16, copies = std::max<int64_t>(2, pool / sh.bytes);
    auto copy = [&](int64_t k) { return buf + (k % copies) * sh.bytes; };
    for (int bb : bblocks) {
      std::vector<float> rd[3], pair;
      float ms = 0;
      for (int it = 0; it < 13; ++it)
        for (int si = 0; si < 3; ++si) {
          const uint8_t* v = copy(it * 3 + si);
          CK(cudaEventRecord(e0, s0));
          CK(cudaStreamWaitEvent(s1, e0));
          spin_kernel<<<1, 32, 0, s0>>>(spins[si] * 1000, sink);
          bulk_prefetch_kernel<<<bb, 32, 0, s1>>>(v, sh.bytes, 65536);
          CK(cudaEventRecord(j1, s1));
          CK(cudaStreamWaitEvent(s0, j1));
          CK(cudaEventRecord(e1, s0));
          read_kernel<<<read_blocks, kThreads, 0, s0>>>(reinterpret_cast<const uint4*>(v), n16, sink);
          CK(cudaEventRecord(e2, s0));
          CK(cudaEventSynchronize(e2));
          CK(cudaEventElapsedTime(&ms, e1, e2));
          if (it >= 3) rd[si].push_back(ms * 1e3f);
          CK(cudaEventElapsedTime(&ms, e0, e1));
          if (it >= 3 && si == 1) pair.push_back(ms * 1e3f);
        }
      std::printf("| %s | %d | %.1f / %.1f / %.1f | %.1f |\n", sh.name, bb, median(rd[0]), median(rd[1]), median(rd[2]),
                  median(pair));
    }
  }
  return 0;
}

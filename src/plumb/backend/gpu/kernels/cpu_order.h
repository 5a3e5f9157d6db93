#pragma once
// The CPU backend's summation order for dot products (cpu::dot, backend/cpu/weight_decode.cpp),
// done by a group of 8 consecutive lanes: lane `sub` accumulates terms sub, sub + 8, ... of the
// whole blocks of 8 (as the CPU's eight vector lanes do, separate multiply and add, no FMA), then
// the lane sums are combined as (l0+l4 + l1+l5) + (l2+l6 + l3+l7) and the tail is added in order.
// cpu_dot below is the same order by one thread. A result computed either way is bitwise the
// CPU's: the GPU backend uses them wherever results must match the CPU exactly (indexer and
// attention scores always; linear and the mHC mixes when the reduction order is "cpu",
// gpu_backend.h). The CPU's plain sequential sums (sums of squares in rms_norm and the mHC
// mixes) are reproduced by one thread looping in order.
#include <cstdint>

#include "plumb/backend/gpu/gpu_compat.h"

namespace plumb::gpu::k {

// Sum of term(i) for i < n. Every lane of the warp must call it (the shuffles are warp-wide),
// with sub = lane % 8 and the same n within a group; the result is valid in lane sub == 0.
// term(i) must give exactly the CPU's term (e.g. __fmul_rn(a[i], b[i])) and have no side effects.
template <class Term>
__device__ __forceinline__ float cpu_order_sum8(const Term& term, int64_t n, int sub) {
  const int64_t body = n / 8 * 8;
  float p = 0.f;
  for (int64_t i = sub; i < body; i += 8) p = __fadd_rn(p, term(i));
  p = __fadd_rn(p, shfl_xor(p, 4));  // sub l < 4: l_l + l_(l+4)
  p = __fadd_rn(p, shfl_xor(p, 1));  // sub 0: (v0 + v1), sub 2: (v2 + v3)
  p = __fadd_rn(p, shfl_xor(p, 2));  // sub 0: (v0 + v1) + (v2 + v3)
  if (sub == 0)
    for (int64_t i = body; i < n; ++i) p = __fadd_rn(p, term(i));
  return p;
}

// The same sum of a[i] * b(i) for i < n by one thread: eight lane accumulators over blocks of 8,
// combined as (l0+l4 + l1+l5) + (l2+l6 + l3+l7), then the tail in order. b(i) gives the CPU's
// operand exactly (a decoded cache value, say).
template <class B>
__device__ inline float cpu_dot_at(const float* a, const B& b, int64_t n) {
  float l[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
#pragma unroll
    for (int u = 0; u < 8; ++u) l[u] = __fadd_rn(l[u], __fmul_rn(a[i + u], b(i + u)));
  const float v0 = __fadd_rn(l[0], l[4]), v1 = __fadd_rn(l[1], l[5]), v2 = __fadd_rn(l[2], l[6]),
              v3 = __fadd_rn(l[3], l[7]);
  float s = __fadd_rn(__fadd_rn(v0, v1), __fadd_rn(v2, v3));
  for (; i < n; ++i) s = __fadd_rn(s, __fmul_rn(a[i], b(i)));
  return s;
}

// The same with b an array.
__device__ inline float cpu_dot(const float* a, const float* b, int64_t n) {
  return cpu_dot_at(a, [b](int64_t i) { return b[i]; }, n);
}

// The CPU's plain sequential fold of v[j0 .. j1) into acc (a sum, a max), by one thread, loading 8
// values before folding them in: a chain of load-then-fold waits one memory latency a value (the
// blocked softmax's sums, a loop the compiler left unrolled, were ~35 cycles a candidate: 18 us
// of a 640-candidate CSA row, PERF.md v37). The order of the folds is unchanged.
template <class Fold>
__device__ inline float fold_in_order(float acc, const float* v, int64_t j0, int64_t j1, Fold fold) {
  int64_t j = j0;
  for (; j + 8 <= j1; j += 8) {
    float x[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) x[u] = v[j + u];
#pragma unroll
    for (int u = 0; u < 8; ++u) acc = fold(acc, x[u]);
  }
  for (; j < j1; ++j) acc = fold(acc, v[j]);
  return acc;
}
__device__ inline float max_fold(float m, float z) { return fmaxf(m, z); }
__device__ inline float sum_fold(float s, float z) { return __fadd_rn(s, z); }

}  // namespace plumb::gpu::k

#pragma once
// Fast exact decoding of weight rows to f32 for the CPU ops (table lookups, one scale per block),
// so GEMMs can dequantize small row tiles on the fly instead of holding an f32 copy of the model.
#include <cstdint>

#include "plumb/format/weight_view.h"

namespace plumb::cpu {

// Rows [r0, r1) of a 2-D weight (or elements [r0, r1) of a 1-D one) into out, row-major f32.
// Same values as plumb::decode_rows.
void decode_weight_rows(const WeightView& w, int64_t r0, int64_t r1, float* out);

// Deterministic f32 dot product (fixed summation order, independent of call site). The order is
// a contract: the GPU backend reproduces it (kernels/cpu_order.h) when asked for bitwise results.
float dot(const float* a, const float* b, int64_t n);

// Other f32 summation orders. Never used unless PLUMB_CPU_ORDER asks for them (cpu_backend.h):
// they exist to measure how far a change of summation order alone moves a forward (the noise
// floor of the golden tests, issue 13). Reversed: one accumulator, the last term first.
// Blocked32: one accumulator per 32 consecutive terms, the partial sums added in order (a tiled
// GEMM's K loop).
enum class SumOrder : uint8_t { Canonical, Reversed, Blocked32 };

// acc + sum_i a[i] * b[i] in the non-canonical order o.
float dot_other(const float* a, const float* b, int64_t n, SumOrder o, float acc = 0.f);

// dot() in order o (Canonical: dot(a, b, n)).
inline float dot(const float* a, const float* b, int64_t n, SumOrder o) {
  return o == SumOrder::Canonical ? dot(a, b, n) : dot_other(a, b, n, o);
}

}  // namespace plumb::cpu

#pragma once
// exp and log1p of f32 computed in double and rounded once to f32: the correctly rounded result
// except in rare double-rounding cases, and the same value on the CPU and on the GPU (host and
// device compile this one expression). Both backends use these wherever an exponential or log
// feeds a result (softmax weights, sigmoids, softplus, SiLU): glibc's expf (worst 0.502 ulp) and
// log1pf (~1 ulp) and the GPU's f32 functions (up to 2 ulp) each miss the last bit on some
// inputs, and one last-bit difference in a softmax weight or a routing score can flip a later
// bf16 rounding that the `faithful` profile then carries on.
#include <cmath>

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>  // __host__ / __device__ and the device math functions
#endif
#if defined(__CUDACC__) || defined(__HIPCC__)
#define PLUMB_CR_FN __host__ __device__ inline
#else
#define PLUMB_CR_FN inline
#endif

namespace plumb::backend {

PLUMB_CR_FN float exp_cr(float x) { return static_cast<float>(::exp(static_cast<double>(x))); }
PLUMB_CR_FN float log1p_cr(float x) { return static_cast<float>(::log1p(static_cast<double>(x))); }

}  // namespace plumb::backend

#pragma once
// Launchers of the elementwise, norm, RoPE, simulated-quantization and Hadamard kernels
// (gpu_elementwise.cpp does the shape checks and errors). Raw pointers and sizes in, the launch's
// error code out; `round_bf16` flags apply Round::BF16 to the values the op defines as its result.
#include <cstdint>

#include "plumb/backend/gpu/gpu_compat.h"
#include "plumb/backend/gpu/weight_ref.h"

namespace plumb::gpu::k {

// y[n, :] = row ids[n] of table (ids already checked to lie in [0, table.rows)).
gpuError_t embed(float* y, const int32_t* ids, int64_t n, const WeightRef& table, gpuStream_t s);
// y [n, copies, d] from x [n, d].
gpuError_t repeat_rows(float* y, const float* x, int64_t n, int64_t copies, int64_t d, gpuStream_t s);
// One row of d values per block; weight (flat index i -> element (i / cols, i % cols)) or null.
// cpu_order: the sum of squares in the CPU backend's order (bitwise its result). act_fp8 (or
// null): also the FP8 round trip of y in 1 x 128 blocks (quant_blocks' values), which a consumer
// that applies act_fp8 may read instead (GpuBackend::set_norm_act_fp8); only where
// rms_norm_act_fp8_ok (else gpuErrorNotSupported).
gpuError_t rms_norm(float* y, const float* x, int64_t rows, int64_t d, const WeightRef* weight, float eps,
                    bool bf16_steps, bool round_bf16, bool cpu_order, float* act_fp8, gpuStream_t s);
// Whether rms_norm can write the act_fp8 copy: the kernel that holds a thread's elements in
// registers (d <= 8192, a norm weight of f32 or bf16 words or none).
bool rms_norm_act_fp8_ok(int64_t d, const WeightRef* weight, bool bf16_steps);
// rms_norm's threads per row (a function of d only): a kernel that norms a row with norm_row.h's
// functions gives the same bits only with this many threads (hc_mix_norm).
unsigned norm_threads(int64_t d);
// rms_norm (no act_fp8 copy) of `rows` vectors of d values, then rope (not inverse) of each
// vector's last 2f values at pos[vector / vecs], then (qcols > 0) the FP8 round trip of its first
// qcols values in blocks of qblock: rms_norm's, rope's and quant_blocks' values in one launch. Only
// where norm_rope_ok (else gpuErrorNotSupported): rms_norm_act_fp8_ok's widths, d even, qcols and
// qblock multiples of the warp.
gpuError_t norm_rope(float* y, const float* x, int64_t rows, int64_t vecs, int64_t d, const WeightRef* weight,
                     float eps, bool bf16_steps, bool round_bf16, bool cpu_order, const int32_t* pos,
                     const float* inv_freq, int64_t f, int64_t qcols, int64_t qblock, gpuStream_t s);
bool norm_rope_ok(int64_t d, const WeightRef* weight, bool bf16_steps, int64_t f, int64_t qcols, int64_t qblock);
gpuError_t scale(float* y, const float* x, int64_t n, float v, bool round_bf16, gpuStream_t s);
gpuError_t add(float* y, const float* a, const float* b, int64_t n, bool round_bf16, gpuStream_t s);
// y [n, count] = columns [begin, begin + count) of x [n, c].
gpuError_t columns(float* y, const float* x, int64_t n, int64_t c, int64_t begin, int64_t count, gpuStream_t s);
// In place on y [n, vecs, dl]: rotates the last 2f dims of each vector (y already holds x).
gpuError_t rope(float* y, const int32_t* pos, const float* inv_freq, int64_t n, int64_t vecs, int64_t dl, int64_t f,
                bool inverse, bool round_bf16, gpuStream_t s);
// y <- FP8 (fp4 = false) or FP4 round trip of x, blocks of `block` over the first `cols` of each of
// `vecs` vectors of dl values (x == y: in place; otherwise y's other columns are not written).
gpuError_t quant_blocks(float* y, const float* x, int64_t vecs, int64_t dl, int64_t cols, int64_t block, bool fp4,
                        gpuStream_t s);
// In place normalized Walsh-Hadamard transform of `vecs` vectors of n values (n a power of two).
gpuError_t hadamard(float* y, int64_t vecs, int64_t n, bool round_bf16, gpuStream_t s);

}  // namespace plumb::gpu::k

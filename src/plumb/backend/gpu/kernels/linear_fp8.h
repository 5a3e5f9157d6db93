#pragma once
// linear() path (d), NVIDIA sm_89+ (Hopper here): FP8 e4m3 tensor cores for FP8 weights with
// 128x128 scales (ue8m0, or f32 as V3 stores them) under act_fp8 (the `faithful` profile's prefill GEMMs). x is quantized to
// e4m3 with one power-of-two scale per row and 128 columns (exactly the CPU's act_quant), the
// products of each 128-wide K block are accumulated by mma.sync m16n8k32 e4m3 in f32, and each
// block's partial sum is scaled by x's and w's block scales and added in f32 (DeepSeek-V3's
// "promotion" of the FP8 partial sums). Requires K % 128 == 0 and R % 64 == 0 per group.
// On HIP (and CUDA archs below sm_89) the launchers return an error: gpu_linear.cpp never picks
// this path there (fp8_mma_available()).
#include <cstdint>

#include "plumb/backend/gpu/gpu_compat.h"
#include "plumb/backend/gpu/kernels/linear.h"
#include "plumb/backend/gpu/weight_ref.h"

namespace plumb::gpu::k {

// True in CUDA builds. The kernel body exists only in the sm_90a code object (the sm_80 one and
// the compute_80 PTX hold an empty kernel), so the caller also requires a compute capability 9.x
// device.
bool fp8_mma_built();

// q [N, ldq] e4m3 codes and sx [N, K_total / 128] f32 scales of the rows of x (cols = K_total,
// a multiple of 128).
gpuError_t act_quant_fp8(const float* x, int64_t ldx, int64_t N, int64_t cols, uint8_t* q, int64_t ldq, float* sx,
                         gpuStream_t s);
// The tiles: Small (64 x rows by 64 weight rows, synchronous loads: decode) or Large (128 by
// 128, K blocks through cp.async stages: from 128 x rows, where large_allowed). Same sums.
enum class Fp8Tiles { Small, Large };
Fp8Tiles fp8_mma_tiles(const LinearArgs& a, bool large_allowed);
// How many ways linear_fp8_mma splits K for a (1 = not split): enough blocks for about two a
// multiprocessor (one with large tiles), at least 2 K blocks a split, and at most K / 256 splits,
// so the partial sums (splits x N x R f32, written and read once, mostly in L2) stay at most a
// quarter of the weight's bytes at 16 rows. It does not look at N within one row tile.
int fp8_mma_splits(const LinearArgs& a, Fp8Tiles tiles, int multiprocessors);
// y = x . w^T per group from the quantized x (a.x is ignored; a.ldx unused). With splits > 1,
// part holds splits x N x groups x R floats: each split's partial sum (in K order within it), then
// added in split order by a second launch. A row's result depends on R, K, groups and splits, not
// on the other rows or the tiles (up to 64 rows, splits does not change with N: one row tile).
gpuError_t linear_fp8_mma(const LinearArgs& a, const uint8_t* q, int64_t ldq, const float* sx, const WeightRef& w,
                          Fp8Tiles tiles, int splits, float* part, gpuStream_t s);

}  // namespace plumb::gpu::k

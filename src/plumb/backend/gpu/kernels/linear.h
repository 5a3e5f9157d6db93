#pragma once
// Launchers of the linear() kernels (gpu_linear.cpp picks the path and does the checks). All
// compute, for n < nrows, g < groups, r < R:
//   y[n*ldy + g*R + r] = sum_k x[n*ldx + g*K + k] * w[g*R + r, k]   (then bf16 rounding if asked)
// with w decoded from its checkpoint format in registers / shared memory.
#include <algorithm>
#include <cstdint>
#include <span>

#include "plumb/backend/gpu/gpu_compat.h"
#include "plumb/backend/gpu/weight_ref.h"

namespace plumb::gpu::k {

struct LinearArgs {
  float* y = nullptr;
  int64_t ldy = 0;
  const float* x = nullptr;
  int64_t ldx = 0;
  int64_t nrows = 0;  // N: rows of x
  int64_t groups = 1, R = 0, K = 0;
  bool round_bf16 = false;
  bool round_w = false;  // each decoded weight value rounded to bf16 first (LinearOpts::bf16_weight)
  bool quant_x = false;  // GEMV only: x is the raw input and the kernel applies act_fp8's round trip
                         // (1x128 blocks of each group's K) itself; see gemv_quant_x_ok
  // Path (c) only: x already as bf16 (bf16_rows of x; row stride ldxb), which the tile loads copy
  // instead of rounding each x element again for every weight tile; null: they round x.
  const uint16_t* xb = nullptr;
  int64_t ldxb = 0;
  // Path (c) only: 3 = path (g): xb holds x's three exact bf16 parts (bf16_parts_rows: hi, mid and
  // lo, K columns each), and the tiles run over 3 K columns, column p K + k of xb against the
  // weight's column k (one group). 1: xb is x rounded to bf16.
  int32_t x_parts = 1;
  // Path (c) only: its pipelined k-loop where it applies (bf16 x, FP4 / FP8 / BF16 weights, K a
  // multiple of 32, 16-byte aligned rows; linear_gemm.cu); false: the synchronous one, the same
  // bits (PLUMB_GPU_GEMM_PIPE=off, the A/B; the tests compare the two).
  bool pipe = true;
};

// (a) one warp per weight row (up to 4 rows per warp), x staged in shared memory 8 rows at a time.
// target_blocks: about how many blocks fill the device (rows per warp drop to 1 below it).
gpuError_t linear_gemv(const LinearArgs& a, const WeightRef& w, int64_t target_blocks, gpuStream_t s);
// linear_gemv of several weights (the x rows may differ): each output the same bits as that job's
// own linear_gemv. Two jobs that the 1-row FP8 kernel takes alike (one x row, one group, whole
// segments, the same scale type and act_fp8 staging) run as one launch, the second's blocks after
// the first's (a decode step's wq_a and wkv, a CSA layer's two wq_b, the shared expert's w1 and w3:
// one launch's latency each, PERF.md v33); any other job runs as its own launch.
struct GemvJob {
  LinearArgs a;
  WeightRef w;
};
// one_launch (if given): whether it gave them one launch.
gpuError_t linear_gemvs(std::span<const GemvJob> jobs, int64_t target_blocks, gpuStream_t s, bool* one_launch = nullptr);
// Whether linear_gemv can take a with quant_x: its x rows of a launch (<= 8) fit the kernel's
// shared memory quantized, and no bf16 weight rounding. Otherwise act_fp8 is a separate
// quant_blocks launch before the GEMV (the same values either way).
bool gemv_quant_x_ok(const LinearArgs& a);
// (b) tiled SIMT GEMM, exact f32 products and f32 accumulation.
gpuError_t linear_simt(const LinearArgs& a, const WeightRef& w, gpuStream_t s);
// (c) bf16 operands (x rounded to nearest even, w decoded to bf16), f32 accumulation: mma.sync
// on CUDA sm_80+, MFMA on HIP gfx90a (gated at run time by GpuBackend's self-check,
// gpu_mfma_check.cpp), the same numerics by SIMT elsewhere.
gpuError_t linear_mma(const LinearArgs& a, const WeightRef& w, gpuStream_t s);
// Whether path (c)'s tiles for a weight of this format and K take LinearArgs::xb /
// GroupedGemmArgs::xb (the 16-element segment tiles: FP8, FP4, BF16 with K % 16 == 0).
bool mma_takes_bf16_x(WFormat f, int64_t K);
// xb [N, cols] (row stride cols, a multiple of 8) = x's rows [N, cols] (row stride ldx) rounded to
// bf16 (nearest even), the values path (c)'s tile load would make.
gpuError_t bf16_rows(const float* x, int64_t ldx, int64_t N, int64_t cols, uint16_t* xb, gpuStream_t s);
// (g) = (c) with LinearArgs::x_parts = 3: f32 x times a bf16-exact weight (BF16, FP4, FP8 with
// ue8m0 scales) with nothing rounded, for many rows (the prefill's f32 linears: the compressor
// and the router gate, which path (b) served): xb [N, 3 cols] (row stride 3 cols, cols a multiple
// of 8) = each x row's bf16_parts (linear_common.h) as three runs of cols columns (hi, mid, lo).
gpuError_t bf16_parts_rows(const float* x, int64_t ldx, int64_t N, int64_t cols, uint16_t* xb, gpuStream_t s);
// (f) f32 x times a BF16 weight on the bf16 tensor cores, x split exactly into three bf16 parts
// (nothing rounded: an f32 GEMM up to summation order), the weight read once for up to
// kF32MmaMaxRows x rows (linear_f32_mma.cu). CUDA only (f32_mma_built); f32_mma_ok says whether it
// takes a (a BF16 weight, or FP8 with ue8m0 scales, made bf16 exactly in the kernel; no rounding of
// the weight or x; K % 32 == 0; x 16-byte aligned rows; the output may be rounded to bf16);
// f32_mma_blocks is its grid's size before split K (256 weight rows a block), f32_mma_splits the
// ways it splits K (1: not split) for about one block a multiprocessor, at least 4 stages of 32
// columns a split and at most K / 256 splits; it does not look at the rows, so a row's result
// does not depend on the rows beside it. With splits > 1, part holds splits x N x groups x R
// floats (linear_split_sum adds them).
constexpr int64_t kF32MmaMaxRows = 64;
bool f32_mma_built();
bool f32_mma_ok(const LinearArgs& a, const WeightRef& w);
int64_t f32_mma_blocks(const LinearArgs& a);
int f32_mma_splits(const LinearArgs& a, int multiprocessors);
gpuError_t linear_f32_mma(const LinearArgs& a, const WeightRef& w, int splits, float* part, gpuStream_t s);
// Split K (paths (d) and (f), linear_split.cu): y = the sum of part[0, splits) [N][groups * R] in
// split order, rounded to bf16 when a.round_bf16.
gpuError_t linear_split_sum(const LinearArgs& a, int splits, const float* part, gpuStream_t s);
// Where split `split`'s unrounded sum of output (n, col) lies in part (col < groups * R).
PLUMB_HD int64_t split_part_index(const LinearArgs& a, int64_t split, int64_t n, int64_t col) {
  return (split * a.nrows + n) * a.groups * a.R + col;
}
// How many ways a GEMM of `blocks` blocks splits K: enough for about `target_blocks` blocks, at
// most `most`, at least 1. It does not look at the x rows (a row's result must not depend on them).
inline int split_k_ways(int64_t blocks, int64_t target_blocks, int64_t most) {
  const int64_t want = (target_blocks + blocks - 1) / blocks;
  return static_cast<int>(std::max<int64_t>(1, std::min(want, most)));
}
// (c) with the SIMT loop on every target (same tiles, same numerics, accumulation order aside):
// the fallback when the matrix-core kernel fails the self-check, and that check's reference.
gpuError_t linear_mma_simt(const LinearArgs& a, const WeightRef& w, gpuStream_t s);
// (c) for many weights of one format and shape at once (the MoE prefill's routed experts, from
// gpu_moe.cpp): for each row tile i < tile_count, tiles[3i..3i+2] = {e, first, end}: rows [first,
// end) of x (end - first <= kGroupedTileRows) times weight table[e * table_stride + which_z] (R
// rows of K) into rows [first, end) of y_z, for projections z < `projections` (1 or 2: w1 and w3
// in one launch). Row tiles start at a multiple of kGroupedTileRows from their expert's first
// row, so that every 64-row half is a tile of that expert's own linear_mma launch: every output
// is bitwise linear_mma's on that expert's rows (linear_gemm.cu says why). matrix: the
// matrix-core tile (linear_mma) or the SIMT loop (linear_mma_simt), the caller's choice by the
// same rule (GpuBackend::mma_matrix_ok).
constexpr int64_t kGroupedTileRows = 128;  // rows of a GroupedGemmArgs row tile at most
struct GroupedGemmArgs {
  const float* x = nullptr;  // device [rows, ldx], bf16-rounded in the tile load like linear_mma's x
  int64_t ldx = 0;
  const uint16_t* xb = nullptr;  // as LinearArgs::xb, but required where mma_takes_bf16_x (null: error)
  int64_t ldxb = 0;
  float* y0 = nullptr;  // device [rows, ldy] per projection
  float* y1 = nullptr;
  int64_t ldy = 0;
  const WeightRef* table = nullptr;  // device
  int64_t table_stride = 1;
  int32_t which0 = 0, which1 = 0;
  int32_t projections = 1;
  const int32_t* tiles = nullptr;  // device [tile_count, 3]
  int64_t tile_count = 0;
  int64_t R = 0, K = 0;  // every weight's rows and columns
  bool round_bf16 = false;
  bool pipe = true;      // as LinearArgs::pipe
  bool aligned = false;  // every table weight's bytes 16-byte aligned (the pipelined loop needs it)
  bool vec = false;      // set by the launcher: 16-element weight segment loads
};
gpuError_t linear_mma_grouped(const GroupedGemmArgs& a, WFormat format, bool matrix, gpuStream_t s);
// Whether path (c) takes its pipelined k-loop for these arguments when asked (LinearArgs::pipe):
// FP4 / FP8 / BF16 weights of whole 32-column k-tiles with bf16 x (xb), 16-byte aligned rows, the
// block's scales within its shared memory; for the grouped form every table weight aligned
// (GroupedGemmArgs::aligned).
bool mma_pipelined(const LinearArgs& a, const WeightRef& w);
bool mma_grouped_pipelined(const GroupedGemmArgs& a, WFormat format);
// (e) every output summed in the CPU backend's order (cpu_order.h): bitwise the CPU's; slow.
gpuError_t linear_cpu_order(const LinearArgs& a, const WeightRef& w, gpuStream_t s);

}  // namespace plumb::gpu::k

#pragma once
// Launchers of the grouped routed-expert kernels (kernels/moe_grouped.cu): few tokens, routing
// read on the device, expert weights from a device table; host side in gpu_moe.cpp.
#include <cstdint>

#include "plumb/backend/gpu/gpu_compat.h"
#include "plumb/backend/gpu/weight_ref.h"

namespace plumb::gpu::k {

// Largest D and I the kernels stage in shared memory (48 KB with padding).
constexpr int64_t kGroupedMoeMaxVector = 8192;
// Most token slots (N * K) a call of the grouped kernels takes (GpuBackend's decode-size limit;
// moe_mma.cu's grouping lists them in shared memory).
constexpr int64_t kGroupedMoeMaxSlots = 2048;

struct GroupedMoeArgs {
  int64_t N = 0, K = 0, D = 0, I = 0, E = 0;  // tokens, slots per token, hidden, expert width, experts
  WFormat format = WFormat::F32;              // every routed expert's (checked by the host)
  const WeightRef* table = nullptr;           // device [3E]: w1, w3, w2 of expert e at 3e, 3e+1, 3e+2
  const int32_t* experts = nullptr;           // device [N, K] routing (ids outside [0, E) are skipped)
  const float* weights = nullptr;             // device [N, K] routing weights
  const float* x = nullptr;                   // device [N, D] (act-quantized by the caller unless quant_x)
  float* h = nullptr;                         // device [N*K, I] scratch
  float* ys = nullptr;                        // device [N*K, D] scratch
  float limit = 0.f;                          // swiglu_limit; <= 0: no clamp
  bool round_bf16 = false;                    // MoeParams::round: GEMM outputs, h and the sum
  bool silu_bf16 = false;                     // MoeParams::silu_out
  bool round_w = false;                       // MoeParams::bf16_weight
  bool weight_after = false;                  // MoeParams::weight_after
  bool accumulate_bf16 = false;               // MoeParams::accumulate
  bool quant_x = false;                       // the up kernel applies act_fp8's round trip to x as it stages it
  bool quant_h = false;                       // FP8 round trip of h before w2 (MoeParams::act_fp8): by the down
  bool quant_h_launch = false;                // kernel as it stages h, or (this) by a quant_blocks launch
  bool vec_up = false, vec_down = false;      // set by the launcher: 16-byte chunk loads fit rows of D / I
  // Scratch of the tensor-core form (moe_mma.cu) only:
  uint16_t* xb = nullptr;      // device [N, D]: x as bf16, each 8 columns permuted (moe_mma.cu)
  uint16_t* hb = nullptr;      // device [N*K, I]: h likewise
  int32_t* groups = nullptr;   // device [grouped_moe_mma_group_ints(N*K, E)]: the slots by expert
  // Its kernels' shape (moe_mma.cu): row tiles a block walks (1, 2, 4 or 8; fewer where they do
  // not divide the projection's rows) and rounds of 128 columns in flight a lane (2 or 4).
  int mma_tiles = 1, mma_depth = 2;
};

// h and ys for every slot: up projection + SwiGLU (+ the act-quant of h), down projection.
gpuError_t grouped_moe_experts(const GroupedMoeArgs& a, gpuStream_t s);
// The same h and ys on the bf16 tensor cores (moe_mma.cu): one block per (expert, row tile) for
// all the slots that chose the expert. Built for CUDA (sm_80+) and the emulator; grouped_moe_mma_ok
// says whether a call qualifies: FP4 weights, act_fp8 (quant_h; x quantized by the caller or
// quant_x), D and I multiples of 128, at most kGroupedMoeMmaMaxExperts experts.
constexpr int64_t kGroupedMoeMmaMaxExperts = 1024;
bool grouped_moe_mma_ok(const GroupedMoeArgs& a);
// int32 scratch the expert grouping needs for `slots` token slots over E experts.
int64_t grouped_moe_mma_group_ints(int64_t slots, int64_t E);
gpuError_t grouped_moe_mma_experts(const GroupedMoeArgs& a, gpuStream_t s);
// y [N, D] = bf16?(sum of each token's weighted slots in the CPU's order + shared [N, D]).
gpuError_t grouped_moe_combine(const GroupedMoeArgs& a, const float* shared, float* y, gpuStream_t s);

}  // namespace plumb::gpu::k

// The CUDA emulator's tensor-core instructions: mma.sync m16n8k16 (bf16) and m16n8k32 (e4m3) with
// f32 accumulators, as warp collectives over the PTX ISA's fragment layouts (the same layouts
// kernels/linear_common.h and kernels/linear_fp8.cu write down beside their asm). Each product is
// exact in both formats; the sum of a fragment's products and the accumulator is formed in double
// and rounded once to f32 (the device's adder rounds differently in the last bits).
#include <cstdint>

#include "plumb/backend/gpu/gpu_compat.h"
#include "plumb/backend/gpu/gpu_numerics.h"

namespace plumb::gpu::emu {
namespace {

struct Fragments {
  uint32_t a[4], b[2];
};

// Lane l's group g = l / 4 and its index t = l % 4 in the group (PTX: groupID, threadID_in_group).
template <int K, class Decode>
void mma(float* d, const uint32_t* a, const uint32_t* b, Decode decode) {
  static_assert(kWarp == 32, "mma.sync is a 32-lane instruction");
  constexpr int E = K / 8;  // elements of one 32-bit register: 2 bf16 or 4 e4m3
  Fragments mine{{a[0], a[1], a[2], a[3]}, {b[0], b[1]}};
  Fragments all[kWarp];
  warp_gather(&mine, sizeof mine, all);
  // A[r][k] is element k % E of lane 4 (r % 8) + (k % (K / 2)) / E's register (r >= 8) + 2 (k >= K / 2);
  // B[k][c] is element k % E of lane 4 c + (k % (K / 2)) / E's register (k >= K / 2).
  auto A = [&](int r, int k) { return decode(all[4 * (r % 8) + (k % (K / 2)) / E].a[(r >= 8) + 2 * (k >= K / 2)], k % E); };
  auto B = [&](int k, int c) { return decode(all[4 * c + (k % (K / 2)) / E].b[k >= K / 2], k % E); };
  const int lane = lane_id(), g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    const int r = g + 8 * (i / 2), c = 2 * t + i % 2;
    double s = d[i];
    for (int k = 0; k < K; ++k) s += static_cast<double>(A(r, k)) * B(k, c);
    d[i] = static_cast<float>(s);
  }
}

}  // namespace

void mma_m16n8k16_bf16(float* d, const uint32_t* a, const uint32_t* b) {
  mma<16>(d, a, b, [](uint32_t w, int e) { return bf16_to_f32(static_cast<uint16_t>(w >> (16 * e))); });
}

void ldmatrix_x4(uint32_t* r, const void* row) {
  static_assert(kWarp == 32, "ldmatrix is a 32-lane instruction");
  const void* rows[kWarp];
  warp_gather(&row, sizeof row, rows);
  const int lane = lane_id();
  for (int j = 0; j < 4; ++j) {
    const auto* p = static_cast<const unsigned char*>(rows[8 * j + lane / 4]) + 4 * (lane % 4);
    r[j] = uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
  }
}

void mma_m16n8k32_e4m3(float* d, const uint32_t* a, const uint32_t* b) {
  mma<32>(d, a, b, [](uint32_t w, int e) { return e4m3_to_f32(static_cast<uint8_t>(w >> (8 * e))); });
}

}  // namespace plumb::gpu::emu

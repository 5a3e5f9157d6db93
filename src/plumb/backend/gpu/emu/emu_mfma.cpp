// The HIP flavour's matrix instruction (emu_hip.h): v_mfma_f32_16x16x16bf16_1k, D (16x16 f32) =
// A (16x16 bf16) * B (16x16 bf16) + C, as a 64-lane warp collective over the operand layout that
// linear_gemm.cu's MfmaTile comment states (so it checks the kernel against its own documented
// layout; gpu_mfma_check.cpp's run-time self-check on an MI250 is the check against the hardware).
// Each product is exact; the sum of a lane's 16 products and its accumulator is formed in double
// and rounded once to f32, as emu_mma.cpp does for mma.sync. MI200's flush of subnormal inputs
// and accumulators to zero is not emulated.
#include <cstdio>
#include <cstdlib>

#include "plumb/backend/gpu/gpu_compat.h"
#include "plumb/backend/gpu/gpu_numerics.h"

namespace plumb::gpu::emu {

static_assert(kWarp == 64, "v_mfma_f32_16x16x16bf16_1k is a wave64 instruction");

void mfma_f32_16x16x16_bf16(float* d, const uint16_t* a, const uint16_t* b, int modifiers) {
  if (modifiers != 0) {
    std::fprintf(stderr, "plumb HIP emulator: an MFMA with broadcast controls (cbsz, abid, blgp) is not emulated\n");
    std::abort();
  }
  struct Operands {
    uint16_t a[4], b[4];
  };
  Operands mine{{a[0], a[1], a[2], a[3]}, {b[0], b[1], b[2], b[3]}};
  Operands all[kWarp];
  warp_gather(&mine, sizeof mine, all);
  // A[r][k]: element k % 4 of lane r + 16 (k / 4); B[k][c]: element k % 4 of lane c + 16 (k / 4);
  // lane l holds D[4 (l / 16) + e][l % 16] in its float e.
  auto A = [&](int r, int k) { return bf16_to_f32(all[r + 16 * (k / 4)].a[k % 4]); };
  auto B = [&](int k, int c) { return bf16_to_f32(all[c + 16 * (k / 4)].b[k % 4]); };
  const int lane = lane_id(), i = lane % 16, q = lane / 16;
  for (int e = 0; e < 4; ++e) {
    const int r = 4 * q + e;
    double s = d[e];
    for (int k = 0; k < 16; ++k) s += static_cast<double>(A(r, k)) * B(k, i);
    d[e] = static_cast<float>(s);
  }
}

}  // namespace plumb::gpu::emu

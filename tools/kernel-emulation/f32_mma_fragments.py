#!/usr/bin/env python3
"""The index mapping of src/plumb/backend/gpu/kernels/linear_f32_mma.cu, emulated in numpy.

Checks, without a GPU, that the kernel's loads, its mma.sync m16n8k16 operands (the PTX fragment
layout, as mma_bf16 in linear_common.h documents it) and its stores compute Y = X W^T with every
output written once: each lane's 16 contiguous bytes of a weight row (columns 8 tig .. 8 tig + 7
of a 32-column stage) split over two MMAs' k-slots, x read at the same columns, the
accumulator fragments stored to (x row, weight row), and split K (each split's stage range,
its partial sums, and their sum in split order). Float64, no bf16 split (the split's
exactness is the kernel comment's argument and GpuOps.LinearF32MmaIsTheF32Product's one-hot
check). Mirror any change of the kernel's mapping here.

  /usr/bin/python3 tools/kernel-emulation/f32_mma_fragments.py
"""
import numpy as np


def splits_for(R, K, multiprocessors=132):
    """f32_mma_splits (one group): about one block a multiprocessor, >= 4 stages a split, <= K / 256."""
    blocks = (R + 255) // 256
    want = (multiprocessors + blocks - 1) // blocks
    return max(1, min(want, min(K // 32 // 4, K // 256)))


def emulate(X, W, NT, splits=1):
    """Y as the kernel (split z of `splits` storing to part[z]) and linear_split_sum leave it
    (NaN where nothing is stored)."""
    N, K = X.shape
    R = W.shape[0]
    part = np.full((splits, N, R), np.nan)
    for split in range(splits):
        # The kernel's integer arithmetic: st0 = split * (K / kStage) / splits, its stage count, k0.
        st0 = split * (K // 32) // splits
        stages = (split + 1) * (K // 32) // splits - st0
        emulate_split(X, W, NT, st0 * 32, stages, part[split])
    Y = part[0].copy()
    for split in range(1, splits):  # linear_split_sum: in split order
        Y += part[split]
    return Y


def emulate_split(X, W, NT, kfirst, stages, Y):
    """One split's grid: K columns [kfirst, kfirst + 32 stages), stored to Y."""
    N, K = X.shape
    R = W.shape[0]
    for block in range((R + 255) // 256):
        for warp in range(8):
            r0 = block * 256 + warp * 32
            acc = np.zeros((32, 2, NT, 4))
            for k0 in range(kfirst, kfirst + 32 * stages, 32):
                for i in range(2):          # weight m-tile (16 rows)
                    for j in range(NT):     # x n-tile (8 rows)
                        for h in range(2):  # the two MMAs of a lane's 8 columns
                            A, B = np.zeros((16, 16)), np.zeros((16, 8))
                            for lane in range(32):
                                g, t = lane // 4, lane % 4
                                rows = (min(r0 + 16 * i + g, R - 1), min(r0 + 16 * i + 8 + g, R - 1))
                                col = k0 + 8 * t + 4 * h  # .x/.y (h = 0) or .z/.w (h = 1) of the uint4
                                A[g, 2 * t:2 * t + 2] = W[rows[0], col:col + 2]           # a0
                                A[g + 8, 2 * t:2 * t + 2] = W[rows[1], col:col + 2]       # a1
                                A[g, 2 * t + 8:2 * t + 10] = W[rows[0], col + 2:col + 4]  # a2
                                A[g + 8, 2 * t + 8:2 * t + 10] = W[rows[1], col + 2:col + 4]  # a3
                                n = 8 * j + g
                                xr = X[n] if n < N else np.zeros(K)
                                B[2 * t:2 * t + 2, g] = xr[col:col + 2]           # b0
                                B[2 * t + 8:2 * t + 10, g] = xr[col + 2:col + 4]  # b1
                            D = A @ B
                            for lane in range(32):
                                g, t = lane // 4, lane % 4
                                acc[lane, i, j] += (D[g, 2 * t], D[g, 2 * t + 1], D[g + 8, 2 * t], D[g + 8, 2 * t + 1])
            for lane in range(32):
                g, t = lane // 4, lane % 4
                for i in range(2):
                    for j in range(NT):
                        for e in range(4):
                            r, n = r0 + 16 * i + g + 8 * (e >> 1), 8 * j + 2 * t + (e & 1)
                            if r < R and n < N:
                                Y[n, r] = acc[lane, i, j, e]


def main():
    rng = np.random.default_rng(1)
    worst = 0.0
    # The last three split K (4, 2 and 3 ways, the last uneven: 25 stages) as f32_mma_splits picks on 132 SMs.
    for N, R, K in [(5, 300, 64), (17, 256, 96), (33, 512, 32), (64, 260, 64), (5, 300, 1024), (9, 256, 512),
                    (3, 256, 800)]:
        NT = 1 if N <= 8 else 2 if N <= 16 else 4 if N <= 32 else 8  # linear_f32_mma's launch_nt
        S = splits_for(R, K)
        X, W = rng.standard_normal((N, K)), rng.standard_normal((R, K))
        Y = emulate(X, W, NT, S)
        assert not np.isnan(Y).any(), f"N={N} R={R} K={K} splits {S}: an output was never stored"
        err = np.abs(Y - X @ W.T).max()
        assert err < 1e-12, f"N={N} R={R} K={K} splits {S}: max error {err}"
        worst = max(worst, err)
        print(f"N={N} R={R} K={K} (NT={NT}, splits {S}): every output stored, max |Y - X W^T| = {err:.1e}")
    print(f"the mapping computes X W^T (worst {worst:.1e})")


if __name__ == "__main__":
    main()

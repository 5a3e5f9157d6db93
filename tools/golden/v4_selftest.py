"""Self test of the codecs and the safetensors writer on hand-computed cases (numpy only)."""
from __future__ import annotations

import json
import os
import struct

import numpy as np

from release_format import (AMAX_FLOOR, E4M3_TABLE, ST_DTYPES, bf16_bits, bf16_value, dequant_fp4_row32, dequant_fp8_block,
                            e2m1_encode, e4m3_encode, e8m0_from_exponent, e8m0_value, pow2_ceil_exponent, quant_fp4_row32,
                            quant_fp8_block, read_safetensors, write_safetensors)


def selftest():
    # e4m3: hand values
    cases = {0.0: 0x00, 1.0: 0x38, -1.0: 0xB8, 448.0: 0x7E, -448.0: 0xFE, 2.0**-9: 0x01, 2.0**-6: 0x08,
             1.0625: 0x38, 1.1875: 0x3A, 1.125: 0x39, 0.1: 0x1D, 3.0 * 2.0**-10: 0x02, 2.0**-10: 0x00,
             240.0: 0x77, 232.0: 0x76}
    for v, b in cases.items():
        got = int(e4m3_encode(np.array([v]))[0])
        assert got == b, f"e4m3({v}) = {got:#x}, want {b:#x}"
        if not np.isnan(E4M3_TABLE[b]):
            assert abs(E4M3_TABLE[b] - np.float32(v)) <= abs(v) * 0.0625 + 2.0**-10
    # every finite code round-trips
    for b in range(256):
        v = E4M3_TABLE[b]
        if np.isnan(v):
            continue
        got = int(e4m3_encode(np.array([v]))[0])
        assert got == b or (v == 0 and (got & 0x7F) == 0), (b, got)
    # e2m1: grid, ties to even
    cases = {0.0: 0, 0.25: 0, 0.26: 1, 0.75: 2, 1.25: 2, 1.75: 4, 2.5: 4, 3.5: 6, 5.0: 6, 5.5: 7, 6.0: 7,
             -0.5: 9, -6.0: 15, -3.0: 13}
    for v, code in cases.items():
        got = int(e2m1_encode(np.array([v]))[0])
        assert got == code, f"e2m1({v}) = {got}, want {code}"
    # ue8m0 exponents
    assert list(pow2_ceil_exponent(np.array([1.0, 1.5, 0.5, 0.75, 448.0 / 448.0, 3.0]))) == [0, 1, -1, 0, 0, 2]
    # FP8 block quantization of a block whose amax is 448*2^-3 -> scale byte 124, exact values
    w = np.zeros((130, 200), dtype=np.float32)
    w[0, 0] = 56.0
    w[5, 7] = -1.75
    w[129, 199] = 3.0  # a partial block of its own (row block 1, col block 1)
    codes, sc = quant_fp8_block(w)
    assert sc.shape == (2, 2) and sc[0, 0] == 127 - 3 and sc[1, 1] == 127 - 7, sc
    assert sc[0, 1] == e8m0_from_exponent(pow2_ceil_exponent(np.array([AMAX_FLOOR / 448])))[0]
    back = dequant_fp8_block(codes, sc)
    assert np.array_equal(back, w), "exactly representable values must round-trip"
    # random: relative error bounded by half an ulp of e4m3 (2^-4) plus subnormal floor
    rng = np.random.default_rng(0)
    w = rng.standard_normal((300, 260)).astype(np.float32)
    codes, sc = quant_fp8_block(w)
    back = dequant_fp8_block(codes, sc)
    s_full = np.repeat(np.repeat(e8m0_value(sc), 128, 0), 128, 1)[:300, :260]
    assert np.all(np.abs(back - w) <= np.abs(w) * 2.0**-4 + s_full * 2.0**-10)
    # FP4: packing order and scales
    w = np.zeros((2, 64), dtype=np.float32)
    w[0, 0], w[0, 1] = 1.0, -6.0  # scale 2^0; codes 2 and 15 -> byte 0xF2
    w[1, 32:] = 0.5 * 12  # amax 6 in the second block of row 1: scale 2^0 -> code 7 everywhere
    w[1, 33] = -3.0
    packed, sc = quant_fp4_row32(w)
    assert packed.shape == (2, 32) and sc.shape == (2, 2)
    assert packed.view(np.uint8)[0, 0] == 0xF2 and sc[0, 0] == 127, (packed[0, 0], sc[0, 0])
    assert packed.view(np.uint8)[1, 16] == (7 | (13 << 4)) and sc[1, 1] == 127
    assert np.array_equal(dequant_fp4_row32(packed, sc), w)
    w = rng.standard_normal((64, 96)).astype(np.float32)
    packed, sc = quant_fp4_row32(w)
    back = dequant_fp4_row32(packed, sc)
    s_full = np.repeat(e8m0_value(sc), 32, 1)
    assert np.all(np.abs(back - w) <= s_full * 1.0 + 1e-7)  # half of the widest step (2) times scale
    # bf16
    x = np.array([1.0, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, -2.5, 3.0e-39], dtype=np.float32)
    assert list(bf16_value(bf16_bits(x))) == [1.0, 1.0, np.float32(1.0 + 4 * 2.0**-8), -2.5, bf16_value(bf16_bits(x))[4]]
    # writer / reader round trip with every dtype
    import tempfile
    tensors = [("a.weight", "F8_E4M3", np.arange(6, dtype=np.uint8).reshape(2, 3)),
               ("a.scale", "F8_E8M0", np.array([[127]], dtype=np.uint8)),
               ("b", "F32", np.array([1.5, -2.0], dtype=np.float32)),
               ("c", "I64", np.array([[1, 2]], dtype=np.int64)),
               ("d", "BF16", bf16_bits(np.array([1.0, 2.0], dtype=np.float32))),
               ("e", "I8", np.array([-1, 2, 3], dtype=np.int8))]
    with tempfile.TemporaryDirectory() as td:
        p = os.path.join(td, "t.safetensors")
        write_safetensors(p, tensors)
        back = read_safetensors(p)
        for name, dt, arr in tensors:
            assert back[name][0] == dt and np.array_equal(back[name][1], arr), name
        with open(p, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
        assert n % 8 == 0
        hdr = json.loads(open(p, "rb").read()[8 : 8 + n])
        for name, h in hdr.items():
            if name != "__metadata__":
                assert h["data_offsets"][0] % ST_DTYPES[h["dtype"]][1] == 0, "misaligned"
    print("selftest: codecs and safetensors writer OK")

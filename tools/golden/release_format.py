"""The release's storage formats in numpy: bf16, e4m3, e2m1 and ue8m0 codecs, the FP8 128x128 and
FP4 1x32 block quantizers (MODEL-SPEC 4.4) and a minimal safetensors reader/writer (dtype strings
BF16, F32, I64, I8, F8_E4M3, F8_E8M0). Shared by make_v4_fixtures.py, make_v3_fixtures.py and
tools/tiny-model; written from the format definitions, independent of plumb's C++ codecs.
"""
from __future__ import annotations

import json
import struct

import numpy as np


def bf16_bits(x):
    """float32 -> bf16 bit pattern (uint16), round to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    assert np.all(np.isfinite(x))
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def pow2_ceil_exponent(v):
    """ceil(log2(v)) exactly, for v > 0 (float64 array)."""
    m, e = np.frexp(v)  # v = m * 2^e, m in [0.5, 1)
    return np.where(m == 0.5, e - 1, e).astype(np.int64)


def e8m0_from_exponent(e):
    assert np.all(e >= -127) and np.all(e <= 127), "ue8m0 exponent out of range"
    return (e + 127).astype(np.uint8)


def e8m0_value(b):
    return np.ldexp(np.float32(1.0), b.astype(np.int32) - 127).astype(np.float32)


def e4m3_encode(x):
    """Values already in [-448, 448] -> e4m3fn bytes, round to nearest even (like a hardware cast)."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    assert np.all(a <= 448.0)
    _, ex = np.frexp(a)
    e = np.maximum(ex - 1, -6)  # floor(log2 a), subnormals share the step 2^-9
    step = np.ldexp(1.0, e - 3)
    q = np.rint(a / step) * step  # round half to even
    assert np.all(q <= 448.0)
    _, eq = np.frexp(q)
    eq = eq - 1
    normal = q >= 2.0**-6
    E = np.where(normal, eq + 7, 0)
    M = np.where(normal, q / np.ldexp(1.0, eq) * 8 - 8, q / 2.0**-9)
    assert np.all(M == np.rint(M)) and np.all((M >= 0) & (M <= 7)) and np.all((E >= 0) & (E <= 15))
    byte = (np.signbit(x).astype(np.uint8) << 7) | (E.astype(np.uint8) << 3) | M.astype(np.uint8)
    assert not np.any((byte & 0x7F) == 0x7F), "NaN code produced"
    return byte.astype(np.uint8)


def _e4m3_table():
    t = np.zeros(256, dtype=np.float32)
    for b in range(256):
        s = -1.0 if b & 0x80 else 1.0
        E = (b >> 3) & 0xF
        M = b & 7
        if E == 15 and M == 7:
            t[b] = np.nan
        elif E == 0:
            t[b] = s * M * 2.0**-9
        else:
            t[b] = s * (1 + M / 8.0) * 2.0 ** (E - 7)
    return t


E4M3_TABLE = _e4m3_table()
E2M1_TABLE = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)


def e2m1_encode(x):
    """Values in [-6, 6] -> 4-bit codes (bit 3 = sign), round to nearest even."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    assert np.all(a <= 6.0)
    _, ex = np.frexp(a)
    e = np.maximum(ex - 1, 0)
    step = np.ldexp(1.0, e - 1)
    q = np.rint(a / step) * step
    lut = {0.0: 0, 0.5: 1, 1.0: 2, 1.5: 3, 2.0: 4, 3.0: 5, 4.0: 6, 6.0: 7}
    mag = np.vectorize(lambda v: lut[float(v)], otypes=[np.uint8])(q) if q.size else q.astype(np.uint8)
    return (mag | (np.signbit(x).astype(np.uint8) << 3)).astype(np.uint8)


AMAX_FLOOR = 1e-4


def quant_fp8_block(w, block=128):
    """[R, C] float32 -> (e4m3 bytes [R, C], ue8m0 bytes [ceil(R/128), ceil(C/128)]).

    scale = 2^ceil(log2(amax/448)) per 128x128 block (a partial edge block uses the elements it
    has), amax floored at 1e-4."""
    R, C = w.shape
    nr, nc = -(-R // block), -(-C // block)
    pad = np.zeros((nr * block, nc * block), dtype=np.float64)
    pad[:R, :C] = w
    blocks = pad.reshape(nr, block, nc, block)
    amax = np.maximum(np.abs(blocks).max(axis=(1, 3)), AMAX_FLOOR)
    e = pow2_ceil_exponent(amax / 448.0)
    scale = np.ldexp(1.0, e)
    q = blocks / scale[:, None, :, None]
    codes = e4m3_encode(q).reshape(nr * block, nc * block)[:R, :C]
    return np.ascontiguousarray(codes), e8m0_from_exponent(e)


def dequant_fp8_block(codes, scale_bytes, block=128):
    R, C = codes.shape
    s = e8m0_value(scale_bytes)
    s_full = np.repeat(np.repeat(s, block, axis=0), block, axis=1)[:R, :C]
    return (E4M3_TABLE[codes] * s_full).astype(np.float32)


def quant_fp4_row32(w):
    """[R, C] float32 (C % 32 == 0) -> (packed int8 [R, C/2], ue8m0 bytes [R, C/32]).

    scale = 2^ceil(log2(amax/6)) per 1x32 block along C; element 2k in the low nibble."""
    R, C = w.shape
    assert C % 32 == 0, f"FP4 needs K % 32 == 0, got {C}"
    blocks = w.astype(np.float64).reshape(R, C // 32, 32)
    amax = np.maximum(np.abs(blocks).max(axis=2), AMAX_FLOOR)
    e = pow2_ceil_exponent(amax / 6.0)
    q = blocks / np.ldexp(1.0, e)[:, :, None]
    codes = e2m1_encode(q).reshape(R, C)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    return np.ascontiguousarray(packed.view(np.int8)), e8m0_from_exponent(e)


def dequant_fp4_row32(packed, scale_bytes):
    p = packed.view(np.uint8)
    R, half = p.shape
    codes = np.empty((R, half * 2), dtype=np.uint8)
    codes[:, 0::2] = p & 0xF
    codes[:, 1::2] = p >> 4
    s = np.repeat(e8m0_value(scale_bytes), 32, axis=1)
    return (E2M1_TABLE[codes] * s).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# safetensors writer / reader (own code: the package's F8_E8M0 support is not relied on)
# ----------------------------------------------------------------------------------------------

ST_DTYPES = {  # name -> (numpy storage dtype, item size)
    "BF16": (np.uint16, 2),
    "F32": (np.float32, 4),
    "I64": (np.int64, 8),
    "I8": (np.int8, 1),
    "F8_E4M3": (np.uint8, 1),
    "F8_E8M0": (np.uint8, 1),
}


def write_safetensors(path, tensors, producer="plumb tools/golden/make_v4_fixtures.py"):
    """tensors: list of (name, dtype_str, np.ndarray with the storage dtype). Tensors are laid out
    by item size (largest first) then name, so every tensor is aligned to its item size.
    `producer` goes into the header's __metadata__ (tools/tiny-model reuses this writer)."""
    names = [t[0] for t in tensors]
    assert len(set(names)) == len(names), "duplicate tensor name"
    order = sorted(tensors, key=lambda t: (-ST_DTYPES[t[1]][1], t[0]))
    header, blobs, off = {}, [], 0
    for name, dt, arr in order:
        np_dt, _ = ST_DTYPES[dt]
        assert arr.dtype == np_dt, f"{name}: {arr.dtype} is not the storage type of {dt}"
        b = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dt, "shape": [int(s) for s in arr.shape], "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt", "producer": producer}
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((-len(hb)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    out, end_prev = {}, 0
    for name, h in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, e = h["data_offsets"]
        assert b == end_prev, f"{name}: hole or overlap in the data buffer"
        end_prev = e
        np_dt, size = ST_DTYPES[h["dtype"]]
        assert (e - b) == size * int(np.prod(h["shape"], dtype=np.int64)), name
        out[name] = (h["dtype"], np.frombuffer(data[base + b : base + e], dtype=np_dt).reshape(h["shape"]))
    assert base + end_prev == len(data), "trailing bytes"
    return out

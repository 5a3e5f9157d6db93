#!/usr/bin/env python3
"""Golden logits for plumb's DeepSeek-V4 `faithful` profile, computed by the release's own code.

Runs DeepSeek's released `inference/model.py` (unmodified, imported from --release-dir; it is
not part of this repository) on the HF fixtures' checkpoints (tests/data/golden/v4/<config>/)
and saves the logits of every position of every prompt:
    <out>/<config>/prompt_<L>.logits.npy   float32 [L, vocab]
    <out>/<config>/meta.json

model.py imports its TileLang kernels from `kernel` and the Hadamard transform from
`fast_hadamard_transform`; neither runs here, so this script installs stand-ins that follow
kernel.py at 0825add line by line (docs/CORRECTNESS.md "Release kernel semantics" has the line
references), in plain torch with TF32 off:
  act_quant      FP8 e4m3 per block along the last dim: amax of the block in f32, floored at 1e-4,
                 s = amax * f32(1/448), rounded up to a power of two (ue8m0) when scale_fmt is set,
                 y = e4m3(clamp(x / s, +-448)) (RNE); inplace: bf16(f32(y) * s);
  fp4_act_quant  the same with e2m1 (max 6, amax floor 6 * 2^-126, always ue8m0, RNE);
  fp8_gemm       GEMM_ORDER "block" (the kernel): per 128-wide K block an f32 partial product of
                 the unscaled e4m3 codes, times sa[m, k] * sb[n/128, k] (f32, that order), added to
                 an f32 accumulator in K order; "fp32": one f32 GEMM of the dequantized operands
                 (the noise-floor experiment); bf16 out;
  fp4_gemm       the same with 32-wide K blocks, the partial product times sa[m, k/4] then sb[n, k];
  sparse_attn    the kernel's online softmax over blocks of 64 slots of topk_idxs (-1 = skip):
                 s = f32(q.k) * scale; m_b = max(m_{b-1}, block max); alpha = exp(m_{b-1} - m_b);
                 l = l * alpha + sum_block exp(s - m_b) (f32, unrounded); acc = acc * alpha +
                 bf16(exp(s - m_b)) . V; at the end l += exp(sink - m), o = bf16(acc / l);
                 ATTN_ORDER "global" instead rounds exp(s - M) with the row's global max M (the
                 stand-in before issue 13, kept to measure what the block rule changes);
  hc_split_sinkhorn  pre/post sigmoids, row softmax + eps, a column normalisation, then iters - 1
                 (row, column) normalisations, every divisor sum + eps, all f32;
  hadamard_transform normalized Sylvester Walsh-Hadamard in f32, input dtype out.
A trailing partial quantization block (the tiny dims only) is quantized on its own, as
MODEL-SPEC 9 states; the real kernels assert full blocks.

Harness choices that are not the release's behaviour, each needed to obtain a golden:
  * every prompt runs on a freshly built model (the release never resets the compressor state
    between prompts, MODEL-SPEC 8.5);
  * the head returns the logits of every position, not only the last (same fp32 product);
  * wo_a is dequantized to bf16 as the release's convert.py does; the other tensors are loaded
    as stored (FP8/FP4 weights stay quantized).

Usage (GPU machine with torch >= 2.8, safetensors, numpy):
    python3 tools/golden/make_v4_faithful.py --release-dir DIR_WITH_model.py \
        --fixtures tests/data/golden/v4 --out tests/data/golden/v4-faithful
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import sys
import types

import numpy as np
import torch
import torch.nn.functional as F


# ---------------------------------------------------------------------------------------------
# Stand-in kernels
# ---------------------------------------------------------------------------------------------

def _pow2_ceil(s: torch.Tensor) -> torch.Tensor:
    """2^ceil(log2(s)) for positive normal f32 s, exactly (mantissa != 0 rounds the exponent up)."""
    bits = s.float().contiguous().view(torch.int32)
    exp = ((bits >> 23) & 0xFF) - 127
    exp = exp + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return torch.pow(torch.tensor(2.0, dtype=torch.float32, device=s.device), exp.float())


def _blocks(x: torch.Tensor, block: int):
    """Splits the last dim into blocks of `block` (a trailing partial block allowed)."""
    n = x.size(-1)
    return [(b, min(n, b + block)) for b in range(0, n, block)]


def _round_e2m1(v: torch.Tensor) -> torch.Tensor:
    """Round to nearest even on the e2m1 grid {0, .5, 1, 1.5, 2, 3, 4, 6} (|v| <= 6)."""
    a = v.abs()
    # grid spacing: 0.5 below 2, 1 in [2, 4), 2 in [4, 6]
    step = torch.where(a < 2, torch.full_like(a, 0.5), torch.where(a < 4, torch.ones_like(a), torch.full_like(a, 2.0)))
    q = torch.round(a / step) * step  # torch.round: half to even on the step count
    return torch.copysign(q, v)


def act_quant(x, block_size=128, scale_fmt=None, scale_dtype=torch.float32, inplace=False):
    xf = x.float()
    ys, ss = [], []
    for b, e in _blocks(xf, block_size):
        blk = xf[..., b:e]
        amax = blk.abs().amax(dim=-1, keepdim=True).clamp_min(1e-4)
        s = amax * (1.0 / 448.0)
        if scale_fmt is not None:
            s = _pow2_ceil(s)
        q = (blk / s).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        ys.append((q.float() * s).to(x.dtype) if inplace else q)
        ss.append(s)
    if inplace:
        x.copy_(torch.cat(ys, dim=-1))
        return x
    return torch.cat(ys, dim=-1), torch.cat(ss, dim=-1).to(scale_dtype)


def fp4_act_quant(x, block_size=32, inplace=False):
    assert inplace, "the stand-in only implements the in-place round trip model.py uses"
    xf = x.float()
    ys = []
    for b, e in _blocks(xf, block_size):
        blk = xf[..., b:e]
        amax = blk.abs().amax(dim=-1, keepdim=True).clamp_min(6 * 2.0 ** -126)
        s = _pow2_ceil(amax * (1.0 / 6.0))
        ys.append((_round_e2m1((blk / s).clamp(-6.0, 6.0)) * s).to(x.dtype))
    x.copy_(torch.cat(ys, dim=-1))
    return x


GEMM_ORDER = "block"   # "block": the kernels' per-K-block promotion; "fp32": one f32 GEMM
ATTN_ORDER = "online"  # "online": the kernel's 64-slot online softmax; "global": one max per row
# When a dict, sparse_attn also stores its internals there (tools/golden/release_step17.py):
# "scores" f32 [b, s, h, topk] (q.k * scale, -inf where skipped), "probs" f32 [b, s, h, topk]
# (exp(s - m_b) before the bf16 rounding, 0 where skipped), "m_blocks" f32 [b, s, h, blocks]
# (the running max after each block), "l" f32 [b, s, h] (the sum before the sink), "l_sink"
# (after it). Recording copies values only: the output is the same with or without it.
TRACE = None


def _expand_act_scale(a_s: torch.Tensor, K: int, block: int) -> torch.Tensor:
    return a_s.float().repeat_interleave(block, dim=-1)[..., :K]


def _blocked_gemm(a2, b2, K, kblock, scale_of_block):
    """sum over K blocks of (a2[:, blk] @ b2[:, blk]^T) * scale_of_block(k), in K order (f32)."""
    acc = torch.zeros(a2.size(0), b2.size(0), dtype=torch.float32, device=a2.device)
    for k, (lo, hi) in enumerate(_blocks(a2, kblock)):
        acc += (a2[:, lo:hi] @ b2[:, lo:hi].t()) * scale_of_block(k)
    return acc


def fp8_gemm(a, a_s, b, b_s, scale_dtype=torch.float32):
    K = a.size(-1)
    a2, sa = a.reshape(-1, K).float(), a_s.reshape(-1, a_s.size(-1)).float()
    bf, sb = b.float(), b_s.float()
    if GEMM_ORDER == "fp32":
        sbf = sb.repeat_interleave(128, dim=0)[: b.size(0)].repeat_interleave(128, dim=1)[:, :K]
        c = (a2 * _expand_act_scale(sa, K, 128)) @ (bf * sbf).t()
    else:  # kernel.py 238-250: Scale_C = sa[m, k] * sb[n / 128, k], C_accum += C_block * Scale_C
        sb_rows = sb.repeat_interleave(128, dim=0)[: b.size(0)]  # [N, K/128]
        c = _blocked_gemm(a2, bf, K, 128, lambda k: sa[:, k : k + 1] * sb_rows[:, k][None, :])
    return c.to(torch.get_default_dtype()).view(*a.shape[:-1], b.size(0))


_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def fp4_gemm(a, a_s, b, b_s, scale_dtype=torch.float32):
    K = a.size(-1)
    a2, sa = a.reshape(-1, K).float(), a_s.reshape(-1, a_s.size(-1)).float()
    raw = b.view(torch.uint8).to(torch.int64)
    lut = torch.tensor(_E2M1, dtype=torch.float32, device=a.device)
    w = torch.stack([lut[raw & 0xF], lut[raw >> 4]], dim=-1).flatten(-2)  # low nibble = even k
    sb = b_s.float()
    if GEMM_ORDER == "fp32":
        c = (a2 * _expand_act_scale(sa, K, 128)) @ (w * sb.repeat_interleave(32, dim=1)[:, :K]).t()
    else:  # kernel.py 491-510: C_accum += C_block * scale_a[m, k / 4] * scale_b[n, k]
        c = _blocked_gemm(a2, w, K, 32, lambda k: sa[:, k // 4 : k // 4 + 1] * sb[:, k][None, :])
    return c.to(torch.get_default_dtype()).view(*a.shape[:-1], b.size(0))


def sparse_attn(q, kv, attn_sink, topk_idxs, softmax_scale):
    b, s, h, d = q.shape
    idx = topk_idxs.long()
    qf = q.float()
    sink = attn_sink.float().view(1, 1, h)
    block = 64 if ATTN_ORDER == "online" else idx.size(-1)  # kernel.py 290
    f32 = dict(dtype=torch.float32, device=q.device)  # the harness's default dtype is bf16
    m = torch.full((b, s, h), float("-inf"), **f32)
    l = torch.zeros((b, s, h), **f32)
    acc = torch.zeros((b, s, h, d), **f32)
    trace = {"scores": [], "probs": [], "m_blocks": []} if TRACE is not None else None
    for t0 in range(0, idx.size(-1), block):
        blk = idx[..., t0 : t0 + block]
        valid = blk >= 0
        kvb = torch.gather(kv.unsqueeze(1).expand(b, s, kv.size(1), d), 2,
                           blk.clamp_min(0).unsqueeze(-1).expand(*blk.shape, d)).float()
        kvb = kvb * valid.unsqueeze(-1)  # kernel.py 325: a skipped slot loads zeros
        sc = torch.einsum("bshd,bskd->bshk", qf, kvb)
        sc = sc.masked_fill(~valid.unsqueeze(2), float("-inf")) * softmax_scale  # 327-330
        m_new = torch.maximum(m, sc.amax(dim=-1))  # 332
        alpha = torch.exp(m - m_new)  # 334
        e = torch.exp(sc - m_new.unsqueeze(-1))  # 336
        l = l * alpha + e.sum(dim=-1)  # 337-339
        acc = acc * alpha.unsqueeze(-1) + torch.einsum("bshk,bskd->bshd", e.to(torch.bfloat16).float(), kvb)  # 340-343
        m = m_new
        if trace is not None:
            for key, v in (("scores", sc), ("probs", e), ("m_blocks", m_new.unsqueeze(-1))):
                trace[key].append(v.detach().clone())
    if trace is not None:
        TRACE.update({k: torch.cat(v, dim=-1) for k, v in trace.items()})
        TRACE["l"] = l.detach().clone()
    l = l + torch.exp(sink - m)  # 346
    if trace is not None:
        TRACE["l_sink"] = l.detach().clone()
    return (acc / l.unsqueeze(-1)).to(q.dtype)  # 348-350


def hc_split_sinkhorn(mixes, hc_scale, hc_base, hc_mult=4, sinkhorn_iters=20, eps=1e-6):
    hc = hc_mult
    pre = torch.sigmoid(mixes[..., :hc] * hc_scale[0] + hc_base[:hc]) + eps
    post = 2 * torch.sigmoid(mixes[..., hc:2 * hc] * hc_scale[1] + hc_base[hc:2 * hc])
    comb = (mixes[..., 2 * hc:] * hc_scale[2] + hc_base[2 * hc:]).unflatten(-1, (hc, hc))
    e = torch.exp(comb - comb.amax(dim=-1, keepdim=True))  # kernel.py 403-408
    comb = e / e.sum(dim=-1, keepdim=True) + eps
    comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    for _ in range(sinkhorn_iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    return pre, post, comb


def hadamard_transform(x, scale=1.0):
    n = x.size(-1)
    h = torch.ones(1, 1, dtype=torch.float32, device=x.device)
    while h.size(0) < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return ((x.float() @ h.t()) * scale).to(x.dtype)


def install_stand_ins():
    k = types.ModuleType("kernel")
    for f in (act_quant, fp4_act_quant, fp8_gemm, fp4_gemm, sparse_attn, hc_split_sinkhorn):
        setattr(k, f.__name__, f)
    sys.modules["kernel"] = k
    h = types.ModuleType("fast_hadamard_transform")
    h.hadamard_transform = hadamard_transform
    sys.modules["fast_hadamard_transform"] = h


# ---------------------------------------------------------------------------------------------
# Model construction and loading
# ---------------------------------------------------------------------------------------------

def model_args(release, cfg: dict, max_seq_len: int):
    ys = cfg.get("rope_scaling") or {}
    return release.ModelArgs(
        max_batch_size=1, max_seq_len=max_seq_len, dtype="fp8", scale_fmt="ue8m0", expert_dtype="fp4",
        scale_dtype="fp8", vocab_size=cfg["vocab_size"], dim=cfg["hidden_size"],
        moe_inter_dim=cfg["moe_intermediate_size"], n_layers=cfg["num_hidden_layers"],
        n_hash_layers=cfg["num_hash_layers"], n_mtp_layers=cfg["num_nextn_predict_layers"],
        n_heads=cfg["num_attention_heads"], n_routed_experts=cfg["n_routed_experts"],
        n_shared_experts=cfg["n_shared_experts"], n_activated_experts=cfg["num_experts_per_tok"],
        score_func=cfg["scoring_func"], route_scale=cfg["routed_scaling_factor"],
        swiglu_limit=cfg["swiglu_limit"], q_lora_rank=cfg["q_lora_rank"], head_dim=cfg["head_dim"],
        rope_head_dim=cfg["qk_rope_head_dim"], norm_eps=cfg["rms_norm_eps"], o_groups=cfg["o_groups"],
        o_lora_rank=cfg["o_lora_rank"], window_size=cfg["sliding_window"],
        compress_ratios=tuple(cfg["compress_ratios"]), compress_rope_theta=cfg["compress_rope_theta"],
        original_seq_len=ys.get("original_max_position_embeddings", 0), rope_theta=cfg["rope_theta"],
        rope_factor=ys.get("factor", 1), beta_fast=ys.get("beta_fast", 32), beta_slow=ys.get("beta_slow", 1),
        index_n_heads=cfg["index_n_heads"], index_head_dim=cfg["index_head_dim"], index_topk=cfg["index_topk"],
        hc_mult=cfg["hc_mult"], hc_sinkhorn_iters=cfg["hc_sinkhorn_iters"], hc_eps=cfg["hc_eps"])


def dequant_fp8(w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    rows, cols = w.shape
    sf = s.float().repeat_interleave(128, 0)[:rows].repeat_interleave(128, 1)[:, :cols]
    return w.float() * sf


def load_checkpoint(model, path: str, device: str = "cuda"):
    from safetensors.torch import load_file
    sd = load_file(path, device=device)
    params = dict(model.named_parameters())
    params.update(dict(model.named_buffers()))
    done = set()
    for name, p in params.items():
        if name not in sd:
            continue  # runtime buffers (caches, rope tables, compressor state)
        t = sd[name]
        if p.dtype == torch.float4_e2m1fn_x2:
            t = t.view(torch.float4_e2m1fn_x2)
        elif name.endswith("wo_a.weight"):  # convert.py: FP8 -> bf16, scale dropped
            t = dequant_fp8(t, sd[name[: -len("weight")] + "scale"])
        if tuple(t.shape) != tuple(p.shape):
            raise SystemExit(f"{path}: {name} has shape {tuple(t.shape)}, model.py wants {tuple(p.shape)}")
        with torch.no_grad():
            if p.dtype == t.dtype:  # raw bytes: copy kernels do not cover every narrow float type
                p.data.view(torch.uint8).copy_(t.contiguous().view(torch.uint8))
            else:
                p.data.copy_(t.to(p.dtype))
        done.add(name)
    missing = [n for n in params if n not in done and not _is_runtime_buffer(n)]
    unused = [n for n in sd if n not in done and not n.endswith("wo_a.scale")]
    if missing or unused:
        raise SystemExit(f"{path}: not loaded {missing[:5]}, unused {unused[:5]}")


def _is_runtime_buffer(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last in ("kv_cache", "kv_state", "score_state", "freqs_cis")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release-dir", required=True, help="directory holding the release's model.py")
    ap.add_argument("--fixtures", required=True, help="tests/data/golden/v4")
    ap.add_argument("--out", required=True, help="tests/data/golden/v4-faithful")
    ap.add_argument("--configs", nargs="*", default=None)
    ap.add_argument("--gemm-order", choices=["block", "fp32"], default="block",
                    help="block: the kernels' per-K-block promotion; fp32: one f32 GEMM (noise floor)")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for the implementation-order floor")
    ap.add_argument("--attn-order", choices=["online", "global"], default="online",
                    help="online: the kernel's 64-slot online softmax; global: one max per row")
    args = ap.parse_args()
    global GEMM_ORDER, ATTN_ORDER
    GEMM_ORDER, ATTN_ORDER = args.gemm_order, args.attn_order

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    install_stand_ins()
    sys.path.insert(0, args.release_dir)
    import model as release  # noqa: E402  (the release's inference/model.py)
    model_py = os.path.join(args.release_dir, "model.py")
    model_sha = hashlib.sha256(open(model_py, "rb").read()).hexdigest()

    configs = args.configs or sorted(d for d in os.listdir(args.fixtures) if os.path.isfile(os.path.join(args.fixtures, d, "config.json")))
    for name in configs:
        src = os.path.join(args.fixtures, name)
        cfg = json.load(open(os.path.join(src, "config.json")))
        prompts = sorted(int(f[len("prompt_"):-len(".ids.npy")]) for f in os.listdir(src)
                         if f.startswith("prompt_") and f.endswith(".ids.npy"))
        dst = os.path.join(args.out, name)
        os.makedirs(dst, exist_ok=True)
        stats = {}
        for L in prompts:
            ids = np.load(os.path.join(src, f"prompt_{L}.ids.npy")).astype(np.int64)
            torch.set_default_dtype(torch.bfloat16)
            for cached in (release.precompute_freqs_cis, release.get_window_topk_idxs, release.get_compress_topk_idxs):
                cached.cache_clear()  # lru_cache'd tensors live on the device they were made on
            torch.set_default_device(args.device)
            torch.manual_seed(0)
            m = release.Transformer(model_args(release, cfg, max_seq_len=max(prompts) + 64))
            load_checkpoint(m, os.path.join(src, "model.safetensors"), args.device)
            m.head.get_logits = lambda x, w=m.head.weight: F.linear(x.float(), w)  # every position
            with torch.inference_mode():
                logits = m(torch.tensor(ids, device=args.device).unsqueeze(0), 0)[0].float().cpu().numpy()
            torch.set_default_device("cpu")
            torch.set_default_dtype(torch.float32)
            assert logits.shape == (L, cfg["vocab_size"]), logits.shape
            np.save(os.path.join(dst, f"prompt_{L}.logits.npy"), logits.astype(np.float32))
            stats[str(L)] = {"logit_absmax": float(np.abs(logits).max())}
            print(f"{name} prompt_{L}: |logits| max {np.abs(logits).max():.3f}", flush=True)
        meta = {
            "config": name,
            "generated_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "command": " ".join(sys.argv),
            "release_model_py_sha256": model_sha,
            "env": {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "numpy": np.__version__},
            "numerics": "the release's inference/model.py with stand-in kernels (see the script docstring)",
            "gemm_order": GEMM_ORDER,
            "device": args.device,
            "attn_order": ATTN_ORDER,
            "checkpoint": f"../../v4/{name}/model.safetensors",
            "prompts": stats,
        }
        json.dump(meta, open(os.path.join(dst, "meta.json"), "w"), indent=1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Golden logits for plumb's DeepSeek-V3 `faithful` profile, computed by the release's own code.

Runs DeepSeek's released V3 `inference/model.py` (unmodified, imported from --release-dir; it is
not part of this repository) on the HF fixtures' checkpoints (tests/data/golden/v3/<config>/) and
saves, per config:
    <out>/<config>/prompt_<L>.logits.npy   float32 [L, vocab]: logits of every position (bf16
                                           values widened to f32, see "head" below)
    <out>/<config>/greedy_<L>.ids.npy      int64 [n]: the release's own greedy continuation of
                                           prompt_<L> (for each greedy_<L>.ids.npy in the fixture)
    <out>/<config>/meta.json

What the release computes in this mode (model.py of deepseek-ai/DeepSeek-V3 at 9b4e978, line
numbers; dtype="fp8" checkpoint, default dtype bf16 as generate.py:109 sets it, world_size 1,
attn_impl "absorb" (model.py:17), gemm_impl "bf16" (model.py:16) unless --gemm-impl fp8).
"bf16 op" below means: inputs bf16, computed in f32 inside the kernel, output rounded once to bf16.
  * Weights (Transformer.__init__ 760, Linear 176-187): every Linear except the head holds the
    FP8 e4m3 weight and an f32 [ceil(out/128), ceil(in/128)] block scale. embed, norms, router
    weight and head are bf16 (created under default dtype bf16); Gate.bias f32 (564).
  * Linear, gemm_impl bf16 (linear 153-157): W = weight_dequant(w, s) = (f32(w_fp8) * s) rounded
    to bf16 (kernel.py 83-86, output dtype = default dtype bf16, kernel.py 107); then
    F.linear(x_bf16, W_bf16) -> bf16 (cuBLAS, f32 accumulation, bf16 output). bf16 weights
    (router, head) go straight to F.linear (153-154). No bias anywhere.
  * Linear, gemm_impl fp8 (158-163): act_quant per 128-block of the last dim (kernel.py 23-35:
    amax of |x| in f32 floored at 1e-4, s = amax / 448, with scale_fmt "ue8m0" s = 2^ceil(log2 s);
    q = fp8(x / s)), then fp8_gemm (kernel.py 145-172: per 128-K block f32 dot * a_s * b_s,
    f32 accumulation, bf16 out). Only plain `Linear` passes scale_fmt (205); ColumnParallel /
    RowParallel (233, 262) call linear() without it (scale_fmt None). The V3 configs have no
    scale_fmt (config_v3.1.json has ue8m0).
  * Embedding (124): bf16 row gather.
  * RMSNorm (278-294): F.rms_norm(x_bf16, (dim,), weight_bf16, eps=1e-6) for every norm (the
    class default eps; config rms_norm_eps is not read). bf16 out; where torch rounds inside
    F.rms_norm (once, or after normalizing and again after the weight product) is a torch
    implementation detail: meta.json "op_probes.rms_norm" measures it on the device.
  * RoPE table (297-375): freqs = 1 / base^(arange(0, d, 2, f32) / d) in f32 (366); YaRN only
    when max_seq_len > original_seq_len (367): low/high = floor/ceil of the correction dims
    computed with original_seq_len (343-345, 327), ramp = clamp((arange(d/2) - low) / (high - low),
    0, 1) in f32 (362-363, +0.001 to high if equal), smooth = 1 - ramp, freqs = freqs / factor *
    (1 - smooth) + freqs * smooth (370, f32); angle = outer(arange(max_seq_len), freqs) in f32
    (372-373, one f32 product per position), freqs_cis = polar(1, angle) complex64 (374), built on
    the GPU (generate.py 115-116 builds the model under torch.device("cuda")). No cos/sin
    attention factor: the release has no equivalent of HF's mscale(mscale)/mscale(mscale_all_dim).
  * apply_rotary_emb (378-393): x.float() viewed as complex pairs (2i, 2i+1) (interleaved, the
    checkpoint's layout), times freqs_cis in complex64 (f32), back to bf16 (393). Applied to
    q_pe (bf16, from wq_b) and k_pe (bf16, from wkv_a).
  * MLA absorb (446-497): q = wq_b(q_norm(wq_a(x))) (bf16 at each step, 464); kv = wkv_a(x) bf16;
    kv_cache <- kv_norm(kv) bf16, pe_cache <- rotated k_pe bf16 (484-485, bf16 buffers);
    wkv_b = weight_dequant -> bf16 [H, nope+v, kv_lora] (481-482);
    q_nope' = einsum(q_nope, wkv_b[:, :nope]) -> bf16 (483);
    scores = bf16( bf16(einsum(q_nope', kv_cache)) + bf16(einsum(q_pe, pe_cache)) ) then
    * softmax_scale -> bf16 (486-487: three bf16 roundings: each einsum, the sum, the scale);
    softmax_scale = qk_head_dim^-0.5 * m^2, m = 0.1 * mscale * ln(rope_factor) + 1, only when
    max_seq_len > original_seq_len (434-437); causal mask is a bf16 tensor of -inf/0 added in bf16
    (789, 488-489, prefill only; decode has no mask); probabilities = softmax in f32 of the bf16
    scores, rounded to bf16 (490); o = einsum(p, kv_cache) -> bf16 (494); o = einsum(o,
    wkv_b[:, -v:]) -> bf16 (495); wo(o.flatten) -> bf16 (496).
  * Dense MLP / Expert / shared experts (532, 633): w2( bf16(silu(w1 x)) * w3 x ) with silu a bf16
    op and the product a bf16 op (rounded), every linear bf16 out. Shared experts are one MLP of
    width n_shared_experts * moe_inter_dim (667).
  * Gate (576-598): logits = F.linear(x_bf16, W_bf16) -> bf16; s = sigmoid -> bf16 (580);
    biased = s + bias -> f32 (bf16 + f32 tensor promotes, 583); groups: sum of the top-2 biased
    scores per group (f32, 589), keep topk_groups groups (590), others -inf (592); top-k of the f32
    biased scores (593); w = unbiased bf16 scores gathered (594); w /= w.sum() in bf16 (sum
    rounded to bf16, quotient rounded to bf16, 596, no epsilon); w *= route_scale in bf16 (597).
  * MoE combine (679-693): y = zeros bf16; for experts in ascending index order (684), rows routed
    to expert i: y[rows] += bf16(expert(x[rows]) * w) -> every add rounded to bf16, so the order
    is expert index order, not top-k rank order (689); z = shared_experts(x) bf16; out = y + z
    bf16 (693).
  * Block (733-734): x = x + attn(attn_norm(x)); x = x + ffn(ffn_norm(x)), bf16 adds.
  * Final (792-793): h = norm(h) bf16; logits = head(h) = F.linear(bf16, bf16) -> **bf16 logits**
    (head dtype = default dtype bf16, 769; no f32 head in V3).
  * Greedy (generate.py 51-71, temperature 0): prefill the whole prompt at start_pos 0, then one
    token per forward at start_pos = cur_pos - 1 reading the bf16 MLA caches; argmax of bf16 logits
    (ties -> lowest id, torch.argmax).

Harness choices that are not the release's behaviour, each needed to obtain a golden:
  * Transformer.forward returns only the last position (792); a forward hook captures norm(h) for
    every position and the script applies the same `model.head` to all of them (same bf16
    F.linear). meta.json records the difference between the release's own last-position logits
    and that row (0 expected; a GEMM with M = L instead of M = 1 may reduce in another order).
  * Gate.bias exists only when dim == 7168 (564); the tiny models are V3 routers (noaux_tc with
    e_score_correction_bias), so after building the model the script registers an f32 `bias`
    Parameter of shape [n_routed_experts] on every MoE gate and loads the checkpoint's bias into
    it; Gate.forward then uses it exactly as in the 671B model (582-583, 589).
  * Checkpoint names are converted with convert.py's own renaming (lines 56-65, mp = 1) using the
    `mapping` dict parsed (ast) from the release's convert.py; MTP layers (index >= n_layers,
    convert.py:53 hard-codes "model.layers.61") are skipped explicitly and listed in meta.json.
    Loading is strict: every parameter filled, every non-MTP tensor used, shapes and dtypes equal,
    bytes checked after load_state_dict(strict=True); FP8 weights stay FP8 with their f32 scales.
  * ModelArgs.mscale = rope_scaling.mscale_all_dim (the release's only mscale is the softmax one,
    HF's softmax scale uses mscale_all_dim; the release cannot express HF's RoPE cos/sin factor
    mscale(mscale)/mscale(mscale_all_dim), 1.0586 for tiny-b, which meta.json records).
  * max_seq_len = config max_position_embeddings (1024 / 1280): > original_max_position_embeddings
    (128 / 32), so the release applies YaRN and the softmax mscale like HF, and >= the longest
    prompt + greedy tokens. Positions < max_seq_len get the same RoPE for any such max_seq_len.
  * Every prompt runs on a freshly built and loaded model (the release reuses its caches; a
    prefill at start_pos 0 overwrites them: meta.json records a second forward on the same model
    being bitwise equal). Greedy also starts from a fresh model. torch.manual_seed(965) before
    each build, as generate.py:111 (nothing random is drawn).
  * --standin-kernels replaces kernel.py's triton kernels by plain-torch transcriptions (below);
    default is the release's own kernel.py. With --gemm-impl fp8 the release's act_quant asserts
    in_features % 128 == 0, which the tiny dims break: fp8 then needs --standin-kernels, whose
    act_quant / fp8_gemm quantize a trailing partial block on its own (an extension).

Usage (GPU machine with torch (+ triton for the real kernels), safetensors, numpy):
    python3 tools/golden/make_v3_faithful.py --release-dir DIR_WITH_model.py \\
        --fixtures tests/data/golden/v3 --out tests/data/golden/v3-faithful
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import datetime
import hashlib
import json
import os
import platform
import sys
import types

import numpy as np
import torch
import torch.nn.functional as F

BLOCK = 128


def die(msg: str):
    raise SystemExit(f"make_v3_faithful: ERROR: {msg}")


# ---------------------------------------------------------------------------------------------
# Stand-in kernels (--standin-kernels): plain torch, written from kernel.py's semantics
# ---------------------------------------------------------------------------------------------

def standin_act_quant(x: torch.Tensor, block_size: int = 128, scale_fmt=None):
    """kernel.py act_quant_kernel (23-35) per block of the last dim; a trailing partial block is
    quantized on its own (the real kernel asserts full blocks)."""
    assert x.is_contiguous(), "Input tensor must be contiguous"
    if scale_fmt not in (None, "ue8m0"):
        die(f"stand-in act_quant: unknown scale_fmt {scale_fmt!r}")
    xf = x.float()
    ys, ss = [], []
    for b in range(0, xf.size(-1), block_size):
        blk = xf[..., b:b + block_size]
        amax = blk.abs().amax(dim=-1, keepdim=True).clamp_min(1e-4)
        s = amax / 448.0
        if scale_fmt == "ue8m0":
            s = torch.exp2(torch.ceil(torch.log2(s)))
        ys.append((blk / s).clamp(-448.0, 448.0).to(torch.float8_e4m3fn))
        ss.append(s)
    return torch.cat(ys, dim=-1).contiguous(), torch.cat(ss, dim=-1).contiguous()


def standin_weight_dequant(x: torch.Tensor, s: torch.Tensor, block_size: int = 128) -> torch.Tensor:
    """kernel.py weight_dequant (83-86, 107): f32(w) * block scale, stored in the default dtype."""
    assert x.is_contiguous() and s.is_contiguous(), "Input tensors must be contiguous"
    assert x.dim() == 2 and s.dim() == 2, "Input tensors must have 2 dimensions"
    M, N = x.shape
    want = ((M + block_size - 1) // block_size, (N + block_size - 1) // block_size)
    assert tuple(s.shape) == want, f"scale shape {tuple(s.shape)} != {want}"
    sf = s.float().repeat_interleave(block_size, 0)[:M].repeat_interleave(block_size, 1)[:, :N]
    return (x.float() * sf).to(torch.get_default_dtype())


def standin_fp8_gemm(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor) -> torch.Tensor:
    """kernel.py fp8_gemm_kernel (156-167): acc += dot_f32(a_blk, b_blk) * a_s * b_s per K block."""
    assert a.is_contiguous() and b.is_contiguous(), "Input tensors must be contiguous"
    assert a_s.is_contiguous() and b_s.is_contiguous(), "Scaling factor tensors must be contiguous"
    K = a.size(-1)
    N = b.size(0)
    a2 = a.reshape(-1, K)
    as2 = a_s.reshape(-1, a_s.size(-1)).float()
    bs = b_s.float().repeat_interleave(BLOCK, 0)[:N]  # [N, k blocks]
    acc = torch.zeros(a2.size(0), N, dtype=torch.float32, device=a.device)
    for i, k0 in enumerate(range(0, K, BLOCK)):
        k1 = min(K, k0 + BLOCK)
        d = a2[:, k0:k1].float() @ b[:, k0:k1].float().t()
        acc += d * as2[:, i:i + 1] * bs[:, i][None, :]
    return acc.to(torch.get_default_dtype()).reshape(*a.shape[:-1], N)


def install_standin_kernels():
    k = types.ModuleType("kernel")
    k.__file__ = "<make_v3_faithful.py stand-in>"
    k.act_quant = standin_act_quant
    k.weight_dequant = standin_weight_dequant
    k.fp8_gemm = standin_fp8_gemm
    sys.modules["kernel"] = k


# ---------------------------------------------------------------------------------------------
# Release import, ModelArgs, checkpoint conversion and loading
# ---------------------------------------------------------------------------------------------

def sha256(path: str) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def import_release(release_dir: str, standin: bool):
    release_dir = os.path.abspath(release_dir)
    for f in ("model.py", "kernel.py", "convert.py"):
        if not os.path.isfile(os.path.join(release_dir, f)):
            die(f"--release-dir {release_dir} has no {f} (pass the release's inference/ directory)")
    for mod in ("model", "kernel"):
        if mod in sys.modules:
            die(f"a module named {mod!r} is already imported; run this script in a fresh interpreter")
    if standin:
        install_standin_kernels()
    else:
        try:
            import triton  # noqa: F401
        except Exception as e:  # noqa: BLE001
            die(f"the release's kernel.py needs triton, which does not import here ({e!r}); "
                f"rerun with --standin-kernels")
    sys.path.insert(0, release_dir)
    try:
        import model as release  # the release's inference/model.py
    except Exception as e:  # noqa: BLE001
        hint = "" if standin else " (if this is a triton problem, rerun with --standin-kernels)"
        raise SystemExit(f"make_v3_faithful: ERROR: importing {release_dir}/model.py failed: {e!r}{hint}") from e
    if os.path.realpath(release.__file__) != os.path.realpath(os.path.join(release_dir, "model.py")):
        die(f"imported `model` from {release.__file__}, not from {release_dir}")
    kfile = getattr(sys.modules["kernel"], "__file__", "?")
    if not standin and os.path.realpath(kfile) != os.path.realpath(os.path.join(release_dir, "kernel.py")):
        die(f"imported `kernel` from {kfile}, not from {release_dir}")
    return release, release_dir, kfile


def release_mapping(release_dir: str) -> dict:
    """The `mapping` dict of the release's convert.py (parsed, not imported: it needs tqdm)."""
    tree = ast.parse(open(os.path.join(release_dir, "convert.py")).read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "mapping" for t in node.targets):
            return ast.literal_eval(node.value)
    die("no top-level `mapping = {...}` in convert.py")


def convert_name(name: str, mapping: dict) -> str:
    """convert.py main(), lines 56-65, with mp = 1 (no sharding)."""
    if name.startswith("model."):
        name = name[len("model."):]
    name = name.replace("self_attn", "attn")
    name = name.replace("mlp", "ffn")
    name = name.replace("weight_scale_inv", "scale")
    name = name.replace("e_score_correction_bias", "bias")
    key = name.split(".")[-2]
    if key not in mapping:
        die(f"checkpoint tensor {name}: key {key!r} not in convert.py's mapping")
    new_key, _dim = mapping[key]
    return name.replace(key, new_key)


def check_config(cfg: dict):
    """Fails on HF config features the release's model.py does not implement."""
    want = {"hidden_act": "silu", "norm_topk_prob": True, "topk_method": "noaux_tc", "attention_bias": False,
            "tie_word_embeddings": False, "moe_layer_freq": 1, "rms_norm_eps": 1e-6, "scoring_func": "sigmoid"}
    bad = {k: cfg.get(k) for k, v in want.items() if cfg.get(k, v) != v}
    if cfg.get("num_key_value_heads", cfg["num_attention_heads"]) != cfg["num_attention_heads"]:
        bad["num_key_value_heads"] = cfg["num_key_value_heads"]
    qc = cfg.get("quantization_config") or {}
    if qc.get("quant_method") != "fp8" or qc.get("fmt", "e4m3") != "e4m3" or list(qc.get("weight_block_size", [])) != [BLOCK, BLOCK]:
        bad["quantization_config"] = qc
    rs = cfg.get("rope_scaling") or {}
    if rs.get("type", rs.get("rope_type")) != "yarn":
        bad["rope_scaling"] = rs
    if bad:
        die(f"config.json has values the release's model.py does not implement: {bad}")


def yarn_mscale(scale: float, m: float) -> float:
    import math
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def model_args(release, cfg: dict, max_seq_len: int):
    rs = cfg["rope_scaling"]
    qc = cfg.get("quantization_config") or {}
    kw = dict(
        max_batch_size=1, max_seq_len=max_seq_len, dtype="fp8", scale_fmt=qc.get("scale_fmt"),
        vocab_size=cfg["vocab_size"], dim=cfg["hidden_size"], inter_dim=cfg["intermediate_size"],
        moe_inter_dim=cfg["moe_intermediate_size"], n_layers=cfg["num_hidden_layers"],
        n_dense_layers=cfg["first_k_dense_replace"], n_heads=cfg["num_attention_heads"],
        n_routed_experts=cfg["n_routed_experts"], n_shared_experts=cfg["n_shared_experts"],
        n_activated_experts=cfg["num_experts_per_tok"], n_expert_groups=cfg["n_group"],
        n_limited_groups=cfg["topk_group"], score_func=cfg["scoring_func"],
        route_scale=cfg["routed_scaling_factor"], q_lora_rank=cfg["q_lora_rank"], kv_lora_rank=cfg["kv_lora_rank"],
        qk_nope_head_dim=cfg["qk_nope_head_dim"], qk_rope_head_dim=cfg["qk_rope_head_dim"],
        v_head_dim=cfg["v_head_dim"], original_seq_len=rs["original_max_position_embeddings"],
        rope_theta=cfg["rope_theta"], rope_factor=rs["factor"], beta_fast=rs["beta_fast"],
        beta_slow=rs["beta_slow"], mscale=rs.get("mscale_all_dim", 0.0))
    fields = {f.name for f in dataclasses.fields(release.ModelArgs)}
    unknown, unset = sorted(set(kw) - fields), sorted(fields - set(kw))
    if unknown or unset:
        die(f"release ModelArgs mismatch: kwargs it does not have {unknown}, fields left at default {unset}")
    return release.ModelArgs(**kw)


def build_model(release, margs, sd: dict):
    """A fresh release Transformer on cuda (as generate.py 115-116), gate biases attached, loaded."""
    torch.manual_seed(965)  # generate.py:111
    with torch.device("cuda"):
        m = release.Transformer(margs)
    if release.world_size != 1 or release.rank != 0:
        die(f"release globals world_size={release.world_size} rank={release.rank}, want 1 / 0")
    attached = []
    for i, layer in enumerate(m.layers):
        if isinstance(layer.ffn, release.MoE) and layer.ffn.gate.bias is None:
            g = layer.ffn.gate
            del g.bias
            g.register_parameter("bias", torch.nn.Parameter(
                torch.zeros(margs.n_routed_experts, dtype=torch.float32, device="cuda")))
            attached.append(f"layers.{i}.ffn.gate.bias")
    want = m.state_dict()
    missing = sorted(set(want) - set(sd))
    unused = sorted(set(sd) - set(want))
    bad = [f"{k}: checkpoint {tuple(sd[k].shape)} {sd[k].dtype}, model.py {tuple(want[k].shape)} {want[k].dtype}"
           for k in sorted(set(want) & set(sd))
           if tuple(sd[k].shape) != tuple(want[k].shape) or sd[k].dtype != want[k].dtype]
    if missing or unused or bad:
        die(f"checkpoint does not match the release model: not in checkpoint {missing}, "
            f"not in model {unused}, shape/dtype mismatches {bad}")
    m.load_state_dict(sd, strict=True)
    for k, v in m.state_dict().items():
        if not torch.equal(v.contiguous().view(torch.uint8), sd[k].contiguous().view(torch.uint8)):
            die(f"{k}: loaded bytes differ from the checkpoint")
    for name, mod in m.named_modules():  # linear() reads weight.scale (model.py 156, 160)
        if isinstance(mod, release.Linear) and mod.weight.element_size() == 1:
            if getattr(mod.weight, "scale", None) is not mod.scale:
                die(f"{name}: weight.scale is not the loaded scale parameter")
    m.eval()
    return m, attached


def load_converted(path: str, mapping: dict, n_layers: int):
    from safetensors.torch import load_file
    raw = load_file(path, device="cuda")
    sd, skipped = {}, []
    for name in sorted(raw):
        parts = name.split(".")
        if name.startswith("model.layers.") and int(parts[2]) >= n_layers:  # MTP (convert.py:53)
            skipped.append(name)
            continue
        new = convert_name(name, mapping)
        if new in sd:
            die(f"two checkpoint tensors convert to {new}")
        sd[new] = raw[name]
    return sd, skipped


# ---------------------------------------------------------------------------------------------
# Forwards
# ---------------------------------------------------------------------------------------------

def prefill_all_positions(model, ids: np.ndarray):
    """model.forward(tokens, 0) as the release runs it, plus the head applied to every position."""
    captured = []
    hook = model.norm.register_forward_hook(lambda mod, inp, out: captured.append(out))
    try:
        tokens = torch.tensor(ids, dtype=torch.long, device="cuda").unsqueeze(0)
        last = model.forward(tokens, 0)  # [1, vocab], logits of the last position (792-793)
    finally:
        hook.remove()
    if len(captured) != 1 or captured[0].shape[:2] != (1, len(ids)):
        die(f"norm hook captured {[tuple(c.shape) for c in captured]}")
    with torch.inference_mode():
        logits = model.head(captured[0])[0]  # [L, vocab], the same module as 793
    return logits, last[0]


def release_greedy(model, prompt: np.ndarray, n_new: int):
    """generate.py generate() (51-71) for one prompt, temperature 0 (argmax), eos_id -1."""
    L = len(prompt)
    total_len = min(model.max_seq_len, n_new + L)
    if total_len != n_new + L:
        die(f"max_seq_len {model.max_seq_len} < prompt {L} + {n_new} new tokens")
    margins = []
    with torch.inference_mode():
        tokens = torch.full((1, total_len), -1, dtype=torch.long, device="cuda")
        tokens[0, :L] = torch.tensor(prompt, dtype=torch.long, device="cuda")
        prev_pos = 0
        for cur_pos in range(L, total_len):
            logits = model.forward(tokens[:, prev_pos:cur_pos], prev_pos)
            next_token = logits.argmax(dim=-1)
            top2 = logits[0].float().topk(2).values
            margins.append(float(top2[0] - top2[1]))
            tokens[:, cur_pos] = next_token
            prev_pos = cur_pos
    return tokens[0, L:].cpu().numpy().astype(np.int64), margins


def top2_margins(logits: np.ndarray) -> np.ndarray:
    s = np.sort(logits, axis=-1)
    return s[:, -1] - s[:, -2]


def op_probes() -> dict:
    """How this torch rounds in the two ops whose internal rounding the code does not spell out."""
    g = torch.Generator(device="cuda").manual_seed(1)
    out = {}
    dim = 144
    x = (torch.randn(512, dim, generator=g, device="cuda", dtype=torch.float32) * 3).to(torch.bfloat16)
    w = (torch.rand(dim, generator=g, device="cuda", dtype=torch.float32) + 0.5).to(torch.bfloat16)
    y = F.rms_norm(x, (dim,), w, 1e-6)
    xf = x.float()
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    two = (xf * r).to(torch.bfloat16) * w
    one = (xf * r * w.float()).to(torch.bfloat16)
    out["rms_norm"] = {"out_dtype": str(y.dtype), "n": y.numel(),
                       "mismatch_vs_bf16(x*rsqrt)*w_bf16": int((y != two).sum()),
                       "mismatch_vs_bf16(x*rsqrt*w)": int((y != one).sum())}
    a = (torch.randn(211, dim, generator=g, device="cuda", dtype=torch.float32)).to(torch.bfloat16)
    b = (torch.randn(320, dim, generator=g, device="cuda", dtype=torch.float32) * 0.1).to(torch.bfloat16)
    yl = F.linear(a, b)
    ref = (a.float() @ b.float().t()).to(torch.bfloat16)
    out["linear_bf16"] = {"out_dtype": str(yl.dtype), "n": yl.numel(),
                          "mismatch_vs_bf16(f32 matmul)": int((yl != ref).sum())}
    return out


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release-dir", required=True, help="the release's inference/ directory (model.py, kernel.py, convert.py)")
    ap.add_argument("--fixtures", default="tests/data/golden/v3", help="HF fixture root (one folder per config)")
    ap.add_argument("--out", default="tests/data/golden/v3-faithful")
    ap.add_argument("--configs", nargs="*", default=None, help="config folders (space or comma separated); default all")
    ap.add_argument("--gemm-impl", choices=("bf16", "fp8"), default="bf16", help="model.gemm_impl (release default bf16)")
    ap.add_argument("--standin-kernels", action="store_true", help="plain-torch kernel.py instead of the release's triton one")
    ap.add_argument("--release-commit", default=None, help="DeepSeek-V3 commit the release dir was taken from (recorded)")
    args = ap.parse_args()

    if not torch.cuda.is_available():
        die("no CUDA device (the release runs on cuda)")
    torch.backends.cuda.matmul.allow_tf32 = False  # defaults; only the stand-ins' f32 matmuls care
    torch.backends.cudnn.allow_tf32 = False
    release, release_dir, kernel_file = import_release(args.release_dir, args.standin_kernels)
    if release.attn_impl != "absorb":
        die(f"release attn_impl is {release.attn_impl!r}, expected the default 'absorb'")
    release.gemm_impl = args.gemm_impl  # read by linear() at call time (model.py 155)
    mapping = release_mapping(release_dir)
    torch.set_default_dtype(torch.bfloat16)  # generate.py:109

    triton_version = None
    try:
        import triton
        triton_version = triton.__version__
    except Exception:  # noqa: BLE001
        pass
    import safetensors
    env = {"python": platform.python_version(), "torch": torch.__version__, "triton": triton_version,
           "numpy": np.__version__, "safetensors": safetensors.__version__, "cuda": torch.version.cuda,
           "device": torch.cuda.get_device_name(0)}
    flags = {"matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
             "matmul.allow_bf16_reduced_precision_reduction":
                 torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
             "deterministic_algorithms": torch.are_deterministic_algorithms_enabled()}
    probes = op_probes()
    print(f"env {env}\nflags {flags}\nop probes {probes}", flush=True)

    names = []
    for c in (args.configs or []):
        names += [n for n in c.split(",") if n]
    if not names:
        names = sorted(d for d in os.listdir(args.fixtures) if os.path.isfile(os.path.join(args.fixtures, d, "config.json")))
    if not names:
        die(f"no configs under {args.fixtures}")

    for name in names:
        src = os.path.join(args.fixtures, name)
        if not os.path.isfile(os.path.join(src, "config.json")):
            die(f"{src}/config.json not found")
        cfg = json.load(open(os.path.join(src, "config.json")))
        fixture_meta = json.load(open(os.path.join(src, "meta.json"))) if os.path.isfile(os.path.join(src, "meta.json")) else {}
        check_config(cfg)
        files = os.listdir(src)
        prompts = sorted(int(f[len("prompt_"):-len(".ids.npy")]) for f in files if f.startswith("prompt_") and f.endswith(".ids.npy"))
        greedys = sorted(int(f[len("greedy_"):-len(".ids.npy")]) for f in files if f.startswith("greedy_") and f.endswith(".ids.npy"))
        if not prompts:
            die(f"{src}: no prompt_<L>.ids.npy")
        for L in greedys:
            if L not in prompts:
                die(f"{src}: greedy_{L}.ids.npy has no prompt_{L}.ids.npy")
        hf_greedy = {L: np.load(os.path.join(src, f"greedy_{L}.ids.npy")).astype(np.int64) for L in greedys}

        rs = cfg["rope_scaling"]
        max_seq_len = int(cfg["max_position_embeddings"])
        need = max([max(prompts)] + [L + len(hf_greedy[L]) for L in greedys])
        if not max_seq_len > rs["original_max_position_embeddings"]:
            die(f"{name}: max_position_embeddings {max_seq_len} <= original {rs['original_max_position_embeddings']}: "
                f"the release would not apply YaRN (model.py 367, 435)")
        if max_seq_len < need:
            die(f"{name}: max_position_embeddings {max_seq_len} < longest sequence {need}")
        margs = model_args(release, cfg, max_seq_len)

        ckpt = os.path.join(src, "model.safetensors")
        sd, skipped = load_converted(ckpt, mapping, margs.n_layers)
        model, attached = build_model(release, margs, sd)
        if args.gemm_impl == "fp8" and not args.standin_kernels:
            odd = [n for n, mod in model.named_modules() if isinstance(mod, release.Linear)
                   and mod.weight.element_size() == 1 and mod.in_features % BLOCK]
            if odd:
                die(f"{name}: --gemm-impl fp8 with the release's kernels needs in_features % 128 == 0 "
                    f"(act_quant asserts it, kernel.py:52); not so for {odd[:4]}...; add --standin-kernels")
        softmax_scale = float(model.layers[0].attn.softmax_scale)
        del model

        dst = os.path.join(args.out, name)
        os.makedirs(dst, exist_ok=True)
        stats = {}
        for L in prompts:
            ids = np.load(os.path.join(src, f"prompt_{L}.ids.npy")).astype(np.int64)
            if ids.shape != (L,) or ids.min() < 0 or ids.max() >= cfg["vocab_size"]:
                die(f"{src}/prompt_{L}.ids.npy: shape {ids.shape}, range [{ids.min()}, {ids.max()}]")
            model, _ = build_model(release, margs, sd)
            logits_t, last_t = prefill_all_positions(model, ids)
            again_t, _ = prefill_all_positions(model, ids)  # same model, stale caches: must not matter
            head_dtype = str(logits_t.dtype)
            logits = logits_t.float().cpu().numpy()
            last = last_t.float().cpu().numpy()
            repeat_equal = bool(torch.equal(logits_t, again_t))
            del model
            if logits.shape != (L, cfg["vocab_size"]) or not np.isfinite(logits).all():
                die(f"{name} prompt_{L}: logits shape {logits.shape}, finite {np.isfinite(logits).all()}")
            np.save(os.path.join(dst, f"prompt_{L}.logits.npy"), logits.astype(np.float32))
            margins = top2_margins(logits)
            st = {"logit_absmax": float(np.abs(logits).max()),
                  "last_argmax": int(logits[-1].argmax()),
                  "top1_top2_gap_min": float(margins.min()),
                  "top1_top2_gap_min_position": int(margins.argmin()),
                  "positions_with_exact_top1_tie": int((margins == 0).sum()),
                  "logits_dtype": head_dtype,
                  "release_last_vs_all_positions_head_max_abs_diff": float(np.abs(last - logits[-1]).max()),
                  "second_forward_same_model_bitwise_equal": repeat_equal}
            hf_path = os.path.join(src, f"prompt_{L}.logits.npy")
            if os.path.isfile(hf_path):
                hf = np.load(hf_path)
                st["vs_hf"] = {"max_abs_diff": float(np.abs(hf - logits).max()),
                               "max_abs_diff_over_hf_absmax": float(np.abs(hf - logits).max() / np.abs(hf).max()),
                               "argmax_equal_positions": int((hf.argmax(-1) == logits.argmax(-1)).sum()),
                               "positions": L}
            stats[str(L)] = st
            print(f"{name} prompt_{L}: {json.dumps(st)}", flush=True)

        greedy = {}
        for L in greedys:
            ids = np.load(os.path.join(src, f"prompt_{L}.ids.npy")).astype(np.int64)
            model, _ = build_model(release, margs, sd)
            new_ids, gaps = release_greedy(model, ids, len(hf_greedy[L]))
            del model
            np.save(os.path.join(dst, f"greedy_{L}.ids.npy"), new_ids)
            same = bool(np.array_equal(new_ids, hf_greedy[L]))
            first_diff = None if same else int(np.nonzero(new_ids != hf_greedy[L])[0][0])
            greedy[str(L)] = {"new_tokens": int(len(new_ids)), "ids": new_ids.tolist(),
                              "equals_hf_greedy": same, "first_difference_step": first_diff,
                              "min_top1_top2_gap": float(min(gaps)), "exact_ties": int(sum(g == 0 for g in gaps))}
            print(f"{name} greedy_{L}: {json.dumps(greedy[str(L)])}", flush=True)

        hf_factor = (yarn_mscale(rs["factor"], rs.get("mscale", 1.0)) / yarn_mscale(rs["factor"], rs["mscale_all_dim"])
                     if rs.get("mscale") and rs.get("mscale_all_dim") else yarn_mscale(rs["factor"], 1.0))
        meta = {
            "config": name,
            "generated_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "command": " ".join(sys.argv),
            "release": {"dir": release_dir, "commit": args.release_commit,
                        "model_py_sha256": sha256(os.path.join(release_dir, "model.py")),
                        "kernel_py_sha256": sha256(os.path.join(release_dir, "kernel.py")),
                        "convert_py_sha256": sha256(os.path.join(release_dir, "convert.py"))},
            "kernels": "standin" if args.standin_kernels else "real",
            "kernel_module": kernel_file,
            "gemm_impl": args.gemm_impl,
            "attn_impl": release.attn_impl,
            "default_dtype": "bfloat16",
            "env": env,
            "torch_flags": flags,
            "op_probes": probes,
            "model_args": dataclasses.asdict(margs),
            "max_seq_len_choice": "config max_position_embeddings: > original_seq_len so YaRN and the softmax mscale "
                                  "are applied (model.py 367, 435), >= longest prompt + greedy tokens",
            "softmax_scale_release": softmax_scale,
            "softmax_scale_hf_fixture": (fixture_meta.get("expected_scales") or {}).get("softmax_scale"),
            "hf_rope_cos_sin_factor_not_in_release": hf_factor,
            "checkpoint": f"../../v3/{name}/model.safetensors",
            "checkpoint_sha256": sha256(ckpt),
            "skipped_checkpoint_tensors": skipped,
            "gate_bias_attached": attached,
            "numerics": "the release's inference/model.py (see the script docstring); logits are the bf16 head "
                        "output widened to f32",
            "harness_choices": [
                "all-position logits: forward hook on model.norm, same model.head applied to every position",
                "Gate.bias registered (f32 [n_routed_experts]) on every MoE gate since dim != 7168, checkpoint "
                "e_score_correction_bias loaded into it",
                "checkpoint names converted with convert.py's renaming and mapping (mp=1); MTP layers skipped",
                "ModelArgs.mscale = rope_scaling.mscale_all_dim; HF's RoPE cos/sin factor is not applied",
                "max_seq_len = max_position_embeddings",
                "fresh model per prompt and per greedy run; torch.manual_seed(965) before each build",
                "greedy: transcription of generate.generate with temperature 0, no EOS stop",
            ] + (["stand-in kernels (plain torch) instead of the release's triton kernel.py"] if args.standin_kernels else []),
            "prompts": stats,
            "greedy": greedy,
        }
        json.dump(meta, open(os.path.join(dst, "meta.json"), "w"), indent=1)
        print(f"{name}: wrote {dst}", flush=True)


if __name__ == "__main__":
    main()

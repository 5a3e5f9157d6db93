"""Shared parts of the tiny trained DeepSeek-V4 model (models/tiny-kjv): its config, the tokenizer
skeleton, the export of a trained HF state dict to the official checkpoint layout, and the torch
fake-quantizers used for quantization-aware training.

The codecs, the safetensors writer, the native checkpoint builder and the native <-> HF name map
are those of the golden fixtures (tools/golden/release_format.py, v4_configs.py, v4_native.py,
v4_hf_names.py; imported, not copied), so the trained model is stored and
loaded exactly like the golden fixtures. `python3 tiny_v4.py` runs the self test (numpy, and torch
if present; no GPU, no transformers).
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "golden"))
import release_format as rf  # noqa: E402  (codecs, safetensors I/O)
import v4_configs  # noqa: E402
import v4_hf_names  # noqa: E402
import v4_native  # noqa: E402

NAME = "tiny-kjv"
PRODUCER = "plumb tools/tiny-model/train.py"

# Native config (the keys make_v4_fixtures' helpers read). The layer schedule is the release's in
# miniature: two SWA layers, then CSA / HCA alternating; the first three layers hash-routed. HCA
# ratio 16 so that 512-token training sequences have 32 HCA entries (the release's 128 would give 4).
# Rope dim 64 and the YaRN numbers are the release's, so the frequency table is the release's too.
CONFIG = dict(v4_configs.COMMON)
CONFIG.update(
    name=NAME,
    seed=4242,
    vocab_size=6144,
    hidden_size=256,
    num_hidden_layers=6,
    compress_ratios=[0, 0, 4, 16, 4, 16, 0],  # last entry: the MTP layer (weights not shipped)
    num_hash_layers=3,
    num_attention_heads=4,
    head_dim=128,
    qk_rope_head_dim=64,
    q_lora_rank=128,
    o_groups=2,
    o_lora_rank=128,
    sliding_window=64,
    n_routed_experts=16,
    num_experts_per_tok=2,
    n_shared_experts=1,
    moe_intermediate_size=256,
    index_n_heads=4,
    index_head_dim=128,
    index_topk=16,
    routed_scaling_factor=1.5,
    swiglu_limit=10.0,
    hc_sinkhorn_iters=20,
    rope_scaling_original=65536,
    max_position_embeddings=1048576,
)

# DeepSeek's special tokens, exact strings. Ids 0/1/2 as in V3/V4; the chat tokens follow.
SPECIAL_TOKENS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>", "<｜User｜>", "<｜Assistant｜>",
                  "<think>", "</think>"]
BOS, EOS = 0, 1


def tokenizer_skeleton():
    """tokenizer.json with DeepSeek V3/V4's normalizer, pre-tokenizer (the three Split regexes +
    ByteLevel without regex), post-processor and decoder, copied verbatim (deepseek_pipeline.json),
    and an empty byte-level BPE model for `tokenizers` to train."""
    with open(os.path.join(HERE, "deepseek_pipeline.json"), encoding="utf-8") as f:
        pipe = json.load(f)
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
            "normalizer": pipe["normalizer"], "pre_tokenizer": pipe["pre_tokenizer"],
            "post_processor": pipe["post_processor"], "decoder": pipe["decoder"],
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": {}, "merges": []}}


def tokenizer_config():
    """V4-Flash's tokenizer_config.json fields (no BOS added by encode; EOS doubles as pad)."""
    tok = lambda s: {"__type": "AddedToken", "content": s, "lstrip": False, "normalized": True, "rstrip": False,
                     "single_word": False}
    return {"add_bos_token": False, "add_eos_token": False, "bos_token": tok(SPECIAL_TOKENS[0]),
            "clean_up_tokenization_spaces": False, "eos_token": tok(SPECIAL_TOKENS[1]), "legacy": True,
            "model_max_length": 1048576, "pad_token": tok(SPECIAL_TOKENS[1]), "sp_model_kwargs": {},
            "unk_token": None, "tokenizer_class": "PreTrainedTokenizerFast"}


def generation_config():
    """The release's keys; a lower temperature / top-p than its 1.0 / 1.0 because a 6M-active model
    sampled at temperature 1 wanders."""
    return {"_from_model_config": True, "bos_token_id": BOS, "eos_token_id": EOS, "do_sample": True,
            "temperature": 0.7, "top_p": 0.9, "transformers_version": "4.57.1"}


# ----------------------------------------------------------------------------------------------
# Export: HF state dict (numpy fp32) -> native tensors, quantized like the release
# ----------------------------------------------------------------------------------------------

FP8_SUFFIXES = ("attn.wq_a.weight", "attn.wq_b.weight", "attn.wkv.weight", "attn.wo_a.weight", "attn.wo_b.weight",
                "attn.indexer.wq_b.weight", "ffn.shared_experts.w1.weight", "ffn.shared_experts.w2.weight",
                "ffn.shared_experts.w3.weight", "e_proj.weight", "h_proj.weight")
F32_SUFFIXES = ("_fn", "_base", "_scale", "attn.attn_sink", ".ape", "ffn.gate.bias")


def native_kind(name):
    """MODEL-SPEC 4.2-4.4 storage of a native tensor: fp8 | fp4 | f32 | i64 | bf16."""
    if ".ffn.experts." in name:
        return "fp4"
    if name.endswith(FP8_SUFFIXES) and ".compressor." not in name:
        return "fp8"
    if name.endswith("ffn.gate.tid2eid"):
        return "i64"
    if name.endswith(F32_SUFFIXES):
        return "f32"
    return "bf16"


def hf_to_native_values(c, hf):
    """Inverse of make_v4_fixtures.native_to_hf_state: {hf name: array} -> {native name: array}.
    Every HF tensor must be used exactly once."""
    wp = "scorer." if any(k.endswith("indexer.scorer.weights_proj.weight") for k in hf) else ""
    out, used = {}, set()

    def take(hf_name, nat):
        out[nat] = hf[hf_name]
        used.add(hf_name)

    for nat, h in v4_hf_names.GLOBAL_RENAMES:
        take(h, nat)
    I = c["moe_intermediate_size"]
    for i in range(c["num_hidden_layers"]):
        for nsuf, hsuf in v4_hf_names.LAYER_RENAMES:
            h = f"model.layers.{i}." + hsuf.replace("{WP}", wp)
            if h in hf:
                take(h, f"layers.{i}.{nsuf}")
        gu, dn = f"model.layers.{i}.mlp.experts.gate_up_proj", f"model.layers.{i}.mlp.experts.down_proj"
        for e in range(c["n_routed_experts"]):
            p = f"layers.{i}.ffn.experts.{e}."
            out[p + "w1.weight"] = hf[gu][e, :I]
            out[p + "w3.weight"] = hf[gu][e, I:]
            out[p + "w2.weight"] = hf[dn][e]
        used.update({gu, dn})
    left = sorted(set(hf) - used)
    assert not left, f"HF tensors with no native name: {left}"
    return out


def quantize_native(values):
    """{native name: array} -> v4_native.Native holding the stored (quantized) tensors and their
    dequantized values."""
    n = v4_native.Native(rng=None)
    for name in sorted(values):
        kind = native_kind(name)
        v = np.ascontiguousarray(values[name])
        if kind == "i64":
            n.i64(name, v.astype(np.int64))
        else:
            getattr(n, kind)(name, v.astype(np.float32))
    return n


def shard_of(name, c):
    """Release layout (MODEL-SPEC 4.1): embed | one shard per layer | norm + head + hc_head | mtp."""
    if name == "embed.weight":
        return 0
    if name.startswith("layers."):
        return 1 + int(name.split(".")[1])
    if name.startswith("mtp."):
        return c["num_hidden_layers"] + 2
    return c["num_hidden_layers"] + 1


def write_model_dir(c, native, out_dir, tokenizer_json=None):
    """Writes the sharded checkpoint, its index, config.json and the tokenizer / generation files."""
    os.makedirs(out_dir, exist_ok=True)
    has_mtp = any(t[0].startswith("mtp.") for t in native.stored)
    n_shards = c["num_hidden_layers"] + 2 + (1 if has_mtp else 0)
    groups = [[] for _ in range(n_shards)]
    for t in native.stored:
        groups[shard_of(t[0], c)].append(t)
    weight_map, total = {}, 0
    for k, group in enumerate(groups):
        fname = f"model-{k + 1:05d}-of-{n_shards:05d}.safetensors"
        rf.write_safetensors(os.path.join(out_dir, fname), group, producer=PRODUCER)
        back = rf.read_safetensors(os.path.join(out_dir, fname))
        for name, dt, arr in group:  # re-read and compare every byte
            assert back[name][0] == dt and np.array_equal(back[name][1], arr), name
            weight_map[name] = fname
            total += arr.nbytes
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    dump_json(os.path.join(out_dir, "model.safetensors.index.json"), index)
    dump_json(os.path.join(out_dir, "config.json"), v4_configs.native_config_json(c), sort_keys=True)
    dump_json(os.path.join(out_dir, "generation_config.json"), generation_config())
    dump_json(os.path.join(out_dir, "tokenizer_config.json"), tokenizer_config())
    if tokenizer_json is not None:
        with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(tokenizer_json)
    return total


def read_model_dir(out_dir):
    """-> {native name: dequantized float32 / int64 array} from the shards on disk."""
    with open(os.path.join(out_dir, "model.safetensors.index.json")) as f:
        index = json.load(f)
    stored = {}
    for fname in sorted(set(index["weight_map"].values())):
        stored.update(rf.read_safetensors(os.path.join(out_dir, fname)))
    assert set(stored) == set(index["weight_map"]), "index and shards disagree"
    vals = {}
    for name, (dt, arr) in stored.items():
        if name.endswith(".scale") and dt == "F8_E8M0":
            continue
        if dt == "F8_E4M3":
            vals[name] = rf.dequant_fp8_block(arr, stored[name[:-len("weight")] + "scale"][1])
        elif dt == "I8":
            vals[name] = rf.dequant_fp4_row32(arr, stored[name[:-len("weight")] + "scale"][1])
        elif dt == "BF16":
            vals[name] = rf.bf16_value(arr)
        else:
            vals[name] = arr
    return vals


def dump_json(path, obj, sort_keys=False):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False, sort_keys=sort_keys)
        f.write("\n")


# ----------------------------------------------------------------------------------------------
# Torch fake quantizers (QAT): the same rounding as make_v4_fixtures' numpy encoders, written
# without torch.float8 so they also run on old CPU torch for the self test.
# ----------------------------------------------------------------------------------------------

def _pow2_ceil(torch, v):
    m, e = torch.frexp(v)
    e = torch.where(m == 0.5, e - 1, e)
    return torch.ldexp(torch.ones_like(v), e)


def fq_fp8_block(torch, w, block=128):
    """[R, C] -> e4m3 values with ue8m0 scales per 128x128 block (partial edge blocks use only
    their own elements), round to nearest even: MODEL-SPEC 4.4."""
    R, C = w.shape
    nr, nc = -(-R // block), -(-C // block)
    pad = torch.nn.functional.pad(w, (0, nc * block - C, 0, nr * block - R))
    b = pad.view(nr, block, nc, block)
    s = _pow2_ceil(torch, b.abs().amax(dim=(1, 3), keepdim=True).clamp_min(rf.AMAX_FLOOR) / 448.0)
    q = b / s
    a = q.abs()
    _, ex = torch.frexp(a)
    step = torch.ldexp(torch.ones_like(a), torch.clamp(ex - 1, min=-6) - 3)  # subnormals share 2^-9
    r = torch.round(a / step) * step
    return (torch.sign(q) * r * s).view(nr * block, nc * block)[:R, :C]


def fq_fp4_row32(torch, w):
    """[..., K] (K % 32 == 0) -> e2m1 values with ue8m0 scales per 1x32 block along K."""
    K = w.shape[-1]
    b = w.reshape(*w.shape[:-1], K // 32, 32)
    s = _pow2_ceil(torch, b.abs().amax(dim=-1, keepdim=True).clamp_min(rf.AMAX_FLOOR) / 6.0)
    q = b / s
    a = q.abs()
    step = torch.where(a < 2, torch.full_like(a, 0.5), torch.where(a < 4, torch.ones_like(a), torch.full_like(a, 2.0)))
    r = torch.clamp(torch.round(a / step) * step, max=6.0)
    return (torch.sign(q) * r * s).reshape(w.shape)


# ----------------------------------------------------------------------------------------------
# Self test (CPU)
# ----------------------------------------------------------------------------------------------

def selftest():
    import tempfile

    # 1. export is the exact inverse of the fixtures' import: tiny-a native -> HF -> native,
    #    requantized, gives the same dequantized values (the codes can differ where a block's
    #    rounded amax dropped to half the scale's range: 3*s == 6*(s/2) in FP4).
    for cname in ("tiny-a", "tiny-b"):
        c = v4_configs.full_cfg(cname)
        ref = v4_native.build_native(c)
        state, _ = v4_hf_names.native_to_hf_state(c, ref, [])
        vals = hf_to_native_values(c, state)
        got = quantize_native(vals)
        want = {t[0]: t for t in ref.stored if not t[0].startswith("mtp.")}
        have = {t[0]: t for t in got.stored}
        assert set(want) == set(have), sorted(set(want) ^ set(have))[:10]
        same_bytes = 0
        for k in want:
            assert want[k][1] == have[k][1] and want[k][2].shape == have[k][2].shape, k
            same_bytes += np.array_equal(want[k][2], have[k][2])
        for k, v in got.values.items():
            assert np.array_equal(v, ref.values[k]), k
        for k, kind in ref.kinds.items():
            if not k.startswith("mtp."):
                assert native_kind(k) == kind, (k, kind, native_kind(k))
        with tempfile.TemporaryDirectory() as td:
            write_model_dir(c, got, td)
            back = read_model_dir(td)
            for k, v in got.values.items():
                assert np.array_equal(back[k], v), k
        print(f"selftest: {cname} native -> HF -> native round trip exact ({same_bytes}/{len(want)} tensors byte-identical)")
    # 2. the tokenizer skeleton carries DeepSeek's pipeline verbatim
    shared = "/work/shared/data/tokenizers/deepseek-v4-flash/tokenizer.json"
    if os.path.exists(shared):
        with open(shared, encoding="utf-8") as f:
            ds = json.load(f)
        sk = tokenizer_skeleton()
        for k in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
            assert sk[k] == ds[k], k
        specials = {t["content"]: t["id"] for t in ds["added_tokens"]}
        assert all(s in specials for s in SPECIAL_TOKENS) and specials[SPECIAL_TOKENS[0]] == 0 and specials[SPECIAL_TOKENS[1]] == 1
        print("selftest: tokenizer pipeline equals DeepSeek V4-Flash's")
    # 3. torch fake quantizers == numpy codecs (bit exact)
    try:
        import torch
    except ImportError:
        print("selftest: torch not installed, fake-quant check skipped")
        torch = None
    if torch is not None:
        rng = np.random.default_rng(7)
        for shape, gain in (((300, 260), 0.05), ((128, 256), 3.0), ((5, 70), 1e-6)):
            w = (rng.standard_normal(shape) * gain).astype(np.float32)
            w[0, 0] = 0.0
            codes, sc = rf.quant_fp8_block(w)
            want = rf.dequant_fp8_block(codes, sc)
            got = fq_fp8_block(torch, torch.from_numpy(w)).numpy()
            assert np.array_equal(got, want), ("fp8", shape, np.abs(got - want).max())
        for shape, gain in (((64, 96), 0.05), ((3, 16, 64), 2.0), ((2, 32), 1e-6)):
            w = (rng.standard_normal(shape) * gain).astype(np.float32)
            w.reshape(-1)[5] = 0.0
            w2 = w.reshape(-1, shape[-1])
            packed, sc = rf.quant_fp4_row32(w2)
            want = rf.dequant_fp4_row32(packed, sc).reshape(shape)
            got = fq_fp4_row32(torch, torch.from_numpy(w)).numpy()
            assert np.array_equal(got, want), ("fp4", shape, np.abs(got - want).max())
        print("selftest: torch fake quantizers are bit-exact with the numpy codecs")
    # 4. size of the tiny-kjv export (random weights of the right shapes)
    c = dict(CONFIG)
    rng = np.random.default_rng(0)
    c_fx = dict(c, expert_gain=1.0)
    nat = v4_native.build_native(c_fx)
    vals = {k: v for k, v in nat.values.items() if not k.startswith("mtp.")}
    with tempfile.TemporaryDirectory() as td:
        total = write_model_dir(c, quantize_native(vals), td)
        size = sum(os.path.getsize(os.path.join(td, f)) for f in os.listdir(td))
    n_params = sum(int(np.prod(v.shape)) for v in vals.values())
    print(f"selftest: export OK; {NAME}: {n_params / 1e6:.1f}M parameters, tensors {total / 2**20:.1f} MiB, "
          f"directory {size / 2**20:.1f} MiB without tokenizer.json")
    del rng


if __name__ == "__main__":
    selftest()

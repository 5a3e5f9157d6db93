#!/usr/bin/env python3
"""The block-aligned DeepSeek-V4 fixture for plumb's `faithful` profile (issue 13), its goldens from
the release's own inference/model.py, and the release's own noise floors.

Checkpoint (numpy only, `--checkpoint-only` runs without torch): the config ALIGNED below, built
with make_v4_fixtures.py's codecs and writer. Every FP8/FP4 GEMM input is a multiple of 128, the
KV nope dims are 2 blocks of 64 and the indexer head is 128 wide, so no partial-block choice is
left (as in the real model). compress_ratios keeps a trailing MTP entry with
num_nextn_predict_layers = 0 (a truncated-depth config both HF and the release read by prefix).

Goldens (GPU machine, torch): the release's model.py, unmodified, with make_v4_faithful.py's
stand-ins for its TileLang kernels, in four variants:
  golden  the kernels' blockwise GEMM promotion and 64-slot online softmax, on the GPU;
  fp32    one f32 GEMM per linear instead of the blockwise promotion (the release's GEMM-order
          noise floor of issue 13);
  global  one softmax max per row instead of the online blocks (what the stand-in did before);
  cpu     the golden variant run by torch on the CPU (other f32 reduction orders everywhere:
          an implementation-order floor).
For each: the last-position logits of every prompt (the release returns only those) and a greedy
continuation the way generate.py runs it (prefill, then one token per forward at start_pos).

Written to <out>/: prompt_<L>.ids.npy (int64), <variant>_<L>.logits.npy (float32 [vocab]),
greedy_<L>.ids.npy (int64 [GREEDY_NEW], golden variant), meta.json (per-variant cosines against
the golden, argmax, greedy ids of every variant, top-1/top-2 gaps).

`--hf-item5 DIR` (issue 13 item 5): HF transformers' fp32 logits for every position of one
2,500-token prompt on a CSA config with index_topk 16 (make_v4_fixtures.py's HF path), for a
comparison with plumb's reference profile.

Usage on the GPU machine:
    python3 tools/golden/make_v4_release.py --release-dir DIR --ckpt tests/data/golden/v4-release/aligned \
        --out OUT [--hf-item5 OUT5]
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_v4_fixtures as mf  # noqa: E402  (the HF model builders)
import release_format as rf  # noqa: E402  (codecs, safetensors I/O)
import v4_configs  # noqa: E402
import v4_hf_names  # noqa: E402
import v4_native  # noqa: E402

PROMPTS = [7, 64, 300, 700]
GREEDY_PROMPT = 300
GREEDY_NEW = 24
VARIANTS = [("golden", "block", "online", "cuda"), ("fp32", "fp32", "online", "cuda"),
            ("global", "block", "global", "cuda"), ("cpu", "block", "online", "cpu")]

# tiny-a's family (YaRN, swiglu limit, route scale, 20 Sinkhorn iterations) at block-aligned dims.
ALIGNED = dict(
    v4_configs.CONFIGS["tiny-a"],
    seed=13013,
    vocab_size=512,
    hidden_size=256,
    compress_ratios=[0, 4, 32, 4, 0],  # SWA, CSA, HCA 32, CSA; the MTP entry without an MTP layer
    num_nextn_predict_layers=0,
    num_hash_layers=1,
    head_dim=192,
    q_lora_rank=128,
    sliding_window=128,
    num_experts_per_tok=2,
    moe_intermediate_size=128,
    index_n_heads=4,
    index_topk=32,
)

# Issue 13 item 5: a CSA config with index_topk 16 and a 2,500-token prompt (tiny-a's shape).
ITEM5 = dict(v4_configs.CONFIGS["tiny-a"], seed=5005, index_topk=16)
ITEM5_LEN = 2500


def aligned_cfg():
    v4_configs.CONFIGS["aligned"] = ALIGNED
    return v4_configs.full_cfg("aligned")


def write_aligned(out_dir):
    c = aligned_cfg()
    native = v4_native.build_native(c)
    os.makedirs(out_dir, exist_ok=True)
    rf.write_safetensors(os.path.join(out_dir, "model.safetensors"), native.stored)
    # native_config_json insists on one entry per layer + MTP layer; this config keeps the extra one
    c_json = dict(c, compress_ratios=c["compress_ratios"][: c["num_hidden_layers"]])
    j = v4_configs.native_config_json(c_json)
    j["compress_ratios"] = list(c["compress_ratios"])
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(j, f, indent=2, sort_keys=True)
        f.write("\n")
    for L in PROMPTS:
        ids = np.random.default_rng([c["seed"], L]).integers(2, c["vocab_size"], size=L, dtype=np.int64)
        np.save(os.path.join(out_dir, f"prompt_{L}.ids.npy"), ids)
    return c


# ---------------------------------------------------------------------------------------------
# The release (torch)
# ---------------------------------------------------------------------------------------------

TAP_PROMPT = 64
TAP_MODULES = ("attn", "ffn", "attn_norm", "ffn_norm", "attn.compressor", "attn.indexer", "attn.indexer.compressor",
               "ffn.gate", "attn.wq_a", "attn.wkv", "attn.kv_norm", "attn.q_norm", "attn.wo_b", "ffn.shared_experts")


def add_taps(m, taps):
    """Forward hooks on the blocks and their main sub-modules: output of the (one) call, as f32."""
    import torch

    def keep(name):
        def hook(_mod, _inp, out):
            if isinstance(out, tuple):
                for i, o in enumerate(out):
                    if isinstance(o, torch.Tensor):
                        taps[f"{name}.{i}"] = o.float().cpu().numpy()
            elif isinstance(out, torch.Tensor):
                taps[name] = out.float().cpu().numpy()
        return hook

    for name, mod in m.named_modules():
        parts = name.split(".")
        if name in ("norm", "head") or (len(parts) == 2 and parts[0] == "layers") or \
                (len(parts) > 2 and parts[0] == "layers" and ".".join(parts[2:]) in TAP_MODULES):
            mod.register_forward_hook(keep(name))


def run_variant(release, fa, cfg, ckpt, gemm, attn, device, prompts, taps=None):
    import torch
    fa.GEMM_ORDER, fa.ATTN_ORDER = gemm, attn
    out = {}

    def fresh():
        for cached in (release.precompute_freqs_cis, release.get_window_topk_idxs, release.get_compress_topk_idxs):
            cached.cache_clear()  # lru_cache'd tensors live on the device they were made on
        torch.set_default_dtype(torch.bfloat16)
        torch.set_default_device(device)
        torch.manual_seed(0)
        m = release.Transformer(fa.model_args(release, cfg, max_seq_len=max(PROMPTS) + GREEDY_NEW + 8))
        fa.load_checkpoint(m, ckpt, device)
        return m

    with torch.inference_mode():
        for L, ids in prompts.items():
            m = fresh()  # the release never resets compressor state between prompts
            if taps is not None and L == TAP_PROMPT:
                add_taps(m, taps)
            t = torch.tensor(ids, device=device).unsqueeze(0)
            out[L] = m(t, 0)[0].float().cpu().numpy()
            if L == GREEDY_PROMPT:  # generate.py: prefill, then one token per forward
                new, logits = [], out[L]
                for step in range(GREEDY_NEW):
                    nxt = int(np.argmax(logits))
                    new.append(nxt)
                    if step + 1 < GREEDY_NEW:
                        logits = m(torch.tensor([[nxt]], device=device), L + step)[0].float().cpu().numpy()
                out["greedy"] = np.array(new, dtype=np.int64)
    torch.set_default_device("cpu")
    torch.set_default_dtype(torch.float32)
    return out


def cosine(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(a @ b / np.sqrt((a @ a) * (b @ b)))


def run_release(args):
    import torch
    import make_v4_faithful as fa

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    fa.install_stand_ins()
    sys.path.insert(0, args.release_dir)
    import model as release  # noqa: E402  (the release's inference/model.py)

    cfg = json.load(open(os.path.join(args.ckpt, "config.json")))
    ckpt = os.path.join(args.ckpt, "model.safetensors")
    prompts = {L: np.load(os.path.join(args.ckpt, f"prompt_{L}.ids.npy")) for L in PROMPTS}
    os.makedirs(args.out, exist_ok=True)
    res, errors = {}, {}
    for name, gemm, attn, device in VARIANTS:
        taps = {} if name == "golden" else None
        try:
            res[name] = run_variant(release, fa, cfg, ckpt, gemm, attn, device, prompts, taps)
        except Exception as ex:  # the golden must exist; a failing extra variant is reported
            if name == "golden":
                raise
            errors[name] = f"{type(ex).__name__}: {ex}"
            print(f"{name} failed: {errors[name]}", flush=True)
            continue
        if taps:
            np.savez_compressed(os.path.join(args.out, f"taps_{TAP_PROMPT}.npz"), **taps)
        for L in PROMPTS:
            np.save(os.path.join(args.out, f"{name}_{L}.logits.npy"), res[name][L].astype(np.float32))
        print(name, {L: cosine(res[name][L], res["golden"][L]) for L in PROMPTS}, flush=True)
    np.save(os.path.join(args.out, f"greedy_{GREEDY_PROMPT}.ids.npy"), res["golden"]["greedy"])
    g = res["golden"]
    meta = {
        "generated_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "command": " ".join(sys.argv),
        "release_model_py_sha256": hashlib.sha256(open(os.path.join(args.release_dir, "model.py"), "rb").read()).hexdigest(),
        "release_commit": args.release_commit,
        "env": {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "numpy": np.__version__},
        "variants": {n: {"gemm": gm, "attn": at, "device": dv} for n, gm, at, dv in VARIANTS},
        "variant_errors": errors,
        "prompts": {},
        "greedy": {"prompt": GREEDY_PROMPT, "new": GREEDY_NEW,
                   **{n: [int(x) for x in res[n]["greedy"]] for n in res}},
    }
    for L in PROMPTS:
        srt = np.sort(g[L])[::-1]
        meta["prompts"][str(L)] = {
            "argmax": int(np.argmax(g[L])), "top1_minus_top2": float(srt[0] - srt[1]),
            "logit_absmax": float(np.abs(g[L]).max()),
            **{f"{n}_vs_golden": {"cosine": cosine(res[n][L], g[L]), "bitwise": bool(np.array_equal(res[n][L], g[L])),
                                  "max_abs_diff": float(np.abs(res[n][L] - g[L]).max()),
                                  "argmax_equal": bool(np.argmax(res[n][L]) == np.argmax(g[L]))}
               for n in res if n != "golden"},
        }
    json.dump(meta, open(os.path.join(args.out, "meta.json"), "w"), indent=1)


def write_item5(out_dir):
    """The item-5 checkpoint, config and prompt (numpy only; the same bytes on every machine)."""
    c = dict(v4_configs.COMMON)
    c.update(ITEM5)
    c["name"] = "item5"
    os.makedirs(out_dir, exist_ok=True)
    native, _ = v4_native.write_checkpoint(c, out_dir)
    ids = np.random.default_rng([c["seed"], ITEM5_LEN]).integers(2, c["vocab_size"], size=ITEM5_LEN, dtype=np.int64)
    np.save(os.path.join(out_dir, f"prompt_{ITEM5_LEN}.ids.npy"), ids)
    return c, native, ids


def run_item5(out_dir):
    import torch
    c, native, ids = write_item5(out_dir)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    log = lambda s: print("[item5]", s, flush=True)  # noqa: E731
    model = mf.build_hf_model(mf.make_hf_config(c, log), log)
    sd = model.state_dict()
    state, _ = v4_hf_names.native_to_hf_state(c, native, list(sd.keys()))
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)).to(sd[k].dtype) for k, v in state.items()}, strict=True)
    with torch.inference_mode():
        lg = model(input_ids=torch.as_tensor(ids, device="cuda")[None], use_cache=False).logits[0].float().cpu().numpy()
    np.save(os.path.join(out_dir, f"prompt_{ITEM5_LEN}.logits.npy"), lg.astype(np.float32))
    log(f"logits {lg.shape}, |max| {np.abs(lg).max():.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", default="tests/data/golden/v4-release/aligned", help="fixture folder (checkpoint, config, prompts)")
    ap.add_argument("--checkpoint-only", action="store_true", help="write the checkpoint and prompts into --ckpt (numpy only)")
    ap.add_argument("--release-dir", help="directory holding the release's model.py")
    ap.add_argument("--release-commit", default="0825add42734731a285e30f657b0ccfc5bad74c9")
    ap.add_argument("--out", help="where the goldens go")
    ap.add_argument("--hf-item5", default=None, help="also write issue 13 item 5's HF logits here")
    ap.add_argument("--item5-checkpoint", default=None, help="write item 5's checkpoint and prompt here (numpy only)")
    args = ap.parse_args()
    if args.checkpoint_only or args.item5_checkpoint:
        if args.checkpoint_only:
            write_aligned(args.ckpt)
        if args.item5_checkpoint:
            write_item5(args.item5_checkpoint)
        return
    if args.hf_item5:
        try:
            run_item5(args.hf_item5)
        except Exception as ex:  # the release goldens matter more; report and go on
            print(f"[item5] failed: {type(ex).__name__}: {ex}", flush=True)
    run_release(args)


if __name__ == "__main__":
    main()

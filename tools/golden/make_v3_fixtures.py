#!/usr/bin/env python3
"""Golden fixtures for plumb's DeepSeek-V3 architecture (issue 7), computed by HF transformers.

For each tiny config below this script
  1. draws every parameter of a tiny DeepSeek-V3 model at random (numpy, fixed seed), including
     the router's e_score_correction_bias,
  2. stores it in the HF V3 checkpoint layout (MODEL-SPEC 7: `model.` names, FP8 e4m3 with **F32**
     `weight_scale_inv` 128x128 block scales for the linears the release stores as FP8, bf16 for
     embed / norms / router / lm_head, F32 e_score_correction_bias) plus a config.json in the
     release's format,
  3. dequantizes exactly the stored values and loads them into `transformers.DeepseekV3ForCausalLM`
     (fp32, TF32 off, eager attention and experts, load_state_dict(strict=True)),
  4. saves HF's logits for every position of prompts of several lengths (one no-cache forward) and
     a greedy continuation (repeated full forwards), and cross-checks HF against the float64 numpy
     forward below (`np_forward`, written from MODEL-SPEC 7; reported in meta.json).

The configs and the checkpoint are v3_checkpoint.py's, the numpy forward v3_numpy_forward.py's; the
codecs and the safetensors writer are release_format.py's. `--no-hf` writes the
checkpoints and runs the numpy forward only (no torch needed).
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_meta import json_clean, logit_stats  # noqa: E402
from v3_checkpoint import (  # noqa: E402
    GREEDY_NEW, GREEDY_PROMPTS, MAX_ATTEMPTS, PROMPT_LENGTHS, full_cfg, native_config_json, write_checkpoint)
from v3_numpy_forward import expected_scales, np_forward, router_margins, yarn_inv_freq  # noqa: E402

# ----------------------------------------------------------------------------------------------
# HF part (GPU machine)
# ----------------------------------------------------------------------------------------------


def make_hf_config(c, log):
    from transformers import DeepseekV3Config

    nc = native_config_json(c)
    keep = ("attention_bias", "attention_dropout", "bos_token_id", "eos_token_id", "first_k_dense_replace",
            "hidden_act", "hidden_size", "intermediate_size", "kv_lora_rank", "max_position_embeddings",
            "moe_intermediate_size", "n_group", "n_routed_experts", "n_shared_experts", "norm_topk_prob",
            "num_attention_heads", "num_experts_per_tok", "num_hidden_layers", "num_key_value_heads", "q_lora_rank",
            "qk_nope_head_dim", "qk_rope_head_dim", "rms_norm_eps", "routed_scaling_factor", "tie_word_embeddings",
            "topk_group", "v_head_dim", "vocab_size")
    common = {k: nc[k] for k in keep}
    common["rope_interleave"] = True  # the release's config has no such key; HF's default is True
    rs = dict(nc["rope_scaling"])
    rs.pop("type")
    modern = dict(common, rope_parameters=dict(rs, rope_type="yarn", rope_theta=c["rope_theta"]))
    legacy = dict(common, rope_theta=c["rope_theta"], rope_scaling=dict(rs, rope_type="yarn"))
    cfgs = []
    for label, kw in (("rope_parameters", modern), ("rope_scaling", legacy)):
        try:
            cfg = DeepseekV3Config(**kw)
        except Exception as ex:
            log(f"hf config: {label} spelling failed ({type(ex).__name__}: {ex})")
            continue
        assert cfg.tie_word_embeddings is False and cfg.first_k_dense_replace == c["first_k_dense_replace"]
        log(f"hf config ({label}): rope {getattr(cfg, 'rope_parameters', None) or getattr(cfg, 'rope_scaling', None)}, "
            f"rope_interleave {getattr(cfg, 'rope_interleave', None)}")
        cfgs.append(cfg)
    assert cfgs, "no config spelling accepted"
    return cfgs


def hf_scales(c, model):
    """What the built model will compute with, vs expected_scales / yarn_inv_freq."""
    rope_af, scale = expected_scales(c)
    r = {"expected": {"softmax_scale": scale, "rope_attention_scaling": rope_af}, "match": False}
    try:
        r["hf"] = {"softmax_scale": float(model.model.layers[0].self_attn.scaling),
                   "rope_attention_scaling": float(model.model.rotary_emb.attention_scaling)}
        hf_f = model.model.rotary_emb.inv_freq.double().cpu().numpy()
        sp = yarn_inv_freq(c)
        d = float(np.max(np.abs(hf_f - sp) / sp)) if hf_f.shape == sp.shape else float("inf")
        r["inv_freq_max_rel_diff_vs_numpy"] = d
        r["match"] = bool(d < 1e-6 and abs(r["hf"]["softmax_scale"] / scale - 1) < 1e-9
                          and abs(r["hf"]["rope_attention_scaling"] / rope_af - 1) < 1e-9)
    except Exception as ex:
        r["error"] = f"{type(ex).__name__}: {ex}"
    return r


def build_hf_model(cfg, log):
    import torch
    from transformers import DeepseekV3ForCausalLM

    model = None
    for kwargs in (dict(attn_implementation="eager", experts_implementation="eager", dtype=torch.float32),
                   dict(attn_implementation="eager", dtype=torch.float32),
                   dict(attn_implementation="eager", torch_dtype=torch.float32)):
        try:
            model = DeepseekV3ForCausalLM._from_config(cfg, **kwargs)
            log(f"hf model: _from_config({', '.join(kwargs)})")
            break
        except Exception as ex:
            log(f"hf model: _from_config({', '.join(kwargs)}) failed: {type(ex).__name__}: {ex}")
    assert model is not None
    if getattr(model.config, "_experts_implementation", "eager") not in (None, "eager"):
        try:
            model.set_experts_implementation("eager")
        except Exception:
            model.config._experts_implementation = "eager"
        log(f"hf model: experts implementation forced to {model.config._experts_implementation!r}")
    return model.float().cuda().eval()


def hf_state(c, W, sd):
    """HF state_dict values from our checkpoint names. HF may hold the routed experts per expert
    (experts.{e}.gate_proj.weight, same names as the checkpoint) or fused (experts.gate_up_proj
    [E, 2I, D] = gate rows then up rows, experts.down_proj [E, D, I]); a transposed fused layout
    is recognised by its shape (D != 2I and D != I in every config)."""
    out, rows = {}, []
    for k, ref in sd.items():
        shape = tuple(ref.shape)
        if k in W:
            v = W[k]
        elif k.endswith("mlp.experts.gate_up_proj") or k.endswith("mlp.experts.down_proj"):
            p = k[: -len("gate_up_proj" if k.endswith("gate_up_proj") else "down_proj")]
            E = c["n_routed_experts"]
            if k.endswith("gate_up_proj"):
                v = np.stack([np.concatenate([W[f"{p}{e}.gate_proj.weight"], W[f"{p}{e}.up_proj.weight"]], 0)
                              for e in range(E)])
            else:
                v = np.stack([W[f"{p}{e}.down_proj.weight"] for e in range(E)])
            if v.shape != shape and v.transpose(0, 2, 1).shape == shape:
                v = v.transpose(0, 2, 1)
        else:
            raise SystemExit(f"HF key without a checkpoint value: {k} {shape}")
        assert tuple(v.shape) == shape, f"{k}: ours {v.shape} vs HF {shape}"
        out[k] = np.ascontiguousarray(v)
        rows.append(k)
    used = {n for n in W if n in out} | {n for n in W if ".mlp.experts." in n}
    unused = sorted(set(W) - used)
    assert not unused, f"checkpoint tensors HF has no place for: {unused}"
    return out, rows


def run_hf(c, ck, out_dir, args, log):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.manual_seed(c["seed"])
    W = ck.values

    for cfg in make_hf_config(c, log):  # the first spelling HF reads the YaRN fields from
        model = build_hf_model(cfg, log)
        scales = hf_scales(c, model)
        log(f"scales: {scales}")
        if scales["match"]:
            break
    else:
        log("WARNING: no config spelling gives the expected YaRN scales; keeping the last (see meta.json)")
    sd = model.state_dict()
    print(f"== {c['name']}: HF state_dict ({len(sd)} entries)")
    for k, v in sd.items():
        print(f"   {k} {tuple(v.shape)}")
    state, rows = hf_state(c, W, sd)
    tens = {k: torch.from_numpy(v).to(sd[k].dtype) for k, v in state.items()}
    res = model.load_state_dict(tens, strict=True)
    log(f"hf model: load_state_dict strict ok ({len(tens)} tensors) {res}")
    for k, v in model.state_dict().items():
        assert torch.equal(v.cpu(), tens[k]), k

    moe_x = {}
    def grab(i):
        def hook(mod, a, kw):
            x = a[0] if a else kw["hidden_states"]
            moe_x[i] = x.reshape(-1, x.shape[-1]).double().cpu().numpy()
        return hook

    hooks = [model.model.layers[i].mlp.register_forward_pre_hook(grab(i), with_kwargs=True)
             for i in range(c["first_k_dense_replace"], c["num_hidden_layers"])]

    def forward(ids):
        with torch.no_grad():
            out = model(input_ids=torch.as_tensor(ids, device="cuda")[None], use_cache=False)
        lg = out.logits[0].float().cpu().numpy()
        assert np.all(np.isfinite(lg)), "non-finite logits"
        return lg

    def greedy(ids):
        seq, gaps, rgap = list(ids), [], float("inf")
        for _ in range(GREEDY_NEW):
            lg = forward(np.array(seq, dtype=np.int64))[-1]
            rgap = min(rgap, router_margins(c, W, moe_x))
            s = np.sort(lg)
            gaps.append(float(s[-1] - s[-2]))
            seq.append(int(np.argmax(lg)))
        return np.array(seq[len(ids):], dtype=np.int64), min(gaps), rgap

    V = c["vocab_size"]
    prompts_meta, numpy_check = {}, {}
    for L in PROMPT_LENGTHS:
        for attempt in range(MAX_ATTEMPTS):
            ids = np.random.default_rng([c["seed"], L, attempt]).integers(2, V, size=L, dtype=np.int64)
            lg = forward(ids)
            gap, std = logit_stats(lg)
            rt_gap = router_margins(c, W, moe_x)
            g_ids, g_gap, g_rt = None, float("inf"), float("inf")
            ok = gap.min() >= args.min_logit_gap and rt_gap >= args.min_router_gap
            if ok and L in GREEDY_PROMPTS:
                g_ids, g_gap, g_rt = greedy(ids)
                ok = g_gap >= args.min_logit_gap and g_rt >= args.min_router_gap
            if ok:
                break
            log(f"  L={L} attempt {attempt}: near-tie (logit gap {gap.min():.2e}, router gap {rt_gap:.2e}, "
                f"greedy gaps {g_gap:.2e}/{g_rt:.2e}); redrawing")
        else:
            raise SystemExit(f"{c['name']} L={L}: no prompt without near-ties in {MAX_ATTEMPTS} attempts")
        np.save(os.path.join(out_dir, f"prompt_{L}.ids.npy"), ids)
        np.save(os.path.join(out_dir, f"prompt_{L}.logits.npy"), lg.astype(np.float32))
        pm = {"attempt": attempt, "logit_std_mean": float(std.mean()), "top1_top2_gap_min": float(gap.min()),
              "logit_absmax": float(np.abs(lg).max()), "router_min_gap": rt_gap}
        if g_ids is not None:
            np.save(os.path.join(out_dir, f"greedy_{L}.ids.npy"), g_ids)
            pm.update(greedy_new_ids=g_ids.tolist(), greedy_min_top1_top2_gap=g_gap, greedy_router_min_gap=g_rt)
        if L <= 64:  # the float64 numpy forward: an independent reading of the same checkpoint
            ref = np_forward(c, W, ids)
            numpy_check[str(L)] = {"max_rel_diff": float(np.abs(ref - lg).max() / np.abs(ref).max()),
                                   "argmax_equal": bool(np.array_equal(ref.argmax(-1), lg.argmax(-1)))}
        prompts_meta[str(L)] = pm
        log(f"  L={L}: {pm} numpy {numpy_check.get(str(L))}")
    for h in hooks:
        h.remove()

    gen_check = {}
    for L in GREEDY_PROMPTS:  # HF's own cached generate (reported only; the golden is no-cache)
        ids = np.load(os.path.join(out_dir, f"prompt_{L}.ids.npy"))
        want = np.load(os.path.join(out_dir, f"greedy_{L}.ids.npy"))
        try:
            with torch.no_grad():
                g = model.generate(torch.as_tensor(ids, device="cuda")[None], max_new_tokens=GREEDY_NEW,
                                   do_sample=False, eos_token_id=None, pad_token_id=0, use_cache=True)
            gen_check[str(L)] = {"same_ids": bool(np.array_equal(g[0, L:].cpu().numpy(), want))}
        except Exception as ex:
            gen_check[str(L)] = {"error": f"{type(ex).__name__}: {ex}"}
    log(f"  generate check: {gen_check}")
    return {"prompts": prompts_meta, "scales": scales, "numpy_float64_check": numpy_check,
            "hf_generate_check": gen_check, "hf_config": json.loads(json.dumps(cfg.to_dict(), default=str)),
            "hf_state_dict_keys": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/data/golden/v3", help="fixture root (one folder per config)")
    ap.add_argument("--configs", default="tiny-a,tiny-b")
    ap.add_argument("--no-hf", action="store_true", help="checkpoints + numpy forward only (no torch)")
    ap.add_argument("--diag", default=None, help="folder for HF's source files")
    ap.add_argument("--min-logit-gap", type=float, default=1e-3)
    ap.add_argument("--min-router-gap", type=float, default=1e-5)
    args = ap.parse_args()
    t0 = time.time()

    def log(msg):
        print(f"[{time.time() - t0:7.1f}s] {msg}", flush=True)

    env = {}
    if not args.no_hf:
        import torch
        import transformers

        assert torch.cuda.is_available(), "needs the GPU machine (or use --no-hf)"
        env = {"transformers": transformers.__version__, "torch": torch.__version__, "numpy": np.__version__,
               "device": torch.cuda.get_device_name(0), "cuda": torch.version.cuda}
        log(f"env: {env}")
        if args.diag:
            import inspect
            import shutil

            import transformers.modeling_rope_utils as ru
            from transformers.models.deepseek_v3 import configuration_deepseek_v3, modeling_deepseek_v3

            os.makedirs(args.diag, exist_ok=True)
            for mod in (modeling_deepseek_v3, configuration_deepseek_v3, ru):
                shutil.copy(inspect.getsourcefile(mod), args.diag)

    for name in args.configs.split(","):
        c = full_cfg(name)
        out_dir = os.path.join(args.out, name)
        ck, st_path = write_checkpoint(c, out_dir)
        log(f"{name}: wrote {st_path} ({os.path.getsize(st_path)} bytes, {len(ck.stored)} tensors)")
        rope_af, scale = expected_scales(c)
        meta = {
            "config": name, "seed": c["seed"], "generated_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv), "env": env,
            "prompt_lengths": PROMPT_LENGTHS,
            "greedy": {"prompts": GREEDY_PROMPTS, "new_tokens": GREEDY_NEW,
                       "method": "argmax of the last position of a full no-cache forward, repeated; no EOS stop"},
            "numerics": "HF transformers fp32 on GPU, TF32 off, eager attention and experts; weights are the "
                        "dequantized stored FP8 (F32 block scales) / bf16 / f32 values",
            "expected_scales": {"softmax_scale": scale, "rope_attention_scaling": rope_af},
            "checkpoint_sha256": hashlib.sha256(open(st_path, "rb").read()).hexdigest(),
        }
        if args.no_hf:
            ids = np.random.default_rng([c["seed"], 7, 0]).integers(2, c["vocab_size"], size=7, dtype=np.int64)
            lg = np_forward(c, ck.values, ids)
            log(f"{name}: numpy forward L=7 ok, logit std {lg.std():.2f}, argmax {lg.argmax(-1).tolist()}")
        else:
            meta.update(run_hf(c, ck, out_dir, args, log))
        with open(os.path.join(out_dir, "meta.json"), "w") as f:
            json.dump(json_clean(meta), f, indent=1, allow_nan=False)
            f.write("\n")
    log("done")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Golden fixtures for plumb's DeepSeek-V4 `reference` profile, computed by HF transformers.

For each tiny config below this script
  1. draws every parameter of a tiny DeepSeek-V4 model at random (numpy, fixed seed),
  2. stores it in the official checkpoint layout (MODEL-SPEC 4.2-4.5: native names, FP8 e4m3 +
     ue8m0 128x128 block scales, FP4 e2m1 packed I8 + ue8m0 1x32 scales, bf16 / f32 / i64),
     written by the small safetensors writer below, plus a config.json in the release's format,
  3. dequantizes exactly the stored values (MODEL-SPEC 4.4, our own code) and loads them into
     `transformers.DeepseekV4ForCausalLM` in fp32 (TF32 off, eager attention, eager experts)
     through our own native -> HF name map (strict: every HF tensor must be set, 1:1),
  4. saves the HF logits of every position of several prompts (one forward, no cache) and a
     greedy continuation computed by repeated full forwards (no cache), and checks that HF's own
     cached `generate` agrees (reported only: HF's cache path is not the golden).

The numpy part (weights, quantization, writer) also runs without torch: `--no-hf` writes the
checkpoints only, `--selftest` checks the codecs and the writer on hand-computed cases.
See tools/golden/README.md for how to regenerate on the GPU machine.
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

from fixture_meta import json_clean, logit_stats
from v4_configs import CONFIGS, GREEDY_NEW, GREEDY_PROMPTS, MAX_ATTEMPTS, PROMPT_LENGTHS, full_cfg
from v4_hf_names import native_to_hf_state
from v4_native import write_checkpoint
from v4_selftest import selftest

# ----------------------------------------------------------------------------------------------
# HF part (GPU machine)
# ----------------------------------------------------------------------------------------------


def spec_inv_freq(c, compress):
    """MODEL-SPEC 2.4, float64: the per-pair frequencies plumb must use."""
    d = c["qk_rope_head_dim"]
    theta = c["compress_rope_theta"] if compress else c["rope_theta"]
    f = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    if not compress:
        return f
    L0, bf, bs, fac = c["rope_scaling_original"], c["beta_fast"], c["beta_slow"], c["yarn_factor"]
    low = np.floor(d * np.log(L0 / (bf * 2 * np.pi)) / (2 * np.log(theta)))
    high = np.ceil(d * np.log(L0 / (bs * 2 * np.pi)) / (2 * np.log(theta)))
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(d // 2) - low) / (high - low), 0, 1)
    return f * (1 - ramp) + (f / fac) * ramp


def hf_layer_types(c):
    names = {0: "sliding_attention", 4: "compressed_sparse_attention"}
    return [names.get(r, "heavily_compressed_attention") for r in c["compress_ratios"][: c["num_hidden_layers"]]]


def hca_ratio(c):
    r = {x for x in c["compress_ratios"][: c["num_hidden_layers"]] if x not in (0, 4)}
    assert len(r) <= 1, "HF supports one HCA ratio per model"
    return r.pop() if r else 128


def make_hf_config(c, log):
    from transformers import DeepseekV4Config

    n = c["num_hidden_layers"]
    prf = c["qk_rope_head_dim"] / c["head_dim"]
    yarn = {"rope_type": "yarn", "rope_theta": c["compress_rope_theta"], "factor": c["yarn_factor"],
            "original_max_position_embeddings": c["rope_scaling_original"], "beta_fast": c["beta_fast"],
            "beta_slow": c["beta_slow"], "attention_factor": 1.0, "partial_rotary_factor": prf}
    common = dict(
        vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], moe_intermediate_size=c["moe_intermediate_size"],
        num_hidden_layers=n, num_attention_heads=c["num_attention_heads"], num_key_value_heads=1,
        head_dim=c["head_dim"], q_lora_rank=c["q_lora_rank"], num_experts_per_tok=c["num_experts_per_tok"],
        n_routed_experts=c["n_routed_experts"], n_shared_experts=c["n_shared_experts"], scoring_func="sqrtsoftplus",
        norm_topk_prob=True, routed_scaling_factor=c["routed_scaling_factor"],
        max_position_embeddings=c["max_position_embeddings"], rope_theta=c["rope_theta"],
        compress_rope_theta=c["compress_rope_theta"], hc_mult=c["hc_mult"], hc_sinkhorn_iters=c["hc_sinkhorn_iters"],
        hc_eps=c["hc_eps"], swiglu_limit=c["swiglu_limit"], sliding_window=c["sliding_window"],
        o_groups=c["o_groups"], o_lora_rank=c["o_lora_rank"], index_n_heads=c["index_n_heads"],
        index_head_dim=c["index_head_dim"], index_topk=c["index_topk"],
        num_nextn_predict_layers=c["num_nextn_predict_layers"], hidden_act="silu", rms_norm_eps=c["rms_norm_eps"],
        bos_token_id=0, eos_token_id=1, tie_word_embeddings=False, attention_bias=False,
    )
    modern = dict(
        common, layer_types=hf_layer_types(c),
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": hca_ratio(c)},
        mlp_layer_types=["hash_moe" if i < c["num_hash_layers"] else "moe" for i in range(n)],
        partial_rotary_factor=prf,
        rope_parameters={"main": {"rope_type": "default", "rope_theta": c["rope_theta"], "partial_rotary_factor": prf},
                         "compress": yarn},
    )
    try:
        cfg = DeepseekV4Config(**modern)
        log("hf config: built with layer_types / compress_rates / mlp_layer_types / rope_parameters")
    except Exception as ex:  # older or newer field names: try the legacy spelling
        log(f"hf config: modern kwargs failed ({type(ex).__name__}: {ex}); trying legacy kwargs")
        legacy = dict(common, layer_types=hf_layer_types(c), compress_rate_csa=4, compress_rate_hca=hca_ratio(c),
                      num_hash_layers=c["num_hash_layers"], qk_rope_head_dim=c["qk_rope_head_dim"],
                      rope_scaling={k: v for k, v in yarn.items() if k not in ("rope_theta", "partial_rotary_factor")})
        cfg = DeepseekV4Config(**legacy)
    # verify what HF derived
    assert list(cfg.layer_types) == hf_layer_types(c), cfg.layer_types
    assert cfg.compress_rates["compressed_sparse_attention"] == 4
    assert cfg.compress_rates["heavily_compressed_attention"] == hca_ratio(c), cfg.compress_rates
    assert list(cfg.mlp_layer_types) == ["hash_moe" if i < c["num_hash_layers"] else "moe" for i in range(n)]
    assert int(round(cfg.head_dim * cfg.partial_rotary_factor)) == c["qk_rope_head_dim"]
    assert cfg.tie_word_embeddings is False
    return cfg


def build_hf_model(cfg, log):
    import torch
    from transformers import DeepseekV4ForCausalLM

    model = None
    for kwargs in (dict(attn_implementation="eager", experts_implementation="eager", dtype=torch.float32),
                   dict(attn_implementation="eager", dtype=torch.float32),
                   dict(attn_implementation="eager", torch_dtype=torch.float32)):
        try:
            model = DeepseekV4ForCausalLM._from_config(cfg, **kwargs)
            log(f"hf model: _from_config({', '.join(kwargs)})")
            break
        except Exception as ex:
            log(f"hf model: _from_config({', '.join(kwargs)}) failed: {type(ex).__name__}: {ex}")
    assert model is not None
    for attr in ("_attn_implementation", "_experts_implementation"):
        if hasattr(model.config, attr):
            log(f"hf model: config.{attr} = {getattr(model.config, attr)!r}")
    if getattr(model.config, "_experts_implementation", "eager") not in (None, "eager"):
        try:
            model.set_experts_implementation("eager")
        except Exception:
            model.config._experts_implementation = "eager"
        log(f"hf model: experts implementation forced to {model.config._experts_implementation!r}")
    return model.float().cuda().eval()


class Probe:
    """Forward hooks: indexer top-k margins, router top-k margins, SwiGLU clamp activity, per-layer RMS."""

    def __init__(self, model, c):
        import torch

        self.c = c
        self.reset()
        self.in_indexer = 0
        probe = self
        orig_tensor_topk, orig_topk = torch.Tensor.topk, torch.topk

        def record(x, k):
            if probe.in_indexer and x.numel() > 0:
                probe.indexer_rows.append((x.detach().float().cpu().numpy().reshape(-1, x.shape[-1]), int(k)))

        def tensor_topk(self_, k, *a, **kw):
            record(self_, k)
            return orig_tensor_topk(self_, k, *a, **kw)

        def fn_topk(x, k, *a, **kw):
            record(x, k)
            return orig_topk(x, k, *a, **kw)

        torch.Tensor.topk = tensor_topk
        torch.topk = fn_topk
        self.n_indexers = self.n_routers = self.n_shared = 0
        for name, mod in model.named_modules():
            cls = type(mod).__name__
            if cls.endswith("Indexer"):
                self.n_indexers += 1
                mod.register_forward_pre_hook(lambda m, a: setattr(probe, "in_indexer", probe.in_indexer + 1))
                mod.register_forward_hook(lambda m, a, o: setattr(probe, "in_indexer", probe.in_indexer - 1))
            if hasattr(mod, "e_score_correction_bias") and hasattr(mod, "weight"):
                self.n_routers += 1
                mod.register_forward_hook(self._router_hook)
            if name.endswith("mlp.shared_experts"):
                self.n_shared += 1
                mod.register_forward_hook(self._shared_hook)
            if cls.endswith("DecoderLayer"):
                li = int(name.split(".")[-1])
                mod.register_forward_hook(lambda m, a, o, li=li: probe.layer_rms.__setitem__(
                    li, float(o.float().pow(2).mean().sqrt()) if hasattr(o, "float") else float("nan")))

    def reset(self):
        self.indexer_rows, self.router_gaps, self.clamp_frac, self.layer_rms = [], [], [], {}

    def _router_hook(self, mod, args, out):
        import torch
        import torch.nn.functional as F

        x = args[0].reshape(-1, mod.weight.shape[1]).float()
        s = torch.sqrt(F.softplus(x @ mod.weight.float().t())) + mod.e_score_correction_bias.float()
        v = s.sort(dim=-1, descending=True).values
        k = self.c["num_experts_per_tok"]
        self.router_gaps.append(float((v[:, k - 1] - v[:, k]).min()))

    def _shared_hook(self, mod, args, out):
        x = args[0]
        lim = self.c["swiglu_limit"]
        g, u = mod.gate_proj(x), mod.up_proj(x)
        self.clamp_frac.append(float(((g > lim).float().mean() + (u.abs() > lim).float().mean()) / 2))

    def indexer_min_rel_gap(self):
        """Smallest (k-th - (k+1)-th) / max|score| over all query rows with more valid entries than k."""
        best, rows_cut = float("inf"), 0
        for x, k in self.indexer_rows:
            for r in x:
                valid = np.sort(r[np.isfinite(r)])[::-1]
                if len(valid) > k:
                    rows_cut += 1
                    scale = max(np.abs(valid).max(), 1e-30)
                    best = min(best, float(valid[k - 1] - valid[k]) / scale)
        return best, rows_cut


def run_hf(c, native, out_dir, args, log, diag):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.manual_seed(c["seed"])

    cfg = make_hf_config(c, log)
    model = build_hf_model(cfg, log)
    sd = model.state_dict()
    diag.append(f"== {c['name']}: HF state_dict ({len(sd)} entries)")
    diag.extend(f"{k} {tuple(v.shape)} {str(v.dtype).replace('torch.', '')}" for k, v in sd.items())
    diag.append(f"== {c['name']}: HF config\n{json.dumps(cfg.to_dict(), indent=1, default=str)}")
    if args.diag:
        with open(os.path.join(args.diag, "hf_state_dict.txt"), "w") as f:
            f.write("\n".join(diag) + "\n")
    state, rows = native_to_hf_state(c, native, list(sd.keys()))
    missing = sorted(set(sd) - set(state))
    extra = sorted(set(state) - set(sd))
    assert not missing and not extra, f"name map not 1:1: HF keys without a value {missing}; values without an HF key {extra}"
    tens = {}
    for k, v in state.items():
        t = torch.from_numpy(np.ascontiguousarray(v))
        assert tuple(t.shape) == tuple(sd[k].shape), f"{k}: shape {tuple(t.shape)} vs HF {tuple(sd[k].shape)}"
        tens[k] = t.to(sd[k].dtype)
    res = model.load_state_dict(tens, strict=True)
    log(f"hf model: load_state_dict strict ok ({len(tens)} tensors) {res}")
    for k, v in model.state_dict().items():  # what HF holds now is exactly what we stored
        assert torch.equal(v.cpu(), tens[k]), k

    # RoPE frequencies vs MODEL-SPEC 2.4
    rope_check = {}
    try:
        rot = model.model.rotary_emb
        for lt, compress in (("main", False), ("compress", True)):
            hf_f = getattr(rot, f"{lt}_inv_freq").double().cpu().numpy()
            sp = spec_inv_freq(c, compress)
            assert hf_f.shape == sp.shape, (lt, hf_f.shape, sp.shape)
            rope_check[lt] = {"max_rel_diff_vs_spec": float(np.max(np.abs(hf_f - sp) / sp)),
                              "attention_scaling": float(getattr(rot, f"{lt}_attention_scaling"))}
    except Exception as ex:
        rope_check["error"] = f"{type(ex).__name__}: {ex}"
    log(f"rope check: {rope_check}")

    # experts path sanity: HF experts module == plain per-expert loop in fp32
    experts_err = None
    try:
      with torch.no_grad():
        exp = model.model.layers[0].mlp.experts
        x = torch.randn(37, c["hidden_size"], device="cuda")
        idx = torch.stack([torch.randperm(c["n_routed_experts"], device="cuda")[: c["num_experts_per_tok"]] for _ in range(37)])
        w = torch.rand(37, c["num_experts_per_tok"], device="cuda")
        got = exp(x, idx, w)
        ref = torch.zeros_like(x)
        I = c["moe_intermediate_size"]
        for t in range(37):
            for j in range(c["num_experts_per_tok"]):
                e = int(idx[t, j])
                gu = exp.gate_up_proj[e] @ x[t]
                g, u = gu[:I].clamp(max=c["swiglu_limit"]), gu[I:].clamp(-c["swiglu_limit"], c["swiglu_limit"])
                ref[t] += w[t, j] * (exp.down_proj[e] @ (torch.nn.functional.silu(g) * u))
        experts_err = float((got - ref).abs().max() / ref.abs().max())
    except Exception as ex:
        log(f"experts check could not run: {type(ex).__name__}: {ex}")
    log(f"experts check: max rel err {experts_err}")
    assert experts_err is None or experts_err < 1e-5, "HF experts path is not plain fp32"

    probe = Probe(model, c)
    log(f"probe: {probe.n_indexers} indexers, {probe.n_routers} learned routers, {probe.n_shared} shared experts")

    def forward(ids):
        with torch.no_grad():
            out = model(input_ids=torch.as_tensor(ids, device="cuda")[None], use_cache=False)
        lg = out.logits[0].float().cpu().numpy()
        assert np.all(np.isfinite(lg)), "non-finite logits"
        return lg

    def greedy(ids):
        seq, gaps = list(ids), []
        for _ in range(GREEDY_NEW):
            lg = forward(np.array(seq, dtype=np.int64))[-1]
            s = np.sort(lg)
            gaps.append(float(s[-1] - s[-2]))
            seq.append(int(np.argmax(lg)))
        return np.array(seq[len(ids):], dtype=np.int64), min(gaps)

    V = c["vocab_size"]
    prompts_meta = {}
    stats_all = {"gap": [], "std": []}
    for L in PROMPT_LENGTHS:
        for attempt in range(MAX_ATTEMPTS):
            rng = np.random.default_rng([c["seed"], L, attempt])
            ids = rng.integers(2, V, size=L, dtype=np.int64)
            probe.reset()
            lg = forward(ids)
            gap, std = logit_stats(lg)
            idx_gap, idx_rows = probe.indexer_min_rel_gap()
            rt_gap = min(probe.router_gaps) if probe.router_gaps else float("inf")
            layer_rms = dict(probe.layer_rms)
            clamp = float(np.mean(probe.clamp_frac)) if probe.clamp_frac else 0.0
            g_ids, g_gap = (None, float("inf"))
            ok = gap.min() >= args.min_logit_gap and idx_gap >= args.min_indexer_gap and rt_gap >= args.min_router_gap
            if ok and L in GREEDY_PROMPTS:
                probe.reset()
                g_ids, g_gap = greedy(ids)
                g_idx_gap, _ = probe.indexer_min_rel_gap()
                g_rt_gap = min(probe.router_gaps) if probe.router_gaps else float("inf")
                ok = g_gap >= args.min_logit_gap and g_idx_gap >= args.min_indexer_gap and g_rt_gap >= args.min_router_gap
                idx_gap, rt_gap = min(idx_gap, g_idx_gap), min(rt_gap, g_rt_gap)
            if ok:
                break
            log(f"  {c['name']} L={L} attempt {attempt}: near-tie (logit gap {gap.min():.2e}, greedy gap {g_gap:.2e}, "
                f"indexer rel gap {idx_gap:.2e}, router gap {rt_gap:.2e}); redrawing the prompt")
        else:
            raise SystemExit(f"{c['name']} L={L}: no prompt without near-ties in {MAX_ATTEMPTS} attempts")
        np.save(os.path.join(out_dir, f"prompt_{L}.ids.npy"), ids)
        np.save(os.path.join(out_dir, f"prompt_{L}.logits.npy"), lg.astype(np.float32))
        stats_all["gap"].append(gap)
        stats_all["std"].append(std)
        pm = {"attempt": attempt, "logit_std_mean": float(std.mean()), "logit_std_min": float(std.min()),
              "top1_top2_gap_min": float(gap.min()), "top1_top2_gap_median": float(np.median(gap)),
              "logit_absmax": float(np.abs(lg).max()), "indexer_rows_with_cut": idx_rows,
              "indexer_min_rel_gap": idx_gap if np.isfinite(idx_gap) else None,
              "router_min_gap": rt_gap if np.isfinite(rt_gap) else None,
              "layer_out_rms": [layer_rms[i] for i in sorted(layer_rms)], "shared_swiglu_clamp_frac": clamp}
        if g_ids is not None:
            np.save(os.path.join(out_dir, f"greedy_{L}.ids.npy"), g_ids)
            pm["greedy_new_ids"] = g_ids.tolist()
            pm["greedy_min_top1_top2_gap"] = g_gap
        prompts_meta[str(L)] = pm
        log(f"  {c['name']} L={L}: std {pm['logit_std_mean']:.2f}, gap min {pm['top1_top2_gap_min']:.3f} "
            f"median {pm['top1_top2_gap_median']:.3f}, indexer rows cut {idx_rows} min rel gap {idx_gap:.2e}, "
            f"router gap {rt_gap:.2e}, clamp {clamp:.3f}, layer rms {[round(x, 2) for x in pm['layer_out_rms']]}")

    # HF's own cached generate (not the golden): same greedy ids? same logits?
    gen_check = {}
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    for L in GREEDY_PROMPTS:
        ids = np.load(os.path.join(out_dir, f"prompt_{L}.ids.npy"))
        want = np.load(os.path.join(out_dir, f"greedy_{L}.ids.npy"))
        try:
            with torch.no_grad():
                g = model.generate(torch.as_tensor(ids, device="cuda")[None], max_new_tokens=GREEDY_NEW,
                                   do_sample=False, eos_token_id=None, pad_token_id=0, use_cache=True,
                                   output_logits=True, return_dict_in_generate=True)
            got = g.sequences[0, L:].cpu().numpy()
            n = min(len(got), len(want))
            first_diff = next((i for i in range(n) if got[i] != want[i]), None)
            # compare the cached step logits with a full forward over the same tokens
            full = forward(np.concatenate([ids, got[:-1]]))[L - 1 :]
            step = torch.stack(g.logits, 0)[:, 0].float().cpu().numpy()
            m = min(len(step), len(full))
            rel = float(np.abs(step[:m] - full[:m]).max() / np.abs(full[:m]).max())
            gen_check[str(L)] = {"same_ids": bool(first_diff is None and len(got) == len(want)),
                                 "first_diff": first_diff, "n_generated": int(len(got)),
                                 "cached_vs_full_logits_max_rel_diff": rel}
        except Exception as ex:
            gen_check[str(L)] = {"error": f"{type(ex).__name__}: {ex}"}
        log(f"  generate check L={L}: {gen_check[str(L)]}")

    # noise floor: the same HF model on the CPU (fp32) vs the GPU golden, longest prompt
    import copy
    Lmax = max(PROMPT_LENGTHS)
    ids = np.load(os.path.join(out_dir, f"prompt_{Lmax}.ids.npy"))
    ref = np.load(os.path.join(out_dir, f"prompt_{Lmax}.logits.npy"))
    cpu_model = copy.deepcopy(model).cpu()
    with torch.no_grad():
        cl = cpu_model(input_ids=torch.as_tensor(ids)[None], use_cache=False).logits[0].float().numpy()
    cpu_gpu = {"max_rel_diff": float(np.abs(cl - ref).max() / np.abs(ref).max()),
               "argmax_equal": bool(np.array_equal(cl.argmax(-1), ref.argmax(-1)))}
    log(f"  cpu vs gpu (L={Lmax}): {cpu_gpu}")
    del cpu_model

    gap = np.concatenate(stats_all["gap"])
    std = np.concatenate(stats_all["std"])
    summary = {"positions": int(len(gap)), "logit_std_mean": float(std.mean()), "logit_std_min": float(std.min()),
               "top1_top2_gap_min": float(gap.min()), "top1_top2_gap_median": float(np.median(gap)),
               "top1_top2_gap_p01": float(np.percentile(gap, 1))}
    return {"prompts": prompts_meta, "logit_summary": summary, "rope_check": rope_check,
            "experts_check_max_rel_err": experts_err, "hf_config": json.loads(json.dumps(cfg.to_dict(), default=str)), "hf_generate_check": gen_check, "cpu_vs_gpu": cpu_gpu,
            "hf_state_dict_entries": len(sd), "name_map": rows}


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------


def config_summary(c):
    n = c["num_hidden_layers"]
    kinds = {0: "SWA", 4: "CSA"}
    return {
        "layers": [{"layer": i, "attn": kinds.get(r, f"HCA{r}"), "ratio": r,
                    "routing": "hash" if i < c["num_hash_layers"] else "learned"}
                   for i, r in enumerate(c["compress_ratios"][:n])],
        "mtp": "mtp.0.* written (ratio-0 layer, learned routing); no golden (HF drops MTP)",
        "dims": {k: c[k] for k in ("vocab_size", "hidden_size", "num_attention_heads", "head_dim", "qk_rope_head_dim",
                                   "q_lora_rank", "o_groups", "o_lora_rank", "sliding_window", "n_routed_experts",
                                   "num_experts_per_tok", "moe_intermediate_size", "index_n_heads", "index_head_dim",
                                   "index_topk", "swiglu_limit", "routed_scaling_factor", "hc_sinkhorn_iters")},
        "init": "numpy PCG64 seed; see build_native() for every tensor's distribution",
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/data/golden/v4", help="fixture root (one folder per config)")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated config names")
    ap.add_argument("--no-hf", action="store_true", help="write the checkpoints only (no torch needed)")
    ap.add_argument("--selftest", action="store_true", help="codec / writer self test only")
    ap.add_argument("--diag", default=None, help="folder for diagnostics (HF source, state_dict listing)")
    ap.add_argument("--min-logit-gap", type=float, default=1e-3, help="top-1 minus top-2 logit, absolute")
    ap.add_argument("--min-indexer-gap", type=float, default=1e-5, help="k-th minus (k+1)-th indexer score, "
                    "relative to the row's max |score|")
    ap.add_argument("--min-router-gap", type=float, default=1e-5, help="k-th minus (k+1)-th biased router score")
    args = ap.parse_args()

    selftest()
    if args.selftest:
        return
    t0 = time.time()
    diag = []

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
            os.makedirs(args.diag, exist_ok=True)
            import inspect
            import shutil

            from transformers.models.deepseek_v4 import configuration_deepseek_v4, modeling_deepseek_v4

            for mod in (modeling_deepseek_v4, configuration_deepseek_v4):
                shutil.copy(inspect.getsourcefile(mod), args.diag)
            extra = []
            try:
                import transformers.masking_utils as mu

                for fn in ("sliding_window_overlay", "sliding_window_causal_mask_function", "create_sliding_window_causal_mask"):
                    if hasattr(mu, fn):
                        extra.append(inspect.getsource(getattr(mu, fn)))
                import transformers.modeling_rope_utils as ru

                extra.append(inspect.getsource(ru._compute_yarn_parameters))
                from transformers.activations import ACT2FN

                extra.append(inspect.getsource(type(ACT2FN["sqrtsoftplus"])))
            except Exception as ex:
                extra.append(f"source dump failed: {ex}")
            with open(os.path.join(args.diag, "hf_helpers_source.txt"), "w") as f:
                f.write("\n\n".join(extra))

    for name in args.configs.split(","):
        c = full_cfg(name)
        out_dir = os.path.join(args.out, name)
        native, st_path = write_checkpoint(c, out_dir)
        log(f"{name}: wrote {st_path} ({os.path.getsize(st_path)} bytes, {len(native.stored)} tensors)")
        meta = {
            "config": name, "seed": c["seed"], "generated_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv), "env": env,
            "summary": config_summary(c),
            "prompt_lengths": PROMPT_LENGTHS, "greedy": {"prompts": GREEDY_PROMPTS, "new_tokens": GREEDY_NEW,
                                                          "method": "argmax of the last position of a full no-cache forward, "
                                                                    "repeated; no EOS stop"},
            "numerics": "HF transformers fp32 on GPU, TF32 off, eager attention and experts, no activation quantization "
                        "(= plumb's reference profile); weights are the dequantized stored FP8/FP4/bf16 values",
            "prompt_ids": "uniform in [2, vocab) from numpy default_rng([seed, L, attempt]); attempt > 0 means an "
                          "earlier draw had a near-tie (logit top-2, indexer top-k cut or router top-k cut)",
            "checkpoint_sha256": hashlib.sha256(open(st_path, "rb").read()).hexdigest(),
        }
        if not args.no_hf:
            meta.update(run_hf(c, native, out_dir, args, log, diag))
        with open(os.path.join(out_dir, "meta.json"), "w") as f:
            json.dump(json_clean(meta), f, indent=1, allow_nan=False)
            f.write("\n")
    log("done")


if __name__ == "__main__":
    main()

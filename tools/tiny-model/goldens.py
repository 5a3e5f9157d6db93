"""HF goldens for models/tiny-kjv (called by train.py once the exported weights are loaded back into
HF): logits of real-text prompts, greedy continuations, the held-out perplexity and sample text.
Same file layout as tests/data/golden/v4/tiny-a (see tools/golden/README.md), plus
heldout.ids.npy. Numerics: fp32, TF32 off, eager attention and experts, no cache, weights = the
dequantized stored FP8 / FP4 / bf16 values (= plumb's `reference` profile)."""
from __future__ import annotations

import csv
import hashlib
import json
import os

import numpy as np

import tiny_v4 as tv

import make_v4_fixtures as mf  # noqa: E402  (tools/golden, on the path tiny_v4 sets)
import fixture_meta  # noqa: E402

PROMPT_LENGTHS = [5, 40, 150]  # total ids, BOS included
GREEDY_PROMPTS = [40, 150]
GREEDY_NEW = 64
PPL_DEFINITION = (
    "ids = encode(heldout.txt) with the model's tokenizer.json: the whole file as one UTF-8 string, no BOS/EOS "
    "added (N ids). Split ids into consecutive non-overlapping windows of `context` tokens, the last window holding "
    "the remaining N mod context tokens. Score each window w on its own, no cache, input [BOS=0] + w; the logits at "
    "input position j predict w[j] (j = 0..len(w)-1), so every held-out token is predicted exactly once and the BOS "
    "is never a target. NLL = sum over all N targets of -log_softmax(logits)[target], accumulated in float64; "
    "ppl = exp(NLL / N).")


def make(model, tok, c, held, held_ids, ppl_b, args, out_dir, model_dir, log, env):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    os.makedirs(out_dir, exist_ok=True)
    np.save(os.path.join(out_dir, "heldout.ids.npy"), np.asarray(held_ids, dtype=np.int64))
    probe = mf.Probe(model, c)

    def forward(ids):
        with torch.no_grad():
            out = model(input_ids=torch.as_tensor(np.asarray(ids), device="cuda")[None], use_cache=False)
        lg = out.logits[0].float().cpu().numpy()
        assert np.all(np.isfinite(lg))
        return lg

    def greedy(ids, n):
        seq, gaps = list(ids), []
        for _ in range(n):
            lg = forward(seq)[-1]
            s = np.sort(lg)
            gaps.append(float(s[-1] - s[-2]))
            seq.append(int(np.argmax(lg)))
        return np.array(seq[len(ids):], dtype=np.int64), min(gaps)

    chapters = [b for b in held.split("\n\n") if b.strip()]
    prompts, gate = {}, dict(logit=1e-3, indexer=1e-5, router=1e-5)
    if getattr(args, "smoke", False):
        gate = dict(logit=-1.0, indexer=-1.0, router=-1.0)
    for pi, L in enumerate(PROMPT_LENGTHS):
        tried = []
        for k in range(len(chapters)):
            chap = chapters[(8 * pi + k) % len(chapters)]  # each length starts at another chapter
            body = tok.encode(chap, add_special_tokens=False).ids[:L - 1]
            text = tok.decode(body)
            if len(body) < L - 1 or tok.encode(text, add_special_tokens=False).ids != body:
                tried.append({"chapter": chap.split("\n", 1)[0], "rejected": "text does not re-encode to the same ids"})
                continue
            ids = np.array([tv.BOS] + body, dtype=np.int64)
            probe.reset()
            lg = forward(ids)
            gap, std = fixture_meta.logit_stats(lg)
            idx_gap, idx_rows = probe.indexer_min_rel_gap()
            rt_gap = min(probe.router_gaps) if probe.router_gaps else float("inf")
            g_ids, g_gap = None, float("inf")
            ok = gap.min() >= gate["logit"] and idx_gap >= gate["indexer"] and rt_gap >= gate["router"]
            if ok and L in GREEDY_PROMPTS:
                probe.reset()
                g_ids, g_gap = greedy(ids, GREEDY_NEW)
                gi, _ = probe.indexer_min_rel_gap()
                gr = min(probe.router_gaps) if probe.router_gaps else float("inf")
                ok = g_gap >= gate["logit"] and gi >= gate["indexer"] and gr >= gate["router"]
                idx_gap, rt_gap = min(idx_gap, gi), min(rt_gap, gr)
            if ok:
                break
            tried.append({"chapter": chap.split("\n", 1)[0], "rejected": f"near-tie: logit gap {gap.min():.2e}, "
                          f"greedy gap {g_gap:.2e}, indexer rel gap {idx_gap:.2e}, router gap {rt_gap:.2e}"})
        else:
            raise SystemExit(f"L={L}: every held-out chapter has a near-tie")
        np.save(os.path.join(out_dir, f"prompt_{L}.ids.npy"), ids)
        np.save(os.path.join(out_dir, f"prompt_{L}.logits.npy"), lg.astype(np.float32))
        pm = {"text": text, "source": f"models/tiny-kjv/heldout.txt, start of {chap.split(chr(10), 1)[0]}",
              "ids": "BOS + encode(text)", "rejected_candidates": tried, "logit_std_mean": float(std.mean()),
              "top1_top2_gap_min": float(gap.min()), "top1_top2_gap_median": float(np.median(gap)),
              "top1_prob_mean": top1_prob_mean(lg),
              "indexer_rows_with_cut": idx_rows, "indexer_min_rel_gap": idx_gap if np.isfinite(idx_gap) else None,
              "router_min_gap": rt_gap if np.isfinite(rt_gap) else None, "argmax": lg.argmax(-1).tolist()}
        if g_ids is not None:
            np.save(os.path.join(out_dir, f"greedy_{L}.ids.npy"), g_ids)
            pm.update(greedy_new_ids=g_ids.tolist(), greedy_min_top1_top2_gap=g_gap, greedy_text=tok.decode(g_ids.tolist()))
        prompts[str(L)] = pm
        log(f"golden L={L}: {text[:60]!r}... gap min {gap.min():.3f}, indexer rows cut {idx_rows}, "
            f"rejected {len(tried)}" + (f"\n    greedy: {pm['greedy_text']!r}" if g_ids is not None else ""))

    # HF's own cached generate (reported, not the golden)
    gen_check = {}
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = tv.EOS
    for L in GREEDY_PROMPTS:
        ids = np.load(os.path.join(out_dir, f"prompt_{L}.ids.npy"))
        want = np.load(os.path.join(out_dir, f"greedy_{L}.ids.npy"))
        try:
            with torch.no_grad():
                g = model.generate(torch.as_tensor(ids, device="cuda")[None], max_new_tokens=GREEDY_NEW, do_sample=False,
                                   eos_token_id=None, pad_token_id=tv.EOS, use_cache=True)
            got = g[0, L:].cpu().numpy()
            gen_check[str(L)] = {"same_ids": bool(len(got) == len(want) and np.array_equal(got, want)),
                                 "first_diff": next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), None)}
        except Exception as ex:
            gen_check[str(L)] = {"error": f"{type(ex).__name__}: {ex}"}
        log(f"generate (cached) check L={L}: {gen_check[str(L)]}")

    samples = make_samples(model, tok, forward)
    for k, v in samples.items():
        log(f"sample {k}: {v['prompt']!r} -> {v['output']!r}")

    shards = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    meta = {
        "model": "models/tiny-kjv", "env": env,
        "checkpoint_sha256": {f: hashlib.sha256(open(os.path.join(model_dir, f), "rb").read()).hexdigest() for f in shards},
        "tokenizer_sha256": hashlib.sha256(open(os.path.join(model_dir, "tokenizer.json"), "rb").read()).hexdigest(),
        "numerics": "HF transformers fp32 on GPU, TF32 off, eager attention and experts, no activation quantization "
                    "(= plumb's reference profile); weights are the dequantized stored FP8/FP4/bf16 values",
        "prompt_lengths": PROMPT_LENGTHS,
        "greedy": {"prompts": GREEDY_PROMPTS, "new_tokens": GREEDY_NEW,
                   "method": "argmax of the last position of a full no-cache forward, repeated; no EOS stop"},
        "prompts": prompts, "hf_generate_check": gen_check,
        "near_tie_gates": gate,
        "perplexity": {"file": "models/tiny-kjv/heldout.txt", "context": args.ctx, "definition": PPL_DEFINITION,
                       "ppl": ppl_b[0], "nll_sum": ppl_b[1], "tokens": ppl_b[2],
                       "ids": "heldout.ids.npy (int64, no BOS)", "windows": -(-ppl_b[2] // args.ctx)},
        "samples": samples,
    }
    with open(os.path.join(out_dir, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(fixture_meta.json_clean(meta), f, indent=1, ensure_ascii=False, allow_nan=False)
        f.write("\n")
    return {"prompts": {k: {"text": v["text"], "greedy_text": v.get("greedy_text")} for k, v in prompts.items()},
            "generate_check": gen_check, "samples": samples}


def top1_prob_mean(lg):
    m = lg.max(-1, keepdims=True).astype(np.float64)
    return float(np.mean(1.0 / np.exp(lg - m).sum(-1)))


def make_samples(model, tok, forward):
    """Text for the model card: greedy and sampled continuations, and a chat turn."""
    import torch

    enc = lambda s: tok.encode(s, add_special_tokens=False).ids
    out = {}
    for name, prompt in (("greedy_genesis", "In the beginning God created"), ("greedy_psalm", "The LORD is my shepherd;")):
        ids = [tv.BOS] + enc(prompt)
        seq = list(ids)
        for _ in range(48):
            seq.append(int(np.argmax(forward(seq)[-1])))
        out[name] = {"prompt": prompt, "mode": "greedy, 48 tokens", "output": tok.decode(seq[len(ids):])}
    gen = torch.Generator().manual_seed(1)
    for name, prompt in (("sampled_jesus", "And Jesus said unto them,"), ("sampled_zh", "《春晓》\n作者：")):
        ids = [tv.BOS] + enc(prompt)
        seq = list(ids)
        for _ in range(48):
            p = torch.softmax(torch.from_numpy(forward(seq)[-1]).double() / 0.7, -1)
            sp, si = torch.sort(p, descending=True)
            keep = torch.cumsum(sp, 0) - sp < 0.9
            q = torch.zeros_like(p)
            q[si[keep]] = sp[keep]
            seq.append(int(torch.multinomial(q / q.sum(), 1, generator=gen)))
        out[name] = {"prompt": prompt, "mode": "temperature 0.7, top-p 0.9, torch.Generator seed 1, 48 tokens",
                     "output": tok.decode(seq[len(ids):])}
    ids = [tv.BOS, tok.token_to_id("<｜User｜>")] + enc("John 3:16") + [tok.token_to_id("<｜Assistant｜>"),
                                                                        tok.token_to_id("</think>")]
    seq = list(ids)
    for _ in range(80):
        seq.append(int(np.argmax(forward(seq)[-1])))
        if seq[-1] == tv.EOS:
            break
    out["chat_john_3_16"] = {"prompt": tok.decode(ids, skip_special_tokens=False), "mode": "greedy until EOS",
                             "output": tok.decode(seq[len(ids):], skip_special_tokens=False)}
    return out


def write_curve(rows, out_dir, dense_end, qat_start):
    with open(os.path.join(out_dir, "loss.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    tok = np.array([r["tokens"] for r in rows]) / 1e6
    ax.plot(tok, [r["loss"] for r in rows], lw=0.8, label="train loss (batch, bf16 autocast)")
    v = [(t, r["val_loss"]) for t, r in zip(tok, rows) if r["val_loss"] is not None]
    ax.plot([a for a, _ in v], [b for _, b in v], "o-", ms=3, label="held-out loss (ctx 256)")
    ax.set_ylim(top=min(ax.get_ylim()[1], 8))
    step_tok = rows[0]["tokens"] / rows[0]["step"]
    for s, name in ((dense_end, "indexer sparse"), (qat_start, "QAT on")):
        if s:
            ax.axvline(s * step_tok / 1e6, color="gray", ls="--", lw=0.8)
            ax.text(s * step_tok / 1e6, ax.get_ylim()[1] * 0.97, f" {name}", fontsize=8, va="top")
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("cross-entropy (nats / token)")
    ax.set_title("tiny-kjv: DeepSeek-V4 architecture, KJV + Tang/Song poems")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "loss.png"))

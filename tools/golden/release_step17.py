#!/usr/bin/env python3
"""What the release's router and indexer choose at one decode step of the aligned fixture's greedy
run (issue 13: step 17 of the 24-token greedy from the 300-token prompt, where plumb picks another
token 7.9 logits away).

Runs the release's inference/model.py (unmodified, make_v4_faithful.py's stand-ins, the golden
variant: blockwise GEMM, 64-slot online softmax, on the GPU) exactly as make_v4_release.py's
greedy does: prefill of the prompt, then one token per forward at start_pos. During the decode
forward that produces the logits of greedy step STEP (input: the release's token of step STEP-1,
at position prompt + STEP - 1) it records every module make_v4_release.py taps, and for every
MoE gate its input x and biased scores sqrt(softplus(x W^T)) + bias (what topk ranks).

Writes <out>/step<STEP>.npz (tap name -> f32 array; "<layer>.gate_x", "<layer>.gate_scores",
per indexer "<layer>.attn.indexer.index_q|index_w|index_keys_all|index_score", and per compressor
"<compressor>.stage.pooled|normed|roped" [entries, dim]: every entry of the run at each stage) and
<out>/step<STEP>_prefill.npz (the prefill's taps of layers 0 and 1 at every prompt position),
<out>/step<STEP>.json (per layer: the chosen experts, the top-4 biased scores and the 2nd/3rd gap;
the indexer's picks; the logits' top-5 at this step), and <out>/step<STEP>_attn0.npz: every stage of
layer 0's attention (an SWA layer) at every position the run computes, the prefill's 0..prompt-1
then each decode step's, as f32 arrays "attn0.<stage>" with the position first (see record_attn0;
about 6 MB, not committed; compare_step17.py --attn0 reads it).

Usage on the GPU machine:
    python3 tools/golden/release_step17.py --release-dir .device/inference \
        --ckpt tests/data/golden/v4-release/aligned --out OUT [--step 17]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_v4_release as mr  # noqa: E402


def record_attn0(release, fa, m):
    """Hooks and spies (from outside: model.py and kernel.py stay unmodified) that record every
    stage of layer 0's attention in each forward, in position order: the prefill's rows, then one
    row per decode step. Returns finish(), which assembles them into {"attn0.<stage>": array}:
      attn_in [P, dim]       the attention's input (attn_norm's output)
      q_a, qr [P, q_lora]    wq_a's output; q_norm's output
      q_b [P, H, Dh]         wq_b's output, before the per-head norm
      q_normed [P, H, Dh]    after the per-head norm (model.py 498), before RoPE
      q [P, H, Dh]           after RoPE: the q fed to sparse_attn
      kv_a, kv_normed, kv_roped, kv [P, Dh]   wkv's output; kv_norm's; after RoPE; after the FP8
                             round trip of the nope dims (model.py 502-506): what sparse_attn reads
      kv_fed [prompt, Dh]    the prefill's kv as sparse_attn received it (checks kv's assembly)
      idx [P, topk]          the index row (int32; a decode step's are ring slots)
      scores, probs [P, H, topk]   the stand-in's q.k * scale and exp(s - m_b) (make_v4_faithful.TRACE)
      m_blocks [P, H, blocks], l, l_sink [P, H]   running max per block, the sum before / after the sink
      sink [H]               attn_sink
      o_raw [P, H, Dh]       sparse_attn's output, before the inverse RoPE
      o [P, H, Dh]           after the inverse RoPE: wo_a's input
      wo_a [P, groups * o_lora]   wo_a's output (the grouped bf16 einsum, model.py 541): wo_b's input
      out [P, dim]           wo_b's output: the attention's output
    """
    import torch

    attn = m.layers[0].attn
    rows, active, fed = {}, [False], {}

    def keep(name, x):  # x [1, s, ...]: one row per position of this forward
        rows.setdefault(name, []).append(x.detach().clone().float()[0].cpu().numpy())

    def pre(mod, inp):
        active[0] = True
        keep("attn_in", inp[0])

    def post(mod, inp, out):
        keep("out", out)
        active[0] = False

    attn.register_forward_pre_hook(pre)
    attn.register_forward_hook(post)
    for sub, name in (("wq_a", "q_a"), ("q_norm", "qr"), ("wq_b", "q_b"), ("wkv", "kv_a"), ("kv_norm", "kv_normed")):
        # the hook copies before model.py's in-place norm / RoPE / FP8 steps change the output
        getattr(attn, sub).register_forward_hook(lambda mod, inp, out, name=name: keep(name, out))
    attn.wo_b.register_forward_pre_hook(lambda mod, inp: keep("wo_a", inp[0]))

    rotary, quant, attend = release.apply_rotary_emb, release.act_quant, release.sparse_attn

    def rotary_spy(x, freqs_cis, inverse=False):
        if active[0] and x.dim() == 4 and not inverse:
            keep("q_rope_in", x)  # q[..., -rd:] after the per-head norm
        y = rotary(x, freqs_cis, inverse)
        if active[0]:
            keep("o_rope_out" if inverse else ("q_rope_out" if x.dim() == 4 else "kv_rope_out"), x)
        return y

    def quant_spy(x, *args, **kw):
        y = quant(x, *args, **kw)
        if active[0] and kw.get("inplace", len(args) > 3 and args[3]):
            keep("kv_nope", x)  # kv[..., :-rd] after its in-place FP8 round trip
        return y

    def attend_spy(q, kv, attn_sink, topk_idxs, softmax_scale):
        if not active[0]:
            return attend(q, kv, attn_sink, topk_idxs, softmax_scale)
        fa.TRACE = {}
        try:
            o = attend(q, kv, attn_sink, topk_idxs, softmax_scale)
            trace = fa.TRACE
        finally:
            fa.TRACE = None
        keep("q", q)
        keep("idx", topk_idxs)
        keep("o_raw", o)
        for k in ("scores", "probs", "m_blocks", "l", "l_sink"):
            keep(k, trace[k])
        if q.size(1) > 1:  # the prefill: kv holds this forward's rows (a decode step reads the ring)
            fed["kv_fed"] = kv.detach().float()[0].cpu().numpy()
        fed["sink"] = attn_sink.detach().float().cpu().numpy()
        return o

    release.apply_rotary_emb, release.act_quant, release.sparse_attn = rotary_spy, quant_spy, attend_spy

    def finish():
        cat = {k: np.concatenate(v) for k, v in rows.items()}
        P, H = cat["q"].shape[:2]
        rd = cat["q_rope_in"].shape[-1]
        out = {k: cat[k] for k in ("attn_in", "q_a", "qr", "kv_a", "kv_normed", "q", "o_raw", "wo_a", "out",
                                   "scores", "probs", "m_blocks", "l", "l_sink")}
        out["idx"] = cat["idx"].astype(np.int32)
        out["q_b"] = cat["q_b"].reshape(P, H, -1)
        out["q_normed"] = np.concatenate([cat["q"][..., :-rd], cat["q_rope_in"]], axis=-1)
        out["kv_roped"] = np.concatenate([cat["kv_normed"][..., :-rd], cat["kv_rope_out"]], axis=-1)
        out["kv"] = np.concatenate([cat["kv_nope"], cat["kv_rope_out"]], axis=-1)
        out["o"] = np.concatenate([cat["o_raw"][..., :-rd], cat["o_rope_out"]], axis=-1)
        out.update(fed)
        # the spies' pieces put together must be what model.py used (warn, keep the record)
        for ok, what in ((np.array_equal(out["q"][..., -rd:], cat["q_rope_out"]), "q's RoPE output is sparse_attn's q"),
                         (np.array_equal(out["kv"][: len(fed["kv_fed"])], fed["kv_fed"]), "kv's stages assemble sparse_attn's kv")):
            print(f"attn0 check: {what}: {'yes' if ok else 'NO (the record is suspect)'}")
        return {f"attn0.{k}": v for k, v in out.items()}

    return finish


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--release-dir", required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--step", type=int, default=17)
    a = ap.parse_args()

    import torch
    import torch.nn.functional as F
    import make_v4_faithful as fa

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    fa.install_stand_ins()
    sys.path.insert(0, a.release_dir)
    import model as release  # noqa: E402

    cfg = json.load(open(os.path.join(a.ckpt, "config.json")))
    ckpt = os.path.join(a.ckpt, "model.safetensors")
    L = mr.GREEDY_PROMPT
    ids = np.load(os.path.join(a.ckpt, f"prompt_{L}.ids.npy"))
    want = [int(t) for t in np.load(os.path.join(a.ckpt, f"greedy_{L}.ids.npy"))]
    fa.GEMM_ORDER, fa.ATTN_ORDER = "block", "online"
    device = "cuda"
    for cached in (release.precompute_freqs_cis, release.get_window_topk_idxs, release.get_compress_topk_idxs):
        cached.cache_clear()
    torch.set_default_dtype(torch.bfloat16)
    torch.set_default_device(device)
    torch.manual_seed(0)
    m = release.Transformer(fa.model_args(release, cfg, max_seq_len=max(mr.PROMPTS) + mr.GREEDY_NEW + 8))
    fa.load_checkpoint(m, ckpt, device)

    taps, recording = {}, [False]
    mr.add_taps(m, taps)
    attn0 = record_attn0(release, fa, m)
    gate_json = {}

    def gate_hook(name):
        def hook(mod, inp, out):
            if not recording[0]:
                return
            x = inp[0]
            s = F.softplus(x.float() @ mod.weight.float().t()).sqrt()
            if mod.bias is not None:
                s = s + mod.bias
            taps[name + ".gate_x"] = x.float().cpu().numpy()
            taps[name + ".gate_scores"] = s.float().cpu().numpy()
            srt = torch.sort(s[-1], descending=True)
            gate_json[name] = {"experts": [int(i) for i in out[1][-1].tolist()],
                               "top4_experts": [int(i) for i in srt.indices[:4].tolist()],
                               "top4_scores": [float(v) for v in srt.values[:4].tolist()]}
        return hook

    for name, mod in m.named_modules():
        if name.endswith("ffn.gate"):
            mod.register_forward_hook(gate_hook(name))

    # The indexers' inputs at the step: q as the scores use it (after RoPE, Hadamard and the FP4
    # round trip, which the release does in place), the heads' weights with the scales folded in,
    # every compressed key so far, and the scores recomputed from them as Indexer.forward does.
    names = {id(mod): name for name, mod in m.named_modules()}
    spied = {}
    fp4_act_quant = release.fp4_act_quant

    def fp4_spy(x, *args, **kw):
        y = fp4_act_quant(x, *args, **kw)
        if recording[0] and x.dim() == 4:  # the indexer's q [b, s, heads, dim]; its keys are 3-d
            spied["q"] = x.detach().clone()
        return y

    indexer_forward = release.Indexer.forward

    def indexer_spy(self, x, qr, start_pos, offset):
        spied.clear()
        out = indexer_forward(self, x, qr, start_pos, offset)
        if recording[0]:
            name = names[id(self)]
            q = spied["q"]
            w = self.weights_proj(x) * (self.softmax_scale * self.n_heads ** -0.5)
            keys = self.kv_cache[: x.size(0), : (start_pos + x.size(1)) // self.compress_ratio]
            score = (torch.einsum("bshd,btd->bsht", q, keys).relu_() * w.unsqueeze(-1)).sum(dim=2)
            for key, v in (("index_q", q), ("index_w", w), ("index_keys_all", keys), ("index_score", score)):
                taps[f"{name}.{key}"] = v.float().cpu().numpy()
        return out

    release.fp4_act_quant = fp4_spy
    release.Indexer.forward = indexer_spy

    # Every compressed entry's stages, over the whole run (prefill and decode steps), for both
    # compressors of each layer: pooled (the norm's input: the softmax-weighted sum cast to
    # bf16), normed (its output), and for the indexer's keys roped (the Hadamard's input).
    stages = {}
    current = [None]

    def keep(name, x):
        stages.setdefault(name, []).append(x.detach().float().reshape(-1, x.size(-1)).cpu().numpy())

    def compressor_pre(name):
        def hook(mod, inp):
            current[0] = name
        return hook

    def norm_hook(name):
        def hook(mod, inp, out):
            keep(f"{name}.stage.pooled", inp[0])
            keep(f"{name}.stage.normed", out)
        return hook

    for name, mod in m.named_modules():
        if name.endswith("compressor"):
            mod.register_forward_pre_hook(compressor_pre(name))
            mod.norm.register_forward_hook(norm_hook(name))
    hadamard = sys.modules["fast_hadamard_transform"].hadamard_transform

    def hadamard_spy(x, *args, **kw):
        if x.dim() == 3 and current[0] is not None:  # a compressor's keys [b, entries, dim]; q is 4-d
            keep(f"{current[0]}.stage.roped", x)
        return hadamard(x, *args, **kw)

    sys.modules["fast_hadamard_transform"].hadamard_transform = hadamard_spy

    with torch.inference_mode():
        logits = m(torch.tensor(ids, device=device).unsqueeze(0), 0)[0].float().cpu().numpy()
        # The prefill's taps at every prompt position for the first layers (~2 MB, not committed:
        # compare_step17.py --prefill reads it), to see where plumb's prefill first parts from it.
        prefill = {f"prefill.{k}": v for k, v in taps.items() if k.split(".")[:2] in (["layers", "0"], ["layers", "1"])}
        got = [int(np.argmax(logits))]
        for s in range(1, a.step + 1):
            recording[0] = s == a.step
            if s == a.step:
                taps.clear()
            logits = m(torch.tensor([[want[s - 1]]], device=device), L + s - 1)[0].float().cpu().numpy()
            got.append(int(np.argmax(logits)))
    top = np.argsort(logits)[::-1][:5]
    summary = {
        "step": a.step, "position": L + a.step - 1, "release_greedy_so_far_matches": got == want[:a.step + 1],
        "argmax": int(np.argmax(logits)), "top5": [[int(t), float(logits[t])] for t in top],
        "gates": gate_json,
        "indexer": {k: np.asarray(v).astype(np.int64).ravel().tolist() for k, v in taps.items()
                    if k.endswith("attn.indexer") or k.endswith("attn.indexer.0")},
    }
    os.makedirs(a.out, exist_ok=True)
    taps.update({k: np.concatenate(v) for k, v in stages.items()})
    np.savez_compressed(os.path.join(a.out, f"step{a.step}.npz"), **taps)
    np.savez_compressed(os.path.join(a.out, f"step{a.step}_prefill.npz"), **prefill)
    json.dump(summary, open(os.path.join(a.out, f"step{a.step}.json"), "w"), indent=1)
    print(json.dumps(summary)[:3000])
    np.savez_compressed(os.path.join(a.out, f"step{a.step}_attn0.npz"), **{"attn0.prompt_len": np.int64(L)}, **attn0())


if __name__ == "__main__":
    main()

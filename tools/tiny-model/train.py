#!/usr/bin/env python3
"""Trains models/tiny-kjv, a small DeepSeek-V4-architecture model, with HF transformers'
`DeepseekV4ForCausalLM` (so the architecture is exactly the reference's), exports it in the
release's checkpoint layout and records HF goldens for it. Runs on the GPU machine (one H200,
torch 2.11, transformers 5.17, tokenizers); see tools/tiny-model/README.md for the command.

Pipeline (one process, about 3.5 minutes on the H200, 2.5 of them training):
  1. byte-level BPE tokenizer (HF `tokenizers`) with DeepSeek V3/V4's pre-tokenizer and special
     tokens, trained on the training split;
  2. training: AdamW, bf16 autocast, random 512-token windows each starting with BOS, plus 10% of
     rows of verse-lookup chat samples (`<｜User｜>John 3:16<｜Assistant｜></think>verse<｜end▁of▁sentence｜>`);
     the lightning indexer learns by KL to the main attention (dense warm-up, then sparse top-k,
     as DeepSeek trains it: its inputs are detached, it gets no LM gradient); learned routers are
     balanced with DeepSeek's bias update (noaux_tc); the last 25% of steps are quantization-aware
     (FP8 / FP4 fake quantization with a straight-through gradient);
  3. perplexity of the held-out text in fp32 (TF32 off): trained weights, then exported weights;
  4. export (tiny_v4.write_model_dir) and goldens (goldens.py) from the exported weights.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiny_v4 as tv  # noqa: E402

import make_v4_fixtures as mf  # noqa: E402  (tools/golden, on the path tiny_v4 sets)
import v4_hf_names  # noqa: E402
T0 = time.time()


def log(msg):
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


# ----------------------------------------------------------------------------------------------
# Data and tokenizer
# ----------------------------------------------------------------------------------------------

def line_chunks(text, n=200):
    """Chunks of n whole lines: `tokenizers` trains / encodes them in parallel. Only a newline run
    that straddles two chunks is split differently from a whole-text encode."""
    lines = text.splitlines(keepends=True)
    return ["".join(lines[i:i + n]) for i in range(0, len(lines), n)]


def train_tokenizer(texts, vocab_size):
    from tokenizers import AddedToken, Tokenizer, pre_tokenizers, trainers

    tok = Tokenizer.from_str(json.dumps(tv.tokenizer_skeleton()))
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False,
        special_tokens=[AddedToken(s, special=True, normalized=False) for s in tv.SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    assert tok.get_vocab_size() == vocab_size, f"tokenizer has {tok.get_vocab_size()} entries, want {vocab_size}"
    for i, s in enumerate(tv.SPECIAL_TOKENS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    return tok


def verses(kjv_text):
    """("Book c:v", text) for every verse of the training chapters."""
    for block in kjv_text.split("\n\n"):
        lines = block.strip("\n").split("\n")
        for line in lines[1:]:
            v, text = line.split(" ", 1)
            yield f"{lines[0]}:{v}", text


def chat_stream(tok, kjv_text, rng):
    """Verse lookup conversations in V4's chat (non-thinking) format, one after the other:
    BOS <｜User｜>{ref}<｜Assistant｜></think>{verse}EOS."""
    vs = list(verses(kjv_text))
    order = rng.permutation(len(vs))
    refs = tok.encode_batch([vs[i][0] for i in order], add_special_tokens=False)
    texts = tok.encode_batch([vs[i][1] for i in order], add_special_tokens=False)
    user, assistant, end_think = (tok.token_to_id(s) for s in ("<｜User｜>", "<｜Assistant｜>", "</think>"))
    out = []
    for r, t in zip(refs, texts):
        out += [tv.BOS, user] + r.ids + [assistant, end_think] + t.ids + [tv.EOS]
    return np.array(out, dtype=np.int64)


def windows(ids, ctx):
    """Held-out protocol: consecutive non-overlapping windows of ctx tokens (the last one shorter)."""
    return [ids[i:i + ctx] for i in range(0, len(ids), ctx)]


# ----------------------------------------------------------------------------------------------
# Model, hooks, QAT
# ----------------------------------------------------------------------------------------------

class State:
    capture = False  # record routing counts / attention / indexer tensors (training forwards only)

    def __init__(self):
        self.counts, self.attn, self.scores, self.picks = {}, {}, {}, {}


def install_hooks(model, c, st):
    import torch
    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as M

    # The indexer is trained only by its KL loss (DeepSeek V3.2 / V4): detach its inputs so that
    # loss does not reach the rest of the model. Numerically a no-op.
    if not getattr(M.DeepseekV4Indexer, "_plumb_detached", False):
        orig = M.DeepseekV4Indexer.forward

        def forward(self, hidden_states, q_residual, *a, **k):
            return orig(self, hidden_states.detach(), q_residual.detach(), *a, **k)

        M.DeepseekV4Indexer.forward = forward
        M.DeepseekV4Indexer._plumb_detached = True

    routers, indexers = [], []
    for name, mod in model.named_modules():
        parts = name.split(".")
        li = int(parts[2]) if len(parts) > 2 and parts[1] == "layers" else None
        if isinstance(mod, M.DeepseekV4TopKRouter):
            routers.append(mod)

            def hook(m, a, out, st=st):
                if st.capture:
                    cnt = torch.bincount(out[2].reshape(-1), minlength=m.num_experts).float()
                    st.counts[m] = st.counts.get(m, 0) + cnt
            mod.register_forward_hook(hook)
        elif isinstance(mod, M.DeepseekV4Attention) and c["compress_ratios"][li] == 4:
            mod.register_forward_hook(keeper(st, "attn", li, lambda out: out[1]))
        elif isinstance(mod, M.DeepseekV4IndexerScorer):
            mod.register_forward_hook(keeper(st, "scores", li, lambda out: out))
        elif isinstance(mod, M.DeepseekV4Indexer):
            indexers.append(mod)
            mod.register_forward_hook(keeper(st, "picks", li, lambda out: out))
    return routers, indexers


def keeper(st, field, li, pick):
    def hook(mod, args, out):  # must return None: a forward hook's return value replaces the output
        if st.capture:
            getattr(st, field)[li] = pick(out)
    return hook


def indexer_kl(st, S):
    """KL(main attention over the compressed entries the indexer picked || softmax of the
    indexer's scores over the same entries), averaged over CSA layers and query rows."""
    import torch

    losses = []
    for li, probs in st.attn.items():
        C = probs.shape[-1] - S
        if C <= 0 or li not in st.scores:
            continue
        p = probs[..., S:].detach().float().sum(1)  # [B, S, C], summed over heads
        idx = st.picks[li]
        sel = torch.zeros(*idx.shape[:2], C + 1, dtype=torch.bool, device=idx.device)
        sel.scatter_(-1, torch.where(idx >= 0, idx, C), True)
        sel = sel[..., :C]
        p = p * sel
        z = p.sum(-1, keepdim=True)
        rows = z.squeeze(-1) > 0
        pn = p / z.clamp_min(1e-30)
        # finite fill (not -inf): a row with no pick must not give NaN gradients
        logq = torch.log_softmax(st.scores[li].float().masked_fill(~sel, -1e9), dim=-1).masked_fill(~sel, 0.0)
        kl = (torch.special.xlogy(pn, pn) - pn * logq).sum(-1)
        if rows.any():
            losses.append(kl[rows].mean())
    return torch.stack(losses).mean() if losses else None


def qat_targets(model):
    """(module, attribute, kind) for every weight the export stores as FP8 or FP4."""
    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as M

    fp8 = {h[:-len(".weight")] for n, h in v4_hf_names.LAYER_RENAMES if tv.native_kind("layers.0." + n) == "fp8"}
    out = []
    for name, mod in model.named_modules():
        if isinstance(mod, M.DeepseekV4Experts):
            out += [(mod, "gate_up_proj", "fp4"), (mod, "down_proj", "fp4")]
        elif name.startswith("model.layers.") and name.count(".") >= 3 and name.split(".", 3)[3] in fp8:
            out.append((mod, "weight", "fp8"))
    return out


def qat(targets, on):
    import torch
    from torch.nn.utils import parametrize

    class FakeQuant(torch.nn.Module):
        def __init__(self, kind):
            super().__init__()
            self.kind = kind

        def forward(self, w):  # straight-through: quantized value, identity gradient
            q = tv.fq_fp4_row32(torch, w.detach()) if self.kind == "fp4" else tv.fq_fp8_block(torch, w.detach())
            return w + (q - w.detach())

    for mod, attr, kind in targets:
        if on:
            parametrize.register_parametrization(mod, attr, FakeQuant(kind))
        else:
            parametrize.remove_parametrizations(mod, attr, leave_parametrized=False)


# ----------------------------------------------------------------------------------------------
# Perplexity
# ----------------------------------------------------------------------------------------------

def perplexity(model, ids, ctx, fp32=True, batch=64):
    """exp(mean NLL) over all held-out tokens; each window of `ctx` tokens (non-overlapping, the
    last one shorter) is scored on its own as [BOS] + window, every window token predicted."""
    import torch

    if fp32:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    total, count = 0.0, 0
    ws = windows(ids, ctx)
    full = [w for w in ws if len(w) == ctx]
    groups = [full[i:i + batch] for i in range(0, len(full), batch)] + [[w] for w in ws if len(w) < ctx]
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=not fp32):
        for g in groups:
            x = torch.tensor([[tv.BOS] + list(w) for w in g], device="cuda")
            lg = model(input_ids=x, use_cache=False).logits[:, :-1].float()
            nll = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), x[:, 1:].reshape(-1), reduction="sum")
            total += float(nll.double())
            count += x.shape[0] * (x.shape[1] - 1)
    assert count == len(ids)
    return math.exp(total / count), total, count


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=".device/corpus")
    ap.add_argument("--heldout", default="models/tiny-kjv")
    ap.add_argument("--out", required=True, help="folder for models/, golden/, train/")
    ap.add_argument("--train-seconds", type=float, default=330)
    ap.add_argument("--max-epochs", type=float, default=4.5, help="passes over the main text; 12 overfits badly "
                    "(held-out ppl 73.6 instead of 32.8, see models/tiny-kjv/README.md)")
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--chat-frac", type=float, default=0.1)
    ap.add_argument("--dense-frac", type=float, default=0.15, help="steps with the indexer dense (all entries)")
    ap.add_argument("--qat-frac", type=float, default=0.25, help="last steps with FP8/FP4 fake quantization")
    ap.add_argument("--kl-coef", type=float, default=0.1)
    ap.add_argument("--bias-rate", type=float, default=5e-3, help="noaux_tc bias update per step (DeepSeek: 1e-3 "
                    "with far larger batches; a short run needs faster balancing)")
    ap.add_argument("--ctx", type=int, default=256, help="held-out perplexity window")
    ap.add_argument("--smoke", action="store_true", help="pipeline test: no near-tie gates on golden prompts")
    args = ap.parse_args()

    import torch
    import transformers
    from torch.nn.utils import parametrize

    import goldens

    c = dict(tv.CONFIG)
    rng = np.random.default_rng(c["seed"])
    torch.manual_seed(c["seed"])
    env = {"torch": torch.__version__, "transformers": transformers.__version__, "numpy": np.__version__,
           "device": torch.cuda.get_device_name(0)}
    import tokenizers
    env["tokenizers"] = tokenizers.__version__
    log(f"env {env}")
    model_dir = os.path.join(args.out, "models", tv.NAME)
    train_dir = os.path.join(args.out, "train")
    os.makedirs(train_dir, exist_ok=True)

    # -- data + tokenizer ---------------------------------------------------------------------
    read = lambda p: open(p, encoding="utf-8").read()
    kjv, zh = read(os.path.join(args.corpus, "kjv_train.txt")), read(os.path.join(args.corpus, "zh_train.txt"))
    held, held_zh = read(os.path.join(args.heldout, "heldout.txt")), read(os.path.join(args.heldout, "heldout-zh.txt"))
    chunks = line_chunks(kjv) + line_chunks(zh)
    tok = train_tokenizer(chunks, c["vocab_size"])
    log(f"tokenizer trained: {tok.get_vocab_size()} entries")
    main_ids = np.array([i for e in tok.encode_batch(chunks, add_special_tokens=False) for i in e.ids], dtype=np.int64)
    held_ids = np.array(tok.encode(held, add_special_tokens=False).ids, dtype=np.int64)
    held_zh_ids = np.array(tok.encode(held_zh, add_special_tokens=False).ids, dtype=np.int64)
    assert tok.decode(held_ids.tolist(), skip_special_tokens=False) == held, "tokenizer does not round-trip"
    assert tok.decode(held_zh_ids.tolist(), skip_special_tokens=False) == held_zh
    chat_ids = chat_stream(tok, kjv, rng)
    log(f"tokens: train {len(main_ids)} (bytes/token {(len(kjv) + len(zh.encode())) / len(main_ids):.2f}), "
        f"chat {len(chat_ids)}, held-out {len(held_ids)} (zh {len(held_zh_ids)})")

    # -- model --------------------------------------------------------------------------------
    cfg = mf.make_hf_config(c, log)
    model = mf.build_hf_model(cfg, log).train()
    with torch.no_grad():
        for i in range(c["num_hash_layers"]):  # a fixed random token -> experts table (HF inits zeros)
            t = np.stack([rng.permutation(c["n_routed_experts"])[:c["num_experts_per_tok"]] for _ in range(c["vocab_size"])])
            model.model.layers[i].mlp.gate.tid2eid.copy_(torch.from_numpy(t))
    for n, p in model.named_parameters():
        assert torch.isfinite(p).all(), f"{n} not initialised"
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f}M parameters")
    st = State()
    routers, indexers = install_hooks(model, c, st)
    targets = qat_targets(model)
    log(f"hooks: {len(routers)} learned routers, {len(indexers)} indexers, {len(targets)} QAT targets")

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    torch.backends.cuda.matmul.allow_tf32 = True
    gmain = torch.from_numpy(main_ids).cuda()
    gchat = torch.from_numpy(chat_ids).cuda()
    B, S = args.batch, args.seq
    n_chat = int(round(B * args.chat_frac))
    ar = torch.arange(S, device="cuda")

    def batch():
        om = torch.randint(0, len(gmain) - S, (B - n_chat,), device="cuda")
        x = gmain[om[:, None] + ar[None, :S - 1]]
        x = torch.cat([torch.full((B - n_chat, 1), tv.BOS, device="cuda"), x], 1)
        if n_chat:
            oc = torch.randint(0, len(gchat) - S, (n_chat,), device="cuda")
            x = torch.cat([x, gchat[oc[:, None] + ar[None]]], 0)
        return x

    def set_dense(dense):
        for m in indexers:
            m.index_topk = 1 << 30 if dense else c["index_topk"]

    def val_loss():
        model.eval()
        ppl, _, _ = perplexity(model, held_ids, args.ctx, fp32=False)
        torch.backends.cuda.matmul.allow_tf32 = True
        model.train()
        return math.log(ppl)

    # -- training -----------------------------------------------------------------------------
    tokens_per_step = B * (S - 1)
    max_by_epochs = int(args.max_epochs * len(main_ids) / ((B - n_chat) * (S - 1)))
    total = min(args.max_steps, max_by_epochs)
    rows, phase, dense_end, qat_start = [], "dense", None, None
    notes = {}
    set_dense(True)
    t_train = time.time()
    step, t_mark = 0, None
    while step < total:
        if step == 20:  # fix the schedule from the measured speed (QAT steps cost ~15% more)
            torch.cuda.synchronize()
            dt = (time.time() - t_mark) / 15
            by_time = int(args.train_seconds / (dt * (1 + 0.15 * args.qat_frac)))
            total = max(40, min(total, by_time))
            notes["step_seconds"] = dt
            log(f"{dt * 1000:.0f} ms/step ({tokens_per_step / dt / 1e3:.0f}k tok/s): {total} steps "
                f"(epoch cap {max_by_epochs}, time cap {by_time})")
        if step == 5:
            torch.cuda.synchronize()
            t_mark = time.time()
        if dense_end is None and step >= args.dense_frac * total and step >= 20:
            dense_end, phase = step, "sparse"
            set_dense(False)
            log(f"step {step}: indexer sparse (top-{c['index_topk']})")
        if qat_start is None and step >= (1 - args.qat_frac) * total and step >= 20:
            model.eval()
            ppl_plain = perplexity(model, held_ids, args.ctx)[0]
            qat(targets, True)
            ppl_ptq = perplexity(model, held_ids, args.ctx)[0]
            torch.backends.cuda.matmul.allow_tf32 = True
            model.train()
            notes["before_qat"] = {"step": step, "ppl_fp32": ppl_plain, "ppl_fake_quant_ptq": ppl_ptq}
            qat_start, phase = step, "qat"
            log(f"step {step}: QAT on; held-out ppl fp32 {ppl_plain:.3f}, with PTQ fake quant {ppl_ptq:.3f}")
        lr = args.lr * min(1.0, (step + 1) / args.warmup)
        if step >= args.warmup:
            prog = (step - args.warmup) / max(1, total - args.warmup)
            lr = args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, prog))))
        for g in opt.param_groups:
            g["lr"] = lr
        x = batch()
        st.capture = True
        st.counts, st.attn, st.scores, st.picks = {}, {}, {}, {}
        with torch.autocast("cuda", dtype=torch.bfloat16), parametrize.cached():
            out = model(input_ids=x, labels=x, use_cache=False)
            kl = indexer_kl(st, S)
            loss = out.loss + (args.kl_coef * kl if kl is not None else 0.0)
        st.capture = False
        st.attn, st.scores, st.picks = {}, {}, {}
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():  # noaux_tc: nudge the bias of over-/under-loaded experts
            for m, cnt in st.counts.items():
                m.e_score_correction_bias += args.bias_rate * torch.sign(cnt.mean() - cnt)
        step += 1
        if step % 10 == 0 or step == total:
            row = {"step": step, "tokens": step * tokens_per_step, "seconds": round(time.time() - t_train, 2),
                   "lr": lr, "phase": phase, "loss": float(out.loss.detach()), "indexer_kl": float(kl.detach()) if kl is not None else None,
                   "grad_norm": float(gn), "val_loss": None}
            if (step > 20 and step % max(10, (total // 25) // 10 * 10) == 0) or step == total:
                row["val_loss"] = val_loss()
                imb = [float(cnt.max() / cnt.mean()) for cnt in st.counts.values()]
                log(f"step {step}/{total} loss {row['loss']:.4f} kl {row['indexer_kl']} val {row['val_loss']:.4f} "
                    f"lr {lr:.2e} gn {row['grad_norm']:.2f} max-load/mean {max(imb):.2f}")
            rows.append(row)
    train_seconds = time.time() - t_train
    log(f"trained {step} steps in {train_seconds:.0f} s, peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
    qat(targets, False)
    model.eval()

    # -- perplexity (a): trained weights, fp32 -------------------------------------------------
    ppl_a = perplexity(model, held_ids, args.ctx)
    ppl_a_zh = perplexity(model, held_zh_ids, args.ctx)
    log(f"held-out ppl, trained fp32 weights: {ppl_a[0]:.4f} (zh {ppl_a_zh[0]:.3f})")

    # -- export + perplexity (b) ----------------------------------------------------------------
    sd = model.state_dict()
    hf = {k: (v.detach().float() if v.is_floating_point() else v.detach()).cpu().numpy() for k, v in sd.items()}
    native = tv.quantize_native(tv.hf_to_native_values(c, hf))
    total_bytes = tv.write_model_dir(c, native, model_dir, tokenizer_json=tok.to_str(pretty=True))
    log(f"exported {len(native.stored)} tensors, {total_bytes / 2**20:.2f} MiB of tensor data")
    deq = tv.read_model_dir(model_dir)

    class _N:
        values = deq
    state, _ = v4_hf_names.native_to_hf_state(c, _N, list(sd.keys()))
    assert set(state) == set(sd), "name map not 1:1"
    model.load_state_dict({k: torch.from_numpy(np.array(v)).to(sd[k].dtype) for k, v in state.items()},
                          strict=True)
    ppl_b = perplexity(model, held_ids, args.ctx)
    ppl_b_zh = perplexity(model, held_zh_ids, args.ctx)
    log(f"held-out ppl, exported FP8/FP4 weights: {ppl_b[0]:.4f} (zh {ppl_b_zh[0]:.3f}); "
        f"quantization costs {100 * (ppl_b[0] / ppl_a[0] - 1):+.2f}%")

    metrics = {
        "env": env, "config": {k: v for k, v in c.items()}, "parameters": n_params,
        "tokens": {"train": int(len(main_ids)), "chat": int(len(chat_ids)), "heldout": int(len(held_ids)),
                   "heldout_zh": int(len(held_zh_ids))},
        "training": {"steps": step, "seconds": train_seconds, "batch": B, "seq": S, "chat_rows": n_chat,
                     "tokens_seen": step * tokens_per_step,
                     "epochs_of_main_text": step * (B - n_chat) * (S - 1) / len(main_ids),
                     "dense_indexer_until_step": dense_end, "qat_from_step": qat_start, "lr": args.lr,
                     "final_train_loss": rows[-1]["loss"], "final_val_loss_bf16": rows[-1]["val_loss"], **notes},
        "perplexity": {"context": args.ctx, "definition": goldens.PPL_DEFINITION,
                       "trained_fp32": {"ppl": ppl_a[0], "nll_sum": ppl_a[1], "tokens": ppl_a[2]},
                       "exported_fp8_fp4": {"ppl": ppl_b[0], "nll_sum": ppl_b[1], "tokens": ppl_b[2]},
                       "relative_increase": ppl_b[0] / ppl_a[0] - 1,
                       "zh_trained_fp32": ppl_a_zh[0], "zh_exported": ppl_b_zh[0]},
        "export_tensor_bytes": total_bytes, "argv": sys.argv,
    }
    # -- goldens (exported weights, fp32, TF32 off) ----------------------------------------------
    metrics["goldens"] = goldens.make(model, tok, c, held, held_ids, ppl_b, args, os.path.join(args.out, "golden", tv.NAME),
                                      model_dir, log, env)
    tv.dump_json(os.path.join(train_dir, "metrics.json"), metrics)
    goldens.write_curve(rows, train_dir, dense_end, qat_start)
    log("done")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Runs ON the GPU machine (scripts/device/check.sh, STEPS=hf): the GPU backend against the HF
transformers goldens committed under tests/data/golden (made by tools/golden/make_v*_fixtures.py):
`plumb logits --backend cuda --numerics reference` on every golden prompt (max |diff| / max |ref|
<= 1e-4 and the same argmax at every position, the criterion the CPU tests use) and `plumb generate
--backend cuda --greedy` on the greedy prompts (token for token). Prints one line per check and
exits 1 if any fails."""
import json, os, subprocess, sys, tempfile
import numpy as np

GOLDEN = "tests/data/golden"
FIXTURES = ["v4/tiny-a", "v4/tiny-b", "v4/tiny-kjv", "v3/tiny-a", "v3/tiny-b"]
BACKEND = os.environ.get("PLUMB_BACKEND", "cuda")
MODEL = {"v4/tiny-kjv": "models/tiny-kjv"}  # golden dirs without their own checkpoint


def plumb(*args):
    r = subprocess.run(["plumb", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"plumb {' '.join(args)} failed: {r.stderr.strip()}")


def main():
    tmp = tempfile.mkdtemp()
    failed = 0
    for fx in FIXTURES:
        d = os.path.join(GOLDEN, fx)
        model = MODEL.get(fx, d)
        meta = json.load(open(os.path.join(d, "meta.json")))
        for n in meta["prompt_lengths"]:
            ids = os.path.join(d, f"prompt_{n}.ids.npy")
            out = os.path.join(tmp, "logits.npy")
            plumb("logits", "--model", model, "--backend", BACKEND, "--numerics", "reference", "--ids", ids, "--out", out)
            got, ref = np.load(out).reshape(-1, np.load(os.path.join(d, f"prompt_{n}.logits.npy")).shape[-1]), np.load(os.path.join(d, f"prompt_{n}.logits.npy"))
            ref = ref.reshape(got.shape)
            rel = float(np.abs(got - ref).max() / np.abs(ref).max())
            mism = int((got.argmax(-1) != ref.argmax(-1)).sum())
            ok = rel <= 1e-4 and mism == 0
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} logits {fx} prompt {n}: max|diff|/max|ref| {rel:.2e}, argmax mismatches {mism}")
        g = meta["greedy"]
        for n in g["prompts"]:
            ids = os.path.join(d, f"prompt_{n}.ids.npy")
            out = os.path.join(tmp, "greedy.npy")
            plumb("generate", "--model", model, "--backend", BACKEND, "--numerics", "reference", "--ids", ids, "--greedy",
                  "--ignore-eos", "--max-new-tokens", str(g["new_tokens"]), "--out-ids", out)
            got, ref = np.load(out).astype(np.int64), np.load(os.path.join(d, f"greedy_{n}.ids.npy")).astype(np.int64)
            same = got.shape == ref.shape and bool((got == ref).all())
            first = next((i for i in range(min(len(got), len(ref))) if got[i] != ref[i]), None)
            failed += not same
            print(f"{'ok  ' if same else 'FAIL'} greedy {fx} prompt {n}: {len(got)} tokens"
                  + ("" if same else f", first difference at {first}"))
    print(f"hf_check: {failed} failing")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

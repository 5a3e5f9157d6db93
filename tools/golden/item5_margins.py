#!/usr/bin/env python3
"""Issue 13 item 5: where plumb's `reference` logits leave HF's on a long prompt, and how close the
discrete choices (indexer top-k, router top-k) are to a tie there.

    python3 tools/golden/item5_margins.py DIR PLUMB_LOGITS.npy

DIR holds config.json, model.safetensors, prompt_<L>.ids.npy and HF's prompt_<L>.logits.npy
(make_v4_release.py --item5-checkpoint / --hf-item5). The margins come from
check_v4_fixtures.py's float64 forward (no shared code with plumb or HF): the indexer's k-th
minus (k+1)-th score relative to the row's largest |score|, and the router's k-th minus (k+1)-th
biased score. A margin below a few f32 ulps (~1e-6) is a tie that any f32 implementation may
resolve either way.
"""
import glob
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_v4_fixtures as ref  # noqa: E402


def main():
    d, plumb_path = sys.argv[1], sys.argv[2]
    cfg = __import__("json").load(open(os.path.join(d, "config.json")))
    ids_path = glob.glob(os.path.join(d, "prompt_*.ids.npy"))[0]
    ids = np.load(ids_path)
    hf = np.load(ids_path.replace(".ids.npy", ".logits.npy")).astype(np.float64)
    pl = np.load(plumb_path).astype(np.float64).reshape(hf.shape)
    taps = {}
    f64 = ref.forward(ref.load(os.path.join(d, "model.safetensors")), cfg, ids, taps)
    scale = np.abs(hf).max()
    for name, got in (("plumb", pl), ("float64", f64)):
        rel = np.abs(got - hf).max(-1) / scale
        bad = np.nonzero(rel > 1e-4)[0]
        print(f"{name} vs HF: max rel {rel.max():.2e} at position {int(rel.argmax())}; positions above 1e-4: "
              f"{bad.tolist()}; argmax differs at {np.nonzero(got.argmax(-1) != hf.argmax(-1))[0].tolist()}")
    rel = np.abs(pl - hf).max(-1) / scale
    for t in np.argsort(-rel)[:3]:
        print(f"position {t}: plumb vs HF {rel[t]:.2e}")
        for k, v in taps.items():
            if k.endswith("indexer_gap") and t in v:
                print(f"  {k}: {v[t]:.3e}")
            elif k.endswith("router_gap"):
                print(f"  {k}: {v[t]:.3e}")
    for k, v in taps.items():
        if k.endswith("indexer_gap"):
            ts = np.array(sorted(v)), None
            g = np.array([v[t] for t in sorted(v)])
            order = np.argsort(g)[:3]
            print(f"{k}: smallest {[(int(ts[0][i]), float(g[i])) for i in order]}")
        elif k.endswith("router_gap"):
            order = np.argsort(v)[:3]
            print(f"{k}: smallest {[(int(i), float(v[i])) for i in order]}")


if __name__ == "__main__":
    main()

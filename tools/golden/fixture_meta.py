"""meta.json helpers shared by the V4 and V3 fixture generators (numpy only)."""
from __future__ import annotations

import numpy as np


def json_clean(x):
    """NaN / inf -> None so that meta.json is strict JSON."""
    if isinstance(x, dict):
        return {k: json_clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_clean(v) for v in x]
    if isinstance(x, (np.integer, np.bool_)):
        return x.item()
    if isinstance(x, (float, np.floating)):
        return float(x) if np.isfinite(x) else None
    return x


def logit_stats(lg):
    s = np.sort(lg, axis=-1)
    gap = s[:, -1] - s[:, -2]
    std = lg.std(axis=-1)
    return gap, std

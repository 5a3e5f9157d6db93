#!/usr/bin/env python3
"""Summarises an Nsight Systems sqlite export of plumb_bench's decode steps (scripts/device/profile.sh).

The decode phase is found as the last `steps` occurrences of the step's first kernel pattern:
plumb_bench runs its timed steps last, so the final `steps` x (kernels per step) kernels are the
decode steps. Kernels per step is found from the repeat period of the kernel-name sequence at the
end of the trace. Prints per-kernel totals per step, launches per step, GPU busy per step, and
the wall time per step (first kernel start to last kernel end / steps).
"""
import argparse
import sqlite3
from collections import defaultdict


def period(names, max_p=5000):
    # smallest p such that the last 2p names repeat with period p
    n = len(names)
    for p in range(1, min(max_p, n // 2) + 1):
        if names[n - p:] == names[n - 2 * p:n - p]:
            return p
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("db")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=1)
    a = ap.parse_args()
    con = sqlite3.connect(a.db)
    rows = con.execute(
        "SELECT k.start, k.end, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON k.shortName = s.id ORDER BY k.start").fetchall()
    names = [r[2] for r in rows]
    p = period(names)
    if p is None:
        print("no repeating decode step found in the trace"); return
    steps = 1
    while len(rows) >= (steps + 1) * p and names[len(rows) - (steps + 1) * p:len(rows) - steps * p] == names[len(rows) - p:]:
        steps += 1
    steps = min(steps, a.steps)
    sel = rows[len(rows) - steps * p:]
    wall = (sel[-1][1] - sel[0][0]) / steps / 1e6
    busy = sum(e - s for s, e, _ in sel) / steps / 1e6
    per = defaultdict(lambda: [0, 0.0])
    for s, e, n in sel:
        per[n][0] += 1
        per[n][1] += (e - s) / 1e6
    print(f"batch {a.batch}: {p} kernels per step, {steps} steps; wall {wall:.3f} ms/step, GPU busy {busy:.3f} ms/step ({100 * busy / wall:.0f}%)")
    # memcpys in the same window
    t0, t1 = sel[0][0], sel[-1][1]
    try:
        mc = con.execute("SELECT count(*), sum(end-start), sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE start >= ? AND end <= ?", (t0, t1)).fetchone()
        print(f"memcpy per step: {mc[0] / steps:.1f} copies, {(mc[1] or 0) / steps / 1e6:.3f} ms, {(mc[2] or 0) / steps:.0f} bytes")
        ms = con.execute("SELECT count(*), sum(end-start) FROM CUPTI_ACTIVITY_KIND_MEMSET WHERE start >= ? AND end <= ?", (t0, t1)).fetchone()
        print(f"memset per step: {ms[0] / steps:.1f}, {(ms[1] or 0) / steps / 1e6:.3f} ms")
        sync = con.execute("SELECT count(*), sum(end-start) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION WHERE start >= ? AND end <= ?", (t0, t1)).fetchone()
        print(f"synchronizations per step: {sync[0] / steps:.1f}, {(sync[1] or 0) / steps / 1e6:.3f} ms")
    except sqlite3.Error as e:
        print(f"(memcpy/sync tables: {e})")
    # host API time per step (launch overhead)
    try:
        api = con.execute("SELECT s.value, count(*), sum(r.end-r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON r.nameId = s.id "
                          "WHERE r.start >= ? AND r.end <= ? GROUP BY s.value ORDER BY 3 DESC LIMIT 8", (t0, t1)).fetchall()
        for n, c, t in api:
            print(f"  api {n}: {c / steps:.1f}/step, {t / steps / 1e6:.3f} ms/step")
    except sqlite3.Error as e:
        print(f"(runtime table: {e})")
    print("kernel | launches/step | ms/step | us/launch")
    for n, (c, t) in sorted(per.items(), key=lambda kv: -kv[1][1])[:30]:
        print(f"{n[:70]} | {c / steps:.1f} | {t / steps:.4f} | {1000 * t / c:.1f}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Plots a benchmark record as one PNG: output throughput vs concurrency and latency CDFs.

Reads either record:
  plumb bench serve --result-json: {"runs": [{"max_concurrency", "summary", "requests", "samples"}]}
  plumb_engine_bench --json:       {"concurrency": [{...}], "schedulers": [{...}]} (with "per_request")
A soak record (bench serve --duration) adds the server's memory and running streams over time.

Usage: tools/plot_bench.py RECORD.json --out FILE.png [--title TEXT]
Needs python3-matplotlib (scripts/install-deps.sh --plots).
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def cdf(ax, values, label):
    values = sorted(v for v in values if v is not None)
    if not values:
        return
    n = len(values)
    ax.step(values, [(i + 1) / n for i in range(n)], where="post", label=label)


def throughput_panel(ax, points, title):
    """points: [(concurrency, output tok/s, ttft p50 ms, tpot p50 ms)]"""
    points = sorted(points)
    xs = [p[0] for p in points]
    ax.plot(xs, [p[1] for p in points], "o-", color="C0")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel("max concurrency")
    ax.set_ylabel("output tokens/s", color="C0")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    twin = ax.twinx()
    twin.plot(xs, [p[2] for p in points], "s--", color="C1", label="TTFT p50")
    twin.plot(xs, [p[3] for p in points], "^--", color="C2", label="TPOT p50")
    twin.set_ylabel("ms")
    twin.legend(loc="upper left", fontsize=8)


def cdf_panel(ax, series, xlabel, title):
    for label, values in series:
        cdf(ax, values, label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of requests")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)


def plot_serve(record, title):
    runs = record["runs"]
    soak = any(run.get("samples") for run in runs)
    panels = 4 if soak else 3
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4))
    label = lambda run: f"C={run['max_concurrency'] or 'inf'}"  # noqa: E731
    points = [(run["max_concurrency"] or 1 << 12, run["summary"]["output_throughput"], run["summary"]["ttft_ms"]["p50"],
               run["summary"]["tpot_ms"]["p50"]) for run in runs]
    throughput_panel(axes[0], points, "throughput vs concurrency")
    cdf_panel(axes[1], [(label(r), r["requests"]["ttft_ms"]) for r in runs], "TTFT (ms)", "TTFT CDF")
    cdf_panel(axes[2], [(label(r), r["requests"]["e2e_ms"]) for r in runs], "end-to-end latency (ms)", "E2E latency CDF")
    if soak:
        ax = axes[3]
        for run in runs:
            samples = run.get("samples") or []
            ts = [s["t_s"] for s in samples]
            if samples and "server_rss_mib" in samples[0]:
                ax.plot(ts, [s["server_rss_mib"] for s in samples], "o-", label=f"{label(run)} server RSS (MiB)")
            ax.plot(ts, [s.get("plumb_requests_running", 0) for s in samples], "x--", label=f"{label(run)} running")
        ax.set_xlabel("time (s)")
        ax.set_title("soak: server memory and running requests")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title or f"plumb bench serve: {record.get('model', '')} ({record.get('dataset', '')} dataset)")
    return fig


def plot_engine(record, title):
    runs = record.get("concurrency", [])
    schedulers = record.get("schedulers", [])
    panels = 3 if schedulers else 2
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4))
    points = [(r["concurrency"], r["output_tokens_per_s"], r["ttft_ms"]["p50"], r["tpot_ms"]["p50"]) for r in runs]
    throughput_panel(axes[0], points, "engine: throughput vs concurrency")
    cdf_panel(axes[1], [(f"C={r['concurrency']}", r.get("per_request", {}).get("latency_ms", [])) for r in runs],
              "end-to-end latency (ms)", "latency CDF by concurrency")
    if schedulers:
        cdf_panel(axes[2], [(s["scheduler"], s.get("per_request", {}).get("latency_ms", [])) for s in schedulers],
                  "end-to-end latency (ms)", "mixed workload: FCFS vs SRPT")
    fig.suptitle(title or f"plumb_engine_bench: {record.get('model', '')} ({record.get('backend', '')})")
    return fig


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("record")
    parser.add_argument("--out", required=True)
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    try:
        with open(args.record) as f:
            record = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"plot_bench.py: {args.record}: {e}")
    if "runs" in record:
        fig = plot_serve(record, args.title)
    elif "concurrency" in record:
        fig = plot_engine(record, args.title)
    else:
        sys.exit(f"plot_bench.py: {args.record}: neither a bench serve record (runs) nor an engine bench record (concurrency)")
    fig.tight_layout()
    fig.savefig(args.out, dpi=80)
    print(f"plot_bench.py: wrote {args.out}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""ctest dist_serve_*: `mpirun -np 2 plumb serve --tp 2 | --ep 2` answers exactly as one process.

Rank 0 serves HTTP and runs the engine; rank 1 follows its model calls (runtime/model_group.h).
The same requests (greedy, seeded sampling with logprobs, a streamed chat, a long prompt twice
(the second from the prefix cache), a client that leaves mid-stream, four at once) go to
a one-process server and to each layout; the answers must be identical but for ids and times.
Then SIGTERM to rank 0 drains it and ends both ranks with exit 0, and `serve --dp 2` is a clear
error that ends every rank. Loopback only; every wait is bounded. Exit 77 (skipped) without mpirun.

  serve_test.py PLUMB MODEL_DIR NUMERICS
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PLUMB, MODEL, NUMERICS = sys.argv[1:4]
NAME = f"dist-serve-{os.getpid()}"  # finds this test's processes in /proc
COMMON = ["serve", "--model", MODEL, "--numerics", NUMERICS, "--threads", "1", "--kv-cache-mb", "64",
          "--kv-block-size", "128", "--port", "0", "--served-model-name", NAME]


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def start(layout):
    cmd = [PLUMB] + COMMON if not layout else ["sh", os.path.join(HERE, "mpi_run.sh"), PLUMB] + COMMON + layout
    env = dict(os.environ, PLUMB_MPI_TIMEOUT="240")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines = []
    deadline = time.time() + 120
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"ready on http://127\.0\.0\.1:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [lines.append(l) for l in proc.stdout], daemon=True).start()
            return proc, int(m.group(1)), lines
    proc.kill()
    fail(f"server {' '.join(layout) or '(one process)'} did not start:\n{''.join(lines)}")


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        data = r.read().decode()
    if body.get("stream"):
        text = []
        for line in data.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for c in json.loads(line[6:]).get("choices", []):
                    text.append(c.get("delta", {}).get("content") or "")
        return "".join(text)
    out = json.loads(data)
    return {"choices": out["choices"], "usage": out["usage"]}


REQUESTS = [
    ("/v1/completions", {"prompt": "In the beginning", "max_tokens": 16, "temperature": 0}),
    ("/v1/completions", {"prompt": "And God said", "max_tokens": 12, "temperature": 0.8, "seed": 3, "logprobs": 2}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Who made the light?"}], "max_tokens": 10,
                              "temperature": 0.7, "seed": 11, "stream": True}),
]
# A prompt of more than one KV block, twice: the second continues from the prefix cache's
# snapshot (a forked sequence on every rank).
LONG = " ".join(f"And the evening and the morning were the day number {i}." for i in range(12))
REQUESTS += [("/v1/completions", {"prompt": LONG, "max_tokens": 6, "temperature": 0})] * 2
CONCURRENT = [("/v1/completions", {"prompt": f"Let there be {w}", "max_tokens": 9, "temperature": 1.1, "seed": i})
              for i, w in enumerate(["light", "a firmament", "lights", "waters"])]


def answers(port):
    out = [post(port, p, dict(b, model=NAME)) for p, b in REQUESTS]
    if out[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 0:
        fail(f"the repeated long prompt was not served from the prefix cache: {out[-1]['usage']}")
    # A streaming client that leaves after its first event: its request is cancelled (and its
    # sequence dropped on every rank); the server goes on.
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"model": NAME, "prompt": "In the beginning", "max_tokens": 200,
                                                  "stream": True, "ignore_eos": True}).encode())
    with urllib.request.urlopen(req, timeout=120) as r:
        r.readline()
    out.append(post(port, "/v1/completions", {"model": NAME, "prompt": "And the LORD said", "max_tokens": 8,
                                              "temperature": 0}))
    together = [None] * len(CONCURRENT)

    def one(i):
        p, b = CONCURRENT[i]
        together[i] = post(port, p, dict(b, model=NAME))
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(CONCURRENT))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    if any(a is None for a in together):
        fail("a concurrent request got no answer")
    return out + together


def rank0_pid():
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if NAME.encode() in cmdline and b"OMPI_COMM_WORLD_RANK=0" in env:
            return int(pid)
    return None


def stop(proc, lines, what):
    pid = rank0_pid() if what != "one process" else proc.pid
    if pid is None:
        proc.kill()
        fail(f"{what}: rank 0 not found")
    os.kill(pid, signal.SIGTERM)
    try:
        rc = proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        fail(f"{what}: did not end within 60 s of SIGTERM to rank 0:\n{''.join(lines)}")
    if rc != 0:
        fail(f"{what}: exit {rc} after SIGTERM to rank 0:\n{''.join(lines)}")


if shutil.which("mpirun") is None:
    print("SKIPPED: mpirun not found (scripts/install-deps.sh installs openmpi-bin)")
    sys.exit(77)

def answers_or_fail(proc, port, lines, what):
    try:
        return answers(port)
    except (OSError, ValueError, KeyError) as e:  # a refused or broken answer, a dead server
        proc.kill()
        fail(f"{what}: {type(e).__name__}: {e}\n{''.join(lines)}")


proc, port, lines = start([])
want = answers_or_fail(proc, port, lines, "one process")
stop(proc, lines, "one process")
for layout in (["--tp", "2"], ["--ep", "2"]):
    proc, port, lines = start(layout)
    got = answers_or_fail(proc, port, lines, " ".join(layout))
    stop(proc, lines, " ".join(layout))
    for i, (w, g) in enumerate(zip(want, got)):
        if w != g:
            fail(f"{' '.join(layout)}: answer {i} differs from one process:\n  one: {w}\n  got: {g}")
    print(f"ok: serve {' '.join(layout)}: {len(want)} answers identical to one process; SIGTERM to rank 0 ended both")

r = subprocess.run(["sh", os.path.join(HERE, "mpi_run.sh"), PLUMB] + COMMON + ["--dp", "2"], capture_output=True,
                   text=True, timeout=200)
if r.returncode == 0 or "one server per replica" not in r.stdout + r.stderr:
    fail(f"serve --dp 2: expected a clear error, got exit {r.returncode}:\n{r.stdout}{r.stderr}")
print("ok: serve --dp 2 is a clear error that ends every rank")

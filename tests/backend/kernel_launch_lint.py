#!/usr/bin/env python3
"""The rule programmatic dependent launch rests on (src/plumb/backend/gpu/kernels/launch.h).

Every kernel is launched through launch() (no <<< >>> outside launch.h), and every __global__
function either starts with pdl_begin() or calls both pdl_wait() and pdl_release() (the kernels
that read weights before they wait, placed by hand). A kernel without its wait would read an
earlier kernel's output while that kernel still runs: a race the op tests see only sometimes.

  kernel_launch_lint.py DIR      check DIR's *.cu and *.h files (exit 1, naming each offence)
  kernel_launch_lint.py --self-test
"""
import pathlib
import re
import sys
import tempfile


def kernel_bodies(text):
    """(name, body) of each __global__ function definition in text."""
    for m in re.finditer(r"__global__\b", text):
        brace, semi = text.find("{", m.end()), text.find(";", m.end())
        if brace < 0 or (0 <= semi < brace):
            continue  # a declaration
        head = text[m.end():brace]
        names = re.findall(r"(\w+)\s*\(", head)
        name = [n for n in names if n != "__launch_bounds__" and not n.startswith("PLUMB_")]
        depth, i = 0, brace
        while True:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                break
            i += 1
        yield (name[-1] if name else "?"), text[brace + 1:i]


def offences(directory):
    out = []
    for path in sorted(pathlib.Path(directory).glob("*")):
        if path.suffix not in (".cu", ".h"):
            continue
        text = path.read_text()
        code = re.sub(r"//[^\n]*", "", text)  # comments may mention either
        if path.name != "launch.h" and "<<<" in code:
            out.append(f"{path.name}: launches with <<< >>> (use launch() of launch.h)")
        for name, body in kernel_bodies(code):
            first = body.strip().split(";", 1)[0].strip()
            if first == "pdl_begin()":
                continue
            if "pdl_wait();" in body and "pdl_release();" in body:
                continue
            out.append(f"{path.name}: kernel {name} neither starts with pdl_begin() nor calls pdl_wait() and pdl_release()")
    return out


def self_test():
    cases = {
        "good.cu": "__global__ void a(float* y) {\n  pdl_begin();\n  y[0] = 1;\n}\n"
                   "__global__ void __launch_bounds__(256) b(const float* w) {\n  prefetch_l2(w);\n  pdl_wait();\n"
                   "  pdl_release();\n}\n__global__ void declared(int);\n",
        "bad_wait.cu": "// pdl_begin() in a comment does not count\n"
                       "__global__ void late(float* y) {\n  y[0] = 1;\n  pdl_begin();\n}\n",
        "bad_launch.cu": "__global__ void k() {\n  pdl_begin();\n}\nvoid go() { k<<<1, 1>>>(); }\n",
    }
    with tempfile.TemporaryDirectory() as d:
        for name, text in cases.items():
            pathlib.Path(d, name).write_text(text)
        got = offences(d)
    want = ["bad_launch.cu: launches with <<< >>> (use launch() of launch.h)",
            "bad_wait.cu: kernel late neither starts with pdl_begin() nor calls pdl_wait() and pdl_release()"]
    if got != want:
        print("self-test failed:\n  got  %s\n  want %s" % (got, want))
        return 1
    print("self-test: a late wait and a <<< >>> launch are refused, good kernels accepted")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    found = offences(sys.argv[1])
    for line in found:
        print(line)
    kernels = sum(1 for p in pathlib.Path(sys.argv[1]).glob("*.cu") for _ in kernel_bodies(p.read_text()))
    if found:
        return 1
    print(f"{kernels} kernels, each waits for its inputs; every launch goes through launch()")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A worker's memory while it loads a model, against what it holds once loaded.

    .venv/bin/python ops/bench/load_bench.py [--model PATH] [--modes none,int4,auto]
        [--python OTHER/.venv/bin/python ...]

Each load runs in a fresh process (one torch thread, the native kernels built first,
so their build is not counted): the peak resident memory while loading (VmHWM) and the
resident memory after (VmRSS), both from /proc/self/status, and the seconds the load
took. `--python` adds another checkout's interpreter (say, the Vigil before a change),
run on the same model and modes; a mode that checkout does not know is marked so.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, sys, time, torch
torch.set_num_threads(1)
from pathlib import Path
from vigil.engine import kernels
from vigil.engine.bundled import ModelFormat, ModelKind, ModelSource, SMOLLM2, bundled_source
from vigil.engine.loaders.llm import load_language_model

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) // 1024  # MiB

path, mode = sys.argv[1], sys.argv[2]
kernels.packed_matmul_ext(); kernels.int4_decode_ext(); kernels.paged_attention_ext()
source = bundled_source(SMOLLM2) if path == "bundled" else ModelSource(
    Path(path).name, ModelKind.GENERATE,
    ModelFormat.GGUF if path.endswith(".gguf") else ModelFormat.HF, Path(path))
before = status("VmRSS")
t0 = time.perf_counter()
try:
    lm = load_language_model(source, torch.device("cpu"), torch.float32, mode)
except ValueError as e:
    print(json.dumps({"error": str(e)})); sys.exit()
seconds = time.perf_counter() - t0
print(json.dumps({"before": before, "peak": status("VmHWM"), "after": status("VmRSS"),
                  "seconds": seconds}))
"""


def measure(python: str, model: str, mode: str) -> dict[str, float | str]:
    out = subprocess.run(
        [python, "-c", CHILD, model, mode], capture_output=True, text=True, check=True
    ).stdout
    result: dict[str, float | str] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="bundled", help="a .gguf file or a folder")
    parser.add_argument("--modes", default="none,int4,auto")
    parser.add_argument("--python", action="append", default=[], help="another checkout's")
    args = parser.parse_args()
    pythons = [sys.executable, *args.python]
    print(f"model: {args.model}; MiB resident (VmRSS / VmHWM), one process a load")
    print("| python | quantization | before load | peak while loading | after | peak - after | s |")
    print("|---|---|---|---|---|---|---|")
    for python in pythons:
        for mode in args.modes.split(","):
            r = measure(python, args.model, mode)
            if "error" in r:
                print(f"| {python} | {mode} | {r['error']} | | | | |")
                continue
            over = float(r["peak"]) - float(r["after"])
            print(
                f"| {python} | {mode} | {r['before']} | {r['peak']} | {r['after']} "
                f"| {over:+.0f} | {float(r['seconds']):.1f} |"
            )


if __name__ == "__main__":
    main()

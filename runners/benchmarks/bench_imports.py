"""What a worker forked after the imports pays for the garbage collector (a benchmark, not a test; CPU).

    python -m runners.benchmarks.bench_imports [--runs 3]

As the home server and a torch.compile worker do (runners/engine/process.py: importing), a parent
imports torch and Triton with the collector off, forks, and the child imports dynamo and inductor the
same way. Two endings of those imports: `frozen` (importing() as it is: gc.freeze) and `collected` (a
full collection instead, as before 2026-11-27). Each run is a fresh interpreter, the two modes in turn,
the first of each run's pair swapped from run to run, after one run of each that is not shown (the file
cache). The table gives the seconds of the parent's imports, of the child's imports (their ending
included), and of 300,000 small allocations the child makes after them, with the collections they
trigger (as a worker's first calls make objects) and a forced full collection.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

RUN = r'''
import contextlib, gc, json, os, sys, time
from runners.engine.process import importing

@contextlib.contextmanager
def collected():
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()

ending = importing if sys.argv[1] == "frozen" else collected
began = time.perf_counter()
with ending():
    import torch, triton
parent_s = time.perf_counter() - began
reading, writing = os.pipe()
if os.fork() == 0:
    began = time.perf_counter()
    with ending():
        import torch._dynamo, torch._inductor.compile_fx
    imported = time.perf_counter()
    made = [[i] for i in range(300_000)]  # tracked objects: their allocation triggers collections
    del made
    gc.collect()
    child = {"child_imports_s": imported - began, "allocations_s": time.perf_counter() - imported}
    os.write(writing, json.dumps(child).encode())
    os._exit(0)
os.wait()
print(json.dumps({"parent_imports_s": parent_s, **json.loads(os.read(reading, 4096))}))
'''

MODES = ("collected", "frozen")


def run_once(mode: str) -> dict:
    repo = Path(__file__).resolve().parents[2]
    path = os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, "-c", RUN, mode], capture_output=True, text=True, check=True,
                            cwd=repo, env={**os.environ, "PYTHONPATH": path})
    return json.loads(result.stdout.splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    for mode in MODES:
        run_once(mode)  # the file cache warmed for both
    print("| run | ending | parent: torch, triton s | child: dynamo, inductor s | child: allocations s |")
    print("|---|---|---|---|---|")
    for run in range(1, args.runs + 1):
        for mode in MODES if run % 2 else MODES[::-1]:
            seconds = run_once(mode)
            print(f"| {run} | {mode} | {seconds['parent_imports_s']:.2f} | "
                  f"{seconds['child_imports_s']:.2f} | {seconds['allocations_s']:.3f} |", flush=True)


if __name__ == "__main__":
    main()

"""Benchmark (CPU): the commands on stores of 10,000 / 100,000 / 1,000,000 rows, their time and peak memory.

    python -m triton_sweep.benchmarks.bench_scale [--rows 10000 100000 1000000] [--timeout 600]
        [--commands compare export plot merge plan] [--plan-shapes 10000 100000 1000000]

Each store holds two sweeps (BASE and NEW, NEW 2% slower) of synthetic softmax rows (tests/fixtures/
synthetic_store.py's rows: samples, no kernel run), 250 configs a shape (2,000 shapes at 1,000,000 rows),
written in bulk. Every command runs in a process of its own: wall seconds and peak resident memory
(ru_maxrss of the child). `plan`: a softmax grid of N shapes at one config planned (max_trials raised)."""
from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SPACE = {"BLOCK_SIZE": (1024, 2048, 4096, 8192, 16384), "num_warps": (1, 2, 4, 8, 16),
         "num_stages": tuple(range(1, 11))}  # 250 configs
CONFIGS = [dict(zip(SPACE, values)) for values in itertools.product(*SPACE.values())]
# Runs a command and prints its peak resident memory (kB, its own and its children's) on stderr's last line
PEAK = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(code)")


def build(path: Path, rows: int) -> float:
    """Two sweeps of rows // 2 rows each into a new store; the seconds it took."""
    from tests.fixtures.synthetic_store import ENV, PEAKS, model_p50, row
    from triton_sweep.store.result_store import ResultStore

    began, store, rng = time.perf_counter(), ResultStore(path), np.random.default_rng(0)
    shapes = [(4096, 200 + 8 * i) for i in range(max(1, rows // 2 // len(CONFIGS)))]
    for sweep_id, slower in (("base", 1.0), ("new", 1.02)):
        batch = []
        for shape, config in itertools.product(shapes, CONFIGS):
            model = dict(config, BLOCK_SIZE=max(config["BLOCK_SIZE"], 1))
            batch.append(row(sweep_id, "triton", shape, config, model_p50(shape, model) * slower, rng))
            if len(batch) == 20000:
                store.append_many(batch)
                batch = []
        store.append_many(batch)
    store.save_peaks(ENV, PEAKS, "2026-01-01T00:00:00")
    store.close()
    return time.perf_counter() - began


def timed(command: list[str], timeout: float) -> tuple[str, str]:
    """(wall seconds, peak MB) of a command run alone; 'timeout' or 'exit N' in place of the seconds."""
    began = time.perf_counter()
    try:
        result = subprocess.run([sys.executable, "-c", PEAK, *command], capture_output=True, text=True,
                                timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"> {timeout:.0f} (timeout)", "-"
    seconds = time.perf_counter() - began
    *said, peak = result.stderr.strip().splitlines() or ["0"]
    if result.returncode not in (0, 1) or result.returncode and "compare" not in command[3]:  # 1: SLOW
        return f"exit {result.returncode}: {' '.join(said)[-200:]}", "-"
    return f"{seconds:.1f}", f"{int(peak) / 1024:.0f}"


def plan(shapes: int) -> None:
    """Plan a grid of about `shapes` softmax shapes (rows x 768 row lengths, 257 to 1024: every one runs
    at the config) at one config, as the sweep does before it starts."""
    from triton_sweep.kernels import softmax
    from triton_sweep.model.space import plan_trials

    grid = {"rows": {"range": [1, max(1, shapes // 768), 1]}, "cols": {"range": [257, 1024, 1]}}
    space = {"BLOCK_SIZE": [1024], "num_warps": [4], "num_stages": [1]}
    trials = plan_trials(softmax.SPEC, {"grid": grid, "dtypes": ["float32"], "space": space,
                                        "baselines": []}, "cuda", max_trials=shapes)
    print(f"planned {len(trials)} trials")


def commands(store: Path, work: Path) -> dict:
    module = [sys.executable, "-m"]
    return {"compare": module + ["triton_sweep.compare", "base", "new", "--store", str(store)],
            "export": module + ["triton_sweep.export", "--store", str(store), "--kernel", "softmax",
                                "--sweep-id", "new", "--out-dir", str(work / "exports")],
            "plot": module + ["triton_sweep.plot", "--store", str(store), "--sweep-id", "new",
                              "--out", str(work / "plots")],
            "merge": module + ["triton_sweep.merge", "--into", str(work / "merged.sqlite"), str(store)]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", nargs="+", type=int, default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--plan-shapes", nargs="+", type=int, default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--commands", nargs="+", default=["compare", "export", "plot", "merge", "plan"])
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--plan-one", type=int, help=argparse.SUPPRESS)  # the `plan` command's process
    args = parser.parse_args(argv)
    if args.plan_one:
        return plan(args.plan_one)
    lines = ["| rows | command | seconds | peak MB |", "|---|---|---|---|"]
    for rows in args.rows if set(args.commands) - {"plan"} else []:
        with tempfile.TemporaryDirectory() as folder:
            work = Path(folder)
            seconds = build(work / "results.sqlite", rows)
            lines.append(f"| {rows:,} | (build the store) | {seconds:.1f} | - |")
            for name, command in commands(work / "results.sqlite", work).items():
                if name in args.commands:
                    lines.append(f"| {rows:,} | {name} | {' | '.join(timed(command, args.timeout))} |")
            print("\n".join(lines[-len(args.commands) - 1:]), flush=True)
    for shapes in args.plan_shapes if "plan" in args.commands else []:
        command = [sys.executable, "-m", "triton_sweep.benchmarks.bench_scale", "--plan-one", str(shapes)]
        seconds, memory = timed(command, args.timeout)
        lines.append(f"| {shapes:,} shapes | plan (kernel.grid) | {seconds} | {memory} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""Benchmark (GPU): the noise between runs of one unchanged measurement, against what one run can see.

    python -m triton_sweep.benchmarks.bench_noise [--runs 6] [--reps 4] [--json FILE]

Each run is a process of its own (a fresh CUDA context, fresh allocations, a later time). Inside a run,
every case (a config or a baseline at one shape) is timed `--reps` times in turn, each repetition on the
run's first buffers ("same") and on buffers placed anew ("fresh"). The table, per case, in sd of log p50
(1.0 ~ 1% spread): `between` runs (first repetition), `within same` / `within fresh` a run, `between of
median` (a run's median over fresh repetitions) and `sampling` (the p50's own standard error). If
`within fresh` is as large as `between`, repetitions inside a trial can stand for runs; if smaller, only
a calibration across runs shows the noise a comparison of two sweeps meets."""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SOFTMAX = [((4096, 1024), 1024, (1, 2, 4, 8)), ((4096, 4096), 4096, (4, 8, 16)),
           ((2048, 16384), 16384, (8, 16, 32))]
LAYERNORM = [((16384, 4096), 4096, (8, 16)), ((2048, 65536), 8192, (8, 16))]
MATMUL = [((4096, 4096, 4096), [(128, 256, 8, 3), (128, 128, 4, 4), (64, 256, 4, 3)]),
          ((8192, 8192, 8192), [(128, 256, 8, 3)])]


def cases() -> list[tuple]:
    """(kernel, shape, dtype, provider, config): configs near the winners of the README sweep, the
    layernorm and matmul sweeps, with each shape's torch baseline; all fp16."""
    found = []
    for shape, block, warps in SOFTMAX:
        found += [("softmax", shape, "float16", "triton",
                   {"BLOCK_SIZE": block, "num_warps": w, "num_stages": 1}) for w in warps]
        found.append(("softmax", shape, "float16", "torch", {}))
    for shape, block, warps in LAYERNORM:
        found += [("layernorm", shape, "float16", "triton",
                   {"BLOCK_SIZE": block, "num_warps": w, "num_stages": 1}) for w in warps]
        found.append(("layernorm", shape, "float16", "torch", {}))
    for shape, configs in MATMUL:
        found += [("matmul", shape, "float16", "triton",
                   {"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": w, "num_stages": s})
                  for m, n, w, s in configs]
        found.append(("matmul", shape, "float16", "torch", {}))
    for n in (1 << 20, 1 << 24):
        found.append(("vector_add", (n,), "float32", "triton",
                      {"BLOCK_SIZE": 1024, "num_warps": 4, "num_stages": 1}))
    return found


def label(case) -> str:
    kernel, shape, dtype, provider, config = case
    settings = " ".join(f"{k}={v}" for k, v in config.items() if k in ("BLOCK_SIZE", "BLOCK_M", "BLOCK_N",
                                                                        "num_warps", "num_stages"))
    return f"{kernel}[{provider}] {'x'.join(map(str, shape))} {settings}".strip()


def child(reps: int, out: Path) -> None:
    """One run: every case `reps` times on the same and on fresh buffers; one JSON line a measurement."""
    import torch

    from triton_sweep.model.spec_sources import load_spec
    from triton_sweep.measure import device as device_info
    from triton_sweep.measure.stop_rule import StopRule
    from triton_sweep.measure.timing import summarize

    torch.cuda.set_device(0)
    rule = StopRule(min_samples=20, min_time_s=0.01, rel_precision=0.005, max_time_s=1.0)  # default preset
    timer = device_info.cuda_timer(0, rule, 0.02)
    read_clock = timer.read_sm_clock
    all_cases = cases()
    specs = {kernel: load_spec(kernel, None) for kernel in {c[0] for c in all_cases}}

    def callable_of(case, inputs, out_tensor):
        kernel, _, _, provider, config = case
        spec = specs[kernel]
        if provider == "triton":
            return lambda: spec.launch(inputs, out_tensor, config)
        baseline = spec.baselines[provider]
        return lambda: baseline(inputs)

    def buffers(case, seed):
        kernel, shape, dtype, _, _ = case
        spec = specs[kernel]
        inputs = spec.make_inputs(shape, getattr(torch, dtype), seed, torch.device("cuda", 0))
        return inputs, spec.output_like(inputs)

    first = {i: buffers(case, 1000 + i) for i, case in enumerate(all_cases)}
    held = []  # fresh buffers stay allocated, so the next ones land elsewhere
    with out.open("w") as sink:
        for rep in range(reps):
            for index, case in enumerate(all_cases):
                for mode in ("same", "fresh"):
                    if mode == "same":
                        inputs, out_tensor = first[index]
                    else:
                        inputs, out_tensor = buffers(case, 1000 + index)
                        held.append((inputs, out_tensor))
                    fn = callable_of(case, inputs, out_tensor)
                    clock = read_clock()
                    measurement = timer.measure(fn)
                    stats = summarize(measurement.samples_s)
                    sink.write(json.dumps({"case": index, "label": label(case), "rep": rep, "mode": mode,
                                           "p50_us": stats["p50_us"], "precision": stats["p50_precision"],
                                           "n": stats["n_samples"], "clock_mhz": clock,
                                           "time": time.time()}) + "\n")
            held.clear()
            torch.cuda.empty_cache()


def sd_log(values) -> float:
    values = np.log(np.asarray(values, dtype=np.float64))
    return float(np.std(values, ddof=1)) if len(values) > 1 else math.nan


def pooled_within(groups) -> float:
    """Pooled standard deviation of log values within groups (each group: one run's repetitions)."""
    squares, freedom = 0.0, 0
    for values in groups:
        logs = np.log(np.asarray(values, dtype=np.float64))
        squares += float(((logs - logs.mean()) ** 2).sum())
        freedom += len(logs) - 1
    return math.sqrt(squares / freedom) if freedom > 0 else math.nan


def analyse(rows: list[dict]) -> list[dict]:
    by_case: dict[int, list[dict]] = {}
    for row in rows:
        by_case.setdefault(row["case"], []).append(row)
    table = []
    for index, found in sorted(by_case.items()):
        runs = sorted({r["run"] for r in found})

        def values(mode, run=None, rep=None):
            return [r["p50_us"] for r in found if r["mode"] == mode and (run is None or r["run"] == run)
                    and (rep is None or r["rep"] == rep)]

        table.append({
            "label": found[0]["label"],
            "p50_us": float(np.median([r["p50_us"] for r in found])),
            "between": 100 * sd_log([values("same", run, 0)[0] for run in runs]),
            "within_same": 100 * pooled_within([values("same", run) for run in runs]),
            "within_fresh": 100 * pooled_within([values("fresh", run) for run in runs]),
            "between_of_median": 100 * sd_log([np.median(values("fresh", run)) for run in runs]),
            "run_medians_spread": 100 * (max(np.median(values("fresh", run)) for run in runs)
                                         / min(np.median(values("fresh", run)) for run in runs) - 1),
            "sampling": 100 * float(np.mean([r["precision"] for r in found])) / 1.96,
        })
    return table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--json", help="write every measurement here (JSON lines)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.reps, Path(args.child))
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for run in range(args.runs):
            path = Path(scratch) / f"run{run}.jsonl"
            began = time.perf_counter()
            subprocess.run([sys.executable, "-m", "triton_sweep.benchmarks.bench_noise", "--reps",
                            str(args.reps),
                            "--child", str(path)], check=True, env=os.environ)
            found = [dict(json.loads(line), run=run) for line in path.read_text().splitlines()]
            rows += found
            print(f"run {run}: {len(found)} measurements in {time.perf_counter() - began:.1f} s", flush=True)
    if args.json:
        Path(args.json).write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = analyse(rows)
    print(f"\n{args.runs} runs x {args.reps} repetitions; standard deviations of log p50 in % "
          "(between runs: the first repetition; within a run: pooled over runs)\n")
    print("| case | p50 us | between | within same | within fresh | between of median | max/min of run "
          "medians | sampling |")
    print("|---|---|---|---|---|---|---|---|")
    for r in table:
        print(f"| {r['label']} | {r['p50_us']:.2f} | {r['between']:.2f} | {r['within_same']:.2f} | "
              f"{r['within_fresh']:.2f} | {r['between_of_median']:.2f} | {r['run_medians_spread']:.2f} | "
              f"{r['sampling']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

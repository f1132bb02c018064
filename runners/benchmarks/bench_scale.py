"""Benchmark (CPU): the commands on stores of 10,000 / 100,000 / 1,000,000 rows, their time and peak memory.

    python -m triton_sweep.benchmarks.bench_scale [--rows 10000 100000 1000000] [--limit-s 600]
        [--commands compare export plot merge finish finish_no_wandb resume plan]
        [--plan-shapes 10000 100000 1000000]

Each store: two sweeps (base, new: the same trials, new drawn anew) of synthetic softmax rows (made-up
latencies): 250 configs a shape (2,000 shapes at 1,000,000 rows), 20 samples each, a baseline, the 3
fastest and the baseline re-timed as finalists in 5 repetitions. Each command in a process of its own:
wall seconds and peak resident memory (os.wait4), killed past --limit-s. `finish`: the sweep's own end
(W&B offline; finish_no_wandb: disabled) on sweep `new`, half the rows. `resume`: the store's part of a
sweep run again (trials kept, their outcomes). `plan`: a grid of N shapes at one config planned."""
from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from triton_sweep.model.trial import Trial
from triton_sweep.store.result_store import ResultStore
from tests.fixtures.synthetic_store import ENV

CONFIGS = [dict(zip(("BLOCK_SIZE", "num_warps", "num_stages"), values)) for values in itertools.product(
    (1024, 2048, 4096, 8192, 16384), (1, 2, 4, 8, 16), range(1, 11))]  # 250
FINALISTS, REPETITIONS, SAMPLES = 3, 5, 20
KERNEL_HASH = "aaaaaaaaaaaa"
ROWS_A_SHAPE = len(CONFIGS) + 1 + FINALISTS + 1


def _rows(sweep_id: str, shape: tuple, rng: np.random.Generator) -> list[dict]:
    """One shape's rows: every config and the baseline screened, the fastest and the baseline re-timed."""
    cells = shape[0] * shape[1]
    true = 8.0 * cells / (4096 * 1024) * (1 + rng.random(len(CONFIGS) + 1))
    true[-1] *= 2.5  # the baseline
    trials = [("triton", c) for c in CONFIGS] + [("torch", {})]
    final = [*np.argsort(true[:-1])[:FINALISTS], len(CONFIGS)]
    rows = [_row(sweep_id, shape, *trials[i], true[i] * np.exp(rng.normal(0, 0.01, SAMPLES)), "screen")
            for i in range(len(trials))]
    for rank, i in enumerate(final, start=1):
        blocks = true[i] * np.exp(rng.normal(0, 0.01, (REPETITIONS, SAMPLES)))
        rows.append(_row(sweep_id, shape, *trials[i], blocks.ravel(), "final",
                         rep_p50s_us=np.median(blocks, axis=1), repetitions=REPETITIONS,
                         rep_noise=float(np.std(np.log(np.median(blocks, axis=1)), ddof=1)),
                         **({} if trials[i][0] != "triton" else dict(rank=rank, tie=rank == 1,
                                                                        chosen=rank == 1))))
    return rows


def _row(sweep_id: str, shape: tuple, provider: str, config: dict, samples: np.ndarray, phase: str,
         **fields) -> dict:
    p50 = float(np.median(samples))
    gbps = 4 * shape[0] * shape[1] / p50 / 1e3
    return {"trial_key": Trial("softmax", provider, shape, "float16", config).key, "sweep_id": sweep_id,
            "kernel": "softmax", "provider": provider, "shape": list(shape), "dtype": "float16",
            "config": config, "status": "ok", "phase": phase, "kernel_hash": KERNEL_HASH, "seed": 0,
            "timestamp": "2026-01-01T00:00:00", **ENV, "p50_us": p50, "samples_us": samples,
            "p50_precision": 0.01, "n_samples": len(samples), "gbps": gbps, "pct_copy_bw": gbps / 40,
            "pct_matmul": gbps / 400, **fields}


def build(path: Path, rows: int) -> int:
    """Two sweeps of `rows` rows in all (whole shapes), written in batches; returns the count written."""
    store = ResultStore(path)
    shapes = [(4096, 128 * (1 + i)) for i in range(max(1, rows // (2 * ROWS_A_SHAPE)))]
    written = 0
    for seed, sweep_id in enumerate(("base", "new")):
        rng = np.random.default_rng(seed)
        for start in range(0, len(shapes), 100):
            batch = [r for shape in shapes[start:start + 100] for r in _rows(sweep_id, shape, rng)]
            written += len(store.append_many(batch))
    store.close()
    return written


def timed(command: list[str], limit_s: float) -> tuple[str, str]:
    """(wall seconds, peak resident MB: the child's own ru_maxrss) of a command; one running past
    limit_s is killed, one failing is named by its exit status (compare's 1, a SLOW verdict, is a run)."""
    began = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    timer = threading.Timer(limit_s, child.kill)
    timer.start()
    _, status, usage = os.wait4(child.pid, 0)
    timer.cancel()
    code = os.waitstatus_to_exitcode(status)
    seconds = f"{time.perf_counter() - began:.1f}"
    if code not in (0, 1) or code and "triton_sweep.compare" not in command:
        seconds = f"> {limit_s:.0f} (killed)" if code == -9 else f"exit {code}"
    return seconds, f"{usage.ru_maxrss / 1024:.0f}"


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


def finish(store: str, out: str, logger_mode: str) -> None:
    """What a sweep's command does after its last trial (runners/outputs: finish), on sweep `new` of
    `store`, writing into the folder `out` (W&B too, in logger_mode)."""
    from triton_sweep.outputs import Outputs
    from triton_sweep.revalidate import compose

    cfg = compose(["kernel=softmax", f"store={store}", "sweep_id=new", f"export_dir={out}/exports",
                   f"logger.dir={out}", f"logger.mode={logger_mode}"])
    outputs = Outputs.from_config(cfg)
    outputs.begin(cfg)
    outputs.finish(cfg, "new", Path(out))


def resume(store: str) -> None:
    """What a sweep run again asks of its store (runners/engine/job.py): the newest row of every trial
    measured in its environment, and the status and p50 of each, for its search to learn from."""
    opened = ResultStore(store)
    kept = opened.measured({**ENV, "kernel_hash": KERNEL_HASH})
    print(f"{len(opened.outcomes(kept.values()))} trials kept")


def commands(store: Path, work: Path) -> dict:
    module = [sys.executable, "-m"]
    return {"compare": module + ["triton_sweep.compare", "base", "new", "--store", str(store)],
            "export": module + ["triton_sweep.export", "--store", str(store), "--kernel", "softmax",
                                "--sweep-id", "new", "--out-dir", str(work / "exports")],
            "plot": module + ["triton_sweep.plot", "--store", str(store), "--sweep-id", "new",
                              "--out", str(work / "plots")],
            "merge": module + ["triton_sweep.merge", "--into", str(work / "merged.sqlite"), str(store)],
            **{name: module + ["triton_sweep.benchmarks.bench_scale", "--finish-one", str(store), str(work),
                               mode]
               for name, mode in (("finish", "offline"), ("finish_no_wandb", "disabled"))},
            "resume": module + ["triton_sweep.benchmarks.bench_scale", "--resume-one", str(store)]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", nargs="+", type=int, default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--plan-shapes", nargs="+", type=int, default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--commands", nargs="+", default=["compare", "export", "plot", "merge", "finish",
                                                              "finish_no_wandb", "resume", "plan"])
    parser.add_argument("--limit-s", type=float, default=600, help="kill a command after this long")
    parser.add_argument("--plan-one", type=int, help=argparse.SUPPRESS)  # the `plan` command's process
    parser.add_argument("--finish-one", nargs=3, help=argparse.SUPPRESS)  # the `finish` command's process
    parser.add_argument("--resume-one", help=argparse.SUPPRESS)  # the `resume` command's process
    args = parser.parse_args(argv)
    if args.plan_one:
        return plan(args.plan_one)
    if args.finish_one:
        return finish(*args.finish_one)
    if args.resume_one:
        return resume(args.resume_one)
    lines = ["| rows | command | seconds | peak MB |", "|---|---|---|---|"]
    for count in args.rows if set(args.commands) - {"plan"} else []:
        with tempfile.TemporaryDirectory() as folder:
            work, began = Path(folder), time.perf_counter()
            written = build(work / "results.sqlite", count)
            lines.append(f"| {written:,} | (build the store) | {time.perf_counter() - began:.1f} | - |")
            for name, command in commands(work / "results.sqlite", work).items():
                if name in args.commands:
                    lines.append(f"| {written:,} | {name} | {' | '.join(timed(command, args.limit_s))} |")
                    print(lines[-1], flush=True)
    for shapes in args.plan_shapes if "plan" in args.commands else []:
        command = [sys.executable, "-m", "triton_sweep.benchmarks.bench_scale", "--plan-one", str(shapes)]
        seconds, memory = timed(command, args.limit_s)
        lines.append(f"| {shapes:,} shapes | plan (kernel.grid) | {seconds} | {memory} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

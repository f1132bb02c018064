"""How triton-sweep-compare's time and memory grow with a store's rows (a benchmark, not a test; no GPU):
prints rows, seconds and the peak resident memory of the command, run in a subprocess.

    python -m triton_sweep.benchmarks.bench_compare_scale [--rows 10000 100000 1000000] [--limit-s 600]

Each count N: one store, two sweeps (base, new: the same trials, new drawn anew) of N rows in all, of
synthetic softmax rows (made-up latencies, no kernel run): 250 configs a shape, 20 samples each, a
baseline, and the 3 fastest configs and the baseline re-timed as finalists in 5 repetitions; written
in bulk (ResultStore.append_many). Then `python -m triton_sweep.compare --store STORE base new`.
"""
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
            "config": config, "status": "ok", "phase": phase, "kernel_hash": "aaaaaaaaaaaa", "seed": 0,
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


def timed(path: Path, limit_s: float) -> tuple[float, float, int]:
    """Seconds, peak resident MB (the child's own ru_maxrss, os.wait4) and exit status of the compare
    command; one running past limit_s is killed (-9)."""
    began = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "triton_sweep.compare", "--store", str(path), "base",
                              "new"], stdout=subprocess.DEVNULL)
    timer = threading.Timer(limit_s, child.kill)
    timer.start()
    _, status, usage = os.wait4(child.pid, 0)
    timer.cancel()
    child.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - began, usage.ru_maxrss / 1024, child.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", nargs="+", type=int, default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--limit-s", type=float, default=600, help="kill a compare after this long")
    args = parser.parse_args()
    print("| rows | build s | compare s | peak MB | exit |\n|---|---|---|---|---|", flush=True)
    for count in args.rows:
        with tempfile.TemporaryDirectory() as work:
            began = time.perf_counter()
            written = build(Path(work) / "results.sqlite", count)
            built = time.perf_counter() - began
            seconds, peak, status = timed(Path(work) / "results.sqlite", args.limit_s)
        print(f"| {written} | {built:.0f} | {seconds:.1f} | {peak:.0f} | {status} |", flush=True)


if __name__ == "__main__":
    main()

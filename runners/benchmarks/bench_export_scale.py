"""How the export's time and memory grow with the number of measured shapes (a benchmark, not a test; no
GPU): prints the table BENCHMARKS.md records.

    python -m triton_sweep.benchmarks.bench_export_scale [--shapes 40 320 2000] [--configs 250]

Each count N: a synthetic softmax sweep (made-up latencies, no kernel run) at N shapes 8192 x cols, the
cols evenly spaced over 200..8000 (aligned and unaligned sizes both), in float16 and bfloat16, every
config of a space of --configs (those whose block cannot hold the row pruned, as a sweep records them),
written in bulk (ResultStore.append_many); then triton_sweep.export.export_kernel on its rows, timed in a
process of its own: the covering set, the leave-one-out estimate and the files, as a sweep's finish
writes them. Peak MB: that process's peak resident memory, the loaded rows included.
"""
from __future__ import annotations

import argparse
import itertools
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from triton_sweep.model.trial import Trial
from triton_sweep.store.result_store import ResultStore
from tests.fixtures.synthetic_store import model_p50, row

BLOCKS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


def space(configs: int) -> list[dict]:
    """`configs` configs (at most 250) of BLOCK_SIZE x num_warps x num_stages, blocks varying fastest."""
    grid = itertools.product((1, 2, 3, 4, 5), (4, 8, 2, 16, 1), BLOCKS)
    return [{"BLOCK_SIZE": b, "num_warps": w, "num_stages": s} for s, w, b in itertools.islice(grid, configs)]


def sweep_rows(count: int, configs: int, dtype: str, rng: np.random.Generator) -> list[dict]:
    """Every row of one dtype: a template row of the fixture's, its fields set per (shape, config); each
    p50 the fixture's model jittered by 5%, so that winners and covering sets vary."""
    shapes = [(8192, 200 + (7800 * i) // count) for i in range(count)]
    ok = row(f"scale_{count}", "triton", shapes[0], {"BLOCK_SIZE": 8192}, 1.0, rng, dtype=dtype, n=3)
    pruned = row(f"scale_{count}", "triton", shapes[0], {"BLOCK_SIZE": 128}, None, rng, status="pruned",
                 dtype=dtype)
    rows = []
    for shape in shapes:
        jitter = np.exp(rng.normal(0.0, 0.05, configs))
        for config, factor in zip(space(configs), jitter):
            key = Trial("softmax", "triton", shape, dtype, config).key
            if config["BLOCK_SIZE"] < shape[1]:
                rows.append({**pruned, "trial_key": key, "shape": list(shape), "config": config})
                continue
            p50 = float(model_p50(shape, config) * factor)
            rows.append({**ok, "trial_key": key, "shape": list(shape), "config": config, "p50_us": p50,
                         "gbps": 4 * shape[0] * shape[1] / p50 / 1e3})
    return rows


def build(path: Path, count: int, configs: int) -> int:
    store = ResultStore(path)
    rng = np.random.default_rng(count)
    total = 0
    for dtype in ("float16", "bfloat16"):
        rows = sweep_rows(count, configs, dtype, rng)
        for start in range(0, len(rows), 50_000):
            store.append_many(rows[start:start + 50_000])
        total += len(rows)
    store.close()
    return total


def export_once(path: Path) -> dict:
    """Load the store and export it, in this process: seconds and peak resident MB."""
    import torch  # noqa: F401  (the sweep's process holds it before its finish: not the export's time)
    from triton_sweep.export import export_kernel

    store = ResultStore(path)
    frame = store.load()
    store.close()
    loaded_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    began = time.perf_counter()
    export_kernel(frame, "softmax", path.parent / "exports")
    seconds = time.perf_counter() - began
    peak = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return {"rows": len(frame), "seconds": seconds, "loaded_mb": loaded_mb, "peak_mb": peak / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", type=int, default=[40, 320, 2000])
    parser.add_argument("--configs", type=int, default=250)
    parser.add_argument("--export", help=argparse.SUPPRESS)  # a store to export, in the child process
    args = parser.parse_args()
    if args.export:
        print(json.dumps(export_once(Path(args.export))))
        return
    lines = ["| shapes | rows | build s | export s | MB loaded | peak MB |", "|---|---|---|---|---|---|"]
    for count in args.shapes:
        with tempfile.TemporaryDirectory() as work:
            path = Path(work) / "results.sqlite"
            began = time.perf_counter()
            build(path, count, args.configs)
            built = time.perf_counter() - began
            child = subprocess.run([sys.executable, "-m", "triton_sweep.benchmarks.bench_export_scale",
                                    "--export", str(path)], capture_output=True, text=True, check=True)
            got = json.loads(child.stdout.strip().splitlines()[-1])
        lines.append(f"| {count} | {got['rows']} | {built:.0f} | {got['seconds']:.1f} | "
                     f"{got['loaded_mb']:.0f} | {got['peak_mb']:.0f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()

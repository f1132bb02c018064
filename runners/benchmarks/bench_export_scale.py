"""How the export's time grows with the number of measured shapes (a benchmark, not a test; no GPU):
prints the table BENCHMARKS.md records.

    python -m triton_sweep.benchmarks.bench_export_scale [--shapes 15 30 60 120]

Each count N: a synthetic softmax sweep (tests/fixtures/synthetic_store.py: made-up latencies, no kernel run)
at N shapes 8192 x cols, the cols evenly spaced over 200..8000 (aligned and unaligned sizes both), in
float16 and bfloat16, every config of its 16-config space; then triton_sweep.export.export_kernel on
its rows, timed: the covering set, the leave-one-out estimate (nested, where both kinds of size were
measured) and the files, as a sweep's finish writes them.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch  # noqa: F401  (imported by the sweep's process before its finish: not part of the export's time)

from triton_sweep.export import export_kernel
from triton_sweep.store.result_store import ResultStore
from tests.fixtures.synthetic_store import softmax_sweep


def export_seconds(count: int, work: Path) -> tuple[int, float]:
    store = ResultStore(work / "results.sqlite")
    shapes = tuple((8192, 200 + (7800 * i) // count) for i in range(count))
    for dtype in ("float16", "bfloat16"):
        softmax_sweep(store, f"scale_{count}", shapes=shapes, finalists=False, dtype=dtype)
    frame = store.load(sweep_id=f"scale_{count}")
    store.close()
    began = time.perf_counter()
    export_kernel(frame, frame["kernel"].iloc[0], work / "exports")
    return len(frame), time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", type=int, default=[15, 30, 60, 120])
    counts = parser.parse_args().shapes
    lines = ["| shapes | rows | export s |", "|---|---|---|"]
    for count in counts:
        with tempfile.TemporaryDirectory() as work:
            rows, seconds = export_seconds(count, Path(work))
        lines.append(f"| {count} | {rows} | {seconds:.1f} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

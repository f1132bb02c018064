"""What the check every command makes of a store at open costs (a benchmark, not a test).

    python -m triton_sweep.benchmarks.bench_store_check [--rows 10000 100000] [--samples 100] [--dir /tmp]
    python -m triton_sweep.benchmarks.bench_store_check --race 30

Writes a store of that many rows (each with its samples, as a trial row carries them), then times
`damage_of` (its header, then SQLite's integrity check of every page) and the whole open of a
ResultStore, five times each, file in the page cache: the median seconds, in a table. --race: for that
many seconds two processes append rows as fast as they can while this one checks the store again and
again; every problem found is a false one.
"""
from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from triton_sweep.store.damage import damage_of
from triton_sweep.store.result_store import ResultStore
from tests.fixtures.synthetic_store import row


def _store(path: Path, rows: int, samples: int) -> None:
    store = ResultStore(path)
    base = row("s", "triton", (4096, 1024), {"BLOCK_SIZE": 1024, "num_warps": 4, "num_stages": 1}, 8.0,
               np.random.default_rng(0), n=samples)
    for start in range(0, rows, 5000):
        store.append_many([{**base, "trial_key": f"k{i}", "sweep_id": f"s{i // 1000}"}
                           for i in range(start, min(rows, start + 5000))])
    store.close()


def _median_s(action, times: int = 5) -> float:
    spent = []
    for _ in range(times):
        began = time.perf_counter()
        action()
        spent.append(time.perf_counter() - began)
    return statistics.median(spent)


def _append_for(path: Path, seconds: float, seed: int) -> None:
    store = ResultStore(path)
    base = row("s", "triton", (4096, 1024), {"BLOCK_SIZE": 1024, "num_warps": 4, "num_stages": 1}, 8.0,
               np.random.default_rng(seed), n=50)
    end, count = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        store.append({**base, "trial_key": f"{seed}-{count}", "sweep_id": f"writer{seed}"})
        count += 1
    store.close()


def race(seconds: float, folder: str) -> None:
    """damage_of against two busy writers: how many checks, and what each problem said."""
    path = Path(folder) / "race.sqlite"
    ResultStore(path).close()
    writers = [multiprocessing.Process(target=_append_for, args=(path, seconds, seed)) for seed in (1, 2)]
    for writer in writers:
        writer.start()
    checks, problems, end = 0, {}, time.monotonic() + seconds
    while time.monotonic() < end:
        problem = damage_of(path)
        checks += 1
        if problem:
            problems[problem[:60]] = problems.get(problem[:60], 0) + 1
    for writer in writers:
        writer.join()
    print(f"| checks | rows written | problems |\n|---|---|---|\n| {checks} | "
          f"{len(ResultStore(path).load())} | {problems or 0} |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--dir", default=None, help="where the stores are written (default: a temp folder)")
    parser.add_argument("--race", type=float, metavar="SECONDS", help="check against two busy writers")
    args = parser.parse_args(argv)
    if args.race:
        with tempfile.TemporaryDirectory(dir=args.dir) as folder:
            race(args.race, folder)
        return
    print("| rows | MB | damage_of, s | ResultStore open + close, s |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        for rows in args.rows:
            path = Path(folder) / f"store{rows}.sqlite"
            _store(path, rows, args.samples)
            checked = _median_s(lambda: damage_of(path))
            opened = _median_s(lambda: ResultStore(path).close())
            print(f"| {rows} | {path.stat().st_size / 1e6:.0f} | {checked:.3f} | {opened:.3f} |", flush=True)


if __name__ == "__main__":
    main()

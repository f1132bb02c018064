"""Benchmark (CPU): a seeded Monte Carlo of compare's rule, runs drawn with more between-run spread than any
rule may assume (issue 32):

    python -m runners.benchmarks.bench_between_runs [--comparisons 1000] [--seed 2026]

Each run is drawn as a GPU gives it: per shape, `repetitions` placements of its inputs that every row of
the shape shares (sd `spread`, the repetition spread), each repetition median with its own sampling noise
(0.1%); per run, an offset every row shares (`run`: what a second machine of the kind moves a whole run
by) or, in the per-shape cells, an offset per shape that repetitions do not see (`per_shape`). A
calibration of 6 such runs (between_runs.calibrate) gives the rule its Spread, drawn anew for every 20
comparisons; then BASE and NEW runs are compared by between_runs.judge with the gate at 2%:
- unchanged: NEW as BASE; the share of comparisons that fail the gate (a false alarm);
- one shape slowed 5%: our rows at one shape 5% slower; the share that fail it (caught);
- every shape slowed 3%: our rows at every shape (not the baselines) 3% slower; the share caught.
Cells: run-level spread 0.3%, 1%, 1.5% and a per-shape spread of 1%; repetition spread 0.3%, 0.6%,
1.2%; 4 judged rows (4 shapes, the winner of each) and 40 (10 shapes, 4 finalists each); every shape
has 4 finalists and 2 baselines, all re-timed in 5 repetitions. Unchanged code is compared 4x as often
(its rate is near the 1% it is held to). The table prints last; then the variance of the p50 of the
pooled samples against that of the mean of the repetitions' medians (P50_VARIANCE).
"""
from __future__ import annotations

import argparse
import itertools
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from runners.results import between_runs as rule_of

SAMPLING = 0.001  # sd of ln of one repetition's median about its placement's (CUPTI: 0.02-0.2%)
REPETITIONS = 5
FINALISTS, BASELINES = 4, 2
CALIBRATION_RUNS = 6
GATE = 0.02
OURS = ("GPU", "kernel", "triton")
UNCHANGED_MORE = 4  # the unchanged scenario takes this many times the comparisons: its rate is near 1%
SCENARIOS = {"unchanged": (0, 0.0), "one shape slowed 5%": (1, math.log(1.05)),
             "every shape slowed 3%": (None, math.log(1.03))}


@dataclass(frozen=True)
class Cell:
    run: float  # sd of the offset a whole run shares
    per_shape: float  # sd of each shape's own offset in a run
    spread: float  # sd of a repetition's placement
    shapes: int
    judged_per_shape: int

    @property
    def judged(self) -> int:
        return self.shapes * self.judged_per_shape

    @property
    def noise(self) -> str:
        return f"per-shape {100 * self.per_shape:g}%" if self.per_shape else f"run {100 * self.run:g}%"


def cells(spreads=(0.003, 0.006, 0.012)) -> list[Cell]:
    noises = [(0.003, 0.0), (0.01, 0.0), (0.015, 0.0), (0.0, 0.01)]
    sizes = [(4, 1), (10, 4)]
    return [Cell(run, per_shape, spread, shapes, judged) for (run, per_shape), spread, (shapes, judged)
            in itertools.product(noises, spreads, sizes)]


def draw_run(cell: Cell, rng: np.random.Generator, slowed: tuple = (0, 0.0)) -> dict:
    """{trial: RunFigure} of one run; `slowed`: (how many shapes, None for all; ln of the slowdown) of
    our rows."""
    shapes_slowed, by = slowed
    rows = FINALISTS + BASELINES
    g = np.arange(cell.shapes)[:, None, None]
    j = np.arange(rows)[None, :, None]
    slow = by * (j < FINALISTS) * (g < (cell.shapes if shapes_slowed is None else shapes_slowed))
    offsets = rng.normal(0.0, cell.run) + rng.normal(0.0, cell.per_shape, (cell.shapes, 1, 1))
    placements = rng.normal(0.0, cell.spread, (cell.shapes, 1, REPETITIONS))
    logs = (np.log(5.0 + 5 * g) + 0.02 * j + slow + offsets + placements
            + rng.normal(0.0, SAMPLING, (cell.shapes, rows, REPETITIONS)))
    spreads = logs.std(axis=2, ddof=1)
    return {(a, b): rule_of.RunFigure(domain(b), ("float16", a),
                                      rule_of.Figure(tuple(logs[a, b]), REPETITIONS, float(spreads[a, b])))
            for a in range(cell.shapes) for b in range(rows)}


def domain(row: int) -> tuple:
    """Our finalists share a domain; each baseline is a provider of its own."""
    return ("GPU", "kernel", "triton" if row < FINALISTS else f"baseline{row}")


def pairs_of(cell: Cell, base: dict, new: dict) -> list:
    return [rule_of.Pair(b.domain, b.group, b.figure, new[key].figure, math.exp(b.figure.value),
                         judged=key[1] < cell.judged_per_shape) for key, b in base.items()]


def failure_rate(cell: Cell, scenario: str, comparisons: int, rng: np.random.Generator) -> float:
    """The share of `comparisons` that fail the gate (at 2%, alpha 1%), each with a calibration of its own
    (the rule's promise is over calibrations too)."""
    rule = rule_of.Rule(alpha=0.01, min_effect=0.01, fail_on_slow=GATE)
    failures = 0
    for _ in range(comparisons):
        spreads = rule_of.calibrate([draw_run(cell, rng) for _ in range(CALIBRATION_RUNS)])
        base, new = draw_run(cell, rng), draw_run(cell, rng, SCENARIOS[scenario])
        pairs = pairs_of(cell, base, new)
        judgement = rule_of.judge(pairs, rule, spreads)
        rows, shifts = rule_of.gate_failures(judgement, pairs, rule)
        failures += bool(rows or shifts)
    return failures / comparisons


def cell_rates(cell: Cell, comparisons: int, seed: int) -> list[float]:
    """The gate's failure rate in each scenario of one cell (its own seeded draws)."""
    rng = np.random.default_rng(seed)
    return [failure_rate(cell, scenario, comparisons * (UNCHANGED_MORE if scenario == "unchanged" else 1),
                         rng) for scenario in SCENARIOS]


def table(comparisons: int, seed: int, chosen: list[Cell], jobs: int) -> list[str]:
    lines = ["| between runs | repetition spread | judged rows | unchanged: gate fails | one shape 5% "
             "slower: caught | every shape 3% slower: caught |", "|---|---|---|---|---|---|"]
    with ProcessPoolExecutor(jobs) as pool:
        seeds = [seed + i for i in range(len(chosen))]
        rates = pool.map(cell_rates, chosen, [comparisons] * len(chosen), seeds)
        for cell, cell_rate in zip(chosen, rates):
            lines.append(f"| {cell.noise} | {100 * cell.spread:g}% | {cell.judged} | "
                         + " | ".join(f"{100 * r:.1f}%" for r in cell_rate) + " |")
            print(lines[-1], flush=True)
    return lines


def p50_variance(rng: np.random.Generator, draws: int = 4000, samples: int = 40) -> list[str]:
    """The variance of ln(p50 of the pooled samples) over that of the mean of ln(repetition medians),
    with samples spread like CUPTI's around each placement (0.5%, a 5% tail 1.5x slower)."""
    lines = ["| repetition spread | var(ln p50) / var(mean ln rep medians) |", "|---|---|"]
    for spread in (0.003, 0.006, 0.012, 0.02):
        p50s, means = [], []
        for _ in range(draws):
            placements = rng.normal(0.0, spread, REPETITIONS)
            blocks = [np.exp(p + rng.normal(0.0, 0.005, samples)) for p in placements]
            for block in blocks:
                block[rng.random(samples) < 0.05] *= 1.5
            p50s.append(math.log(np.median(np.concatenate(blocks))))
            means.append(np.mean([math.log(np.median(b)) for b in blocks]))
        lines.append(f"| {100 * spread:g}% | {np.var(p50s) / np.var(means):.2f} |")
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--comparisons", type=int, default=1000, help="per cell and scenario")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--jobs", type=int, default=os.cpu_count(), help="processes (cells run in parallel)")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    lines = table(args.comparisons, args.seed, cells(), args.jobs)
    lines += [""] + p50_variance(np.random.default_rng(args.seed))
    print(f"\n{args.comparisons} comparisons per cell and scenario ({UNCHANGED_MORE}x unchanged), "
          f"seed {args.seed}, "
          f"{time.perf_counter() - began:.0f} s\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

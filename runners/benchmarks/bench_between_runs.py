"""Benchmark (CPU): a seeded Monte Carlo of compare's rule, runs drawn with more between-run spread than any
rule may assume (issue 32):

    python -m runners.benchmarks.bench_between_runs [--comparisons 1000] [--seed 2026] [--jobs N]

Each run is drawn as a GPU gives it: per shape, `repetitions` placements of its inputs that every row of
the shape shares (sd `spread`, the repetition spread), each repetition median with its own sampling noise
(0.1%); per run, an offset every row shares (`run`: what a second machine of the kind moves a whole run
by) or, in the per-shape cells, an offset per shape that repetitions do not see (`per_shape`). Every
comparison draws its own calibration of 6 such runs (between_runs.calibrate: the rule's promise is over
calibrations too); then BASE and NEW runs are compared by between_runs.judge:
- unchanged: NEW as BASE; the share of comparisons that fail the gate at 2% (a false alarm), and at 0%
  (any judged row or shift SLOW);
- one shape slowed 5%: our rows at one shape 5% slower; the share that fail the gate at 2% (caught);
- every shape slowed 3%: our rows at every shape (not the baselines) 3% slower; the share caught.
Cells: run-level spread 0.3%, 1%, 1.5% and a per-shape spread of 1%; repetition spread 0.3%, 0.6%,
1.2%; 4 judged rows (4 shapes, the winner of each) and 40 (10 shapes, 4 finalists each); every shape
has 4 finalists and 2 baselines, all re-timed in 5 repetitions. Then cells that break what the first
table keeps equal: NEW re-timed in 3 repetitions at twice the spread (a re-validation with other
settings); judged rows timed once, in screening (their median known to ±2%); a calibration of one shape
judging ten. Unchanged code is compared 4x as often (its rate is near the 1% it is held to). The tables
print last; then the variance of the p50 of the pooled samples against that of the mean of the
repetitions' medians (P50_VARIANCE).
"""
from __future__ import annotations

import argparse
import itertools
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Optional

import numpy as np

from runners.results import between_runs as rule_of

SAMPLING = 0.001  # sd of ln of one repetition's median about its placement's (CUPTI: 0.02-0.2%)
SCREEN_PRECISION = 0.02  # a screening row's median: timing=screen stops at 2% (95% half-width)
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
    new_repetitions: int = REPETITIONS  # NEW's, where it was re-timed otherwise
    new_spread: float = 1.0  # NEW's repetition spread, times BASE's
    screened: int = 0  # rows a shape measured in screening only (one median), every one judged
    calibration_shapes: Optional[int] = None  # the calibration's runs measured this many shapes

    @property
    def judged(self) -> int:
        return self.shapes * (self.judged_per_shape + self.screened)

    @property
    def noise(self) -> str:
        return f"per-shape {100 * self.per_shape:g}%" if self.per_shape else f"run {100 * self.run:g}%"


def cells(spreads=(0.003, 0.006, 0.012)) -> list[Cell]:
    noises = [(0.003, 0.0), (0.01, 0.0), (0.015, 0.0), (0.0, 0.01)]
    sizes = [(4, 1), (10, 4)]
    return [Cell(run, per_shape, spread, shapes, judged) for (run, per_shape), spread, (shapes, judged)
            in itertools.product(noises, spreads, sizes)]


UNEQUAL = {"new_repetitions": 3, "new_spread": 2.0}  # NEW re-timed otherwise than BASE
BROKEN = [  # (what the cell breaks, the cell)
    ("NEW in 3 repetitions, twice the spread", Cell(0.01, 0.0, 0.006, 4, 1, **UNEQUAL)),
    ("NEW in 3 repetitions, twice the spread", Cell(0.01, 0.0, 0.006, 10, 4, **UNEQUAL)),
    ("judged rows timed once (screening)", Cell(0.01, 0.0, 0.006, 4, 1, screened=4)),
    ("judged rows timed once (screening)", Cell(0.01, 0.0, 0.006, 10, 4, screened=4)),
    ("a calibration of one shape", Cell(0.0, 0.01, 0.006, 10, 4, calibration_shapes=1)),
]


def draw_run(cell: Cell, rng: np.random.Generator, slowed: tuple = (0, 0.0), new: bool = False,
             shapes: Optional[int] = None) -> dict:
    """{trial: RunFigure} of one run; `slowed`: (how many shapes, None for all; ln of the slowdown) of
    our rows; `new`: timed as the cell's NEW side is; `shapes`: only the first so many."""
    shapes_slowed, by = slowed
    shapes = shapes or cell.shapes
    repetitions = cell.new_repetitions if new else REPETITIONS
    spread = cell.spread * (cell.new_spread if new else 1.0)
    rows = FINALISTS + BASELINES
    g = np.arange(shapes)[:, None, None]
    j = np.arange(rows)[None, :, None]
    ours = (j < FINALISTS) * (g < (shapes if shapes_slowed is None else shapes_slowed))
    offsets = rng.normal(0.0, cell.run) + rng.normal(0.0, cell.per_shape, (shapes, 1, 1))
    placements = rng.normal(0.0, spread, (shapes, 1, repetitions))
    logs = (np.log(5.0 + 5 * g) + 0.02 * j + by * ours + offsets + placements
            + rng.normal(0.0, SAMPLING, (shapes, rows, repetitions)))
    spreads = logs.std(axis=2, ddof=1)
    run = {(a, b): rule_of.RunFigure(domain(b), ("float16", a),
                                     rule_of.Figure(tuple(logs[a, b]), repetitions, float(spreads[a, b])))
           for a in range(shapes) for b in range(rows)}
    for a, b in itertools.product(range(shapes), range(cell.screened)):  # one median on the first placement
        slow = by * (shapes_slowed is None or a < shapes_slowed)
        value = (math.log(5.0 + 5 * a) + 0.1 + 0.02 * b + slow
                 + offsets[a, 0, 0] + placements[a, 0, 0] + rng.normal(0.0, SCREEN_PRECISION / 1.96))
        run[(a, rows + b)] = rule_of.RunFigure(OURS, ("float16", a), rule_of.Figure.of(
            math.exp(value), precision=SCREEN_PRECISION))
    return run


def domain(row: int) -> tuple:
    """Our finalists and screened rows share a domain; each baseline is a provider of its own."""
    return OURS if row < FINALISTS or row >= FINALISTS + BASELINES else ("GPU", "kernel", f"baseline{row}")


def pairs_of(cell: Cell, base: dict, new: dict) -> list:
    return [rule_of.Pair(b.domain, b.group, b.figure, new[key].figure, math.exp(b.figure.value),
                         judged=key[1] < cell.judged_per_shape or key[1] >= FINALISTS + BASELINES)
            for key, b in base.items()]


def failure_rates(cell: Cell, scenario: str, comparisons: int, rng: np.random.Generator) -> tuple:
    """The shares of `comparisons` that fail the gate at 2% and at 0% (alpha 1%), each with a
    calibration of its own (the rule's promise is over calibrations too)."""
    rules = [rule_of.Rule(alpha=0.01, min_effect=0.01, fail_on_slow=gate) for gate in (GATE, 0.0)]
    failures = [0, 0]
    for _ in range(comparisons):
        runs = [draw_run(cell, rng, shapes=cell.calibration_shapes) for _ in range(CALIBRATION_RUNS)]
        spreads = rule_of.calibrate(runs)
        base, new = draw_run(cell, rng), draw_run(cell, rng, SCENARIOS[scenario], new=True)
        pairs = pairs_of(cell, base, new)
        judgement = rule_of.judge(pairs, rules[0], spreads)
        for index, rule in enumerate(rules):
            rows, shifts = rule_of.gate_failures(judgement, pairs, rule)
            failures[index] += bool(rows or shifts)
    return tuple(f / comparisons for f in failures)


def cell_rates(cell: Cell, comparisons: int, seed: int) -> list[float]:
    """Unchanged at 2% and 0%, then the slowdowns at 2%: one cell's draws, seeded."""
    rng = np.random.default_rng(seed)
    rates = list(failure_rates(cell, "unchanged", comparisons * UNCHANGED_MORE, rng))
    return rates + [failure_rates(cell, scenario, comparisons, rng)[0] for scenario in list(SCENARIOS)[1:]]


HEAD = ("judged rows | unchanged: gate fails at 2% | at 0% | one shape 5% slower: caught | every shape 3% "
        "slower: caught |")


def table(comparisons: int, seed: int, jobs: int) -> list[str]:
    chosen = cells() + [cell for _, cell in BROKEN]
    with ProcessPoolExecutor(jobs) as pool:
        seeds = [seed + i for i in range(len(chosen))]
        rates = list(pool.map(cell_rates, chosen, [comparisons] * len(chosen), seeds))
    lines = ["| between runs | repetition spread | " + HEAD, "|---|---|---|---|---|---|---|"]
    for cell, cell_rate in zip(chosen, rates[:len(cells())]):
        lines.append(f"| {cell.noise} | {100 * cell.spread:g}% | {cell.judged} | "
                     + " | ".join(f"{100 * r:.1f}%" for r in cell_rate) + " |")
    lines += ["", "| what breaks | between runs | repetition spread | " + HEAD, "|---" * 8 + "|"]
    for (name, cell), cell_rate in zip(BROKEN, rates[len(cells()):]):
        lines.append(f"| {name} | {cell.noise} | {100 * cell.spread:g}% | {cell.judged} | "
                     + " | ".join(f"{100 * r:.1f}%" for r in cell_rate) + " |")
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
    lines = table(args.comparisons, args.seed, args.jobs)
    lines += [""] + p50_variance(np.random.default_rng(args.seed))
    print(f"\n{args.comparisons} comparisons per cell and scenario ({UNCHANGED_MORE}x unchanged), "
          f"seed {args.seed}, {time.perf_counter() - began:.0f} s\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

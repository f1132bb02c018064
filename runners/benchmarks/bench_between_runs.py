"""Benchmark (CPU): a seeded Monte Carlo of compare's rule, runs drawn with more between-run spread than any
rule may assume:

    python -m triton_sweep.benchmarks.bench_between_runs [--comparisons 1000] [--seed 2026] [--jobs N]
        [--cells grid broken fleet audit]

A run as a GPU gives it: per shape, `repetitions` placements every row of the shape shares, each median
with its own sampling noise; per run, an offset every row shares and one per shape. Every comparison
draws its own calibration of 6 runs; BASE and NEW are judged by between_runs.judge: unchanged (the share
failing the gate at 2% and 0%), one shape of ours slowed 5%, every shape slowed 3% (the shares caught).
Cells: a grid of noises; what breaks its equal sides (BROKEN); a fleet's machine effects the calibration
did not see (FLEET), with and without baselines; where an independent audit broke the rule (AUDIT)."""
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

from triton_sweep.compare import between_runs as rule_of
from triton_sweep.compare.calibration import calibrate
from triton_sweep.compare.figures import Figure, Pair, RunFigure

SAMPLING = 0.001  # sd of ln of one repetition's median about its placement's (CUPTI: 0.02-0.2%)
SCREEN_PRECISION = 0.02  # a screening row's median: timing=screen stops at 2% (95% half-width)
REPETITIONS = 5
FINALISTS, BASELINES = 4, 2
CALIBRATION_RUNS = 6
GATE = 0.02
MEMORY, COMPUTE = "memory-bound", "compute-bound"
OURS = ("GPU", "kernel0", "triton")
UNCHANGED_MORE = 4  # the unchanged scenario takes this many times the comparisons: its rate is near 1%
SCENARIOS = {"unchanged": (0, 0.0), "one shape slowed 5%": (1, math.log(1.05)),
             "every shape slowed 3%": (None, math.log(1.03))}


@dataclass(frozen=True)
class Cell:
    run: float  # sd of the offset a whole run shares
    per_shape: float  # sd of each shape's own offset in a run (every provider's at the shape)
    spread: float  # sd of a repetition's placement
    shapes: int  # a kernel's
    judged_per_shape: int
    new_repetitions: int = REPETITIONS  # NEW's, where it was re-timed otherwise
    new_spread: float = 1.0  # NEW's repetition spread, times BASE's
    screened: int = 0  # rows a shape measured in screening only (one median), every one judged
    calibration_shapes: Optional[int] = None  # the calibration's runs measured this many shapes
    baselines: int = BASELINES  # providers beside ours at every shape (the controls)
    memory: tuple = (0.0,)  # per kernel, the share of its shapes (the smallest) that are memory-bound
    new_memory: float = 0.0  # NEW's machine moves every memory-bound row by this (ln), the calibration's not
    new_size: float = 0.0  # NEW's machine moves each shape by 0 to this (ln), growing with its size
    size_scale: tuple = (1.0, 1.0)  # a run's shift times this at the smallest shape to the largest
    quiet: tuple = (1.0, 1.0)  # the calibration's run and per-shape spreads are the judged runs' over these
    tails: str = "normal"  # a run's shift: normal, t3 (Student's t, 3 d.o.f., sd `run`), or bimodal:P
    # (+2% with probability P, else 0)
    control_share: float = 1.0  # NEW's machine moves the baselines by this share of what it moves ours by
    new_baselines: float = 0.0  # NEW's baselines moved by this (ln) at every shape, ours not: an upgrade
    own: float = 0.0  # the share of per_shape's variance that is each provider's own, not the shape's
    slowed_controls: float = 0.0  # where ours is slowed, the baselines at those shapes too, by this (ln)

    @property
    def judged(self) -> int:
        return len(self.memory) * self.shapes * (self.judged_per_shape + self.screened)

    @property
    def noise(self) -> str:
        parts = [f"run {100 * self.run:g}%" if self.run else "", f"per-shape {100 * self.per_shape:g}%"
                 if self.per_shape else ""]
        return ", ".join(filter(None, parts)) or "none"


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
FLEET = {  # what a fleet breaks: a machine effect the calibration did not see
    "NEW's machine: memory-bound shapes +1.5%": {"memory": (0.5,), "new_memory": 0.015},
    "NEW's machine: memory-bound shapes +1.25%": {"memory": (0.5,), "new_memory": 0.0125},
    "two kernels, the memory-bound one +1.5% on NEW": {"memory": (1.0, 0.0), "new_memory": 0.015},
    "two kernels, the memory-bound one +1% on NEW": {"memory": (1.0, 0.0), "new_memory": 0.01},
    "a run's shift x0.25..1.75 with shape size": {"size_scale": (0.25, 1.75)},
    "NEW's machine +0..2% with shape size": {"new_size": 0.02},
    "calibrated on a quieter machine: run and per-shape spread x1.5": {"quiet": (1.5, 1.5)},
    "calibrated on a quieter machine: run and per-shape spread x2": {"quiet": (2.0, 2.0)},
    "calibrated on a quieter machine: per-shape spread x2": {"quiet": (1.0, 2.0)},
    "heavy-tailed run shifts (t, 3 d.o.f.)": {"tails": "t3"},
    "bimodal runs (+2% with probability 0.1)": {"tails": "bimodal:0.1"},
    "bimodal runs (+2% with probability 0.2)": {"tails": "bimodal:0.2"},
}


AUDIT = {  # where an independent audit's model of runs broke the gate (issue 74): the baselines not moving
    # quite as ours, an upgrade that moved them, noise of a provider's own, a regression that moved them too
    "NEW's machine: memory-bound +2%, the baselines 0.75 as much": {"memory": (0.5,), "new_memory": 0.02,
                                                                    "control_share": 0.75},
    "NEW's machine: memory-bound +3%, the baselines 0.9 as much": {"memory": (0.5,), "new_memory": 0.03,
                                                                   "control_share": 0.9},
    "memory-bound +2.5% on NEW, a torch upgrade: baselines 0.5% faster": {
        "memory": (0.5,), "new_memory": 0.025, "new_baselines": math.log(0.995)},
    "memory-bound +2.5% on NEW, a torch upgrade: baselines 1% faster": {
        "memory": (0.5,), "new_memory": 0.025, "new_baselines": math.log(0.99)},
    "calibrated 3x quieter, half of each shape's own part the provider's own": {"quiet": (3.0, 3.0),
                                                                               "own": 0.5},
    "the slowed shapes' baselines +4% too": {"slowed_controls": math.log(1.04)},
}


def fleet_cells(conditions: dict = FLEET) -> list[tuple[str, Cell]]:
    """The FLEET conditions on runs that differ by 1% as a whole and 0.5% per shape, at both sizes, with
    baselines at every shape (the controls), then without (an export sweep's default)."""
    return [(f"{name}{'' if baselines else ', no baselines'}",
             Cell(0.01, 0.005, 0.006, shapes, judged, baselines=baselines, **changes))
            for baselines in (BASELINES, 0) for name, changes in conditions.items()
            for shapes, judged in ((4, 1), (10, 4))]


def _run_shift(cell: Cell, rng: np.random.Generator, sd: float) -> float:
    if cell.tails == "t3":
        return float(rng.standard_t(3)) * sd / math.sqrt(3)  # t3's variance is 3
    if cell.tails.startswith("bimodal:"):
        return 0.02 * float(rng.random() < float(cell.tails.split(":")[1]))
    return float(rng.normal(0.0, sd))


def draw_run(cell: Cell, rng: np.random.Generator, slowed: tuple = (0, 0.0), new: bool = False,
             shapes: Optional[int] = None, calibration: bool = False) -> dict:
    """{trial: RunFigure} of one run; `slowed`: (how many shapes, None for all; ln of the slowdown) of
    our rows; `new`: timed as the cell's NEW side is, on NEW's machine; `shapes`: only the first so many;
    `calibration`: a run of the calibration (on its quieter machine where the cell says so)."""
    shapes_slowed, by = slowed
    shapes = shapes or cell.shapes
    repetitions = cell.new_repetitions if new else REPETITIONS
    spread = cell.spread * (cell.new_spread if new else 1.0)
    run_sd, shape_sd = (cell.run / cell.quiet[0], cell.per_shape / cell.quiet[1]) if calibration else (
        cell.run, cell.per_shape)
    rows = FINALISTS + cell.baselines
    g = np.arange(shapes)[:, None, None]
    j = np.arange(rows)[None, :, None]
    ours = (j < FINALISTS) * (g < (shapes if shapes_slowed is None else shapes_slowed))
    size = np.linspace(0.0, 1.0, shapes)[:, None, None] if shapes > 1 else np.zeros((1, 1, 1))
    run = {}
    for k, memory_share in enumerate(cell.memory):
        kinds = [MEMORY if a < round(memory_share * cell.shapes) else COMPUTE for a in range(shapes)]
        memory = np.array([kind == MEMORY for kind in kinds], dtype=float)[:, None, None]
        scale = cell.size_scale[0] + (cell.size_scale[1] - cell.size_scale[0]) * size
        shared_sd, own_sd = shape_sd * math.sqrt(1 - cell.own), shape_sd * math.sqrt(cell.own)
        offsets = _run_shift(cell, rng, run_sd) * scale + rng.normal(0.0, shared_sd, (shapes, 1, 1))
        baseline = (j >= FINALISTS).astype(float)
        if own_sd:  # each provider's own part: ours (every finalist) one, each baseline one
            provider = np.where(j < FINALISTS, 0, j - FINALISTS + 1)
            offsets = offsets + rng.normal(0.0, own_sd, (shapes, 1 + cell.baselines, 1))[:, provider[0, :, 0]]
        if new:
            effect = cell.new_memory * memory + cell.new_size * size
            shares = 1 - baseline * (1 - cell.control_share)  # ours 1, the baselines control_share
            offsets = offsets + effect * shares + cell.new_baselines * baseline
        placements = rng.normal(0.0, spread, (shapes, 1, repetitions))
        slowed_shapes = g < (shapes if shapes_slowed is None else shapes_slowed)
        if by and cell.slowed_controls:  # a slowdown that moved the baselines at its shapes too
            offsets = offsets + cell.slowed_controls * baseline * slowed_shapes * (k == 0)
        logs = (np.log(5.0 + 5 * g) + 0.02 * j + by * ours * (k == 0) + offsets + placements
                + rng.normal(0.0, SAMPLING, (shapes, rows, repetitions)))
        spreads = logs.std(axis=2, ddof=1)
        for a, b in itertools.product(range(shapes), range(rows)):
            run[(k, a, b)] = figure(k, a, b, kinds[a], Figure(tuple(logs[a, b]), repetitions,
                                                                    float(spreads[a, b])))
        for a, b in itertools.product(range(shapes), range(cell.screened if k == 0 else 0)):
            slow = by * (shapes_slowed is None or a < shapes_slowed)  # one median on the first placement
            value = (math.log(5.0 + 5 * a) + 0.1 + 0.02 * b + slow
                     + offsets[a, 0, 0] + placements[a, 0, 0] + rng.normal(0.0, SCREEN_PRECISION / 1.96))
            run[(k, a, rows + b)] = figure(k, a, 0, kinds[a], Figure.of(math.exp(value),
                                                                               precision=SCREEN_PRECISION))
    return run


def figure(kernel: int, shape: int, row: int, kind: str, value: Figure) -> RunFigure:
    """Our finalists and screened rows share a domain; each baseline is a provider of its own."""
    provider = "triton" if row < FINALISTS else f"baseline{row}"
    domain, group = ("GPU", f"kernel{kernel}", provider), ("float16", shape)
    return RunFigure(domain, group, value, ("GPU", f"kernel{kernel}", *group), kind)


def pairs_of(cell: Cell, base: dict, new: dict) -> list:
    return [Pair(b.domain, b.group, b.figure, new[key].figure, math.exp(b.figure.value),
                         judged=key[2] < cell.judged_per_shape or key[2] >= FINALISTS + cell.baselines,
                         control=b.control, kind=b.kind)
            for key, b in base.items()]


def failure_rates(cell: Cell, scenario: str, comparisons: int, rng: np.random.Generator) -> tuple:
    """The shares of `comparisons` that fail the gate at 2% and at 0% (alpha 1%), each with a
    calibration of its own (the rule's promise is over calibrations too)."""
    rules = [rule_of.Rule(alpha=0.01, min_effect=0.01, fail_on_slow=gate) for gate in (GATE, 0.0)]
    failures = [0, 0]
    for _ in range(comparisons):
        runs = [draw_run(cell, rng, shapes=cell.calibration_shapes, calibration=True)
                for _ in range(CALIBRATION_RUNS)]
        spreads = calibrate(runs)
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


def groups() -> dict[str, list[tuple[str, Cell]]]:
    """The benchmark's cells by group, in the order their seeds follow."""
    return {"grid": [("", cell) for cell in cells()], "broken": BROKEN, "fleet": fleet_cells(),
            "audit": [(name, cell) for name, cell in fleet_cells(AUDIT) if cell.baselines]}


def table(comparisons: int, seed: int, jobs: int, chosen: tuple = ("grid", "broken", "fleet", "audit")
          ) -> list[str]:
    """The rates of the chosen groups' cells; a cell's seed is its place among all cells, whichever run."""
    numbered = [(group, i, name, cell) for i, (group, name, cell) in enumerate(
        (group, name, cell) for group, named in groups().items() for name, cell in named) if group in chosen]
    with ProcessPoolExecutor(jobs) as pool:
        rates = list(pool.map(cell_rates, [c for *_, c in numbered], [comparisons] * len(numbered),
                              [seed + i for _, i, _, _ in numbered]))
    lines = []
    for group in chosen:
        named = group != "grid"
        lines += ["", ("| what breaks | " if named else "| ") + "between runs | repetition spread | " + HEAD,
                  "|---" * (8 if named else 7) + "|"]
        for (of, _, name, cell), cell_rate in zip(numbered, rates):
            if of == group:
                lines.append((f"| {name} | " if named else "| ") + f"{cell.noise} | "
                             f"{100 * cell.spread:g}% | {cell.judged} | "
                             + " | ".join(f"{100 * r:.1f}%" for r in cell_rate) + " |")
    return lines[1:]


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
    parser.add_argument("--cells", nargs="+", choices=list(groups()), default=list(groups()),
                        help="the groups of cells to run (a cell's seed is the same in any choice)")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    lines = table(args.comparisons, args.seed, args.jobs, tuple(args.cells))
    lines += [""] + p50_variance(np.random.default_rng(args.seed))
    print(f"\n{args.comparisons} comparisons per cell and scenario ({UNCHANGED_MORE}x unchanged), "
          f"seed {args.seed}, {time.perf_counter() - began:.0f} s\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""Whether two runs differ: the rule runners.compare and runners.revalidate judge by.

The unit of replication is the run. The samples of one run share where its buffers landed, its clocks and
its neighbours, so their spread says nothing of how far a second run of the same code may fall (on an
H200 an unchanged re-run moved a 5 us softmax by 2.4% while a rank test of its samples gave p = 1e-28).
Three things move a row's figure between two runs, each measured where it can be:
- the placement of its buffers, and its own sampling: measured inside each run by repetitions (a trial's
  samples taken in blocks on buffers placed anew, runners/measure/timing.py). The figure compared is the
  mean of ln(each repetition's median) (`rep_p50s_us`), whose variance is s^2/R: s the spread of those
  logs, pooled over both sides' rows of the same provider, dtype and shape (they share each repetition's
  placement, so its degrees of freedom count once per placement: (R_base - 1) + (R_new - 1), not once
  per row), else over the provider's rows of the same size class of p50; R the repetitions;
- the shift a whole run shares (its machine, process, clock state): on a second machine of one kind every
  row of a kernel moves together (BENCHMARKS.md, 2026-11-24: a matmul by 1.6%). It is estimated from the
  data, per provider of a kernel on a GPU (a change of the kernel moves ours, not the baselines): the
  median over shapes of each shape's median ln(NEW/BASE), robust to regressions at fewer than half the
  shapes; every row is judged against it, and the shift itself once, against what runs of this kind of
  machine differ by; the variance of that median is simulated from each shape's (one noisy shape among
  quiet ones barely moves it);
- a per-shape part of the run's shift that repetitions do not show (each shape its own clock state): from
  the same calibration.
What runs of one kind of machine differ by (`Spread`: the sd of a run's shift and of the per-shape
part, with their degrees of freedom) is measured, never assumed: `calibrate` reads it off three or more
runs of the same sweep (compare's `--calibration`: the CI recipe runs the gated sweep six times on its
runner class), else the spread measured here per GPU model and kernel class is used (MEASURED; a GPU or
class not in it cannot have its shift judged, and the gate refuses rather than pass it silently).

The alternatives weighed (figures: BENCHMARKS.md, 2026-11-25):
- A stated run noise widening every row's threshold (the rule before issue 32, 0.5%): it held only while
  machines differ by less; an independent Monte Carlo with its own functions failed unchanged code in
  3-12% of comparisons where runs differ by 1-1.5%, and at 40 judged rows the 2 r^2 term alone made every
  threshold at least 3%. With the shift estimated and taken out, unchanged code fails the gate in 0.0-0.7%
  of the Monte Carlo's comparisons in every cell, runs differing by 0.3% to 1.5% as a whole or by 1% per
  shape (runners/benchmarks/bench_between_runs.py), and a regression of one shape is judged against its
  repetitions alone: 5% at one shape is caught in 100% of comparisons wherever the repetitions spread
  0.6% or less, however far the whole run moved.
- A calibration alone, its spread added to every row (a calibration command run on the CI runner class):
  it measures what the old rule assumed, but every row then pays the machines' spread, which repetitions
  make needless for a change of one shape. Here the calibration judges only what the data cannot tell
  from another machine, a change of every row; where the machines of a kind differ by 1% or more, no rule
  catches a 3% change of every row reliably (the Monte Carlo: 5-14%; one that knew the spread exactly:
  12-32%), and the report's `catches` says so.
- The baselines as the control of a kernel change: they are not in every sweep, and a torch upgrade moves
  them as surely as a kernel change moves ours; each provider has its own shift instead.
On H100s: 12 comparisons of unchanged runs, on one machine and across two, passed with no row not SAME; a
5% slowdown put into softmax failed the gate in 20 of 20 tries, by its shift (threshold ±1.7%).

The verdicts. Each row: SLOW (FAST) when ln(NEW/BASE) less the shift is above (below minus) its
threshold: Student's t quantile (scipy) of its family's share of alpha times the standard deviation of
that difference, sqrt(s^2/R_base + s^2/R_new + 2 tau^2 + var(shift)), with Welch-Satterthwaite degrees of
freedom; and at least ln(1 + min_effect). Each shift: the same, with sqrt(2 sigma^2 + var(shift)) and the
fewer degrees of freedom of its two terms (_verdict_of_shift says why). The
rows the gate judges and the shifts share alpha (half each, Bonferroni within), so that unchanged code
fails the gate in at most alpha of comparisons; the other rows are a family of their own at alpha.
Every judged row and shift also carries the smallest slowdown it catches in 95% of runs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional, Sequence

import numpy as np

SIZE_CLASSES = ((10.0, "<10us"), (100.0, "10-100us"), (1000.0, "0.1-1ms"), (math.inf, ">=1ms"))
MIN_RUNS = 3  # a calibration needs the spread of at least three runs' shifts
POWER_Z = 1.6449  # the smallest slowdown caught "in 95% of runs": the threshold plus this many sds
MEDIAN_DRAWS = 4000  # draws of the simulation of a median's variance (its own error about 2%)
# Where a row kept only its p50 (the median of every sample, an export written before issue 32), its
# variance is taken as this times s^2/R: the variance of ln p50 over that of the mean of ln(repetition
# medians) was 1.02-1.29 in bench_between_runs' simulation of repetitions (larger with the spread) and
# 1.21-1.38 in the audit of issue 32.
P50_VARIANCE = 1.4
MEMORY_BOUND, COMPUTE_BOUND = "memory-bound", "compute-bound"


@dataclass(frozen=True)
class Spread:
    """What runs of one kind of machine differ by, as standard deviations of ln(p50): the shift a whole
    run shares (sd of one run's, about the kind's mean) and the part of each shape's that repetitions do
    not show, each with its degrees of freedom, and where it was measured."""
    shift: float
    shift_df: float
    shape: float
    shape_df: float
    source: str


# (GPU, kernel class) -> the spread of runs measured on this project's lent machines, used where a
# comparison gives no --calibration: runs of the README sweep (softmax, memory-bound) and of a matmul space
# (compute-bound) on two H100 machines, 8 runs on one and 3 on the other (BENCHMARKS.md, 2026-11-25,
# `bench_gate reruns` then `bench_gate against`). A spread of 0 is what those runs left once their own
# repetition noise was taken out: the shift is then judged by the comparison's own noise alone.
MEASURED: dict[tuple[str, str], Spread] = {
    ("NVIDIA H100 80GB HBM3", COMPUTE_BOUND): Spread(0.00370, 10, 0.0, 10,
                                                      "matmul on two H100 machines, 11 runs of 2 shapes"),
    ("NVIDIA H100 80GB HBM3", MEMORY_BOUND): Spread(0.0, 10, 0.0, 20,
                                                     "softmax on two H100 machines, 11 runs of 3 shapes"),
}


@dataclass(frozen=True)
class Figure:
    """One row as the rule reads it: ln of each repetition's median, or of the p50 where none was kept
    (then `repetitions` and `noise` are as recorded)."""
    logs: tuple
    repetitions: int
    noise: Optional[float]  # sd of the logs of the repetitions' medians

    @classmethod
    def of(cls, p50_us: float, rep_p50s_us=None, repetitions=None, noise=None) -> "Figure":
        if rep_p50s_us is not None and len(rep_p50s_us) >= 1:
            logs = tuple(float(v) for v in np.log(np.asarray(rep_p50s_us, dtype=np.float64)))
            spread = float(np.std(logs, ddof=1)) if len(logs) > 1 else None
            return cls(logs, len(logs), spread)
        count = 1 if repetitions is None or not repetitions > 1 else int(repetitions)
        return cls((math.log(p50_us),), count, None if count < 2 or noise is None else float(noise))

    @property
    def value(self) -> float:
        return sum(self.logs) / len(self.logs)

    @property
    def share(self) -> float:
        """The variance of `value` in units of s^2 (the repetition spread)."""
        if len(self.logs) == self.repetitions:
            return 1.0 / self.repetitions
        return P50_VARIANCE / self.repetitions


@dataclass
class Pair:
    """One trial measured on both sides. `domain`: what one shift is common to (GPU, kernel, provider: a
    change of the kernel moves ours and not the baselines); `group`: the rows of the domain that share each
    repetition's placement (dtype, shape)."""
    domain: tuple
    group: tuple
    base: Figure
    new: Figure
    p50_us: float  # BASE's p50, for the size class
    judged: bool
    comparable: bool = True  # timed by the same method

    @property
    def difference(self) -> float:
        return self.new.value - self.base.value


@dataclass(frozen=True)
class Rule:
    alpha: float = 0.01
    min_effect: float = 0.01
    fail_on_slow: float = 0.0  # the gate's X: a slowdown is caught when beyond its threshold and this


@dataclass
class Shift:
    """The shift common to a domain and its verdict."""
    value: float  # ln(NEW/BASE)
    variance: float  # of its estimate (the rows' noise, not the machines')
    freedom: float
    groups: int
    spread: Optional[Spread]
    judged: bool  # the gate judges it: its domain has rows the gate judges (ours)
    verdict: str = "NOT JUDGED"
    threshold: float = math.nan
    catches: float = math.nan  # the smallest uniform slowdown caught in 95% of runs (ln)


@dataclass
class Judgement:
    rows: list = field(default_factory=list)  # one dict a pair, in order
    shifts: dict = field(default_factory=dict)  # domain -> Shift


def size_class(p50_us: float) -> str:
    return next(name for bound, name in SIZE_CLASSES if p50_us < bound)


def t_quantile(tail: float, freedom: float) -> float:
    """The upper `tail` quantile of Student's t (the normal's at infinite freedom)."""
    from scipy import stats

    return float(stats.norm.isf(tail) if not math.isfinite(freedom) else stats.t.isf(tail, freedom))


def satterthwaite(terms: Sequence[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variance terms (variance, its freedom)."""
    total = sum(v for v, _ in terms)
    spread = sum(v * v / f for v, f in terms if v > 0 and math.isfinite(f))
    if total <= 0 or spread == 0:
        return math.inf
    return total * total / spread


def _noise_classes(pairs: list[Pair]) -> tuple[dict, dict]:
    """(s, freedom) pooled per (domain, group) over both sides' figures with repetitions, and per (domain,
    size class) over those groups."""
    sums: dict[tuple, list] = {}
    for pair in pairs:
        entry = sums.setdefault((pair.domain, pair.group), [0.0, 0, 1, 1, pair.p50_us])
        for side, figure in ((2, pair.base), (3, pair.new)):
            if figure.noise is not None and figure.repetitions > 1:
                entry[0] += (figure.repetitions - 1) * figure.noise ** 2
                entry[1] += figure.repetitions - 1
                entry[side] = max(entry[side], figure.repetitions)
    by_group, by_size = {}, {}
    for key, (squares, weight, r_base, r_new, p50) in sums.items():
        if weight:
            freedom = (r_base - 1) + (r_new - 1)  # once per placement, not once per row
            by_group[key] = (math.sqrt(squares / weight), freedom)
            size = by_size.setdefault((key[0], size_class(p50)), [0.0, 0])
            size[0] += freedom * squares / weight
            size[1] += freedom
    return by_group, {key: (math.sqrt(s / f), f) for key, (s, f) in by_size.items()}


def judge(pairs: list[Pair], rule: Rule, spreads: dict) -> Judgement:
    """The verdict of every pair and of every domain's shift (module doc); `spreads`: domain -> Spread or
    None."""
    by_group, by_size = _noise_classes([p for p in pairs if p.comparable])
    noise = []
    for pair in pairs:
        found = by_group.get((pair.domain, pair.group))
        where = "shape"
        if found is None:
            found, where = by_size.get((pair.domain, size_class(pair.p50_us))), "size class"
        noise.append(None if found is None or not pair.comparable else (*found, where))
    result = Judgement()
    for domain in dict.fromkeys(p.domain for p in pairs):
        members = [i for i, p in enumerate(pairs) if p.domain == domain and noise[i] is not None]
        judged = any(pairs[i].judged for i in members)
        result.shifts[domain] = _shift(pairs, noise, members, spreads.get(domain), judged)
    # Two families, each at alpha: what the gate judges (its rows and shifts, half of alpha each, so that
    # unchanged code fails the gate in at most alpha), and the rest.
    tails = {}
    for judged in (True, False):
        rows = sum(1 for i, p in enumerate(pairs) if p.judged == judged and noise[i] is not None)
        shifts = [s for s in result.shifts.values() if s is not None and s.spread is not None
                  and s.judged == judged]
        tails[judged] = rule.alpha / 2 / max(rows, 1)
        for shift in shifts:
            _verdict_of_shift(shift, rule, rule.alpha / 2 / len(shifts))
    tails = [tails[pair.judged] for pair in pairs]
    result.rows = _rows(pairs, noise, [result.shifts.get(p.domain) for p in pairs], rule, tails)
    return result


def _variance(pair: Pair, s: float) -> float:
    return s * s * (pair.base.share + pair.new.share)


def _shift(pairs: list[Pair], noise: list, members: list[int], spread: Optional[Spread],
           judged: bool) -> Optional[Shift]:
    """The median over groups of each group's median difference (its re-timed rows where it has them),
    and the variance of that estimate from the rows' noise and the spread's per-shape part."""
    if not members:
        return None
    groups: dict[tuple, list[int]] = {}
    for i in members:
        groups.setdefault(pairs[i].group, []).append(i)
    values, variances, freedoms = [], [], []
    for indices in groups.values():
        retimed = [i for i in indices if pairs[i].base.repetitions > 1 and pairs[i].new.repetitions > 1]
        used = retimed or indices
        values.append(float(np.median([pairs[i].difference for i in used])))
        variances.append(float(np.median([_variance(pairs[i], noise[i][0]) for i in used])))
        freedoms.append(min(noise[i][1] for i in used))
    shape = 2 * (spread.shape if spread else 0.0) ** 2
    total = median_variance([v + shape for v in variances])
    noise = float(np.mean(variances))
    terms = [(total * noise / (noise + shape), min(freedoms)),
             (total * shape / (noise + shape), spread.shape_df if spread else math.inf)]
    return Shift(float(np.median(values)), total, satterthwaite(terms), len(values), spread, judged)


def median_variance(variances: list[float]) -> float:
    """The variance of the median of independent normal values of these variances: their mean's up to two,
    else a seeded simulation (with one noisy shape among quiet ones the median mostly sits with the quiet
    ones, which pi/2 times the variance of their mean would not see)."""
    if len(variances) <= 2:
        return sum(variances) / len(variances) ** 2
    draws = _standard_normal(len(variances)) * np.sqrt(variances)
    return float(np.var(np.median(draws, axis=1)))


@lru_cache(maxsize=64)
def _standard_normal(count: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((MEDIAN_DRAWS, count))


def _verdict_of_shift(shift: Shift, rule: Rule, tail: float) -> None:
    """The shift against the spread of runs. Its t quantile takes the fewer degrees of freedom of its two
    terms, not Welch-Satterthwaite's: those grow exactly when the calibration's few runs put sigma low by
    chance, which is when the test most needs them not to (judged so, unchanged code failed by the shift
    in 0.9% of the Monte Carlo's comparisons where 0.5% was its share; so, 0.5%)."""
    spread = shift.spread
    terms = [(2 * spread.shift ** 2, spread.shift_df), (shift.variance, shift.freedom)]
    sd = math.sqrt(sum(v for v, _ in terms))
    quantile = t_quantile(tail, min(spread.shift_df, shift.freedom))
    threshold = max(quantile * sd, math.log1p(rule.min_effect))
    shift.threshold = threshold
    shift.verdict = "SLOW" if shift.value > threshold else "FAST" if shift.value < -threshold else "SAME"
    shift.catches = max(threshold, math.log1p(rule.fail_on_slow)) + POWER_Z * sd


def _rows(pairs: list[Pair], noise: list, shifts: list, rule: Rule, tails: list[float]) -> list[dict]:
    """Each pair's verdict against its domain's shift (the t quantiles in one call: a sweep has
    thousands of rows)."""
    rows, judged = [], []
    for pair, found, shift, tail in zip(pairs, noise, shifts, tails):
        row = {"ratio": math.exp(pair.difference), "vs_shift": math.nan, "threshold": math.nan,
               "catches": math.nan, "noise_from": "-"}
        if not pair.comparable or found is None:
            rows.append({**row, "verdict": "OTHER TIMER" if not pair.comparable else "NO REPETITIONS"})
            continue
        s, freedom, where = found
        spread = shift.spread
        tau = spread.shape if spread else 0.0
        terms = [(_variance(pair, s), freedom), (2 * tau * tau, spread.shape_df if spread else math.inf),
                 (shift.variance, shift.freedom)]
        row.update(vs_shift=math.exp(pair.difference - shift.value),
                   noise_from=f"{where} s={100 * s:.2f}% reps {pair.base.repetitions}+{pair.new.repetitions}")
        rows.append(row)
        judged.append((row, math.sqrt(sum(v for v, _ in terms)), tail, satterthwaite(terms)))
    quantiles = _t_quantiles([tail for *_, tail, _ in judged], [freedom for *_, freedom in judged])
    floor = math.log1p(rule.min_effect)
    for (row, sd, _, _), quantile in zip(judged, quantiles):
        threshold = max(quantile * sd, floor)
        residual = math.log(row["vs_shift"])
        row.update(verdict="SLOW" if residual > threshold else "FAST" if residual < -threshold else "SAME",
                   threshold=math.expm1(threshold),
                   catches=math.expm1(max(threshold, math.log1p(rule.fail_on_slow)) + POWER_Z * sd))
    return rows


def _t_quantiles(tails: list[float], freedoms: list[float]) -> list[float]:
    from scipy import stats

    if not tails:
        return []
    tails, freedoms = np.asarray(tails), np.asarray(freedoms, dtype=np.float64)
    finite = np.isfinite(freedoms)
    return list(np.where(finite, stats.t.isf(tails, np.where(finite, freedoms, 1.0)), stats.norm.isf(tails)))


@dataclass(frozen=True)
class RunFigure:
    """One trial's figure in one run of a calibration."""
    domain: tuple
    group: tuple
    figure: Figure


def calibrate(runs: list[dict], source: str = "") -> dict:
    """domain -> Spread, from three or more runs of the same sweep (each {trial key: RunFigure}).

    Per domain, the trials present in every run (their re-timed ones, where a shape has them) give a
    table of runs x shapes: each shape's median over its trials of ln(figure) less the trial's mean over
    the runs. A two-way analysis of variance of that table with the repetitions' noise taken out (it is
    what each comparison adds for itself): sigma^2 = (MS_runs - MS_residual) / shapes, K - 1 degrees of
    freedom; tau^2 = MS_residual - the mean noise of a shape's figure, (K - 1)(G - 1); both at least 0.
    One shape: tau is not told apart from sigma, which then carries it."""
    spreads = {}
    if len(runs) < MIN_RUNS:
        return spreads
    common = set.intersection(*(set(run) for run in runs))
    by_domain: dict[tuple, dict[tuple, list]] = {}
    for key in sorted(common):
        first = runs[0][key]
        by_domain.setdefault(first.domain, {}).setdefault(first.group, []).append(key)
    for domain, groups in by_domain.items():
        table, noises = [], []
        for keys in groups.values():
            retimed = [k for k in keys if all(run[k].figure.repetitions > 1 for run in runs)]
            keys = retimed or keys
            logs = np.array([[run[k].figure.value for k in keys] for run in runs])  # runs x trials
            table.append(np.median(logs - logs.mean(axis=0), axis=1))
            noises.append(_figure_noise([run[k].figure for run in runs for k in keys]))
        if any(n is None for n in noises):
            continue
        spreads[domain] = _two_way(np.array(table).T, float(np.mean(noises)), source)
    return spreads


def _figure_noise(figures: list[Figure]) -> Optional[float]:
    """The variance of one trial's figure in one run, from the pooled repetition spread of `figures`."""
    squares = sum((f.repetitions - 1) * f.noise ** 2 for f in figures if f.noise is not None)
    weight = sum(f.repetitions - 1 for f in figures if f.noise is not None)
    if not weight:
        return None
    return squares / weight * float(np.median([f.share for f in figures]))


def _two_way(table: np.ndarray, noise: float, source: str) -> Spread:
    """The spread of a runs x shapes table of centred figures (calibrate)."""
    runs, shapes = table.shape
    run_means = table.mean(axis=1)
    if shapes == 1:
        shift = max(float(np.var(run_means, ddof=1)) - noise, 0.0)
        return Spread(math.sqrt(shift), runs - 1, 0.0, math.inf,
                      f"{source}{runs} runs of 1 shape (its own part carried by the run's)")
    residual = table - run_means[:, None] - table.mean(axis=0)[None, :] + table.mean()
    freedom = (runs - 1) * (shapes - 1)
    ms_residual = float((residual ** 2).sum()) / freedom
    ms_runs = shapes * float(np.var(run_means, ddof=1))
    shape = max(ms_residual - noise, 0.0)
    shift = max((ms_runs - ms_residual) / shapes, 0.0)
    return Spread(math.sqrt(shift), runs - 1, math.sqrt(shape), freedom,
                  f"{source}{runs} runs of {shapes} shapes")


def gate_failures(judgement: Judgement, pairs: list[Pair], rule: Rule) -> tuple[list[int], list[tuple]]:
    """What fails the gate: the judged pairs SLOW against their shift by more than rule.fail_on_slow
    (their indices), and the domains whose shift is SLOW by more than it."""
    rows = [i for i, (pair, row) in enumerate(zip(pairs, judgement.rows))
            if pair.judged and row["verdict"] == "SLOW" and row["vs_shift"] - 1 > rule.fail_on_slow]
    shifts = [domain for domain, shift in judgement.shifts.items()
              if shift is not None and shift.judged and shift.verdict == "SLOW"
              and math.expm1(shift.value) > rule.fail_on_slow]
    return rows, shifts

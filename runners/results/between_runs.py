"""Whether two runs differ: the rule runners.compare and runners.revalidate judge by.

The unit of replication is the run. The samples of one run share where its buffers landed, its clocks and
its neighbours, so their spread says nothing of how far a second run of the same code may fall (on an
H200 an unchanged re-run moved a 5 us softmax by 2.4% while a rank test of its samples gave p = 1e-28).
Three things move a row's figure between two runs, each measured where it can be:
- the placement of its buffers, and its own sampling: measured inside each run by repetitions (a trial's
  samples taken in blocks on buffers placed anew, runners/measure/timing.py). The figure compared is the
  mean of ln(each repetition's median) (`rep_p50s_us`), whose variance is s^2/R: s the spread of those
  logs, pooled per side over that side's rows of the same provider, dtype and shape (they share each
  repetition's placement, so its degrees of freedom count once per placement, R - 1, not once per row;
  the two sides' combine by Welch-Satterthwaite), else over the provider's rows of the same size class of
  p50; R the repetitions. A row timed once (screening) adds its own median's error, from its 95% interval;
  every row, the clock's resolution (q^2/12: the CUDA-event fallback reads about 0.5 us);
- the shift a whole run shares (its machine, process, clock state): on a second machine of one kind every
  row of a kernel moves together (BENCHMARKS.md, 2026-11-24: a matmul by 1.6%). It is estimated from the
  data, per provider of a kernel on a GPU (a change of the kernel moves ours, not the baselines): the
  median over shapes of each shape's median ln(NEW/BASE), judged once against what runs of this kind of
  machine differ by. Each row is judged against the same median over the other shapes of its kernel
  alone: independent of the row, so a change of its shape is neither half taken by the shift (two shapes)
  nor judged against a reference that holds it; a kernel of one shape has no other, and its rows get no
  verdict of their own (ONE SHAPE: the shift speaks for them). The variance of a median over shapes is
  simulated from each shape's (one noisy shape among quiet ones barely moves it);
- a per-shape part of the run's shift that repetitions do not show (each shape its own clock state): from
  the same calibration.
What runs of one kind of machine differ by (`Spread`: the sd of a run's shift and of the per-shape
part, with their degrees of freedom) is measured, never assumed: `calibrate` reads it off three or more
runs of the same sweep on the machines the comparison is about (compare's `--calibration`; the CI recipe
runs the gated sweep six times on its runner class), or the user states it (`--machine-spread`). Without
either a shift cannot be judged, and the gate refuses rather than pass a change of every row silently.
No table of spreads ships with the tool: two H100 machines (BENCHMARKS.md) give a machine effect one
degree of freedom, no bound for a third machine.

The alternatives weighed (figures: BENCHMARKS.md, 2026-11-25):
- A stated run noise widening every row's threshold (the rule before issue 32, 0.5%): it held only while
  machines differ by less; an independent Monte Carlo with its own functions failed unchanged code in
  3-12% of comparisons where runs differ by 1-1.5%, and at 40 judged rows the 2 r^2 term alone made every
  threshold at least 3%. With the shift estimated and taken out, unchanged code keeps alpha in every cell
  of the Monte Carlo (runners/benchmarks/bench_between_runs.py), runs differing by 0.3% to 1.5% as a
  whole or by 1% per shape, and a regression of one shape is judged against its repetitions and the
  other shapes alone.
- A calibration alone, its spread added to every row (a calibration command run on the CI runner class):
  it measures what the old rule assumed, but every row then pays the machines' spread, which repetitions
  make needless for a change of one shape. Here the calibration judges only what the data cannot tell
  from another machine, a change of every row; where the machines of a kind differ by 1% or more, no rule
  catches a 3% change of every row reliably (a test that knew the spread exactly: 12-32%), and the
  report's `catches` says so.
- The baselines as the control of a kernel change: they are not in every sweep, and a torch upgrade moves
  them as surely as a kernel change moves ours; each provider has its own shift instead.

The verdicts. Each row: SLOW (FAST) when ln(NEW/BASE) less the other shapes' shift is above (below minus)
its threshold: Student's t quantile (scipy) of its family's share of alpha times the standard deviation
of that difference, sqrt(var(row) + 2 tau^2 + var(their shift)), with Welch-Satterthwaite degrees of
freedom but never more than tau's; and at least ln(1 + min_effect). Each shift: the same, with
sqrt(2 sigma^2 + var(shift)) and the fewer degrees of freedom of its two terms (_verdict_of_shift says
why). The rows the gate judges and the shifts share alpha (half each, Bonferroni within), so that
unchanged code fails the gate in at most alpha of comparisons; the other rows are a family of their own at
alpha. The promise is over calibrations: a calibration of few runs that came out low keeps failing more
often until it is made again. Every judged row and shift carries the smallest slowdown it catches in 95%
of runs.
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
ONE_SHAPE = "ONE SHAPE"  # a row alone in its domain: no other shape to tell its change from the shift


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


@dataclass(frozen=True)
class Figure:
    """One row as the rule reads it: ln of each repetition's median, or of the p50 where none was kept
    (then `repetitions` and `noise` are as recorded); `own`: the variance of the figure its repetitions'
    spread cannot show, in ln units squared: a single median's own sampling error (from its interval) and
    the clock's resolution."""
    logs: tuple
    repetitions: int
    noise: Optional[float]  # sd of the logs of the repetitions' medians
    own: float = 0.0

    @classmethod
    def of(cls, p50_us: float, rep_p50s_us=None, repetitions=None, noise=None, precision=None,
           resolution: float = 0.0) -> "Figure":
        """A row's figure. `precision`: the half-width of its p50's 95% interval, relative (a row of one
        repetition: that is its own error; infinite: unknown); `resolution`: the clock's quantum over the
        p50 (a value read off it is within one quantum: variance q^2/12 each side of a difference)."""
        clock = resolution ** 2 / 12
        if rep_p50s_us is not None and len(rep_p50s_us) > 1:
            logs = tuple(float(v) for v in np.log(np.asarray(rep_p50s_us, dtype=np.float64)))
            return cls(logs, len(logs), float(np.std(logs, ddof=1)), clock)
        count = 1 if pd_missing(repetitions) or not repetitions > 1 else int(repetitions)
        spread = None if count < 2 or noise is None or pd_missing(noise) else float(noise)
        own = clock
        if count == 1:  # one median: its own sampling error is the repetitions' part too
            own += math.inf if precision is None or pd_missing(precision) else (precision / 1.96) ** 2
        return cls((math.log(p50_us),), count, spread, own)

    @property
    def value(self) -> float:
        return sum(self.logs) / len(self.logs)

    @property
    def share(self) -> float:
        """The variance of `value` in units of s^2 (the repetition spread)."""
        if len(self.logs) == self.repetitions:
            return 1.0 / self.repetitions
        return P50_VARIANCE / self.repetitions


def pd_missing(value) -> bool:
    """A missing number as a store or JSON gives it: None or NaN."""
    return value is None or (isinstance(value, float) and math.isnan(value))


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
    return _t_quantiles([tail], [freedom])[0]


def satterthwaite(terms: Sequence[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variance terms (variance, its freedom)."""
    total = sum(v for v, _ in terms)
    spread = sum(v * v / f for v, f in terms if v > 0 and math.isfinite(f))
    if total <= 0 or spread == 0:
        return math.inf
    return total * total / spread


def _noise_classes(pairs: list[Pair]) -> tuple[dict, dict]:
    """Each side's (s, freedom) pooled per (domain, group) over its figures with repetitions (the rows of a
    group share each repetition's placement, so its degrees of freedom count once per placement, R - 1),
    and per (domain, size class) over those groups: keys (domain, group or size class, side)."""
    sums: dict[tuple, list] = {}
    for pair in pairs:
        for side, figure in (("base", pair.base), ("new", pair.new)):
            entry = sums.setdefault((pair.domain, pair.group, side), [0.0, 0, 1, pair.p50_us])
            if figure.noise is not None and figure.repetitions > 1:
                entry[0] += (figure.repetitions - 1) * figure.noise ** 2
                entry[1] += figure.repetitions - 1
                entry[2] = max(entry[2], figure.repetitions)
    by_group, by_size = {}, {}
    for (domain, group, side), (squares, weight, repetitions, p50) in sums.items():
        if weight:
            freedom = repetitions - 1
            by_group[(domain, group, side)] = (math.sqrt(squares / weight), freedom)
            size = by_size.setdefault((domain, size_class(p50), side), [0.0, 0])
            size[0] += freedom * squares / weight
            size[1] += freedom
    return by_group, {key: (math.sqrt(s / f), f) for key, (s, f) in by_size.items()}


def _pair_noise(pair: Pair, by_group: dict, by_size: dict) -> Optional[tuple[float, float, str]]:
    """(variance, degrees of freedom, where from) of a pair's difference from its repetitions: each side's
    spread from its own rows of the group (a side without repetitions takes the other's: the same code on
    the same kind of machine), else of the size class; None where neither side has any, or a single
    median's own error is unknown."""
    terms, where = [], "shape"
    found = {side: by_group.get((pair.domain, pair.group, side)) for side in ("base", "new")}
    if not any(found.values()):
        where = "size class"
        found = {side: by_size.get((pair.domain, size_class(pair.p50_us), side)) for side in ("base", "new")}
    if not any(found.values()):
        return None
    for side, figure in (("base", pair.base), ("new", pair.new)):
        s, freedom = found[side] or found["new" if side == "base" else "base"]
        terms.append((s * s * figure.share + figure.own, freedom))
    variance = sum(v for v, _ in terms)
    if not math.isfinite(variance):
        return None
    spreads = "/".join(f"{100 * found[side][0]:.2f}%" if found[side] else "-" for side in ("base", "new"))
    reps = f"{pair.base.repetitions}+{pair.new.repetitions}"
    return variance, satterthwaite(terms), f"{where} s={spreads} reps {reps}"


def judge(pairs: list[Pair], rule: Rule, spreads: dict) -> Judgement:
    """The verdict of every pair and of every domain's shift (module doc); `spreads`: domain -> Spread or
    None."""
    by_group, by_size = _noise_classes([p for p in pairs if p.comparable])
    noise = [_pair_noise(p, by_group, by_size) if p.comparable else None for p in pairs]
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
    others = {domain: _others(pairs, noise, domain, spreads.get(domain)) for domain in result.shifts}
    result.rows = _rows(pairs, noise, others, spreads, rule, [tails[pair.judged] for pair in pairs])
    return result


def _groups(pairs: list[Pair], noise: list, members: list[int]) -> dict[tuple, tuple[float, float, float]]:
    """group -> (its median difference, the median variance of its rows, their fewest degrees of freedom),
    from its re-timed rows where it has them."""
    by_group: dict[tuple, list[int]] = {}
    for i in members:
        by_group.setdefault(pairs[i].group, []).append(i)
    found = {}
    for group, indices in by_group.items():
        retimed = [i for i in indices if pairs[i].base.repetitions > 1 and pairs[i].new.repetitions > 1]
        used = retimed or indices
        found[group] = (float(np.median([pairs[i].difference for i in used])),
                        float(np.median([noise[i][0] for i in used])), min(noise[i][1] for i in used))
    return found


def _estimate(groups: list[tuple[float, float, float]],
              spread: Optional[Spread]) -> tuple[float, float, float]:
    """(the median of the groups' differences, its variance, its degrees of freedom): the groups' own
    noise and the spread's per-shape part."""
    shape = 2 * (spread.shape if spread else 0.0) ** 2
    total = median_variance([v + shape for _, v, _ in groups])
    return float(np.median([d for d, _, _ in groups])), total, _freedom(total, groups, shape, spread)


def _freedom(total: float, groups: list[tuple[float, float, float]], shape: float,
             spread: Optional[Spread]) -> float:
    """The degrees of freedom of a median's variance `total`, shared between the groups' own noise and the
    spread's per-shape part (`shape`, 2 tau^2) as their means are."""
    noise = float(np.mean([v for _, v, _ in groups]))
    weight = noise + shape or 1.0
    return satterthwaite([(total * noise / weight, min(f for _, _, f in groups)),
                          (total * shape / weight, spread.shape_df if spread else math.inf)])


def _shift(pairs: list[Pair], noise: list, members: list[int], spread: Optional[Spread],
           judged: bool) -> Optional[Shift]:
    """The median over groups of each group's median difference, and the variance of that estimate."""
    if not members:
        return None
    groups = list(_groups(pairs, noise, members).values())
    value, variance, freedom = _estimate(groups, spread)
    return Shift(value, variance, freedom, len(groups), spread, judged)


def _others(pairs: list[Pair], noise: list, domain: tuple, spread: Optional[Spread]) -> dict:
    """group -> the shift of its domain estimated without it (value, variance, freedom), what its rows are
    judged against: independent of them, so that a change of the group is not half taken by the shift
    (two shapes) and no covariance is left out; None where the group is its domain's only one."""
    members = [i for i, p in enumerate(pairs) if p.domain == domain and noise[i] is not None]
    groups = _groups(pairs, noise, members)
    if len(groups) == 1:
        return dict.fromkeys(groups)
    shape = 2 * (spread.shape if spread else 0.0) ** 2
    values = [d for d, _, _ in groups.values()]
    variances = without_one_median_variances([v + shape for _, v, _ in groups.values()])
    found = {}
    for index, group in enumerate(groups):
        rest = [g for other, g in groups.items() if other != group]
        found[group] = (float(np.median(values[:index] + values[index + 1:])), variances[index],
                        _freedom(variances[index], rest, shape, spread))
    return found


def median_variance(variances: list[float]) -> float:
    """The variance of the median of independent normal values of these variances: their mean's up to two,
    else a seeded simulation (with one noisy shape among quiet ones the median mostly sits with the quiet
    ones, which pi/2 times the variance of their mean would not see)."""
    if len(variances) <= 2:
        return sum(variances) / len(variances) ** 2
    draws = _standard_normal(len(variances)) * np.sqrt(variances)
    return float(np.var(np.median(draws, axis=1)))


def without_one_median_variances(variances: list[float]) -> list[float]:
    """For each value, the variance of the median of the others (independent normals of these variances):
    one seeded simulation sorted once, each median read off the order statistics with that value left
    out (the i-th smallest of the others is the i-th of all, or the next where the one left out is at or
    below it)."""
    count = len(variances)
    if count <= 3:  # the others are one value, or two whose median is their mean
        return [(sum(variances) - v) / (count - 1) ** 2 for v in variances]
    draws = _standard_normal(count) * np.sqrt(variances)
    order = np.argsort(draws, axis=1)
    ranks = np.argsort(order, axis=1)
    ordered = np.take_along_axis(draws, order, axis=1)
    rows = np.arange(len(draws))
    others = count - 1
    found = []
    for index in range(count):
        left_out = ranks[:, index]

        def smallest(i):
            return ordered[rows, i + (left_out <= i)]

        median = (smallest(others // 2) if others % 2
                  else (smallest(others // 2 - 1) + smallest(others // 2)) / 2)
        found.append(float(np.var(median)))
    return found


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


def _rows(pairs: list[Pair], noise: list, others: dict, spreads: dict, rule: Rule,
          tails: list[float]) -> list[dict]:
    """Each pair's verdict against the shift of the other shapes of its domain (the t quantiles in one
    call: a sweep has thousands of rows)."""
    rows, judged = [], []
    for pair, found, tail in zip(pairs, noise, tails):
        row = {"ratio": math.exp(pair.difference), "vs_shift": math.nan, "threshold": math.nan,
               "catches": math.nan, "noise_from": "-"}
        if not pair.comparable or found is None:
            rows.append({**row, "verdict": "OTHER TIMER" if not pair.comparable else "NO REPETITIONS"})
            continue
        variance, freedom, where = found
        shift = others[pair.domain][pair.group]
        if shift is None:
            rows.append({**row, "verdict": ONE_SHAPE, "noise_from": where})
            continue
        value, shift_variance, shift_freedom = shift
        spread = spreads.get(pair.domain)
        tau = spread.shape if spread else 0.0
        terms = [(variance, freedom), (2 * tau * tau, spread.shape_df if spread else math.inf),
                 (shift_variance, shift_freedom)]
        row.update(vs_shift=math.exp(pair.difference - value), noise_from=where)
        rows.append(row)
        # The calibration's few runs may put tau low by chance, and Welch-Satterthwaite's degrees of freedom
        # grow exactly then (the shift's reason, _verdict_of_shift): never more than tau's own.
        freedom = min(satterthwaite(terms), spread.shape_df if spread else math.inf)
        judged.append((row, math.sqrt(sum(v for v, _ in terms)), tail, freedom))
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
    """t_quantile of each (tail, freedom), from scipy.special's inverse distribution functions (those
    scipy.stats' t.isf and norm.isf call): on an H100 host, beside torch and pandas, scipy.stats took
    0.9-1.2 s to import, after a revalidate's sweep and before its verdicts, scipy.special 0.3-0.45 s
    (BENCHMARKS.md, 2026-11-27 (seventh))."""
    from scipy import special

    if not tails:
        return []
    tails, freedoms = np.asarray(tails, dtype=np.float64), np.asarray(freedoms, dtype=np.float64)
    finite = np.isfinite(freedoms)
    # The upper tail by symmetry (-quantile of the lower), which keeps a small tail's precision.
    return [float(q) for q in np.where(finite, -special.stdtrit(np.where(finite, freedoms, 1.0), tails),
                                       -special.ndtri(tails))]


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
    One shape: tau is not told apart from sigma; sigma, which carries both, stands for it too."""
    spreads = {}
    if len(runs) < MIN_RUNS:
        return spreads
    by_domain: dict[tuple, dict[tuple, list]] = {}
    for key in sorted(runs[0]):
        first = runs[0][key]
        if all(key in run and run[key].domain == first.domain for run in runs[1:]):
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
    """The variance of one trial's figure in one run, from the pooled repetition spread of `figures` and
    their own error; None where none has repetitions or its own error is unknown."""
    squares = sum((f.repetitions - 1) * f.noise ** 2 for f in figures if f.noise is not None)
    weight = sum(f.repetitions - 1 for f in figures if f.noise is not None)
    own = float(np.median([f.own for f in figures]))
    if not weight or not math.isfinite(own):
        return None
    return squares / weight * float(np.median([f.share for f in figures])) + own


def _two_way(table: np.ndarray, noise: float, source: str) -> Spread:
    """The spread of a runs x shapes table of centred figures (calibrate)."""
    runs, shapes = table.shape
    run_means = table.mean(axis=1)
    if shapes == 1:
        shift = math.sqrt(max(float(np.var(run_means, ddof=1)) - noise, 0.0))
        return Spread(shift, runs - 1, shift, runs - 1,
                      f"{source}{runs} runs of 1 shape (each shape's own part taken as the run's)")
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

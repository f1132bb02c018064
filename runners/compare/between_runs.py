"""Whether two runs differ: the rule runners.compare and runners.revalidate judge by.

The unit of replication is the run. A row's noise is measured by its repetitions; the shift a whole run
shares is estimated from the data (the median over shapes, per provider of a kernel, and per kind of bound
where the kinds moved apart) and judged against the spread of runs a calibration measured; each row is
judged against the other shapes' shift, and a SLOW or FAST one against its controls (the other providers
at its shape, timed in the same rounds): MACHINE where they moved alike. The calibration is checked
against the comparison's own data and widened where that is noisier. runners/compare/GATE.md explains
each step and the alternatives weighed; BENCHMARKS.md has the figures.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
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
CHECK_P = 0.01  # a calibration is widened where the comparison's own data is noisier at this level
SHAPE_CHECK = 6  # shapes a domain needs for the check of each shape's own part (fewer: too few to tell)
KINDS_P = 0.05  # a domain's memory- and compute-bound shapes are judged apart where they moved apart so
MACHINE = "MACHINE"  # SLOW or FAST, and its controls moved alike: the machine's, not the code's
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
    control: Optional["Spread"] = None  # the same of a domain's difference from its controls' (GATE.md)
    repetition: Optional[dict] = None  # group -> (s^2, freedom): the repetitions' spread in its runs
    run_noise: float = 0.0  # the rows' part of a calibration run's shift: shift^2 + this is what was measured

    def widened(self, variance: float, why: str) -> "Spread":
        """This spread with every variance times `variance` (>= 1), and why in its source."""
        scale = math.sqrt(variance)
        control = self.control and replace(self.control, shift=self.control.shift * scale,
                                           shape=self.control.shape * scale)
        return replace(self, shift=self.shift * scale, shape=self.shape * scale, control=control,
                       run_noise=self.run_noise * variance, source=f"{self.source}; {why}")

    def run_terms(self, variance: float, freedom: float) -> list[tuple[float, float]]:
        """The variance terms of the difference of two runs' shifts whose estimates have `variance`: the
        spread of runs as measured (its rows' noise in it: a difference of two mean squares, sigma^2 alone,
        has no chi-square's degrees of freedom and may come out 0), and what the estimates add beyond."""
        measured = self.shift ** 2 + self.run_noise
        return [(2 * measured, self.shift_df), (max(variance - 2 * self.run_noise, 0.0), freedom)]


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
    control: Optional[tuple] = None  # pairs of other domains with this key are its controls (GATE.md)
    kind: str = ""  # what bounds its shape: memory-bound or compute-bound ('' unknown)

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
    vs_controls: float = math.nan  # ln(NEW/BASE) against its controls' (GATE.md)


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
    """The verdict of every pair and of every shift (GATE.md), its shifts keyed (domain, kind): kind ''
    where the domain's kinds of bound are judged together; `spreads`: domain -> Spread or None."""
    by_group, by_size = _noise_classes([p for p in pairs if p.comparable])
    noise = [_pair_noise(p, by_group, by_size) if p.comparable else None for p in pairs]
    apart = _kinds_apart(pairs, noise, spreads)
    spreads = {(p.domain, p.kind if p.domain in apart else ""): spreads.get(p.domain) for p in pairs}
    pairs = [replace(p, domain=(p.domain, p.kind if p.domain in apart else "")) for p in pairs]
    members = {domain: [i for i, p in enumerate(pairs) if p.domain == domain and noise[i] is not None]
               for domain in dict.fromkeys(p.domain for p in pairs)}
    groups = {domain: _groups(pairs, noise, indices) for domain, indices in members.items()}
    spreads = {domain: _checked(spreads.get(domain), domain[0], groups[domain], by_group)
               for domain in members}
    controls = _controls(pairs, groups)
    result = Judgement()
    for domain, indices in members.items():
        judged = any(pairs[i].judged for i in indices)
        result.shifts[domain] = _shift(groups[domain], spreads[domain], judged)
    # Two families, each at alpha: what the gate judges (its rows and shifts, half of alpha each, so that
    # unchanged code fails the gate in at most alpha), and the rest. The test against the controls only
    # clears a verdict (both must hold), so it takes no share of alpha.
    tails = {}
    for judged in (True, False):
        rows = sum(1 for i, p in enumerate(pairs) if p.judged == judged and noise[i] is not None)
        shifts = [(d, s) for d, s in result.shifts.items() if s is not None and s.spread is not None
                  and s.judged == judged]
        tails[judged] = rule.alpha / 2 / max(rows, 1)
        for domain, shift in shifts:
            _verdict_of_shift(shift, rule, rule.alpha / 2 / len(shifts))
            _shift_against_controls(shift, groups[domain], controls, domain, rule.alpha / 2 / len(shifts))
    others = {domain: _others(groups[domain], spreads[domain]) for domain in result.shifts}
    by_shape = {(domain, group): spread for domain in result.shifts for group, spread in
                _shapes_checked(groups[domain], others[domain], spreads[domain]).items()}
    result.rows = _rows(pairs, noise, others, {**spreads, **by_shape}, controls, rule,
                        [tails[pair.judged] for pair in pairs])
    return result


def _kinds_apart(pairs: list[Pair], noise: list, spreads: dict) -> set:
    """The domains whose shapes of two kinds of bound moved apart beyond chance (the kinds' shifts differ,
    two-sided p < KINDS_P): their rows and shifts are judged per kind; the others' together (a row
    judged against fewer shapes loses reach for nothing where the kinds moved alike)."""
    by_kind: dict[tuple, dict[str, list]] = {}
    for i, pair in enumerate(pairs):
        if pair.kind and noise[i] is not None:
            by_kind.setdefault(pair.domain, {}).setdefault(pair.kind, []).append(i)
    apart = set()
    for domain, kinds in by_kind.items():
        if len(kinds) < 2:
            continue
        (value, variance, freedom), (other, other_variance, other_freedom) = (
            _estimate(list(_groups(pairs, noise, members).values()), spreads.get(domain))
            for members in list(kinds.values())[:2])
        quantile = t_quantile(KINDS_P / 2, min(freedom, other_freedom))
        if abs(value - other) > quantile * math.sqrt(variance + other_variance):
            apart.add(domain)
    return apart


def _controls(pairs: list[Pair], groups: dict) -> dict:
    """(domain, group) -> its controls: (value, variance, freedom) of the median over the other domains
    with a pair of its control key of their group's median difference, and their rounds (_series: BASE's,
    NEW's) where every one has them."""
    by_key: dict[tuple, dict] = {}
    figures: dict[tuple, list] = {}
    for pair in pairs:
        if pair.control is not None and pair.group in groups[pair.domain]:
            by_key.setdefault(pair.control, {})[pair.domain] = pair.group
            if pair.base.repetitions > 1 and pair.new.repetitions > 1:
                figures.setdefault((pair.domain, pair.group), []).append(pair)
    rounds = {where: (_series([p.base for p in found]), _series([p.new for p in found]))
              for where, found in figures.items()}
    found = {}
    for members in by_key.values():
        for domain, group in members.items():
            rest = [(d, g) for d, g in members.items() if d != domain]
            if not rest:
                continue
            values = [groups[d][g] for d, g in rest]
            series = [rounds.get(where, (None, None)) for where in rest]
            paired = tuple(_median_series([s[side] for s in series]) for side in (0, 1))
            found[(domain, group)] = (float(np.median([d for d, _, _ in values])),
                                      median_variance([v for _, v, _ in values]),
                                      min(f for _, _, f in values),
                                      None if any(x is None for x in paired) else paired,
                                      rounds.get((domain, group)))
    return found


def _series(figures: list[Figure]) -> Optional[np.ndarray]:
    """The median, round by round, of the logs of figures timed in the same rounds (a shape's finalists
    and baselines share each round's placement); None unless each kept its R >= 2 repetition medians."""
    if any(len(f.logs) != f.repetitions or f.repetitions < 2 for f in figures):
        return None
    return _median_series([f.logs for f in figures])


def _median_series(series: list) -> Optional[np.ndarray]:
    """The median, round by round, of series of one length; None where one is missing or they differ."""
    if not series or any(s is None for s in series) or len({len(s) for s in series}) != 1:
        return None
    return np.median(np.array(series), axis=0)


def _paired(base, new, rounds: Optional[tuple]) -> Optional[tuple[float, float, float]]:
    """(difference, variance, freedom) of ln(NEW/BASE) against the controls', round by round: the
    variance from the spread of each side's differences over its rounds, so that what a round's
    placement moves alike (every provider at the shape) cancels; None where the rounds do not pair."""
    if rounds is None or base is None or new is None:
        return None
    noises = [_round_noise(np.asarray(side), control) for side, control in zip((base, new), rounds)]
    if None in noises:
        return None
    terms = [(noise, len(side) - 1) for noise, side in zip(noises, (base, new))]
    return (float(np.mean(new) - np.mean(rounds[1]) - np.mean(base) + np.mean(rounds[0])),
            sum(v for v, _ in terms), satterthwaite(terms))


def _round_noise(own: Optional[np.ndarray], control: Optional[np.ndarray]) -> Optional[float]:
    """The variance of the mean over rounds of `own` less `control`, from their spread round by round."""
    if own is None or control is None or len(own) != len(control):
        return None
    return float(np.var(own - control, ddof=1)) / len(own)


def _checked(spread: Optional[Spread], domain: tuple, groups: dict, by_group: dict) -> Optional[Spread]:
    """The spread, checked against the comparison's own data: widened where a side's repetitions spread
    wider than the calibration's runs' beyond chance (an F test, p < CHECK_P), every part by their ratio
    (a noisier machine), and said so in its source. `by_group`: each side's repetition spread per shape
    (_noise_classes)."""
    if spread is None:
        return None
    from scipy import special

    noisier = []
    for side in ("base", "new") if spread.repetition else ():
        # each shape's spread over the calibration's there (shapes' spreads differ: a 5 us kernel's
        # placements move it 2%, a 30 us one's 0.3%), pooled by degrees of freedom
        ratios = [(found[0] ** 2 / calibrated[0], found[1], calibrated[1]) for group in groups
                  if (found := by_group.get((domain, group, side)))
                  and (calibrated := spread.repetition.get(group)) and calibrated[0] > 0]
        if ratios:
            # a mean of ratios, each over a calibration of its own: F with the fewest of their freedoms
            freedom, calibrated_df = sum(f for _, f, _ in ratios), min(f for _, _, f in ratios)
            ratio = sum(r * f for r, f, _ in ratios) / freedom
            if ratio > 1 and special.fdtrc(freedom, calibrated_df, ratio) < CHECK_P:
                noisier.append((ratio, side.upper()))
    if not noisier:
        return spread
    ratio, side = max(noisier)
    return spread.widened(ratio, f"widened x{math.sqrt(ratio):.2f}: {side}'s repetitions spread "
                                 f"x{math.sqrt(ratio):.2f} the calibration's (a noisier machine)")


def _shapes_checked(groups: dict, others: dict, spread: Optional[Spread]) -> dict:
    """group -> the spread its rows are judged by where not the domain's: where the other shapes' NEW/BASE
    about their own others spread wider than the spread predicts beyond chance (their mean squared z
    against a chi-square, p < CHECK_P), each shape's own part widened to what they show (a mean squared
    z of 1), with their G - 2 degrees of freedom. The shape's own row is left out: a shape that changed
    is judged by the others' spread, not its own. Fewer than SHAPE_CHECK shapes are not checked: widened
    on 1-3 degrees of freedom, a row would be no longer judged at all."""
    if spread is None or len(groups) < SHAPE_CHECK:
        return {}
    from scipy import optimize, special

    names = list(groups)
    values = np.array([groups[g][0] for g in names])
    # each one's variance but its own 2 tau^2, about a median of one value fewer than others' (G - 2)
    rest = np.array([groups[g][1] + others[g][1] * (len(names) - 1) / (len(names) - 2) for g in names])
    critical = special.chdtri(len(groups) - 1, CHECK_P) / (len(groups) - 1)
    found = {}
    for index, group in enumerate(names):
        kept = np.arange(len(names)) != index  # the others, each about the median of the others but it
        squares = (values[kept] - without_one_medians(values[kept])) ** 2

        def squared_z(tau: float) -> float:
            return float(np.mean(squares / (rest[kept] + 2 * tau * tau)))

        if squared_z(spread.shape) > critical:
            high = 1.0
            while squared_z(high) > 1:  # shapes that moved apart by more than e (ln units)
                high *= 4
            tau = optimize.brentq(lambda t: squared_z(t) - 1, spread.shape, high)
            found[group] = replace(spread, shape=tau, shape_df=len(groups) - 2, source=(
                f"{spread.source}; each shape's own part widened {_pct(spread.shape)} -> {_pct(tau)}: the "
                "other shapes' NEW/BASE spread wider than the calibration says"))
    return found


def _pct(value: float) -> str:
    return f"{100 * value:.2f}%"


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


def _shift(groups: dict, spread: Optional[Spread], judged: bool) -> Optional[Shift]:
    """The median over groups of each group's median difference, and the variance of that estimate."""
    if not groups:
        return None
    value, variance, freedom = _estimate(list(groups.values()), spread)
    return Shift(value, variance, freedom, len(groups), spread, judged)


def _others(groups: dict, spread: Optional[Spread]) -> dict:
    """group -> the shift of its domain estimated without it (value, variance, freedom), what its rows are
    judged against: independent of them, so that a change of the group is not half taken by the shift
    (two shapes) and no covariance is left out; None where the group is its domain's only one."""
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
    """For each value, the variance of the median of the others (independent normals of these variances),
    from one seeded simulation (without_one_medians)."""
    count = len(variances)
    if count <= 3:  # the others are one value, or two whose median is their mean
        return [(sum(variances) - v) / (count - 1) ** 2 for v in variances]
    medians = without_one_medians(_standard_normal(count) * np.sqrt(variances))
    return [float(v) for v in np.var(medians, axis=0)]


def without_one_medians(values: np.ndarray) -> np.ndarray:
    """Along the last axis, for each value the median of the others: the values sorted once, each median
    read off the order statistics with that value left out (the k-th smallest of the others is the k-th
    of all, or the next where the one left out is at or below it)."""
    ordered = np.sort(values, axis=-1)
    ranks = np.argsort(np.argsort(values, axis=-1), axis=-1)
    others = values.shape[-1] - 1

    def smallest(k: int) -> np.ndarray:
        return np.take_along_axis(ordered, k + (ranks <= k), axis=-1)

    return smallest(others // 2) if others % 2 else (smallest(others // 2 - 1) + smallest(others // 2)) / 2


@lru_cache(maxsize=64)
def _standard_normal(count: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((MEDIAN_DRAWS, count))


def _verdict_of_shift(shift: Shift, rule: Rule, tail: float) -> None:
    """The shift against the spread of runs. Its t quantile takes the fewer degrees of freedom of its two
    terms, not Welch-Satterthwaite's: those grow exactly when the calibration's few runs put sigma low by
    chance, which is when the test most needs them not to (judged so, unchanged code failed by the shift
    in 0.9% of the Monte Carlo's comparisons where 0.5% was its share; so, 0.5%)."""
    spread = shift.spread
    terms = spread.run_terms(shift.variance, shift.freedom)
    sd = math.sqrt(sum(v for v, _ in terms))
    quantile = t_quantile(tail, min(spread.shift_df, shift.freedom))
    threshold = max(quantile * sd, math.log1p(rule.min_effect))
    shift.threshold = threshold
    shift.verdict = "SLOW" if shift.value > threshold else "FAST" if shift.value < -threshold else "SAME"
    shift.catches = max(threshold, math.log1p(rule.fail_on_slow)) + POWER_Z * sd


def _shift_against_controls(shift: Shift, groups: dict, controls: dict, domain: tuple, tail: float) -> None:
    """A SLOW or FAST shift whose controls moved alike is the machine's (MACHINE): the median over its
    groups of their difference from their controls' (paired by rounds where they pair), judged against the
    spread of that difference between runs (the calibration's `control`) as the shift is against its own."""
    spread = shift.spread.control
    if spread is None:
        return
    found = []
    for group, (value, variance, freedom) in groups.items():
        control = controls.get((domain, group))
        if control is None:
            continue
        own = control[4]
        paired = _paired(own[0], own[1], control[3]) if own else None
        difference, noise, noise_df = paired or (value - control[0], variance + control[1], min(freedom,
                                                                                                 control[2]))
        found.append((difference, noise + 2 * spread.shape ** 2, noise_df))
    if not found:
        return
    shift.vs_controls = float(np.median([d for d, _, _ in found]))
    variance = median_variance([v for _, v, _ in found])
    if shift.verdict in ("SLOW", "FAST"):
        threshold = _threshold(spread.run_terms(variance, min(f for _, _, f in found)), tail)
        shift.verdict = _cleared(shift.verdict, shift.vs_controls, threshold)


def _rows(pairs: list[Pair], noise: list, others: dict, spreads: dict, controls: dict, rule: Rule,
          tails: list[float]) -> list[dict]:
    """Each pair's verdict against the shift of the other shapes of its domain (the t quantiles in one
    call: a sweep has thousands of rows), then a SLOW or FAST one against its controls."""
    rows, judged = [], []
    for pair, found, tail in zip(pairs, noise, tails):
        row = {"ratio": math.exp(pair.difference), "vs_shift": math.nan, "threshold": math.nan,
               "catches": math.nan, "noise_from": "-", "vs_controls": math.nan}
        if not pair.comparable or found is None:
            rows.append({**row, "verdict": "OTHER TIMER" if not pair.comparable else "NO REPETITIONS"})
            continue
        variance, freedom, where = found
        shift = others[pair.domain][pair.group]
        if shift is None:
            rows.append({**row, "verdict": ONE_SHAPE, "noise_from": where})
            continue
        value, shift_variance, shift_freedom = shift
        spread = spreads.get((pair.domain, pair.group), spreads.get(pair.domain))
        tau = spread.shape if spread else 0.0
        terms = [(variance, freedom), (2 * tau * tau, spread.shape_df if spread else math.inf),
                 (shift_variance, shift_freedom)]
        row.update(vs_shift=math.exp(pair.difference - value), noise_from=where)
        rows.append(row)
        # The calibration's few runs may put tau low by chance, and Welch-Satterthwaite's degrees of freedom
        # grow exactly then (the shift's reason, _verdict_of_shift): never more than tau's own.
        freedom = min(satterthwaite(terms), spread.shape_df if spread else math.inf)
        judged.append((row, math.sqrt(sum(v for v, _ in terms)), tail, freedom))
        control = controls.get((pair.domain, pair.group))
        if control is not None and spread is not None and spread.control is not None:
            logs = (f.logs if len(f.logs) == f.repetitions else None for f in (pair.base, pair.new))
            paired = _paired(*logs, control[3])
            difference, noise, noise_df = paired or (pair.difference - control[0], variance + control[1],
                                                     satterthwaite([(variance, freedom), control[1:3]]))
            row["vs_controls"] = math.exp(difference)
            row["against_controls"] = (spread.control, noise + pair.base.own + pair.new.own, noise_df, tail)
    quantiles = _t_quantiles([tail for *_, tail, _ in judged], [freedom for *_, freedom in judged])
    floor = math.log1p(rule.min_effect)
    for (row, sd, _, _), quantile in zip(judged, quantiles):
        threshold = max(quantile * sd, floor)
        residual = math.log(row["vs_shift"])
        verdict = "SLOW" if residual > threshold else "FAST" if residual < -threshold else "SAME"
        if verdict != "SAME" and "against_controls" in row:
            threshold_of_controls = _against_controls(*row["against_controls"])
            verdict = _cleared(verdict, math.log(row["vs_controls"]), threshold_of_controls)
        row.pop("against_controls", None)
        row.update(verdict=verdict, threshold=math.expm1(threshold),
                   catches=math.expm1(max(threshold, math.log1p(rule.fail_on_slow)) + POWER_Z * sd))
    return rows


def _against_controls(spread: Spread, variance: float, freedom: float, tail: float) -> float:
    """The threshold of a row's difference from its controls': its noise and theirs, and the spread of that
    difference between runs, whole and per shape."""
    return _threshold([(variance, freedom), (2 * spread.shape ** 2, spread.shape_df),
                       *spread.run_terms(0.0, math.inf)], tail)


def _threshold(terms: list[tuple[float, float]], tail: float) -> float:
    """t quantile (Welch-Satterthwaite degrees of freedom) times the sd of a sum of variance terms."""
    return t_quantile(tail, satterthwaite(terms)) * math.sqrt(sum(v for v, _ in terms))


def _cleared(verdict: str, difference: float, threshold: float) -> str:
    """A SLOW or FAST verdict, MACHINE where its difference from its controls' is within `threshold` or
    the other way."""
    if abs(difference) <= threshold or (difference > 0) != (verdict == "SLOW"):
        return MACHINE
    return verdict


def _t_quantiles(tails: list[float], freedoms: list[float]) -> list[float]:
    """t_quantile of each (tail, freedom), from scipy.special's inverse distribution functions (those
    scipy.stats' t.isf and norm.isf call): scipy.stats takes about a second to import beside torch and
    pandas, scipy.special a third of it."""
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
    control: Optional[tuple] = None
    kind: str = ""


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
    control_of = {}  # (domain, group) -> its control key
    for key in sorted(runs[0]):
        first = runs[0][key]
        if all(key in run and run[key].domain == first.domain for run in runs[1:]):
            by_domain.setdefault(first.domain, {}).setdefault(first.group, []).append(key)
            if first.control is not None:
                control_of[(first.domain, first.group)] = first.control
    columns = {}  # (domain, group) -> (its centred figure in each run, the noise of one, each run's figures)
    for domain, groups in by_domain.items():
        for group, keys in groups.items():
            retimed = [k for k in keys if all(run[k].figure.repetitions > 1 for run in runs)]
            keys = retimed or keys
            logs = np.array([[run[k].figure.value for k in keys] for run in runs])  # runs x trials
            by_run = [[run[k].figure for k in keys] for run in runs]
            columns[(domain, group)] = (np.median(logs - logs.mean(axis=0), axis=1),
                                        _figure_noise([f for figures in by_run for f in figures]), by_run)
    sharing: dict[tuple, list] = {}
    for where, key in control_of.items():
        if columns[where][1] is not None:
            sharing.setdefault(key, []).append(where)
    for domain, groups in by_domain.items():
        own = [columns[(domain, group)] for group in groups]
        if any(noise is None for _, noise, _ in own):
            continue
        spread = _two_way(np.array([column for column, _, _ in own]).T,
                          float(np.mean([noise for _, noise, _ in own])), source)
        table, noises = [], []
        for group in groups:
            rest = [columns[w] for w in sharing.get(control_of.get((domain, group)), []) if w[0] != domain]
            if rest:
                column, noise, by_run = columns[(domain, group)]
                table.append(column - np.median([c for c, _, _ in rest], axis=0))
                paired = [_round_noise(_series(by_run[r]), _median_series([_series(c[2][r]) for c in rest]))
                          for r in range(len(runs))]
                noises.append(float(np.mean(paired)) if None not in paired
                              else noise + median_variance([n for _, n, _ in rest]))
        control = _two_way(np.array(table).T, float(np.mean(noises)), f"{source}against its controls, ") \
            if table else None
        repetition = {group: found for group in groups if (found := _placements(columns[(domain, group)][2]))}
        spreads[domain] = replace(spread, control=control, repetition=repetition)
    return spreads


def _pooled(figures: list[Figure]) -> Optional[tuple[float, float]]:
    """(s^2, freedom): the repetition spread pooled over these figures; None where none has repetitions."""
    weight = sum(f.repetitions - 1 for f in figures if f.noise is not None)
    if not weight:
        return None
    return sum((f.repetitions - 1) * f.noise ** 2 for f in figures if f.noise is not None) / weight, weight


def _placements(sets: list[list[Figure]]) -> Optional[tuple[float, float]]:
    """(s^2, freedom) pooled over sets of figures that each share their repetitions' placements (the rows
    of one shape in one run): a set's freedom counts once, R - 1."""
    pooled = [(found[0], max(f.repetitions for f in figures) - 1)
              for figures in sets if (found := _pooled(figures)) is not None]
    freedom = sum(f for _, f in pooled)
    return (sum(s2 * f for s2, f in pooled) / freedom, freedom) if freedom else None


def _figure_noise(figures: list[Figure]) -> Optional[float]:
    """The variance of one trial's figure in one run, from the pooled repetition spread of `figures` and
    their own error; None where none has repetitions or its own error is unknown."""
    pooled = _pooled(figures)
    own = float(np.median([f.own for f in figures]))
    if pooled is None or not math.isfinite(own):
        return None
    return pooled[0] * float(np.median([f.share for f in figures])) + own


def _two_way(table: np.ndarray, noise: float, source: str) -> Spread:
    """The spread of a runs x shapes table of centred figures (calibrate)."""
    runs, shapes = table.shape
    run_means = table.mean(axis=1)
    if shapes == 1:
        shift = math.sqrt(max(float(np.var(run_means, ddof=1)) - noise, 0.0))
        return Spread(shift, runs - 1, shift, runs - 1,
                      f"{source}{runs} runs of 1 shape (each shape's own part taken as the run's)",
                      run_noise=noise)
    residual = table - run_means[:, None] - table.mean(axis=0)[None, :] + table.mean()
    freedom = (runs - 1) * (shapes - 1)
    ms_residual = float((residual ** 2).sum()) / freedom
    ms_runs = shapes * float(np.var(run_means, ddof=1))
    shape = max(ms_residual - noise, 0.0)
    shift = max((ms_runs - ms_residual) / shapes, 0.0)
    return Spread(math.sqrt(shift), runs - 1, math.sqrt(shape), freedom,
                  f"{source}{runs} runs of {shapes} shapes", run_noise=ms_residual / shapes)


def gate_failures(judgement: Judgement, pairs: list[Pair], rule: Rule) -> tuple[list[int], list[tuple]]:
    """What fails the gate: the judged pairs SLOW against their shift by more than rule.fail_on_slow
    (their indices), and the domains whose shift is SLOW by more than it."""
    rows = [i for i, (pair, row) in enumerate(zip(pairs, judgement.rows))
            if pair.judged and row["verdict"] == "SLOW" and row["vs_shift"] - 1 > rule.fail_on_slow]
    shifts = [domain for domain, shift in judgement.shifts.items()
              if shift is not None and shift.judged and shift.verdict == "SLOW"
              and math.expm1(shift.value) > rule.fail_on_slow]
    return rows, shifts

"""Whether two runs differ: the rule triton_sweep.compare and triton_sweep.revalidate judge by.

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
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from triton_sweep.compare.calibration import Spread, checked_spread, shapes_checked
from triton_sweep.compare.estimators import (median_series, median_variance, paired_difference, round_series,
                                             satterthwaite, t_quantile, t_quantiles,
                                             without_one_median_variances, without_one_medians)
from triton_sweep.compare.figures import Pair, size_class

POWER_Z = 1.6449  # the smallest slowdown caught "in 95% of runs": the threshold plus this many sds
KINDS_P = 0.05  # a domain's memory- and compute-bound shapes are judged apart where they moved apart so
MACHINE = "MACHINE"  # SLOW or FAST, and its controls moved alike: the machine's, not the code's
ONE_SHAPE = "ONE SHAPE"  # a row alone in its domain: no other shape to tell its change from the shift
OTHER_TIMER = "OTHER TIMER"  # the two rows were timed by different methods: not comparable
NO_REPETITIONS = "NO REPETITIONS"  # neither side has the noise of the row's class: no verdict
VERDICTS = ("SAME", "FAST", "SLOW", MACHINE, ONE_SHAPE, OTHER_TIMER, NO_REPETITIONS)
JUDGED = VERDICTS[:4]  # a row or shift judged (whatever it was judged to be)


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
    pairs = [Pair(domain=(p.domain, p.kind if p.domain in apart else ""), group=p.group, base=p.base,
                  new=p.new, p50_us=p.p50_us, judged=p.judged, comparable=p.comparable, control=p.control,
                  kind=p.kind)
             for p in pairs]  # by name, not dataclasses.replace: 8 times as long
    members = {domain: [i for i, p in enumerate(pairs) if p.domain == domain and noise[i] is not None]
               for domain in dict.fromkeys(p.domain for p in pairs)}
    groups = {domain: _groups(pairs, noise, indices) for domain, indices in members.items()}
    spreads = {domain: checked_spread(spreads.get(domain), domain[0], groups[domain], by_group)
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
                shapes_checked(groups[domain], others[domain], spreads[domain]).items()}
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
    with a pair of its control key of their group's median difference, and their rounds (round_series: BASE's,
    NEW's) where every one has them."""
    by_key: dict[tuple, dict] = {}
    figures: dict[tuple, list] = {}
    for pair in pairs:
        if pair.control is not None and pair.group in groups[pair.domain]:
            by_key.setdefault(pair.control, {})[pair.domain] = pair.group
            if pair.base.repetitions > 1 and pair.new.repetitions > 1:
                figures.setdefault((pair.domain, pair.group), []).append(pair)
    rounds = {where: (round_series([p.base for p in found]), round_series([p.new for p in found]))
              for where, found in figures.items()}
    found = {}
    for members in by_key.values():
        for domain, group in members.items():
            rest = [(d, g) for d, g in members.items() if d != domain]
            if not rest:
                continue
            values = [groups[d][g] for d, g in rest]
            series = [rounds.get(where, (None, None)) for where in rest]
            paired = tuple(median_series([s[side] for s in series]) for side in (0, 1))
            found[(domain, group)] = (float(np.median([d for d, _, _ in values])),
                                      median_variance([v for _, v, _ in values]),
                                      min(f for _, _, f in values),
                                      None if any(x is None for x in paired) else paired,
                                      rounds.get((domain, group)))
    return found


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
    noise, fewest = float(np.mean([v for _, v, _ in groups])), min(f for _, _, f in groups)
    return float(np.median([d for d, _, _ in groups])), total, _freedom(total, noise, fewest, shape, spread)


def _freedom(total: float, noise: float, fewest: float, shape: float, spread: Optional[Spread]) -> float:
    """The degrees of freedom of a median's variance `total`, shared between the groups' own noise (their
    mean variance `noise`, their fewest degrees of freedom) and the spread's per-shape part (`shape`,
    2 tau^2) as their means are."""
    weight = noise + shape or 1.0
    return satterthwaite([(total * noise / weight, fewest),
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
    if len(groups) < 2:
        return dict.fromkeys(groups)
    shape = 2 * (spread.shape if spread else 0.0) ** 2
    values, noises, freedoms = (np.array(column, dtype=np.float64) for column in zip(*groups.values()))
    medians = without_one_medians(values)
    variances = without_one_median_variances([v + shape for _, v, _ in groups.values()])
    found = {}
    for index, group in enumerate(groups):
        rest = np.arange(len(groups)) != index
        found[group] = (float(medians[index]), variances[index], _freedom(
            variances[index], float(np.mean(noises[rest])), float(np.min(freedoms[rest])), shape, spread))
    return found


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
        paired = paired_difference(own[0], own[1], control[3]) if own else None
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
            rows.append({**row, "verdict": OTHER_TIMER if not pair.comparable else NO_REPETITIONS})
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
            paired = paired_difference(*logs, control[3])
            difference, noise, noise_df = paired or (pair.difference - control[0], variance + control[1],
                                                     satterthwaite([(variance, freedom), control[1:3]]))
            row["vs_controls"] = math.exp(difference)
            row["against_controls"] = (spread.control, noise + pair.base.own + pair.new.own, noise_df, tail)
    quantiles = t_quantiles([tail for *_, tail, _ in judged], [freedom for *_, freedom in judged])
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


def failures(rows: list[dict], shifts: dict, rule: Rule) -> tuple[list[int], list[tuple]]:
    """The gate's fail rule, its one statement: of the judged rows `rows`, those SLOW against their shift
    by more than rule.fail_on_slow (their indices), and the judged shifts SLOW by more than it, and by
    more than it beyond their controls too where they have any (their domains): a machine that moves the
    baselines nearly as much as ours, or an upgrade that moves them alone, is not our kernel's change."""
    slow = [i for i, row in enumerate(rows)
            if row["verdict"] == "SLOW" and row["vs_shift"] - 1 > rule.fail_on_slow]
    failed = [domain for domain, shift in shifts.items()
              if shift is not None and shift.judged and shift.verdict == "SLOW"
              and math.expm1(shift.value) > rule.fail_on_slow
              and not math.expm1(shift.vs_controls) <= rule.fail_on_slow]  # NaN: no controls
    return slow, failed


def gate_failures(judgement: Judgement, pairs: list[Pair], rule: Rule) -> tuple[list[int], list[tuple]]:
    """What fails the gate (failures): the judged pairs' indices, and the domains of the shifts."""
    judged = [i for i, pair in enumerate(pairs) if pair.judged]
    slow, shifts = failures([judgement.rows[i] for i in judged], judgement.shifts, rule)
    return [judged[i] for i in slow], shifts

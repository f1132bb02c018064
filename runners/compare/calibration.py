"""The spread of runs a comparison's shifts are judged against: calibrate measures it (a Spread per GPU,
kernel and provider) off three or more runs of the same sweep, by a two-way analysis of variance with the
repetitions' noise taken out; checked_spread and shapes_checked widen it where the comparison's own data
is noisier than it says. runners/compare/GATE.md explains each step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from triton_sweep.compare.estimators import (median_series, median_variance, round_noise, round_series,
                                             without_one_medians)
from triton_sweep.compare.figures import Figure

MIN_RUNS = 3  # a calibration needs the spread of at least three runs' shifts
CHECK_P = 0.01  # a calibration is widened where the comparison's own data is noisier at this level
SHAPE_CHECK = 6  # shapes a domain needs for the check of each shape's own part (fewer: too few to tell)


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
    # each column's median round by round in each run (estimators.round_series), computed once
    rounds = {where: [round_series(figures) for figures in column[2]] for where, column in columns.items()}
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
            others = [w for w in sharing.get(control_of.get((domain, group)), []) if w[0] != domain]
            if others:
                rest = [columns[w] for w in others]
                column, noise, _ = columns[(domain, group)]
                table.append(column - np.median([c for c, _, _ in rest], axis=0))
                own_rounds = rounds[(domain, group)]
                paired = [round_noise(own_rounds[r], median_series([rounds[w][r] for w in others]))
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


def checked_spread(spread: Optional[Spread], domain: tuple, groups: dict, by_group: dict) -> Optional[Spread]:
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


def shapes_checked(groups: dict, others: dict, spread: Optional[Spread]) -> dict:
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

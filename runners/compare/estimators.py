"""The statistics the rule (runners/compare/between_runs.py) and its calibration (calibration.py) share:
t quantiles without scipy.stats, Welch-Satterthwaite degrees of freedom, the variance of a median (and of
each leave-one-out median) by a seeded simulation, and figures timed in the same rounds paired round by
round. runners/compare/GATE.md says why each is what it is.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Optional, Sequence

import numpy as np

from triton_sweep.compare.figures import Figure

MEDIAN_DRAWS = 4000  # draws of the simulation of a median's variance (its own error about 2%)


def t_quantile(tail: float, freedom: float) -> float:
    """The upper `tail` quantile of Student's t (the normal's at infinite freedom)."""
    return t_quantiles([tail], [freedom])[0]


def t_quantiles(tails: list[float], freedoms: list[float]) -> list[float]:
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


def satterthwaite(terms: Sequence[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variance terms (variance, its freedom)."""
    total = sum(v for v, _ in terms)
    spread = sum(v * v / f for v, f in terms if v > 0 and math.isfinite(f))
    if total <= 0 or spread == 0:
        return math.inf
    return total * total / spread


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


def round_series(figures: list[Figure]) -> Optional[np.ndarray]:
    """The median, round by round, of the logs of figures timed in the same rounds (a shape's finalists
    and baselines share each round's placement); None unless each kept its R >= 2 repetition medians."""
    if any(len(f.logs) != f.repetitions or f.repetitions < 2 for f in figures):
        return None
    return median_series([f.logs for f in figures])


def median_series(series: list) -> Optional[np.ndarray]:
    """The median, round by round, of series of one length; None where one is missing or they differ."""
    if not series or any(s is None for s in series) or len({len(s) for s in series}) != 1:
        return None
    return np.median(np.array(series), axis=0)


def paired_difference(base, new, rounds: Optional[tuple]) -> Optional[tuple[float, float, float]]:
    """(difference, variance, freedom) of ln(NEW/BASE) against the controls', round by round: the
    variance from the spread of each side's differences over its rounds, so that what a round's
    placement moves alike (every provider at the shape) cancels; None where the rounds do not pair."""
    if rounds is None or base is None or new is None:
        return None
    noises = [round_noise(np.asarray(side), control) for side, control in zip((base, new), rounds)]
    if None in noises:
        return None
    terms = [(noise, len(side) - 1) for noise, side in zip(noises, (base, new))]
    return (float(np.mean(new) - np.mean(rounds[1]) - np.mean(base) + np.mean(rounds[0])),
            sum(v for v, _ in terms), satterthwaite(terms))


def round_noise(own: Optional[np.ndarray], control: Optional[np.ndarray]) -> Optional[float]:
    """The variance of the mean over rounds of `own` less `control`, from their spread round by round."""
    if own is None or control is None or len(own) != len(control):
        return None
    return float(np.var(own - control, ddof=1)) / len(own)

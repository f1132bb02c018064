"""A row as the rule of runners/compare/between_runs.py reads it: a Figure (the logs of its repetitions'
medians, or its p50 where none was kept, and the error they cannot show), a Pair of them (one trial on
both sides) and a RunFigure (one trial in one run of a calibration, runners/compare/calibration.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

SIZE_CLASSES = ((10.0, "<10us"), (100.0, "10-100us"), (1000.0, "0.1-1ms"), (math.inf, ">=1ms"))
# Where a row kept only its p50 (the median of every sample, an export written before issue 32), its
# variance is taken as this times s^2/R: the variance of ln p50 over that of the mean of ln(repetition
# medians) was 1.02-1.29 in bench_between_runs' simulation of repetitions (larger with the spread) and
# 1.21-1.38 in the audit of issue 32.
P50_VARIANCE = 1.4


@dataclass(frozen=True, slots=True)  # slots: a pair of them a compared row, a million rows
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


@dataclass(slots=True)
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
class RunFigure:
    """One trial's figure in one run of a calibration."""
    domain: tuple
    group: tuple
    figure: Figure
    control: Optional[tuple] = None
    kind: str = ""


def size_class(p50_us: float) -> str:
    return next(name for bound, name in SIZE_CLASSES if p50_us < bound)

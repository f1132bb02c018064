"""The stopping rule of every measurement: when the median of the samples is known well enough.

StopRule stops on the precision of the reported figure, the 95% confidence interval of the median, not
on the spread of single samples (a few outliers make that spread large while the median is already
known to 0.1%), after a minimum of samples and of time, or at a cap. It is the one definition of the
rule: the schema's `timing` (screening) and `finalists` nodes extend it (runners/model/schema.py), the
sweep makes one of each (`StopRule.of`), and the timers take it (runners/measure/repetitions.py).

Light on purpose (numpy is imported where an interval is computed): the schema imports it
before the sweep starts its workers.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Optional, Sequence

STOP_CONVERGED = "converged"
STOP_TIMEOUT = "timeout"
# The timer's resolution bounds the median's precision above the rule's: the interval's ends are one
# reading or two adjacent ones (at_resolution), and more samples would at best decide between the two.
# On an H100, CUPTI reads 32 ns steps: 5.5-7.1 us kernels and a 6.2 us torch.compile baseline ran to
# the 1 s cap in the README sweep, 2500-3700 samples each (BENCHMARKS.md, T).
STOP_RESOLUTION = "resolution"
# Finalists: the decision their rounds feed (runners/model/finalists.py: settled) is known before every
# median reaches the rule's precision.
STOP_SETTLED = "settled"
TAIL_95 = 0.025  # each tail of a two-sided 95% interval
# Distinct readings this close (seconds) are one reading of a clock, off by its conversion's rounding:
# an H100's CUPTI reads kernel times in 32 ns steps, with values 1 ns off them now and then (5.472,
# 5.473, 5.504, 5.505 us: BENCHMARKS.md, T); read as a 1 ns clock, a 5.5 us median
# was "known to 0.02%" where the clock knows it to 0.6%.
CLOCK_JITTER_S = 2.5e-9
# The exact 95% interval of the median exists from 6 values on (min to max covers 1 - 2 / 2^n: 96.9% at
# n = 6, 93.8% at n = 5); up to 8 values it spans the whole sample.
MIN_SAMPLES_FOR_INTERVAL = 6


# A repetition takes at least this many samples, so that its median is a median of something.
MIN_SAMPLES_PER_REPETITION = 8


class StopRuleError(ValueError):
    """A field of a stopping rule out of its range; the message begins with the field's name."""


@dataclass
class StopRule:
    """When to stop sampling. The schema's `timing` and `finalists` nodes are this rule with fields of
    their own added (runners/model/schema.py), checked here when one is made; the defaults are the
    default preset's (conf/timing/default.yaml)."""

    min_samples: int = 20
    min_time_s: float = 0.01  # wall time spent sampling, flushes and enqueueing included
    rel_precision: float = 0.005  # half-width of the median's 95% confidence interval, relative to it
    max_time_s: float = 1.0
    repetitions: int = 1  # blocks of samples, each on freshly placed buffers (runners/measure/repetitions.py)

    def __post_init__(self) -> None:
        if self.min_samples < MIN_SAMPLES_FOR_INTERVAL:
            raise StopRuleError(f"min_samples: {self.min_samples} must be >= {MIN_SAMPLES_FOR_INTERVAL} "
                                "(fewer samples give no 95% interval of the median)")
        if not 0 < self.rel_precision < 1:
            raise StopRuleError(f"rel_precision: {self.rel_precision} must be in (0, 1), e.g. 0.005 for 0.5%")
        if self.max_time_s <= 0:
            raise StopRuleError(f"max_time_s: {self.max_time_s} must be > 0")
        if self.min_time_s < 0:
            raise StopRuleError(f"min_time_s: {self.min_time_s} must be >= 0")
        if self.min_time_s > self.max_time_s:
            raise StopRuleError(f"min_time_s: {self.min_time_s} is past max_time_s ({self.max_time_s}): "
                                "every trial would stop at the cap")
        if self.repetitions < 1:
            raise StopRuleError(f"repetitions: {self.repetitions} must be >= 1")

    @classmethod
    def of(cls, node) -> "StopRule":
        """The rule of a schema node that extends it (its own fields left out): what the timer takes."""
        return cls(**{f.name: node[f.name] if isinstance(node, Mapping) else getattr(node, f.name)
                      for f in fields(cls)})

    def per_repetition(self) -> "StopRule":
        """The rule of one of `repetitions` blocks: its share of the samples and seconds, and the
        precision that the pooled median of all blocks then reaches (the interval shrinks as
        1/sqrt(samples)); one block: the rule itself."""
        if self.repetitions <= 1:
            return self
        share = self.repetitions
        return StopRule(max(math.ceil(self.min_samples / share), MIN_SAMPLES_PER_REPETITION),
                        self.min_time_s / share, min(self.rel_precision * math.sqrt(share), 0.5),
                        self.max_time_s / share)


    def check(self, samples_s: Sequence[float], elapsed_s: float) -> Optional[str]:
        """None while more samples are needed, else why to stop: max_time_s whatever the precision;
        else, once min_samples are taken and min_time_s has passed, when the median is known to
        rel_precision, or known as well as the timer's resolution lets it be (at_resolution)."""
        if elapsed_s >= self.max_time_s:
            return STOP_TIMEOUT
        if len(samples_s) < self.min_samples or elapsed_s < self.min_time_s:
            return None
        if median_precision(samples_s) <= self.rel_precision:
            return STOP_CONVERGED
        if at_resolution(samples_s):
            return STOP_RESOLUTION
        return None


def median_interval(values: Sequence[float], jitter: float = CLOCK_JITTER_S) -> tuple[float, float]:
    """95% confidence interval of the median from the order statistics, at the exact binomial rank (the
    sign-test interval: no assumption on the distribution, so rare outliers widen it by one rank, not by
    their size): [x_(i), x_(n-1-i)], i the largest rank with P(Binomial(n, 1/2) <= i) <= 2.5%, so that
    it covers the median in at least 95% of samples for every n (the normal approximation of the rank
    covers 87.5% at n = 4 and below 95% at 191 of the n from 4 to 400). Too few values (n < 6: even
    min to max covers less than 95%): the whole real line.

    Values read off a clock of resolution q (ties in the sample; the CUDA-event timer quantizes) are each
    within q of the truth, so the interval is widened by the sample's quantum at each end (quantum();
    `jitter`: CLOCK_JITTER_S in the values' unit): 17 samples of 5.0 and 3 of 5.5 are not a median
    known to 0%. All values equal: the quantum is unknown, and so is the median's interval."""
    low, high, _ = median_interval_and_step(values, jitter)
    return low, high


def median_interval_and_step(values: Sequence[float], jitter: float = CLOCK_JITTER_S
                             ) -> tuple[float, float, float]:
    """median_interval's (low, high) and the clock step it widened each end by (NaN where unknown)."""
    import numpy as np

    ordered = np.sort(np.asarray(values, dtype=np.float64))
    n = len(ordered)
    rank = _interval_rank(n)
    if rank < 0:
        return -math.inf, math.inf, math.nan
    step = quantum(ordered, jitter)
    if math.isnan(step):
        return -math.inf, math.inf, step
    return float(ordered[rank]) - step, float(ordered[n - 1 - rank]) + step, step


@lru_cache(maxsize=None)
def _interval_rank(n: int) -> int:
    """The 0-based rank of the lower end of the exact 95% interval of the median of n values; -1 when
    no interval reaches 95% (n < 6): the largest i with P(Binomial(n, 1/2) <= i) <= 2.5%."""
    from scipy.stats import binom

    rank = int(binom.ppf(TAIL_95, n, 0.5))  # the smallest i with P(X <= i) >= 2.5%
    return rank if binom.cdf(rank, n, 0.5) <= TAIL_95 else rank - 1


def quantum(ordered, jitter: float = CLOCK_JITTER_S) -> float:
    """The resolution the sorted values were read at: 0 when no two are equal (finer than their
    spacing), else the smallest gap between distinct values larger than `jitter` (a clock's rounding,
    CLOCK_JITTER_S in the values' unit), or the smallest gap where none is larger (a fine clock); NaN
    when all are equal (unknown)."""
    import numpy as np

    distinct = np.unique(ordered)
    if len(distinct) == len(ordered):
        return 0.0
    if len(distinct) == 1:
        return math.nan
    gaps = np.diff(distinct)
    steps = gaps[gaps > jitter]
    return float(steps.min() if len(steps) else gaps.min())


def at_resolution(values: Sequence[float], jitter: float = CLOCK_JITTER_S) -> bool:
    """Whether the median's interval is within one step of as narrow as the timer's resolution lets it
    be: its ends are the same reading or two adjacent ones (within `jitter` of that, where the readings
    are further apart than it), so that it is at most [r - q, r + 2q] (median_interval, q the quantum);
    more samples can at best take it to r +- q, where the median sits well inside one reading, and never
    where it lies between two. Ends further apart: False (more samples narrow it). All values equal
    (the resolution is unknown): False."""
    import numpy as np

    ordered = np.sort(np.asarray(values, dtype=np.float64))
    rank = _interval_rank(len(ordered))
    if rank < 0:
        return False
    step = quantum(ordered, jitter)
    same = jitter if step > jitter else 0.0
    return step > 0 and ordered[len(ordered) - 1 - rank] - ordered[rank] <= step + same


def median_precision(samples: Sequence[float]) -> float:
    """The larger distance from the median to an end of its 95% interval, relative to the median."""
    import numpy as np

    low, high = median_interval(samples)
    median = float(np.median(samples))
    if not math.isfinite(low) or median <= 0:
        return math.inf
    return max(median - low, high - median) / median


def quantization_note(samples: Sequence[float]) -> Optional[str]:
    """What a row's message says when the timer's resolution, not the number of samples, bounds the
    median's precision (the quantum is at least a third of the interval's half-width: at_resolution's
    interval, [r - q, r + 2q], has a half-width of up to 2q plus a clock's rounding); else None."""
    import numpy as np

    ordered = np.sort(np.asarray(samples, dtype=np.float64))
    step = quantum(ordered)
    median = float(np.median(ordered)) if len(ordered) else 0.0
    if median <= 0 or step == 0:
        return None
    if math.isnan(step):
        return (f"all {len(ordered)} samples are equal: the timer's resolution is unknown, and so is the "
                "p50's precision")
    if step < median_precision(ordered) * median / 3:
        return None
    return (f"samples quantized to {step:.3g} (the timer's resolution): the p50 is known to "
            f"+-{100 * median_precision(ordered):.2g}% at best, however many samples are taken")

"""The stopping rule of every measurement: when the median of the samples is known well enough.

StopRule stops on the precision of the reported figure, the 95% confidence interval of the median, not
on the spread of single samples (a few outliers make that spread large while the median is already
known to 0.1%), after a minimum of samples and of time, or at a cap. It is the one definition of the
rule: the schema's `timing` (screening) and `finalists` nodes extend it (runners/engine/schema.py), the
sweep makes one of each (`StopRule.of`), and the timers take it (runners/measure/timing.py).

Light on purpose (numpy is imported where an interval is computed): the schema imports it before the
sweep starts its workers.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Optional, Sequence

STOP_CONVERGED = "converged"
STOP_TIMEOUT = "timeout"
Z_95 = 1.959964
# The order-statistic interval of the median exists from 4 values on (n - 1.96 sqrt(n) >= 0); up to
# 7 values it spans the whole sample, min to max.
MIN_SAMPLES_FOR_INTERVAL = 4


# A repetition takes at least this many samples, so that its median is a median of something.
MIN_SAMPLES_PER_REPETITION = 8


class StopRuleError(ValueError):
    """A field of a stopping rule out of its range; the message begins with the field's name."""


@dataclass
class StopRule:
    """When to stop sampling. The schema's `timing` and `finalists` nodes are this rule with fields of
    their own added (runners/engine/schema.py), checked here when one is made; the defaults are the
    default preset's (conf/timing/default.yaml)."""

    min_samples: int = 20
    min_time_s: float = 0.01  # wall time spent sampling, flushes and enqueueing included
    rel_precision: float = 0.005  # half-width of the median's 95% confidence interval, relative to it
    max_time_s: float = 1.0
    repetitions: int = 1  # blocks of samples, each on freshly placed buffers (module docstring)

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
        rel_precision."""
        if elapsed_s >= self.max_time_s:
            return STOP_TIMEOUT
        if len(samples_s) < self.min_samples or elapsed_s < self.min_time_s:
            return None
        if median_precision(samples_s) <= self.rel_precision:
            return STOP_CONVERGED
        return None


def median_interval(values: Sequence[float]) -> tuple[float, float]:
    """95% confidence interval of the median from the order statistics (the sign-test interval: no
    assumption on the distribution, so rare outliers widen it by one rank, not by their size).
    Too few values: the whole real line."""
    import numpy as np

    ordered = np.sort(np.asarray(values, dtype=np.float64))
    n = len(ordered)
    k = math.floor((n - Z_95 * math.sqrt(n)) / 2)
    if k < 0:
        return -math.inf, math.inf
    return float(ordered[k]), float(ordered[n - 1 - k])


def median_precision(samples: Sequence[float]) -> float:
    """The larger distance from the median to an end of its 95% interval, relative to the median."""
    import numpy as np

    low, high = median_interval(samples)
    median = float(np.median(samples))
    if not math.isfinite(low) or median <= 0:
        return math.inf
    return max(median - low, high - median) / median

"""Timing: what a measurement is (Measurement, pooled), its statistics, the parts of the sampling loop
both timers share, and the interpreter's wall-clock timer.

The figure of record is the kernel's own duration on the GPU, as a profiler sees it (BENCHMARKS.md, T):
- CUPTI activity records (cupti_records.py); a CUDA-event pair around each launch is kept beside it as a
  cross-check (it adds ~3 us a sample). The GPU's timer: cuda_timer.py.
- The L2 is evicted before every sample by a kernel that only reads (l2_flush.py): no dirty lines.
- Warm-up first (one call of each function, then calls for warmup_s where the GPU sat idle longer than
  WARM_AFTER_IDLE_S), so that compiles, module loads and an idle clock never land in a sample.
- The stopping rule: stop_rule.py. Repetitions, blocks of samples on buffers placed anew whose medians'
  spread is what a second run may differ by: repetitions.py. Why: CONTRIBUTING.md, "Design notes"."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from triton_sweep.measure.stop_rule import (STOP_CONVERGED, STOP_RESOLUTION, STOP_SETTLED, STOP_TIMEOUT,
                                            StopRule, median_precision)


# What produced a row's samples (the store's `timing_method`, part of the resume key): the kernel's
# GPU time from CUPTI records; the CUDA-event time, where CUPTI cannot be used (another profiler such
# as ncu or nsys holds it); the wall clock of the Triton interpreter.
METHOD_CUPTI = "cupti/read-flush"
METHOD_EVENTS = "cuda-events/read-flush"
METHOD_WALL = "wall"

def relative_noise(samples: Sequence[float]) -> float:
    """Sample standard deviation over the mean (nvbench's "Noise"): reported, not a stopping rule."""
    if len(samples) < 2:
        return math.inf
    values = np.asarray(samples, dtype=np.float64)
    mean = values.mean()
    return float(values.std(ddof=1) / mean) if mean > 0 else math.inf


def summarize(samples_s: Sequence[float]) -> dict:
    """p20/p50/p80, min and mean in microseconds, the relative noise, and the precision of the p50
    (half-width of its 95% interval, relative)."""
    ordered = np.sort(np.asarray(samples_s, dtype=np.float64))
    to_us = 1e6
    p20, p50, p80 = np.percentile(ordered, [20, 50, 80]) * to_us
    return {
        "p20_us": float(p20),
        "p50_us": float(p50),
        "p80_us": float(p80),
        "min_us": float(ordered[0]) * to_us,
        "mean_us": float(np.mean(ordered)) * to_us,
        "noise": relative_noise(ordered),
        "p50_precision": median_precision(ordered),
        "n_samples": len(ordered),
    }


def next_batch_rounds(rule: StopRule, samples: Sequence[Sequence[float]], elapsed_s: float) -> int:
    """How many more rounds to take before judging again: enough for the least precise median to
    reach rel_precision if its interval shrinks as 1/sqrt(n) (with 20% to spare) and for min_samples
    and min_time_s, but at most as many as taken so far (the guess grows from measured data: the cap
    wins over both) and no more than fit before max_time_s; at least one."""
    taken = len(samples[0])
    if taken == 0:
        return max(rule.min_samples, 1)
    worst = max(median_precision(s) for s in samples)
    wanted = (taken if not math.isfinite(worst)
              else math.ceil(1.2 * taken * (worst / rule.rel_precision) ** 2) - taken)
    wanted = max(wanted, rule.min_samples - taken)
    seconds_per_round = max(elapsed_s, 1e-9) / taken
    if elapsed_s < rule.min_time_s:
        wanted = max(wanted, math.ceil((rule.min_time_s - elapsed_s) / seconds_per_round))
    fits = math.floor((rule.max_time_s - elapsed_s) / seconds_per_round)
    return max(1, min(wanted, taken, fits))


@dataclass
class Measurement:
    samples_s: list[float]  # the figure of record: GPU time per call (CUPTI), else event or wall time
    stop_reason: str
    method: str  # METHOD_*: what produced samples_s
    event_samples_s: Optional[list[float]] = None  # CUDA-event time of the calls the GPU ran back to back
    late_event_samples_s: Optional[list[float]] = None  # of the calls the host enqueued late (host_late)
    kernels_per_call: Optional[float] = None  # median count of GPU activities per call (CUPTI)
    measure_s: float = 0.0  # wall time of warm-up and sampling
    sm_clock_start_mhz: Optional[int] = None
    sm_clock_end_mhz: Optional[int] = None
    repetition_p50s_s: Optional[list[float]] = None  # the median of each repetition, in order


def pooled(blocks: Sequence[Measurement]) -> Measurement:
    """One measurement of a call from its repetitions: every sample kept, the median of each block
    beside them; converged only if every block converged, else the first of timeout, resolution and
    settled that one of them stopped on; clocks from the first and the last."""
    events = [e for m in blocks for e in (m.event_samples_s or [])]
    late_events = [e for m in blocks for e in (m.late_event_samples_s or [])]
    counts = [m.kernels_per_call for m in blocks if m.kernels_per_call is not None]
    return Measurement(
        samples_s=[s for m in blocks for s in m.samples_s],
        stop_reason=next((reason for reason in (STOP_TIMEOUT, STOP_RESOLUTION, STOP_SETTLED)
                          if any(m.stop_reason == reason for m in blocks)), STOP_CONVERGED),
        method=blocks[0].method, event_samples_s=events or None, late_event_samples_s=late_events or None,
        kernels_per_call=float(np.median(counts)) if counts else None,
        measure_s=sum(m.measure_s for m in blocks), sm_clock_start_mhz=blocks[0].sm_clock_start_mhz,
        sm_clock_end_mhz=blocks[-1].sm_clock_end_mhz,
        repetition_p50s_s=[float(np.median(m.samples_s)) for m in blocks])


def repetition_noise(p50s: Optional[Sequence[float]]) -> Optional[float]:
    """Standard deviation of the log of the repetitions' medians (0.02: about 2% from one placement
    of the buffers to the next); None with fewer than two repetitions."""
    if p50s is None or len(p50s) < 2:
        return None
    return float(np.std(np.log(np.asarray(p50s, dtype=np.float64)), ddof=1))


def warm_up(fn: Callable[[], object], sync: Callable[[], None], warmup_s: float) -> None:
    fn()  # the first call compiles and loads; never part of a sample
    sync()
    deadline = time.perf_counter() + warmup_s
    while time.perf_counter() < deadline:
        fn()
        sync()


def rotated(count: int, round_index: int) -> list[int]:
    first = round_index % count
    return list(range(first, count)) + list(range(first))


# A test of the samples so far of each interleaved function: whether sampling may stop (finalists).
Settled = Callable[[list[list[float]]], bool]


def stop_reasons(rule: StopRule, samples: list[list[float]], elapsed_s: float,
                  settled: Optional[Settled] = None) -> Optional[list[str]]:
    """Each function's stop reason once the rule holds for all of them, else None; with `settled` (a
    test of the samples so far), also once min_samples and min_time_s are reached and it holds."""
    reasons = [rule.check(s, elapsed_s) for s in samples]
    if None not in reasons:
        return reasons
    if (settled is not None and elapsed_s >= rule.min_time_s
            and min(map(len, samples)) >= rule.min_samples and settled(samples)):
        return [STOP_SETTLED] * len(samples)
    return None


class InterpreterTimer:
    """Wall-clock timing of the Triton interpreter on the CPU. These rows are exported only when asked
    (triton-sweep-export --interpreter), as the interpreter's."""

    method = METHOD_WALL

    def __init__(self, rule: StopRule, warmup_s: float):
        self.rule = rule
        self.warmup_s = warmup_s

    def measure(self, fn: Callable[[], object], rule: Optional[StopRule] = None) -> Measurement:
        return self.measure_interleaved([fn], rule)[0]

    def measure_interleaved(self, fns: Sequence[Callable[[], object]], rule: Optional[StopRule] = None,
                            warmup_s: Optional[float] = None,
                            settled: Optional[Settled] = None) -> list[Measurement]:
        rule = rule or self.rule
        began = time.perf_counter()
        for fn in fns:
            warm_up(fn, lambda: None, self.warmup_s if warmup_s is None else warmup_s)
        samples: list[list[float]] = [[] for _ in fns]
        sampling_began = time.perf_counter()
        while True:  # in batches, as the GPU timer: at least min_samples, whatever the cap
            for _ in range(next_batch_rounds(rule, samples, time.perf_counter() - sampling_began)):
                for index in rotated(len(fns), len(samples[0])):
                    start = time.perf_counter()
                    fns[index]()
                    samples[index].append(time.perf_counter() - start)
            reasons = stop_reasons(rule, samples, time.perf_counter() - sampling_began, settled)
            if reasons:
                measure_s = time.perf_counter() - began
                return [Measurement(s, r, METHOD_WALL, measure_s=measure_s) for s, r in zip(samples, reasons)]

"""Timing: the stopping rule, sample statistics, and the two timers (CUDA events; interpreter wall clock).

Rules kept here (and why):
- CUDA events bracket the launch only. The L2 flush (a buffer of 2x the device's L2, allocated once)
  is cleared before every sample, outside the event window, so every sample reads from HBM, as a kernel
  does in a real model where other work evicted its inputs.
- Warm-up first, so compilation, module load and first-touch never land in a sample.
- Samples are taken in batches with one synchronize per batch; every sample is kept.
- nvbench's stopping rule (StopRule) decides when there are enough.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

STOP_CONVERGED = "converged"
STOP_TIMEOUT = "timeout"


@dataclass(frozen=True)
class StopRule:
    min_samples: int
    min_time_s: float
    max_noise: float
    max_time_s: float

    def check(self, samples_s: Sequence[float], elapsed_s: float) -> Optional[str]:
        """None while more samples are needed, else why to stop.

        `samples_s` are the measured times; `elapsed_s` the wall time spent sampling so far. Stop at
        max_time_s whatever the noise; otherwise need min_samples and min_time_s of measured time, then
        stop once the relative noise is <= max_noise.
        """
        if elapsed_s >= self.max_time_s:
            return STOP_TIMEOUT
        if len(samples_s) < self.min_samples or sum(samples_s) < self.min_time_s:
            return None
        if relative_noise(samples_s) <= self.max_noise:
            return STOP_CONVERGED
        return None


def relative_noise(samples: Sequence[float]) -> float:
    """Sample standard deviation over the mean (nvbench's "Noise")."""
    if len(samples) < 2:
        return math.inf
    values = np.asarray(samples, dtype=np.float64)  # numpy: checked after every batch of ~10^5 samples
    return float(values.std(ddof=1) / values.mean())


def percentile(sorted_samples: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100], of an already sorted sequence."""
    position = (len(sorted_samples) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(sorted_samples) - 1)
    return sorted_samples[low] + (sorted_samples[high] - sorted_samples[low]) * (position - low)


def summarize(samples_s: Sequence[float]) -> dict:
    """p20/p50/p80, min and mean in microseconds, and the relative noise."""
    ordered = sorted(samples_s)
    to_us = 1e6
    return {
        "p20_us": percentile(ordered, 20) * to_us,
        "p50_us": percentile(ordered, 50) * to_us,
        "p80_us": percentile(ordered, 80) * to_us,
        "min_us": ordered[0] * to_us,
        "mean_us": float(np.mean(ordered)) * to_us,
        "noise": relative_noise(ordered),
        "n_samples": len(ordered),
    }


@dataclass
class Measurement:
    samples_s: list[float]
    stop_reason: str
    sm_clock_start_mhz: Optional[int] = None
    sm_clock_end_mhz: Optional[int] = None


def _warm_up(fn: Callable[[], object], sync: Callable[[], None], warmup_s: float) -> None:
    fn()  # the first call compiles and loads; never part of a sample
    sync()
    deadline = time.perf_counter() + warmup_s
    while time.perf_counter() < deadline:
        fn()
        sync()


class CudaTimer:
    """CUDA-event timing with an L2 flush before every sample."""

    # First guess of the host's cost to enqueue one sample (flush, two events, a Triton launch);
    # later batches use the cost measured on the previous batch.
    HOST_SECONDS_PER_SAMPLE = 200e-6

    def __init__(self, device, rule: StopRule, warmup_s: float, read_sm_clock: Callable[[], Optional[int]],
                 max_clock_mhz: Optional[int] = None):
        import torch

        self._torch = torch
        self.device = device
        self.rule = rule
        self.warmup_s = warmup_s
        self.read_sm_clock = read_sm_clock
        self.clock_hz = (max_clock_mhz or 2000) * 1e6
        l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size
        # 2x L2: a write of exactly L2 bytes can leave lines of the inputs resident in a partitioned L2.
        self.flush_buffer = torch.empty(max(2 * l2_bytes, 1 << 24), dtype=torch.int8, device=device)

    def measure(self, fn: Callable[[], object], rule: Optional[StopRule] = None) -> Measurement:
        """Time fn until `rule` (default: the timer's own) says stop."""
        return self.measure_interleaved([fn], rule)[0]

    def measure_interleaved(self, fns: Sequence[Callable[[], object]], rule: Optional[StopRule] = None) -> list[Measurement]:
        """Time several functions round-robin (finalists), one sample of each per round, until `rule`
        holds for every one of them. Interleaving exposes all of them to the same clocks, temperature
        and neighbours; the order rotates every round so that none always runs first after the hold."""
        torch = self._torch
        rule = rule or self.rule
        for fn in fns:
            _warm_up(fn, torch.cuda.synchronize, self.warmup_s)
        rounds = max(rule.min_samples, 1)
        events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in fns]
                  for _ in range(rounds)]
        samples: list[list[float]] = [[] for _ in fns]
        host_seconds = self.HOST_SECONDS_PER_SAMPLE * rounds * len(fns)
        clock_start = self.read_sm_clock()
        began = time.perf_counter()
        round_index = 0
        while True:
            # Hold the GPU while the host enqueues the batch. Without this the host (~40 us a sample)
            # falls behind a short kernel, the GPU drains its queue, and a start event fires before its
            # kernel has arrived: seen on an H200 as 20-90% noise on 20 us softmax samples.
            torch.cuda._sleep(int(1.25 * host_seconds * self.clock_hz))
            enqueue_began = time.perf_counter()
            for pairs in events:
                for index in _rotated(len(fns), round_index):
                    start, end = pairs[index]
                    self.flush_buffer.zero_()  # outside the window: evicts the inputs from L2
                    start.record()
                    fns[index]()
                    end.record()
                round_index += 1
            last_end = end
            host_seconds = time.perf_counter() - enqueue_began
            last_end.synchronize()
            for pairs in events:
                for index, (start, end) in enumerate(pairs):
                    samples[index].append(start.elapsed_time(end) * 1e-3)
            reasons = _stop_reasons(rule, samples, time.perf_counter() - began)
            if reasons:
                clock_end = self.read_sm_clock()
                return [Measurement(s, r, clock_start, clock_end) for s, r in zip(samples, reasons)]


def _rotated(count: int, round_index: int) -> list[int]:
    first = round_index % count
    return list(range(first, count)) + list(range(first))


def _stop_reasons(rule: StopRule, samples: list[list[float]], elapsed_s: float) -> Optional[list[str]]:
    """Each function's stop reason once the rule holds for all of them, else None."""
    reasons = [rule.check(s, elapsed_s) for s in samples]
    return None if None in reasons else reasons


class InterpreterTimer:
    """Wall-clock timing of the Triton interpreter on the CPU. These rows are never exported."""

    def __init__(self, rule: StopRule, warmup_s: float):
        self.rule = rule
        self.warmup_s = warmup_s

    def measure(self, fn: Callable[[], object], rule: Optional[StopRule] = None) -> Measurement:
        return self.measure_interleaved([fn], rule)[0]

    def measure_interleaved(self, fns: Sequence[Callable[[], object]], rule: Optional[StopRule] = None) -> list[Measurement]:
        rule = rule or self.rule
        for fn in fns:
            _warm_up(fn, lambda: None, self.warmup_s)
        samples: list[list[float]] = [[] for _ in fns]
        began = time.perf_counter()
        round_index = 0
        while True:
            for index in _rotated(len(fns), round_index):
                start = time.perf_counter()
                fns[index]()
                samples[index].append(time.perf_counter() - start)
            round_index += 1
            reasons = _stop_reasons(rule, samples, time.perf_counter() - began)
            if reasons:
                return [Measurement(s, r) for s, r in zip(samples, reasons)]

"""The GPU's timer (CudaTimer): a clean L2 flush before every sample, CUPTI kernel time of record, the
CUDA-event time beside it; samples in batches, the GPU held by a spin kernel while the host enqueues
them (hold_seconds), so that no sample waits for the host."""
from __future__ import annotations

import math
import time
from typing import Callable, NamedTuple, Optional, Sequence

import numpy as np

from triton_sweep.measure.cupti_records import (KernelClock, busy_ns, calls_from_records, fastest_call_s,
                                                host_late)
from triton_sweep.measure.l2_flush import L2Flush
from triton_sweep.measure.stop_rule import StopRule
from triton_sweep.measure.timing import (METHOD_CUPTI, METHOD_EVENTS, Measurement, Settled, rotated,
                                         stop_reasons, warm_up, next_batch_rounds)

# Calls enqueued behind one hold. Behind a 2 s hold on an H200, 128 samples (a flush, two events and a
# 4 us launch each) were enqueued in 7.8 ms, 256 blocked the host for the whole hold: CUDA's launch
# queue was full. A host blocked behind a held GPU would take its wait for enqueue time and size every
# later hold from it (seen: 64 -> 248 us a call in 4 batches), so a hold covers half of what fits.
MAX_CALLS_PER_HOLD = 64


class Pace(NamedTuple):
    """How fast a measurement's calls go, per call: the host's time to enqueue one (a flush, an event
    pair and the call) and the GPU's to run the fastest of them (its flush and its work:
    fastest_call_s; 0 until a batch has been recorded)."""
    host_s: float
    gpu_s: float


def hold_seconds(calls: int, host_s: float, gpu_s: float) -> float:
    """How long to hold the GPU before `calls` calls that the host enqueues host_s apart (25% spared)
    and the GPU runs in gpu_s or longer each, so that it never reaches a call the host has not yet
    enqueued.

    Call i (from 0) is enqueued (i + 1) x 1.25 host_s after the hold is, and reached hold + i x gpu_s
    after the hold starts, or later (the GPU is idle or busy with the calls before): the hold is the
    largest (i + 1) x 1.25 host_s - i x gpu_s, the last call's where the host is the slower, one call's
    enqueue where the GPU is. Sized as if the GPU did nothing (calls x 1.25 host_s), a hold also spans
    the time the GPU then spends on the calls: on an H200, a 1.2 us vector add's finalists took ~115 us
    a sample, the host needing ~60 (BENCHMARKS.md, T). gpu_s must be the fastest call's, not
    the calls' average: where fast calls come first in a rotation with a slow one (a finalists group's
    configs beside its baseline), a hold sized by the average lets the GPU reach them early."""
    spared = 1.25 * host_s
    return max(spared, calls * spared - (calls - 1) * gpu_s)


# The GPU counts as busy, and the warm-up loop is left out, when this timer sampled this recently.
WARM_AFTER_IDLE_S = 0.1


class CudaTimer:
    """GPU timing with a clean L2 flush before every sample: CUPTI kernel time of record, CUDA-event
    time beside it (the event time alone where CUPTI cannot be used)."""

    def __init__(self, device, rule: StopRule, warmup_s: float, read_sm_clock: Callable[[], Optional[int]],
                 max_clock_mhz: Optional[int] = None, probe_clock: bool = True):
        import torch

        self._torch = torch
        self.device = device
        self.rule = rule
        self.warmup_s = warmup_s
        self.read_sm_clock = read_sm_clock
        self.clock_hz = (max_clock_mhz or 2000) * 1e6
        self.sampled_at = -math.inf  # perf_counter() at the end of the last sampling
        began = time.perf_counter()
        props = torch.cuda.get_device_properties(device)
        self.flush = L2Flush(torch, device, props.L2_cache_size, props.multi_processor_count)
        self.flush()  # compiles and loads the flush kernel outside any measurement
        torch.cuda.synchronize(device)
        # What the timer's own start cost (seconds), for the worker's start line: the flush buffer and
        # kernel (a compile on a cold Triton cache). The worker times the CUPTI probe itself, with its
        # wait for the GPU's lock (runners/engine/worker.py).
        self.start_seconds = {"flush": time.perf_counter() - began}
        self.kernel_clock, self.method = None, METHOD_EVENTS
        if probe_clock:
            self.probe_kernel_clock()

    def probe_kernel_clock(self) -> None:
        """Time with CUPTI's kernel records where they can be read (KernelClock's probe), else with CUDA
        events. Called on the thread that measures: kineto's first session on another thread than the
        one that loaded torch prints "ERROR: External init callback must run in same thread as
        registerClient" (torch's callback there does nothing; seen on an H200 host, torch 2.11), which
        every sweep printed while its trial worker started its GPU on a thread of its own."""
        self.kernel_clock = KernelClock(self._torch, self.flush)
        self.method = METHOD_CUPTI if self.kernel_clock.available else METHOD_EVENTS

    def measure(self, fn: Callable[[], object], rule: Optional[StopRule] = None) -> Measurement:
        """Time fn until `rule` (default: the timer's own) says stop."""
        return self.measure_interleaved([fn], rule)[0]

    def measure_interleaved(self, fns: Sequence[Callable[[], object]], rule: Optional[StopRule] = None,
                            warmup_s: Optional[float] = None,
                            settled: Optional[Settled] = None) -> list[Measurement]:
        """Time several functions round-robin (finalists), one sample of each per round, until `rule`
        holds for every one of them (or `settled` does: stop_reasons). Interleaving exposes all of
        them to the same clocks, temperature and neighbours; the order rotates every round so that none
        always runs first after the hold.
        warmup_s: instead of the timer's (0: one call each, for a repetition whose binaries are loaded);
        either is left out when the GPU is busy (WARM_AFTER_IDLE_S)."""
        torch = self._torch
        rule = rule or self.rule
        began = time.perf_counter()
        if began - self.sampled_at < WARM_AFTER_IDLE_S:
            warmup_s = 0.0
        for fn in fns:
            warm_up(fn, torch.cuda.synchronize, self.warmup_s if warmup_s is None else warmup_s)
        samples: list[list[float]] = [[] for _ in fns]
        event_samples: list[list[float]] = [[] for _ in fns]
        late_event_samples: list[list[float]] = [[] for _ in fns]
        activities: list[list[int]] = [[] for _ in fns]
        pace = Pace(self._enqueue_seconds(fns), 0.0)
        clock_start = self.read_sm_clock()
        sampling_began = time.perf_counter()
        while True:
            rounds = next_batch_rounds(rule, samples, time.perf_counter() - sampling_began)
            pace = self._sample_batch(fns, rounds, pace, samples, event_samples, late_event_samples,
                                      activities)
            reasons = stop_reasons(rule, samples, time.perf_counter() - sampling_began, settled)
            self.sampled_at = time.perf_counter()
            if reasons:
                clock_end = self.read_sm_clock()
                measure_s = time.perf_counter() - began
                per_function = zip(samples, event_samples, late_event_samples, activities, reasons)
                return [Measurement(s, reason, self.method, event_samples_s=e or None,
                                    late_event_samples_s=late or None,
                                    kernels_per_call=float(np.median(a)) if a else None, measure_s=measure_s,
                                    sm_clock_start_mhz=clock_start, sm_clock_end_mhz=clock_end)
                        for s, e, late, a, reason in per_function]

    def _enqueue_seconds(self, fns) -> float:
        """The host's time to enqueue one sample of the slowest of `fns` (a flush, an event pair and
        the call), from one such call of each after the warm-up, the GPU idle: what the first hold of
        a measurement is sized by; its batches then measure it again. (A fixed first guess of 200 us a
        call held an H200 2.5 ms before the 10 samples of a 2 us softmax's screening: 6.2 ms a screening,
        4.8 ms with the hold sized so; BENCHMARKS.md, O.)"""
        torch = self._torch
        pair = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        slowest = 0.0
        for fn in fns:
            began = time.perf_counter()
            self._enqueue_sample(fn, pair)
            slowest = max(slowest, time.perf_counter() - began)
        torch.cuda.synchronize()  # a batch's records then hold its own calls alone
        return slowest

    def _enqueue_sample(self, fn, pair) -> None:
        """One sample: the flush, then fn between the CUDA-event pair."""
        start, end = pair
        self.flush()  # outside the window: the inputs leave the L2, no dirty line stays
        start.record()
        fn()
        end.record()

    def _sample_batch(self, fns, rounds: int, pace: Pace, samples, event_samples, late_event_samples,
                      activities) -> Pace:
        """Take `rounds` rounds of samples, appending to the lists, the GPU held before each part of
        them as long as `pace` says it must be (hold_seconds); returns the batch's pace: the host's
        enqueue time per call measured behind the batch's first hold (the launch queue is empty there,
        so the host never waits on the GPU inside that measurement), which sizes the batch's later holds,
        and the GPU's time for its fastest call from its records (pace's as given where there are none)."""
        torch = self._torch
        first_round = len(samples[0])
        order = [index for r in range(rounds) for index in rotated(len(fns), first_round + r)]
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in order]
        measured_per_call = pace.host_s

        def enqueue() -> None:
            nonlocal measured_per_call
            for first in range(0, len(order), MAX_CALLS_PER_HOLD):
                chunk = range(first, min(first + MAX_CALLS_PER_HOLD, len(order)))
                # Hold the GPU while the host enqueues these calls. Without this the host (~40 us a
                # sample) falls behind a short kernel, the GPU drains its queue, and a start event
                # fires before its kernel has arrived: seen on an H200 as 20-90% noise on 20 us
                # softmax event times.
                hold_s = hold_seconds(len(chunk), measured_per_call, pace.gpu_s)
                torch.cuda._sleep(int(hold_s * self.clock_hz))
                enqueue_began = time.perf_counter()
                for position in chunk:
                    self._enqueue_sample(fns[order[position]], events[position])
                if first == 0:
                    measured_per_call = (time.perf_counter() - enqueue_began) / len(chunk)

        gpu_per_call = pace.gpu_s
        if self.method == METHOD_CUPTI:
            hold_name = self.kernel_clock.hold_name
            records = self.kernel_clock.record(enqueue)
            calls = calls_from_records(records, len(order), hold_name=hold_name)
            late = host_late(calls, order)
            work = [(r.start_ns, r.end_ns) for r in records if r.name != hold_name]
            # launch gaps left out: holds err longer
            gpu_per_call = fastest_call_s(busy_ns(work) * 1e-9, calls)
        else:
            enqueue()
            torch.cuda.synchronize()
            calls = None
        for position, (index, (start, end)) in enumerate(zip(order, events)):
            event_s = start.elapsed_time(end) * 1e-3
            if calls is None:  # the event time is the figure of record
                samples[index].append(event_s)
            else:
                samples[index].append(calls[position].gpu_s)
                (late_event_samples if position in late else event_samples)[index].append(event_s)
                activities[index].append(calls[position].activities)
        return Pace(measured_per_call, gpu_per_call)


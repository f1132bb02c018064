"""Timing: the stopping rule, sample statistics, the clean L2 flush, and the timers (GPU; interpreter).

The figure of record is the kernel's own duration on the GPU, as a profiler sees it (BENCHMARKS.md, T):
- CUPTI activity records read through torch.profiler's kineto backend; a CUDA-event pair around each
  launch is kept beside it as a cross-check (it adds ~3 us a sample).
- The L2 is evicted before every sample by a kernel that only reads (L2Flush): no dirty lines to write back.
- Warm-up first (one call of each function, then calls for warmup_s where the GPU sat idle longer than
  WARM_AFTER_IDLE_S), so that compiles, module loads and an idle clock never land in a sample.
- Samples come in batches, the GPU held by a spin kernel while the host enqueues them (MAX_CALLS_PER_HOLD),
  so no sample waits for the host; where one did (host_late), the records show it and it is set apart.
- The stopping rule: runners/measure/stop_rule.py. Repetitions: blocks of samples on buffers placed anew,
  whose medians' spread is what a second run may differ by. Why: CONTRIBUTING.md, "Design notes"."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional, Sequence

import numpy as np
import triton
import triton.language as tl

from runners.measure.stop_rule import (STOP_CONVERGED, STOP_RESOLUTION, STOP_SETTLED, STOP_TIMEOUT, StopRule,
                                       median_precision)


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


def _warm_up(fn: Callable[[], object], sync: Callable[[], None], warmup_s: float) -> None:
    fn()  # the first call compiles and loads; never part of a sample
    sync()
    deadline = time.perf_counter() + warmup_s
    while time.perf_counter() < deadline:
        fn()
        sync()


def _rotated(count: int, round_index: int) -> list[int]:
    first = round_index % count
    return list(range(first, count)) + list(range(first))


# A test of the samples so far of each interleaved function: whether sampling may stop (finalists).
Settled = Callable[[list[list[float]]], bool]


def _stop_reasons(rule: StopRule, samples: list[list[float]], elapsed_s: float,
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


# --- the clean flush -------------------------------------------------------------------------
# 2x the L2: H100/H200 split their L2 in two partitions, and a read of exactly L2 bytes can leave
# lines of the inputs resident. Reading 4x gave the same kernel times as 2x on an H200 (4.19 us for a
# 2^20 vector add, 30.43 us for softmax 8192x4096) at twice the cost (60 us a flush against 31-37).
FLUSH_L2_MULTIPLE = 2
FLUSH_MIN_BYTES = 16 << 20  # GPUs with a small or unreported L2 still get a real flush
FLUSH_BLOCK = 4096  # int32 elements a program reads per step: 16 KB
FLUSH_PROGRAMS_PER_SM = 4
FLUSH_KERNEL_NAME = "_l2_flush_read_kernel"  # how the flush is found among the CUPTI records
# Calls enqueued behind one hold. Behind a 2 s hold on an H200, 128 samples (a flush, two events and a
# 4 us launch each) were enqueued in 7.8 ms, 256 blocked the host for the whole hold: CUDA's launch
# queue was full. A host blocked behind a held GPU would take its wait for enqueue time and size every
# later hold from it (seen: 64 -> 248 us a call in 4 batches), so a hold covers half of what fits.
MAX_CALLS_PER_HOLD = 64
# GPU idle in a call's window beyond its function's least, per gap, that makes it late (host_late):
# well above the launch gaps' own spread (3.0 us median, 3.4 us 90th percentile on an H100) and well
# below the cross-check's allowance (runners/engine/worker.py, LAUNCH_ALLOWANCE_US).
HOST_LATE_S = 1e-6


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


@triton.jit
def _l2_flush_read_kernel(buffer_ptr, partial_ptr, n_elements, BLOCK: tl.constexpr):
    # A grid-stride read of the whole buffer; one int32 written per program, so the L2 holds clean
    # lines only once it ends (a sum the compiler cannot drop, as it would an unused load).
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    total = tl.zeros([BLOCK], dtype=tl.int32)
    for start in range(pid * BLOCK, n_elements, step):
        offsets = start + tl.arange(0, BLOCK)
        total += tl.load(buffer_ptr + offsets, mask=offsets < n_elements, other=0)
    tl.store(partial_ptr + pid, tl.sum(total, axis=0))


def flush_elements(l2_bytes: Optional[int]) -> int:
    """int32 elements of the flush buffer: FLUSH_L2_MULTIPLE x the L2 (at least FLUSH_MIN_BYTES),
    rounded up to whole blocks."""
    n_bytes = max(FLUSH_L2_MULTIPLE * (l2_bytes or 0), FLUSH_MIN_BYTES)
    return math.ceil(n_bytes / 4 / FLUSH_BLOCK) * FLUSH_BLOCK


class L2Flush:
    """Evicts the L2 without leaving dirty lines: reads a buffer of 2x the L2 (see above)."""

    def __init__(self, torch, device, l2_bytes: Optional[int], sm_count: int):
        self.buffer = torch.ones(flush_elements(l2_bytes), dtype=torch.int32, device=device)
        self.partials = torch.empty(max(1, sm_count) * FLUSH_PROGRAMS_PER_SM, dtype=torch.int32,
                                    device=device)

    def __call__(self) -> None:
        _l2_flush_read_kernel[(self.partials.numel(),)](self.buffer, self.partials, self.buffer.numel(),
                                                        BLOCK=FLUSH_BLOCK, num_warps=8)


# --- GPU time from CUPTI records ---------------------------------------------------------------
class GpuRecord(NamedTuple):
    """One kernel, memset or memcpy as the GPU ran it (CUPTI activity record), in ns."""
    name: str
    start_ns: int
    end_ns: int


class CallRecord(NamedTuple):
    """One enqueued call as the CUPTI records show it."""
    gpu_s: float  # its activities' time, overlaps counted once: the figure of record
    activities: int
    # The GPU idle from its flush's end to the start of the GPU's next work (the next call's flush, or
    # a hold): its CUDA-event window lies inside. None for a batch's last call (no work follows it).
    idle_s: Optional[float]


class RecordMismatch(RuntimeError):
    """The CUPTI records do not hold one flush per enqueued call: samples cannot be assigned."""


def fastest_call_s(busy_s: float, calls: Sequence[CallRecord]) -> float:
    """The GPU's time for the fastest call of a batch, its flush included: an equal share of what the
    batch kept the GPU busy with besides its calls' own work (the flushes, one a call), plus the least
    of that work (what hold_seconds is to be given)."""
    own = [call.gpu_s for call in calls]
    return max(0.0, busy_s - sum(own)) / len(own) + min(own)


def busy_ns(intervals: Sequence[tuple[int, int]]) -> int:
    """Length of the union of [start, end) intervals: the sum of the durations when they run one
    after another, and no double count when a call runs work on two streams at once."""
    total, covered_to = 0, None
    for start, end in sorted(intervals):
        if covered_to is None or start >= covered_to:
            total += end - start
            covered_to = end
        elif end > covered_to:
            total += end - covered_to
            covered_to = end
    return total


def calls_from_records(records: Sequence[GpuRecord], calls: int, flush_name: str = FLUSH_KERNEL_NAME,
                       hold_name: Optional[str] = None) -> list[CallRecord]:
    """Each enqueued call's CallRecord, in enqueue order, from the records of a batch.

    Every call was enqueued right after a flush, so the activities that start between one flush and
    the next (or the end) are that call's; anything before the first flush belongs to no call, nor do
    the kernels named `hold_name` (the spin that holds the GPU while the host enqueues: a batch of more
    than MAX_CALLS_PER_HOLD calls has one between two calls, which would otherwise add milliseconds to
    the call before it). Raises RecordMismatch unless there is exactly one flush a call.
    """
    ordered = sorted((r for r in records if r.name != hold_name), key=lambda r: r.start_ns)
    hold_starts = sorted(r.start_ns for r in records if r.name == hold_name)
    flushes = [i for i, r in enumerate(ordered) if r.name == flush_name]
    if len(flushes) != calls:
        raise RecordMismatch(f"expected {calls} flush records in the CUPTI trace, found {len(flushes)}")
    bounds = flushes[1:] + [len(ordered)]
    result = []
    for first, end in zip(flushes, bounds):
        intervals = [(r.start_ns, r.end_ns) for r in ordered[first + 1:end]]
        busy = busy_ns(intervals)
        flush_end = ordered[first].end_ns
        done = max([flush_end] + [e for _, e in intervals])
        following = [start for start in hold_starts if start >= done][:1]
        following += [ordered[end].start_ns] if end < len(ordered) else []
        idle = (min(following) - flush_end - busy) * 1e-9 if following else None
        result.append(CallRecord(busy * 1e-9, len(intervals), idle))
    return result


def host_late(calls: Sequence[CallRecord], functions: Sequence[int]) -> set[int]:
    """Positions of the calls of a batch whose launch the host enqueued late: the GPU, done with the
    call's flush, waited for it, and its CUDA-event window holds that wait (the host's time, not the
    GPU's). `functions[i]`: which function call i ran.

    A call fed in time idles only in its own launch gaps: about 3 us from the flush's end to its
    kernel on an H100 (the start event between them), one after its last kernel (the end event, the
    next flush's start), one between each two kernels of an eager call. The least idle of a
    function's calls in the batch is that (its first follows the hold, enqueued well ahead); a call
    idle by more than HOST_LATE_S a gap beyond it was late. Where the host was late for the next
    call's flush only, its window was not stretched, and it is set apart all the same. A batch's last
    call (nothing follows it) is not judged. Seen (BENCHMARKS.md, T): a host sharing
    its core with two busy processes gave calls up to 7 ms of such wait."""
    least: dict[int, float] = {}
    for call, function in zip(calls, functions):
        if call.idle_s is not None:
            least[function] = min(least.get(function, math.inf), call.idle_s)
    return {position for position, (call, function) in enumerate(zip(calls, functions))
            if call.idle_s is not None
            and call.idle_s > least[function] + HOST_LATE_S * (call.activities + 1)}


class KernelClock:
    """Records the GPU activities of a stretch of host code through torch.profiler (kineto/CUPTI).

    `available` is False where the profiler cannot record (another profiler, such as ncu or nsys,
    holds CUPTI, or torch was built without it): probed once with a hold and a flush, and `reason` says
    why. `hold_name`: the name the hold kernel (torch.cuda._sleep) is recorded under, so that the
    samples leave it out (calls_from_records).
    """

    def __init__(self, torch, flush: L2Flush):
        self._torch = torch
        self.available, self.reason, self.hold_name = True, None, None
        try:
            records = self.record(lambda: (torch.cuda._sleep(1000), flush()))
        except Exception as error:  # kineto raises RuntimeError and others; the reason is kept and shown
            self.available, self.reason = False, f"{type(error).__name__}: {error}"
            return
        others = {r.name for r in records} - {FLUSH_KERNEL_NAME}
        if not any(r.name == FLUSH_KERNEL_NAME for r in records):
            self.available, self.reason = False, "the profiler returned no record of the flush kernel"
        elif len(others) != 1:
            self.available, self.reason = False, (f"the profiler recorded {sorted(others) or 'nothing'} "
                                                  "beside the flush where one hold kernel ran")
        else:
            (self.hold_name,) = others

    def record(self, work: Callable[[], object]) -> list[GpuRecord]:
        """Run `work` (which enqueues GPU work), wait for the GPU, return the activities recorded."""
        from torch.autograd import DeviceType
        from torch.autograd.profiler import profile

        torch = self._torch
        # GPU activities only: no CPU-side op records to make or parse.
        with profile(use_device="cuda", use_cpu=False, use_kineto=True) as recorder:
            work()
            torch.cuda.synchronize()
        records = []
        for event in recorder.kineto_results.events():
            if event.device_type() != DeviceType.CUDA:
                continue
            if getattr(event, "is_user_annotation", lambda: False)():  # a CPU range mirrored on the GPU row
                continue
            records.append(GpuRecord(event.name(), event.start_ns(), event.end_ns()))
        return records


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
        holds for every one of them (or `settled` does: _stop_reasons). Interleaving exposes all of
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
            _warm_up(fn, torch.cuda.synchronize, self.warmup_s if warmup_s is None else warmup_s)
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
            reasons = _stop_reasons(rule, samples, time.perf_counter() - sampling_began, settled)
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
        order = [index for r in range(rounds) for index in _rotated(len(fns), first_round + r)]
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


class InterpreterTimer:
    """Wall-clock timing of the Triton interpreter on the CPU. These rows are never exported."""

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
            _warm_up(fn, lambda: None, self.warmup_s if warmup_s is None else warmup_s)
        samples: list[list[float]] = [[] for _ in fns]
        sampling_began = time.perf_counter()
        while True:  # in batches, as the GPU timer: at least min_samples, whatever the cap
            for _ in range(next_batch_rounds(rule, samples, time.perf_counter() - sampling_began)):
                for index in _rotated(len(fns), len(samples[0])):
                    start = time.perf_counter()
                    fns[index]()
                    samples[index].append(time.perf_counter() - start)
            reasons = _stop_reasons(rule, samples, time.perf_counter() - sampling_began, settled)
            if reasons:
                measure_s = time.perf_counter() - began
                return [Measurement(s, r, METHOD_WALL, measure_s=measure_s) for s, r in zip(samples, reasons)]

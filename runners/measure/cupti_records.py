"""GPU time from CUPTI records: the activities (kernels, memsets, memcpys) of a batch of samples, read
through torch.profiler's kineto backend (KernelClock), assigned to the calls that enqueued them, and
the calls the host enqueued late set apart (host_late)."""
from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional, Sequence

from triton_sweep.measure.l2_flush import FLUSH_KERNEL_NAME, L2Flush

# GPU idle in a call's window beyond its function's least, per gap, that makes it late (host_late):
# well above the launch gaps' own spread (3.0 us median, 3.4 us 90th percentile on an H100) and well
# below the cross-check's allowance (runners/measure/metrics.py, LAUNCH_ALLOWANCE_US).
HOST_LATE_S = 1e-6


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


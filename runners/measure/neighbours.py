"""Other processes on the GPUs a job measures on.

Kernels of two processes on one GPU take turns on it (time-slicing), so a neighbour's work slows and
spreads every figure measured beside it, and nothing in the figures says why (BENCHMARKS.md, G11). A
GpuWatch polls NVML on a thread of its own: the processes holding a CUDA context on each GPU of the job
and, of those not the job's, which ran kernels lately. A row measured while another process ran kernels
on its GPU says so (`gpu_shared`); the job names every other process it sees and keeps no ceilings
measured beside one; compare's gate and revalidate refuse to judge marked rows. An idle context is named
and marks nothing. Not seen: work begun after the newest poll, a neighbour NVML does not list; where
NVML lists none of the job's own workers (a container's PID namespace) or keeps no per-process
utilization, no row says either way (`gpu_shared` empty), and the job says why."""
from __future__ import annotations

import bisect
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from triton_sweep.measure.device import nvml_text, nvml_unavailable

# Seconds between polls. A poll took 0.05 ms a GPU on an H100 host, and 2.1 ms more for a GPU with
# another process on it (its utilization samples), on this process's watching thread.
POLL_S = 0.25
# A process counts as running kernels for this long after a sample gave it SM or memory activity. NVML
# samples a GPU every ~1/6 s and gives a sample to one of the processes taking turns on it, or splits it:
# beside a loop of short timed kernels on an H100, a process running matmuls the whole time went without
# a sample for up to 0.77 s (BENCHMARKS.md, G).
BUSY_FOR_S = 2.0


@dataclass(frozen=True)
class Neighbour:
    pid: int
    name: str
    memory_mib: Optional[float]  # None where NVML does not say

    def __str__(self) -> str:
        memory = f", {self.memory_mib:.0f} MiB" if self.memory_mib is not None else ""
        return f"pid {self.pid} ({self.name}{memory})"


class Polls:
    """What the polls saw on each GPU: the processes holding a context there (the job's own among them:
    which those are is known only to the job's thread, and given to `seen` and `busy`), and at each poll
    those counted as running kernels then: present, and given a sample of activity by NVML within
    BUSY_FOR_S."""

    def __init__(self, uuids: Sequence[str]):
        self._times: dict[str, list[float]] = {uuid: [] for uuid in uuids}
        self._busy: dict[str, list[frozenset]] = {uuid: [] for uuid in uuids}
        self._last_active: dict[str, dict[int, float]] = {uuid: {} for uuid in uuids}  # pid -> poll time
        self._present: dict[str, dict[int, Neighbour]] = {uuid: {} for uuid in uuids}  # every one seen
        self._lock = threading.Lock()

    def add(self, at: float, uuid: str, present: Sequence[Neighbour], active: set) -> None:
        """One poll of GPU `uuid` at time.monotonic() `at`: the processes present, and the pids NVML gave a
        sample of SM or memory activity since the poll before."""
        with self._lock:
            last_active = self._last_active[uuid]
            last_active.update(dict.fromkeys(active, at))
            self._times[uuid].append(at)
            self._busy[uuid].append(frozenset(
                n.pid for n in present if at - last_active.get(n.pid, -math.inf) <= BUSY_FOR_S))
            for neighbour in present:
                self._present[uuid].setdefault(neighbour.pid, neighbour)

    def seen(self, ours: set) -> list[tuple[str, Neighbour]]:
        """Every process seen so far that is not one of `ours`, with its GPU."""
        with self._lock:
            return [(uuid, n) for uuid, present in self._present.items() for n in present.values()
                    if n.pid not in ours]

    def busy(self, uuid: str, start: float, end: float, ours: set) -> list[Neighbour]:
        """The processes but `ours` counted as running kernels on GPU `uuid` at any poll from the last one
        at or before `start` to the first after `end` (or the newest, where none is after it yet): those
        a measurement from `start` to `end` may have run beside. Work begun after the newest poll is not
        seen."""
        with self._lock:
            times, busy = self._times[uuid], self._busy[uuid]
            first = max(bisect.bisect_right(times, start) - 1, 0)
            last = bisect.bisect_right(times, end) + 1
            pids = frozenset().union(*busy[first:last]) - ours
            return [self._present[uuid][pid] for pid in sorted(pids)]


class GpuWatch:
    """Polls NVML every POLL_S on a daemon thread (`start`, `stop`). `ours()` gives the pids of the job's
    processes that hold a CUDA context; it is called on the job's thread alone (the handles of forked
    workers read their server's pipe, which that thread also reads), by every method but the polls, and
    any pid it ever gave stays the job's (a worker that crashed and is exiting). A process counts as
    busy at a poll where NVML's per-process utilization gave it SM or memory activity within BUSY_FOR_S;
    where the GPU does not keep that (NVML: not supported), nothing is told. Work a neighbour began
    after the newest poll is seen by the next rows only (a row's answer comes at its end), and one that
    stopped less than BUSY_FOR_S ago counts as having run beside a row."""

    def __init__(self, uuids: Sequence[str], ours: Callable[[], set], pynvml=None):
        if pynvml is None:  # the NVML bindings; tests on a host without a GPU give a stand-in
            import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml
        by_uuid = {}
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            by_uuid[nvml_text(pynvml.nvmlDeviceGetUUID(handle))] = handle
        missing = [uuid for uuid in uuids if uuid not in by_uuid]
        if missing:
            raise LookupError(f"NVML does not list {', '.join(missing)}")
        self._handles = {uuid: by_uuid[uuid] for uuid in uuids}
        self._ours = ours
        # every pid ours() gave; the polls read it only to skip the utilization query of a GPU where every
        # process is the job's
        self._ever_ours: set = set()
        self.polls = Polls(uuids)
        self.cannot: Optional[str] = None  # why nothing can be told, from the first poll
        self.failed_at: Optional[float] = None  # when a later poll failed (NVML's error): nothing told after
        # NVML's utilization samples after this are the next poll's (the first looks back BUSY_FOR_S)
        self._since_us = int((time.time() - BUSY_FOR_S) * 1e6)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-neighbours", daemon=True)
        self.shared_rows = 0  # rows measured while another process ran kernels on their GPU
        self._named: set[tuple] = set()  # (GPU, pid) of the other processes said, once each
        self._warned: set[tuple] = set()  # of those that ran kernels beside a row, warned of once each

    def start(self) -> "GpuWatch":
        """The first poll at once (a neighbour there before the job is named before any row), then the
        thread, unless the first poll found that nothing can be told (`cannot`). Call it once the trial
        workers hold their contexts: NVML must list one of them, else its pids are not this namespace's."""
        ours = self.ours()
        try:
            for handle in self._handles.values():  # where the GPU keeps no per-process utilization: raises
                self._active(handle, self._since_us)
            listed = self.poll()
        except self._nvml.NVMLError_NotSupported as error:
            self.cannot = f"NVML keeps no per-process utilization here ({error})"
        else:
            if not ours & listed:
                self.cannot = ("NVML lists none of this job's workers (its process ids are of another PID "
                               "namespace, as in some containers)")
        if self.cannot is None:
            self._thread.start()
        return self

    def stop(self) -> None:
        """Ends the polls. Waits a second at most: an NVML call that does not return (a GPU in trouble)
        leaves the daemon thread to the end of the process, not the job waiting."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1.0)

    def ours(self) -> set:
        """The job's processes on the GPUs, every one it ever had (on the job's thread only)."""
        self._ever_ours |= {pid for pid in self._ours() if pid is not None}
        return self._ever_ours

    def poll(self) -> set:
        """One poll of every GPU; returns the pids NVML listed."""
        at, since_us = time.monotonic(), self._since_us
        self._since_us = int(time.time() * 1e6)
        listed = set()
        for uuid, handle in self._handles.items():
            processes = self._nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            listed |= {p.pid for p in processes}
            others = [p for p in processes if p.pid not in self._ever_ours]
            active = self._active(handle, since_us) if others else set()
            self.polls.add(at, uuid, [_neighbour(p, self._nvml) for p in others], active)
        return listed

    def _active(self, handle, since_us: int) -> set:
        try:
            samples = self._nvml.nvmlDeviceGetProcessUtilization(handle, since_us)
        except self._nvml.NVMLError_NotFound:  # no sample since then: nothing ran
            return set()
        return {sample.pid for sample in samples if sample.smUtil or sample.memUtil}

    def _run(self) -> None:
        while not self._stopped.wait(POLL_S):
            try:
                self.poll()
            except self._nvml.NVMLError as error:
                self.failed_at = time.monotonic()
                print(f"note: other processes on the GPUs no longer watched: NVML failed ({error})")
                return

    def row_shared(self, uuid: Optional[str], measured_s: float, measurer: str) -> Optional[bool]:
        """Whether another process ran kernels on GPU `uuid` while a row's timer's loop ran for measured_s
        up to now (its answer comes as it ends); None where that is not known. Names each other process
        the first time it is seen, and warns the first time one ran kernels beside a row."""
        self.name_neighbours()
        end = time.monotonic()
        beside = self.busy(uuid, end - measured_s, end)
        if beside is None:
            return None
        for neighbour in beside:
            if (uuid, neighbour.pid) not in self._warned:
                self._warned.add((uuid, neighbour.pid))
                print(f"warning: {neighbour} ran kernels on {uuid} while {measurer} measured: kernels of "
                      "both take turns on the GPU, and the rows measured meanwhile are slow and spread by "
                      "its work (they say gpu_shared)")
        self.shared_rows += bool(beside)
        return bool(beside)

    def name_neighbours(self) -> None:
        """Name each other process the first time it is seen on a GPU."""
        for gpu, neighbour in self.polls.seen(self.ours()):
            if (gpu, neighbour.pid) not in self._named:
                self._named.add((gpu, neighbour.pid))
                print(f"note: another process holds a CUDA context on {gpu}: {neighbour}; rows measured "
                      "while it runs kernels there say gpu_shared")

    def summary(self) -> dict:
        """summary.json's part, with the closing warning where rows were shared."""
        if self.shared_rows:
            print(f"warning: {self.shared_rows} rows were measured while another process ran kernels on "
                  "their GPU (gpu_shared): their figures are slow and spread by its work; measure them "
                  "again on a GPU of their own, and triton_sweep.compare the two")
        return {"gpu_shared_rows": self.shared_rows,
                "gpu_neighbours": [f"{gpu}: {neighbour}" for gpu, neighbour in self.polls.seen(self.ours())]}

    def busy(self, uuid: Optional[str], start: float, end: float) -> Optional[list[Neighbour]]:
        """The other processes that ran kernels on GPU `uuid` while a measurement from `start` to `end`
        (time.monotonic()) ran, or just before (Polls.busy); None where that cannot be told (no GPU,
        `cannot`, NVML failed by then)."""
        if uuid is None or uuid not in self._handles or self.cannot is not None or (
                self.failed_at is not None and end > self.failed_at):
            return None
        return self.polls.busy(uuid, start, end, self.ours())


def _neighbour(process, pynvml) -> Neighbour:
    """A process NVML lists, named by its command (/proc, else NVML) and the GPU memory it holds."""
    try:
        name = Path(f"/proc/{process.pid}/comm").read_text().strip()
    except OSError:
        try:
            name = nvml_text(pynvml.nvmlSystemGetProcessName(process.pid))
        except pynvml.NVMLError:
            name = "?"
    memory = process.usedGpuMemory
    return Neighbour(process.pid, name, memory / 2 ** 20 if isinstance(memory, int) else None)


def watch_gpus(uuids: Sequence[str], ours: Callable[[], set]) -> Optional[GpuWatch]:
    """A started GpuWatch of these GPUs, the other processes there from the start named; None, saying
    why, where nothing can be told (no NVML, a GPU it does not list, `cannot`)."""
    try:
        watch = GpuWatch(uuids, ours).start()
    except Exception as error:
        if not (isinstance(error, LookupError) or nvml_unavailable(error)):
            raise
        why = str(error)
    else:
        if watch.cannot is None:
            watch.name_neighbours()
            return watch
        watch.stop()
        why = watch.cannot
    print(f"note: other processes on the GPUs not watched: {why}; no row says whether it shared its GPU")
    return None

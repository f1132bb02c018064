"""Feeds trials through the compile pool and the GPU workers at the same time.

While the GPU workers start (imports, CUDA context, flush buffer: seconds), the fork server imports
torch, Triton and the kernel's module, and from then on the pool compiles the first batch for the
compile target read through NVML, also while the first GPU worker measures the device's ceilings
(measure_peaks). Then a trial of the kernel goes to a compile worker (backend=cuda with a pool), then,
built, to the first free GPU worker, preferring one whose last trial had the same (shape, dtype) (its
inputs and float64 reference are cached there); baselines need no compile. While the GPUs time the first
configs, the pool compiles the next ones. Who compiles a config (the pool, or a GPU worker with nothing
to time): runners/engine/placement.py; where the torch.compile baselines run (side workers):
runners/engine/side.py; the finalists groups: runners/engine/finalist_queue.py."""
from __future__ import annotations

import time
from typing import Callable, Optional, Sequence

from triton_sweep.engine.finalist_queue import FinalistQueue
from triton_sweep.engine.placement import CompilePlacement
from triton_sweep.engine.process import WorkerLost, WorkerProcess, drive, stop_all
from triton_sweep.engine.side import SideTurns
from triton_sweep.model.trial import Trial


class WorkerStartError(RuntimeError):
    """A worker process could not start: a setup problem (imports, CUDA), not an outcome of a trial."""


class Scheduler:
    """Trials through the compile pool and the GPU workers; every trial ends in one call of `record`.

    Its parts, one job each: where a config compiles (`placement`: CompilePlacement), the torch.compile
    side workers' trials and their turns on each GPU's lock (`turns`: SideTurns), the finalists groups
    (`finals`: FinalistQueue). The Scheduler dispatches: it hands each idle worker its next request, a
    trial worker preferring a trial of its last (shape, dtype), and each answer to the part it is for.
    """

    def __init__(self, gpu_workers: list[WorkerProcess], compilers: list[WorkerProcess],
                 trial_timeout_s: float, compile_timeout_s: float, target: Optional[tuple] = None,
                 sides: Sequence[WorkerProcess] = (),
                 compiles: Callable[[Trial], bool] = lambda trial: False):
        """`target`: what the pool compiles for until `set_device` gives the GPU's own (None: nothing
        is compiled before then). `sides`: the workers of the trials that `compiles` (SideTurns), the
        i-th on the GPU of gpu_workers[i], sharing its lock."""
        self.gpu_workers = gpu_workers
        self.placement = CompilePlacement(compilers, compile_timeout_s, target)
        self.turns = SideTurns(sides, gpu_workers, compiles)
        self.finals = FinalistQueue(self.turns.mine)
        self.trial_timeout_s = trial_timeout_s
        self.record: Callable[[Optional[WorkerProcess], Trial, dict], None] = (
            lambda worker, trial, result: None)
        self.peaks: dict = {}
        self.ready: list[Trial] = []  # the trial workers' trials ready to run
        self.last_group: dict[int, tuple] = {}  # id(worker) -> (shape, dtype) of its last trial
        self.deadline = float("inf")
        self.more: Optional[Callable[[], list[Trial]]] = None  # run's
        self.not_run = 0  # trials dropped at the deadline
        self._starting = False
        self._peaks: Optional[tuple] = None  # (answer, lost) of measure_peaks' request, once it is in

    # --- start-up ---------------------------------------------------------------------------
    def start(self, ahead: list[Trial]) -> None:
        """Start the GPU workers and the fork server (those not started yet: the sweep starts some
        before it validates its input) and return once every GPU worker is ready; meanwhile the pool
        compiles `ahead` (the first batch) if the target is known. Raises WorkerStartError."""
        server = self.placement.server
        for worker in self.on_gpu + ([server] if server is not None else []):
            if worker.process is None:
                worker.start()
        self.placement.compile_ahead(ahead)
        self._starting = True
        try:
            drive(self._workers(), self._assign, self._deliver, self._pending,
                  until=lambda: all(worker.ready for worker in self.gpu_workers))
        finally:
            self._starting = False

    def measure_peaks(self, timeout_s: float) -> dict:
        """The device's ceilings, measured by the first GPU worker while the pool goes on compiling the
        first batch. A request waited for outside this loop left the compile workers forked meanwhile
        without their first config until it ended: in 3 of 9 cold README runs on an H200 host they were
        forked as the ceilings began, got their configs 0.8-1.2 s later, when they ended, and the first
        binaries came after the trials began (BENCHMARKS.md, O). Raises WorkerLost
        where the GPU worker hangs or dies."""
        self._peaks = None
        self.gpu_workers[0].submit(("peaks",), ("peaks", None), timeout_s, "measuring peaks")
        drive(self._workers(), self._assign, self._deliver, self._pending,
              until=lambda: self._peaks is not None)
        answer, lost = self._peaks
        if lost is not None:
            raise lost
        return answer

    @property
    def on_gpu(self) -> list[WorkerProcess]:
        """The processes that hold a CUDA context: the trial workers and the side workers."""
        return self.gpu_workers + self.turns.sides

    def keep_gpu_workers(self, keep: list[WorkerProcess]) -> None:
        """Use only `keep` from now on; the other GPU workers are stopped, with their side workers."""
        dropped = [w for w in self.gpu_workers if w not in keep]
        their_sides = self.turns.of(dropped)
        for side in their_sides:
            self.ready += self.turns.drop(side)
        stop_all(dropped + their_sides)
        self.gpu_workers = keep

    def set_device(self, target: Optional[tuple], max_shared_bytes: Optional[int], peaks: dict) -> None:
        """What the GPU workers reported: compiles for another target (a wrong guess) are redone."""
        self.placement.set_device(target, max_shared_bytes)
        self.peaks = peaks

    def stop_compilers(self) -> None:
        """Kill the pool and its fork server once no more compiles will come (CompilePlacement.stop)."""
        self.placement.stop()

    # --- the two kinds of work --------------------------------------------------------------
    def run(self, trials: list[Trial], record: Callable, deadline: float = float("inf"),
            more: Optional[Callable[[], list[Trial]]] = None) -> None:
        """Compile, gate and time `trials`, each ending in one record(worker or None, trial, result);
        returns when each has been recorded or dropped at the deadline. None may be pruned: the job
        records those itself, all at once (Job.record_pruned). `more`: the next trials to run, asked
        after a trial's record whenever no config waits for the compile pool (a pipelined search)."""
        if any(trial.pruned_reason for trial in trials):
            raise ValueError("Scheduler.run runs trials; pruned ones are the job's to record")
        self.record, self.deadline, self.more = record, deadline, more
        self._add(trials)
        self._drive()
        self.more = None

    def _add(self, trials: list[Trial]) -> None:
        for trial in trials:
            if self.placement.needs_compile(trial):
                self._settled(self.placement.want(trial))
            elif self.turns.takes(trial):
                self.turns.ready.append(trial)
            else:
                self.ready.append(trial)
        self.placement.drop_unwanted()

    def run_finalists(self, groups: list[list[Trial]], rules: list, tie_floor: float,
                      on_result: Callable) -> None:
        """Re-time each group (the finalists of one (shape, dtype)) interleaved on one GPU worker
        until its rule (a StopRule, of `rules` in turn) holds or the ties at tie_floor are settled;
        on_result(worker, trials, results) for each group. The groups go to whichever worker is free, so
        they spread over the GPUs, each whole on one; a group whose worker dies in it is re-timed once
        more from its start, on another worker where one is free (FinalistQueue)."""
        self.deadline = float("inf")
        self.finals.add(groups, rules, tie_floor, on_result)
        self._drive()

    # --- the loop ---------------------------------------------------------------------------
    def _workers(self) -> list[WorkerProcess]:
        # GPU workers first: within one turn of the loop they take what they will compile themselves
        # before the pool is asked to grow.
        server = self.placement.server
        return self.on_gpu + ([server] if server is not None else []) + self.placement.compilers

    def _drive(self) -> None:
        drive(self._workers(), self._assign, self._deliver, self._pending, early=self._early)
        if time.monotonic() >= self.deadline:
            self.not_run += self.placement.drop_all() + len(self.ready) + len(self.turns.ready)
            self.ready.clear()
            self.turns.ready.clear()

    def _settled(self, settled: Optional[tuple]) -> None:
        """A wanted trial's compile outcome (CompilePlacement.settle): on to a GPU worker, or recorded."""
        if settled is not None:
            trial, failure = settled
            if failure is None:
                self.ready.append(trial)
            else:
                self.record(None, trial, failure)
                self._refill()

    def _refill(self) -> None:
        """After a record: run's `more`, where no config waits for the compile pool."""
        if self.more is not None and self.placement.compilers and not self.placement.to_compile:
            self._add(self.more())

    def _for_pool(self, worker: WorkerProcess) -> bool:
        return worker is self.placement.server or self.placement.is_compiler(worker)

    def _pending(self, worker: WorkerProcess) -> bool:
        if time.monotonic() >= self.deadline:
            return False
        if self._for_pool(worker):
            return self.placement.pending(worker)
        if self._dropped(worker):
            return False
        has_work = bool(self._queue(worker)) or self.finals.has_work(worker)
        if worker in self.turns.sides:
            return has_work
        return self._starting or has_work or self.placement.stealable()

    def _dropped(self, worker: WorkerProcess) -> bool:
        """A GPU worker given up: a side worker that could not start, or one of a GPU of another model."""
        return worker not in self.turns.sides and worker not in self.gpu_workers

    def _queue(self, worker: WorkerProcess) -> list[Trial]:
        """The trials ready for `worker`: a side worker's (SideTurns.queue), else the trial workers'."""
        return self.turns.queue(worker) if worker in self.turns.sides else self.ready

    def _assign(self, worker: WorkerProcess):
        if time.monotonic() >= self.deadline or worker is self.placement.server:
            return None
        if self.placement.is_compiler(worker):
            return self.placement.assign()
        if self._dropped(worker) or self.turns.waits(worker):
            return None  # given up, or its GPU's lock is the side worker's (SideTurns)
        wait_s = self.turns.lock_wait_s(worker)
        side = worker in self.turns.sides
        queue = self._queue(worker)
        if queue:
            group = self.last_group.get(id(worker))
            trial = next((t for t in queue if (t.shape, t.dtype) == group), queue[0])
            prepare = self.turns.prepare(worker, trial, self.trial_timeout_s)
            if prepare is not None:
                return prepare
            (self.turns.ready if side else self.ready).remove(trial)
            self.last_group[id(worker)] = (trial.shape, trial.dtype)
            return (("trial", trial, self.peaks), ("trial", trial), self.trial_timeout_s + wait_s,
                    f"running {trial.label}")
        trial = self.placement.take_for_gpu(self.last_group.get(id(worker))) if not side else None
        if trial is not None:
            self.last_group[id(worker)] = (trial.shape, trial.dtype)
            return (("trial", trial, self.peaks), ("trial", trial), self.trial_timeout_s,
                    f"compiling and running {trial.label}")
        group = self.finals.take(worker)
        if group is None:
            return None
        trials, rule = group
        self.last_group[id(worker)] = (trials[0].shape, trials[0].dtype)
        return self.finals.request(trials, rule, self.peaks, self.trial_timeout_s, wait_s)

    def _early(self, worker: WorkerProcess, task, answer) -> bool:
        """Whether a GPU worker gets its next task before this answer is recorded (the store's commit,
        the outputs, the search told): an answer of a trial or finalists group that leaves it usable
        (a sticky CUDA error ends the worker). Its GPU then works while this process records."""
        if task == "start" or task[0] not in ("trial", "finalists") or worker not in self.on_gpu:
            return False
        result = answer if task[0] == "trial" else answer[0]
        return not result.get("sticky")

    def _deliver(self, worker: WorkerProcess, task, answer, lost: Optional[WorkerLost]) -> None:
        if task == "start":
            if lost is not None and worker in self.turns.sides:
                self.ready += self.turns.could_not_start(worker, lost)
            elif lost is not None:
                raise WorkerStartError(f"{worker.name} could not start: {lost}")
            return
        kind, payload = task
        if kind == "peaks":
            self._peaks = (answer, lost)
        elif kind == "compile":
            self._settled(self.placement.compiled(*payload, answer, lost))
        elif kind == "prepare":
            seconds = self.turns.compiled_ahead(worker, payload, answer, lost)
            if seconds is not None:
                self.placement.compile_s[payload.key] = seconds
        elif kind == "trial":
            result = answer if lost is None else {"status": lost.status, "message": str(lost)}
            if result.pop("sticky", False):
                worker.stop()  # it is exiting anyway; never hand it the next trial
            self.placement.took(payload.key, result)
            self.record(worker, payload, result)
            self._refill()
        else:
            self.finals.deliver(worker, *payload, answer, lost)

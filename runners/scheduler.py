"""Feeds trials through the compile pool and the GPU workers at the same time.

A trial of the kernel goes to a compile worker first (backend=cuda with a pool), then, built, to the
first free GPU worker, preferring one whose last trial had the same (shape, dtype) (its inputs and
float64 reference are cached there). Baselines need no compile. While the GPUs time the first
configs, the pool compiles the next ones. Every trial ends in exactly one call of `record`, whatever
happens to the processes running it.
"""
from __future__ import annotations

import time
from collections import deque
from typing import Callable, Optional

from runners import check, compile_pool
from runners.process import WorkerLost, WorkerProcess, drive
from runners.trials import TRITON_PROVIDER, Trial


class WorkerStartError(RuntimeError):
    """A worker process could not start: a setup problem (imports, CUDA), not an outcome of a trial."""


class Scheduler:
    def __init__(self, gpu_workers: list[WorkerProcess], compilers: list[WorkerProcess],
                 record: Callable[[WorkerProcess, Trial, dict], None], peaks: dict, trial_timeout_s: float,
                 compile_timeout_s: float, target: Optional[tuple], max_shared_bytes: Optional[int]):
        self.gpu_workers, self.compilers = gpu_workers, compilers
        self.record, self.peaks = record, peaks
        self.trial_timeout_s, self.compile_timeout_s = trial_timeout_s, compile_timeout_s
        self.target, self.max_shared_bytes = target, max_shared_bytes
        self.to_compile: deque[Trial] = deque()
        self.ready: list[Trial] = []
        self.finalist_groups: deque[list[Trial]] = deque()
        self.compile_s: dict[str, float] = {}  # trial key -> seconds its compile took in the pool
        self.last_group: dict[int, tuple] = {}  # id(worker) -> (shape, dtype) of its last trial
        self.deadline = float("inf")
        self.not_run = 0  # trials dropped at the deadline
        self._on_finalists: Optional[Callable] = None
        self._final_rule: dict = {}

    # --- the two kinds of work --------------------------------------------------------------
    def run(self, trials: list[Trial], deadline: float = float("inf")) -> None:
        """Compile, gate and time `trials`; returns when each has been recorded or dropped at the deadline."""
        self.deadline = deadline
        for trial in trials:
            if trial.pruned_reason:
                self.record(None, trial, {"status": check.STATUS_PRUNED, "message": trial.pruned_reason})
            elif trial.provider == TRITON_PROVIDER and self.compilers:
                self.to_compile.append(trial)
            else:
                self.ready.append(trial)
        self._drive()

    def run_finalists(self, groups: list[list[Trial]], rule: dict, on_result: Callable) -> None:
        """Re-time each group (the finalists of one (shape, dtype)) interleaved on one GPU worker
        until `rule` (StopRule fields) holds; on_result(worker, trials, results) for each group."""
        self.deadline = float("inf")
        self.finalist_groups.extend(groups)
        self._final_rule, self._on_finalists = rule, on_result
        self._drive()

    # --- the loop ---------------------------------------------------------------------------
    def _drive(self) -> None:
        drive(self.gpu_workers + self.compilers, self._assign, self._deliver, self._pending)
        if time.monotonic() >= self.deadline:
            self.not_run += len(self.to_compile) + len(self.ready)
            self.to_compile.clear()
            self.ready.clear()

    def _is_compiler(self, worker: WorkerProcess) -> bool:
        return any(worker is c for c in self.compilers)

    def _pending(self, worker: WorkerProcess) -> bool:
        if time.monotonic() >= self.deadline:
            return False
        if self._is_compiler(worker):
            return bool(self.to_compile)
        return bool(self.ready or self.finalist_groups)

    def _assign(self, worker: WorkerProcess):
        if not self._pending(worker):
            return None
        if self._is_compiler(worker):
            trial = self.to_compile.popleft()
            return (compile_pool.compile_request(trial, self.target, self.max_shared_bytes), ("compile", trial),
                    self.compile_timeout_s, f"compiling {trial.label}")
        if self.ready:
            group = self.last_group.get(id(worker))
            index = next((i for i, t in enumerate(self.ready) if (t.shape, t.dtype) == group), 0)
            trial = self.ready.pop(index)
            self.last_group[id(worker)] = (trial.shape, trial.dtype)
            return ("trial", trial, self.peaks), ("trial", trial), self.trial_timeout_s, f"running {trial.label}"
        trials = self.finalist_groups.popleft()
        self.last_group[id(worker)] = (trials[0].shape, trials[0].dtype)
        # Each finalist was already timed once; the round-robin re-timing gets that long per finalist.
        timeout_s = self.trial_timeout_s * len(trials)
        return (("finalists", trials, self.peaks, self._final_rule), ("finalists", trials), timeout_s,
                f"re-timing {len(trials)} finalists at {trials[0].label}")

    def _deliver(self, worker: WorkerProcess, task, answer, lost: Optional[WorkerLost]) -> None:
        if task == "start":
            if lost is not None:
                raise WorkerStartError(f"{worker.name} could not start: {lost}")
            return
        kind, payload = task
        if kind == "compile":
            self._compiled(payload, answer, lost)
        elif kind == "trial":
            result = answer if lost is None else {"status": lost.status, "message": str(lost)}
            if result.pop("sticky", False):
                worker.stop()  # it is exiting anyway; never hand it the next trial
            if payload.key in self.compile_s:
                result["compile_s"] = self.compile_s.pop(payload.key)
            self.record(worker, payload, result)
        else:
            results = answer if lost is None else [{"status": lost.status, "message": str(lost)}]
            if results[0].pop("sticky", False):
                worker.stop()
            self._on_finalists(worker, payload, results)

    def _compiled(self, trial: Trial, outcome: Optional[dict], lost: Optional[WorkerLost]) -> None:
        if lost is not None:  # hung past the compile timeout, or the compiler process died
            status = check.STATUS_TIMEOUT if lost.status == check.STATUS_TIMEOUT else check.STATUS_COMPILE_ERROR
            outcome = {"status": status, "message": f"compile: {lost}", "compile_s": None}
        if outcome["status"] in (compile_pool.BUILT, compile_pool.DEFERRED):
            self.compile_s[trial.key] = outcome["compile_s"]
            self.ready.append(trial)
        else:
            self.record(None, trial, outcome)

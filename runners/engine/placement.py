"""Where a config compiles: the compile pool, or the GPU worker that would otherwise wait for it.

The configs queued for the pool, their outcomes not yet taken, the compile seconds measured in this job,
and the rule (CompilePlacement's docstring) that lets a GPU worker with nothing to time take a config
from the pool's queue. The scheduler (runners/engine/scheduler.py) asks it for the compile workers'
requests and hands it their answers.
"""
from __future__ import annotations

import statistics
import time
from collections import deque
from typing import Optional

from triton_sweep.engine import compile_pool
from triton_sweep.engine.process import WorkerLost, WorkerProcess
from triton_sweep.model.trial import TRITON_PROVIDER, Trial
from triton_sweep.measure import check


class CompilePlacement:
    """Who compiles a config, decided as the job goes, from what this job measures:
    - A GPU worker with nothing built to time compiles the next config itself (its first call compiles
      it) when the pool cannot hand it a binary sooner: nothing is compiling in the pool, or the pool's
      next binary is due (its oldest compile in flight plus the median compile seconds of the pool in
      this job) later than the GPU worker would take (the median first call of the configs GPU workers
      compiled in this job). Until both figures exist, only when nothing is compiling in the pool. So a
      GPU worker never waits for a pool that is still starting.
    - Compile workers are forked once the fork server has imported everything, one per config waiting
      for a compile (queued or compiling), up to compile.workers, and more when the search adds configs.
      A list the GPU workers have taken by then gets no compile worker: the pool is skipped for a small
      list whose compiles all fit in the fork server's start (a kernel module that imports slowly, say),
      and grows to its full size for a large one."""

    def __init__(self, compilers: list[WorkerProcess], compile_timeout_s: float, target: Optional[tuple]):
        self.compilers, self.compile_timeout_s = compilers, compile_timeout_s
        # The fork server the compile workers come from (one per job); it takes part in `drive` until it
        # is ready, so that its ready message wakes the loop to fork them.
        self.server = next((w.server for w in compilers if w.server is not None), None)
        self.target, self.max_shared_bytes = target, None
        self.to_compile: deque[Trial] = deque()
        self.compiling: set[str] = set()  # keys queued or in flight in the pool
        self.built: dict[str, dict] = {}  # key -> compile outcome (for self.target) not yet taken by run()
        self.wanted: dict[str, Trial] = {}  # key -> trial of run() waiting for its compile outcome
        self.compile_s: dict[str, float] = {}  # trial key -> seconds its compile took in the pool
        self.pool_compile_s: list[float] = []  # seconds of each compile in the pool, this job
        self.gpu_compile_s: list[float] = []  # first-call seconds of each config a GPU worker compiled
        self.gpu_compiled: set[str] = set()  # keys of the configs GPU workers compiled themselves

    def needs_compile(self, trial: Trial) -> bool:
        return trial.provider == TRITON_PROVIDER and not trial.pruned_reason and bool(self.compilers)

    def queue(self, trial: Trial) -> None:
        if trial.key not in self.compiling:
            self.compiling.add(trial.key)
            self.to_compile.append(trial)

    def compile_ahead(self, trials: list[Trial]) -> None:
        """Queue the first batch before the GPU workers are ready, if the target is known."""
        if self.target is not None:
            for trial in trials:
                if self.needs_compile(trial):
                    self.queue(trial)

    def want(self, trial: Trial) -> Optional[tuple]:
        """A trial of run() that needs its compile: settled now where built (see settle), else queued."""
        self.wanted[trial.key] = trial
        if trial.key in self.built:
            return self.settle(trial.key)
        self.queue(trial)
        return None

    def drop_unwanted(self) -> None:
        """Compiled ahead but not wanted (already in the store): not worth the pool's time any more."""
        dropped = [t for t in self.to_compile if t.key not in self.wanted]
        self.to_compile = deque(t for t in self.to_compile if t.key in self.wanted)
        self.compiling.difference_update(t.key for t in dropped)

    def drop_all(self) -> int:
        """At the deadline: nothing more compiles; returns how many wanted trials are dropped."""
        dropped = len(self.wanted)
        self.to_compile.clear()
        self.compiling.clear()
        self.wanted.clear()
        return dropped

    def set_device(self, target: Optional[tuple], max_shared_bytes: Optional[int]) -> None:
        """What the GPU workers reported: compiles for another target (a wrong guess) are redone."""
        if target != self.target:
            self.built.clear()
        self.target, self.max_shared_bytes = target, max_shared_bytes

    def stop(self) -> None:
        """Kill the pool and its fork server (they hold nothing worth a graceful exit) once no more
        compiles will come: every worker signalled first, then each reaped."""
        for worker in self.compilers:
            worker.kill()
        for worker in self.compilers:
            worker.stop()
        if self.server is not None:
            self.server.stop()
        self.compilers, self.server = [], None

    def is_compiler(self, worker: WorkerProcess) -> bool:
        return any(worker is c for c in self.compilers)

    def pending(self, worker: WorkerProcess) -> bool:
        """Whether the fork server or a compile worker has work (the scheduler's `pending` for them)."""
        if worker is self.server:
            return not worker.ready and bool(self.to_compile)
        if worker.process is None:
            return self._wants_compile_worker()
        return bool(self.to_compile)

    def _wants_compile_worker(self) -> bool:
        """Whether to fork one more compile worker: the fork server is ready, and fewer have been
        forked than configs wait for a compile (queued, or compiling now)."""
        if not self.to_compile or (self.server is not None and not self.server.ready):
            return False
        started = sum(c.process is not None for c in self.compilers)
        compiling = sum(c.task is not None and c.task != "start" for c in self.compilers)
        return started < compiling + len(self.to_compile)

    def assign(self) -> Optional[tuple]:
        """A compile worker's next request: the next config queued, for the target known now."""
        if not self.to_compile:
            return None
        trial = self.to_compile.popleft()
        return (compile_pool.compile_request(trial, self.target), ("compile", (trial, self.target)),
                self.compile_timeout_s, f"compiling {trial.label}")

    def stealable(self) -> bool:
        """Whether a config of run() waits in the queue for the pool (not one compiled ahead only)."""
        return any(t.key in self.wanted for t in self.to_compile)

    def _may_compile_on_gpu(self) -> bool:
        """The rule of the class docstring: a GPU worker compiles a config itself only when the pool
        cannot hand it one sooner."""
        in_flight = [c for c in self.compilers if c.task is not None and c.task != "start"]
        if not in_flight:
            return True
        if not self.pool_compile_s or not self.gpu_compile_s:
            return False
        oldest = min(c.deadline - c.timeout_s for c in in_flight)  # when the longest-running compile began
        next_binary = oldest + statistics.median(self.pool_compile_s)
        return next_binary > time.monotonic() + statistics.median(self.gpu_compile_s)

    def take_for_gpu(self, group: Optional[tuple]) -> Optional[Trial]:
        """The next config waiting for the pool, taken out of it for a GPU worker to compile and run,
        one of `group` (its last (shape, dtype)) if any; None when there is none or the pool will be
        sooner."""
        if not self.stealable() or not self._may_compile_on_gpu():
            return None
        waiting = [t for t in self.to_compile if t.key in self.wanted]
        trial = next((t for t in waiting if (t.shape, t.dtype) == group), waiting[0])
        self.to_compile.remove(trial)
        self.compiling.discard(trial.key)
        del self.wanted[trial.key]
        self.gpu_compiled.add(trial.key)
        return trial

    def took(self, key: str, result: dict) -> None:
        """A trial's result is in: its compile seconds onto its row, or its first call counted as the
        compile of a GPU worker."""
        if key in self.compile_s:
            result["compile_s"] = self.compile_s.pop(key)
        elif key in self.gpu_compiled and result.get("first_call_s") is not None:
            self.gpu_compile_s.append(result["first_call_s"])

    def compiled(self, trial: Trial, target: tuple, outcome: Optional[dict],
                 lost: Optional[WorkerLost]) -> Optional[tuple]:
        """A compile worker's answer; the trial settled (see settle) where run() waits for it."""
        self.compiling.discard(trial.key)
        if target != self.target:  # built for a guess the GPU workers did not confirm
            if trial.key in self.wanted:
                self.queue(trial)
            return None
        if lost is not None:  # hung past the compile timeout, or the compiler process died
            status = (check.STATUS_TIMEOUT if lost.status == check.STATUS_TIMEOUT
                      else check.STATUS_COMPILE_ERROR)
            outcome = {"status": status, "message": f"compile: {lost}", "compile_s": None}
        elif outcome.get("compile_s") is not None:
            self.pool_compile_s.append(outcome["compile_s"])
        self.built[trial.key] = outcome
        if trial.key in self.wanted:
            return self.settle(trial.key)
        return None

    def settle(self, key: str) -> tuple[Trial, Optional[dict]]:
        """A wanted trial's compile outcome is in: (trial, None) for a GPU worker to run, or (trial,
        result) to record as a failure."""
        trial, outcome = self.wanted.pop(key), self.built.pop(key)
        shared = outcome.get("shared_bytes")
        if (outcome["status"] == compile_pool.BUILT and self.max_shared_bytes and shared
                and shared > self.max_shared_bytes):
            outcome = {**outcome, "status": check.STATUS_OUT_OF_RESOURCES,
                       "message": f"shared memory: {outcome['kernel_name']} needs {shared} bytes, "
                                  f"the device has {self.max_shared_bytes}"}
        if outcome["status"] in (compile_pool.BUILT, compile_pool.DEFERRED):
            self.compile_s[key] = outcome["compile_s"]
            return trial, None
        return trial, {k: outcome[k] for k in ("status", "message", "compile_s")}

"""Feeds trials through the compile pool and the GPU workers at the same time.

While the GPU workers start (imports, CUDA context, flush buffer: seconds), the fork server imports
torch, Triton and the kernel's module, and from then on the pool compiles the first batch for the
compile target read through NVML, also while the first GPU worker measures the device's ceilings
(measure_peaks). Then a trial of the kernel goes to a compile worker (backend=cuda with a pool), then,
built, to the first free GPU worker, preferring one whose last trial had the same (shape, dtype) (its
inputs and float64 reference are cached there); baselines need no compile. While the GPUs time the first
configs, the pool compiles the next ones. Who compiles a config (the pool, or a GPU worker with nothing
to time) and where the torch.compile baselines run (side workers): Scheduler's docstring."""
from __future__ import annotations

import statistics
import time
from collections import deque
from typing import Callable, Optional, Sequence

from runners.engine import compile_pool
from runners.engine.process import WorkerLost, WorkerProcess, drive, stop_all
from runners.model.trial import TRITON_PROVIDER, Trial
from runners.measure import check
from runners.measure.stop_rule import StopRule


class WorkerStartError(RuntimeError):
    """A worker process could not start: a setup problem (imports, CUDA), not an outcome of a trial."""


class Scheduler:
    """Trials through the compile pool and the GPU workers; every trial ends in one call of `record`.

    Who compiles a config, decided as the job goes, from what this job measures:
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
      and grows to its full size for a large one.

    The torch.compile baselines (trials whose first call compiles) go to the side workers where there are
    some (runners/engine/worker.py: one beside the trial worker of each of the first GPUs, as many as such
    trials), with the finalists groups that hold one; everything else goes to the trial workers. A side
    worker first compiles a trial ahead (a request that launches nothing and takes no lock), while the trial
    workers go on, and then runs it: a trial compiled ahead, and the finalists group that holds it, are the
    side worker's that compiled it (another would compile it again, under its GPU's lock). A side worker and
    the trial worker of its GPU take turns on that GPU's lock: the trial worker gets no new request while
    its side worker has one that holds it, and a request of the side worker may wait for the trial worker's
    request in flight, so its timeout grows by what is left of that one. The other GPUs go on meanwhile. A
    side worker that cannot start leaves its trials to the other side workers, the last one to the trial
    workers.
    """

    def __init__(self, gpu_workers: list[WorkerProcess], compilers: list[WorkerProcess],
                 trial_timeout_s: float, compile_timeout_s: float, target: Optional[tuple] = None,
                 sides: Sequence[WorkerProcess] = (),
                 compiles: Callable[[Trial], bool] = lambda trial: False):
        """`target`: what the pool compiles for until `set_device` gives the GPU's own (None: nothing
        is compiled before then). `sides`: the workers of the trials that `compiles` (class docstring),
        the i-th on the GPU of gpu_workers[i], sharing its lock."""
        self.gpu_workers, self.compilers = gpu_workers, compilers
        self.sides, self.compiles = list(sides), compiles
        # id(worker) -> the worker on its GPU, both ways: a side worker's trial worker and the reverse
        self.partners = {id(w): other for side, trial in zip(self.sides, gpu_workers)
                         for w, other in ((side, trial), (trial, side))}
        # The fork server the compile workers come from (one per job); it takes part in `drive` until it
        # is ready, so that its ready message wakes the loop to fork them.
        self.server = next((w.server for w in compilers if w.server is not None), None)
        self.trial_timeout_s, self.compile_timeout_s = trial_timeout_s, compile_timeout_s
        self.target, self.max_shared_bytes = target, None
        self.record: Callable[[Optional[WorkerProcess], Trial, dict], None] = (
            lambda worker, trial, result: None)
        self.peaks: dict = {}
        self.to_compile: deque[Trial] = deque()
        self.compiling: set[str] = set()  # keys queued or in flight in the pool
        self.built: dict[str, dict] = {}  # key -> compile outcome (for self.target) not yet taken by run()
        self.wanted: dict[str, Trial] = {}  # key -> trial of run() waiting for its compile outcome
        self.ready: list[Trial] = []
        self.ready_side: list[Trial] = []  # the side workers'
        self.prepared: dict[str, int] = {}  # key -> id() of the side worker that compiled it ahead (or tried)
        self.finalist_groups: deque[tuple[list[Trial], StopRule]] = deque()  # each with its rule
        self.lost_groups: dict[str, int] = {}  # first trial's key -> id() of the worker that died in it
        self.compile_s: dict[str, float] = {}  # trial key -> seconds its compile took in the pool
        self.last_group: dict[int, tuple] = {}  # id(worker) -> (shape, dtype) of its last trial
        self.deadline = float("inf")
        self.not_run = 0  # trials dropped at the deadline
        self._starting = False
        self._on_finalists: Optional[Callable] = None
        self._tie_floor = 0.0
        self.pool_compile_s: list[float] = []  # seconds of each compile in the pool, this job
        self.gpu_compile_s: list[float] = []  # first-call seconds of each config a GPU worker compiled
        self.gpu_compiled: set[str] = set()  # keys of the configs GPU workers compiled themselves
        self._peaks: Optional[tuple] = None  # (answer, lost) of measure_peaks' request, once it is in

    # --- start-up ---------------------------------------------------------------------------
    def start(self, ahead: list[Trial]) -> None:
        """Start the GPU workers and the fork server (those not started yet: the sweep starts some
        before it validates its input) and return once every GPU worker is ready; meanwhile the pool
        compiles `ahead` (the first batch) if the target is known. Raises WorkerStartError."""
        for worker in self.on_gpu + ([self.server] if self.server is not None else []):
            if worker.process is None:
                worker.start()
        if self.target is not None:
            for trial in ahead:
                if self._needs_compile(trial):
                    self._queue_compile(trial)
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
        return self.gpu_workers + self.sides

    def keep_gpu_workers(self, keep: list[WorkerProcess]) -> None:
        """Use only `keep` from now on; the other GPU workers are stopped, with their side workers."""
        dropped = [w for w in self.gpu_workers if w not in keep]
        their_sides = [side for side in self.sides if self.partners[id(side)] in dropped]
        for side in their_sides:
            self._drop_side(side)
        stop_all(dropped + their_sides)
        self.gpu_workers = keep

    def set_device(self, target: Optional[tuple], max_shared_bytes: Optional[int], peaks: dict) -> None:
        """What the GPU workers reported: compiles for another target (a wrong guess) are redone."""
        if target != self.target:
            self.built.clear()
        self.target, self.max_shared_bytes, self.peaks = target, max_shared_bytes, peaks

    def stop_compilers(self) -> None:
        """Kill the pool and its fork server (they hold nothing worth a graceful exit) once no more
        compiles will come: every worker signalled first, then each reaped."""
        for worker in self.compilers:
            worker.kill()
        for worker in self.compilers:
            worker.stop()
        if self.server is not None:
            self.server.stop()
        self.compilers, self.server = [], None

    # --- the two kinds of work --------------------------------------------------------------
    def run(self, trials: list[Trial], record: Callable, deadline: float = float("inf")) -> None:
        """Compile, gate and time `trials`, each ending in one record(worker or None, trial, result);
        returns when each has been recorded or dropped at the deadline. None may be pruned: the job
        records those itself, all at once (Job.record_pruned)."""
        if any(trial.pruned_reason for trial in trials):
            raise ValueError("Scheduler.run runs trials; pruned ones are the job's to record")
        self.record, self.deadline = record, deadline
        for trial in trials:
            if self._needs_compile(trial):
                self.wanted[trial.key] = trial
                if trial.key in self.built:
                    self._settle(trial.key)
                else:
                    self._queue_compile(trial)
            elif self.sides and self.compiles(trial):
                self.ready_side.append(trial)
            else:
                self.ready.append(trial)
        # compiled ahead but not wanted (already in the store): not worth the pool's time any more
        dropped = [t for t in self.to_compile if t.key not in self.wanted]
        self.to_compile = deque(t for t in self.to_compile if t.key in self.wanted)
        self.compiling.difference_update(t.key for t in dropped)
        self._drive()

    def run_finalists(self, groups: list[list[Trial]], rules: list, tie_floor: float,
                      on_result: Callable) -> None:
        """Re-time each group (the finalists of one (shape, dtype)) interleaved on one GPU worker
        until its rule (a StopRule, of `rules` in turn) holds or the ties at tie_floor are settled;
        on_result(worker, trials, results) for each group. The groups go to whichever worker is free, so
        they spread over the GPUs, each whole on one; a group whose worker dies in it is re-timed once
        more from its start, on another worker where one is free."""
        self.deadline = float("inf")
        self.finalist_groups.extend(zip(groups, rules, strict=True))
        self._tie_floor, self._on_finalists = tie_floor, on_result
        self._drive()

    # --- the loop ---------------------------------------------------------------------------
    def _workers(self) -> list[WorkerProcess]:
        # GPU workers first: within one turn of the loop they take what they will compile themselves
        # before the pool is asked to grow.
        return self.on_gpu + ([self.server] if self.server is not None else []) + self.compilers

    def _drive(self) -> None:
        drive(self._workers(), self._assign, self._deliver, self._pending, early=self._early)
        if time.monotonic() >= self.deadline:
            self.not_run += len(self.wanted) + len(self.ready) + len(self.ready_side)
            self.to_compile.clear()
            self.compiling.clear()
            self.wanted.clear()
            self.ready.clear()
            self.ready_side.clear()

    def _needs_compile(self, trial: Trial) -> bool:
        return trial.provider == TRITON_PROVIDER and not trial.pruned_reason and bool(self.compilers)

    def _queue_compile(self, trial: Trial) -> None:
        if trial.key not in self.compiling:
            self.compiling.add(trial.key)
            self.to_compile.append(trial)

    def _is_compiler(self, worker: WorkerProcess) -> bool:
        return any(worker is c for c in self.compilers)

    def _pending(self, worker: WorkerProcess) -> bool:
        if time.monotonic() >= self.deadline:
            return False
        if worker is self.server:
            return not worker.ready and bool(self.to_compile)
        if self._is_compiler(worker):
            if worker.process is None:
                return self._wants_compile_worker()
            return bool(self.to_compile)
        if self._dropped(worker):
            return False
        has_work = (bool(self._queue(worker))
                    or any(self._mine(worker, trials) for trials, _ in self.finalist_groups))
        if worker in self.sides:
            return has_work
        return self._starting or has_work or self._stealable()

    def _dropped(self, worker: WorkerProcess) -> bool:
        """A GPU worker given up: a side worker that could not start, or one of a GPU of another model."""
        return worker not in self.sides and worker not in self.gpu_workers

    def _drop_side(self, side: WorkerProcess) -> None:
        """Give up a side worker: what it compiled ahead is anyone's again; the last one's trials go to
        the trial workers."""
        self.sides.remove(side)
        trial_worker = self.partners.pop(id(side))
        self.partners.pop(id(trial_worker), None)
        self.prepared = {key: owner for key, owner in self.prepared.items() if owner != id(side)}
        if not self.sides:
            self.ready += self.ready_side
            self.ready_side.clear()

    def _mine(self, worker: WorkerProcess, trials: list[Trial]) -> bool:
        """Whether a trial (a list of one) or finalists group is `worker`'s: the side workers' when one
        of them compiles and there are side workers (of those, the one that compiled the first of them
        compiled ahead, where one was: a group whose two baselines two side workers compiled goes to
        one), the trial workers' otherwise."""
        for_side = bool(self.sides) and any(self.compiles(trial) for trial in trials)
        owner = next((self.prepared[trial.key] for trial in trials if trial.key in self.prepared), None)
        return for_side == (worker in self.sides) and owner in (None, id(worker))

    @staticmethod
    def _busy(worker: Optional[WorkerProcess]) -> bool:
        """Whether `worker` has a request that holds the GPU's lock (a compile ahead holds none)."""
        return (worker is not None and worker.task is not None and worker.task != "start"
                and worker.task[0] != "prepare")

    def _lock_wait_s(self, worker: WorkerProcess) -> float:
        """How long a side worker may wait for its GPU's lock: what is left of the request in flight of
        that GPU's trial worker (it holds the lock at most until then, when it is killed); 0 otherwise."""
        partner = self.partners.get(id(worker))
        if worker not in self.sides or not self._busy(partner):
            return 0.0
        return max(partner.deadline - time.monotonic(), 0.0)

    def _queue(self, worker: WorkerProcess) -> list[Trial]:
        """The trials ready for `worker`: for a side worker those it compiled ahead and those no side
        worker has, else those of the trial workers."""
        if worker not in self.sides:
            return self.ready
        return [trial for trial in self.ready_side if self._mine(worker, [trial])]

    def _wants_compile_worker(self) -> bool:
        """Whether to fork one more compile worker: the fork server is ready, and fewer have been
        forked than configs wait for a compile (queued, or compiling now)."""
        if not self.to_compile or (self.server is not None and not self.server.ready):
            return False
        started = sum(c.process is not None for c in self.compilers)
        compiling = sum(c.task is not None and c.task != "start" for c in self.compilers)
        return started < compiling + len(self.to_compile)

    def _stealable(self) -> bool:
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

    def _take_to_compile_on_gpu(self, worker: WorkerProcess) -> Optional[Trial]:
        """The next config waiting for the pool, taken out of it for `worker` to compile and run,
        one of its last (shape, dtype) if any; None when there is none or the pool will be sooner."""
        if not self._stealable() or not self._may_compile_on_gpu():
            return None
        group = self.last_group.get(id(worker))
        waiting = [t for t in self.to_compile if t.key in self.wanted]
        trial = next((t for t in waiting if (t.shape, t.dtype) == group), waiting[0])
        self.to_compile.remove(trial)
        self.compiling.discard(trial.key)
        del self.wanted[trial.key]
        self.gpu_compiled.add(trial.key)
        return trial

    def _assign(self, worker: WorkerProcess):
        if time.monotonic() >= self.deadline or worker is self.server:
            return None
        if self._is_compiler(worker):
            if not self.to_compile:
                return None
            trial = self.to_compile.popleft()
            return (compile_pool.compile_request(trial, self.target), ("compile", (trial, self.target)),
                    self.compile_timeout_s, f"compiling {trial.label}")
        if self._dropped(worker):
            return None
        if worker not in self.sides and self._busy(self.partners.get(id(worker))):
            return None  # its GPU's lock is the side worker's: the turns of the module docstring
        wait_s = self._lock_wait_s(worker)
        queue = self._queue(worker)
        if queue:
            group = self.last_group.get(id(worker))
            trial = next((t for t in queue if (t.shape, t.dtype) == group), queue[0])
            if worker in self.sides and trial.key not in self.prepared:
                self.prepared[trial.key] = id(worker)
                return (("prepare", trial), ("prepare", trial), self.trial_timeout_s,
                        f"compiling {trial.label} ahead")
            (self.ready_side if worker in self.sides else self.ready).remove(trial)
            self.last_group[id(worker)] = (trial.shape, trial.dtype)
            return (("trial", trial, self.peaks), ("trial", trial), self.trial_timeout_s + wait_s,
                    f"running {trial.label}")
        trial = self._take_to_compile_on_gpu(worker) if worker not in self.sides else None
        if trial is not None:
            self.last_group[id(worker)] = (trial.shape, trial.dtype)
            return (("trial", trial, self.peaks), ("trial", trial), self.trial_timeout_s,
                    f"compiling and running {trial.label}")
        mine = [g for g in self.finalist_groups if self._mine(worker, g[0])]
        # a group lost with its worker goes to another worker where one takes it first
        group = next((g for g in mine if self.lost_groups.get(g[0][0].key) != id(worker)), None) or next(
            iter(mine), None)
        if group is None:
            return None
        self.finalist_groups.remove(group)
        trials, rule = group
        self.last_group[id(worker)] = (trials[0].shape, trials[0].dtype)
        # Each finalist was already timed once; the round-robin re-timing gets that long per finalist.
        timeout_s = self.trial_timeout_s * len(trials) + wait_s
        message = ("finalists", trials, self.peaks, rule, self._tie_floor)
        doing = f"re-timing {len(trials)} finalists at {trials[0].label}"
        return message, ("finalists", (trials, rule)), timeout_s, doing

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
            if lost is not None and worker in self.sides:
                self._drop_side(worker)
                takers = "the other torch.compile workers" if self.sides else "the trial workers"
                print(f"note: {worker.name} could not start ({lost}); {takers} take its trials")
            elif lost is not None:
                raise WorkerStartError(f"{worker.name} could not start: {lost}")
            return
        kind, payload = task
        if kind == "peaks":
            self._peaks = (answer, lost)
        elif kind == "compile":
            self._compiled(*payload, answer, lost)
        elif kind == "prepare":
            if lost is None and answer.get("compile_s") is not None:
                self.compile_s[payload.key] = answer["compile_s"]
            elif lost is None and answer.get("message"):
                print(f"note: {worker.name} could not compile {payload.label} ahead ({answer['message']}); "
                      "its first call compiles it")
        elif kind == "trial":
            result = answer if lost is None else {"status": lost.status, "message": str(lost)}
            if result.pop("sticky", False):
                worker.stop()  # it is exiting anyway; never hand it the next trial
            if payload.key in self.compile_s:
                result["compile_s"] = self.compile_s.pop(payload.key)
            elif payload.key in self.gpu_compiled and result.get("first_call_s") is not None:
                self.gpu_compile_s.append(result["first_call_s"])
            self.record(worker, payload, result)
        else:
            trials, rule = payload
            if lost is not None and lost.status == "crashed" and trials[0].key not in self.lost_groups:
                # the worker died in the group: its rounds start again, once, on one worker (another
                # where one is free), so that no group is split and none is lost with a worker
                print(f"note: {worker.name} died re-timing the finalists at {trials[0].label} ({lost}); "
                      "they are re-timed again")
                self.lost_groups[trials[0].key] = id(worker)
                self.finalist_groups.appendleft((trials, rule))
                return
            results = answer if lost is None else [{"status": lost.status, "message": str(lost)}]
            if results[0].pop("sticky", False):
                worker.stop()
            self._on_finalists(worker, trials, results)

    def _compiled(self, trial: Trial, target: tuple, outcome: Optional[dict],
                  lost: Optional[WorkerLost]) -> None:
        self.compiling.discard(trial.key)
        if target != self.target:  # built for a guess the GPU workers did not confirm
            if trial.key in self.wanted:
                self._queue_compile(trial)
            return
        if lost is not None:  # hung past the compile timeout, or the compiler process died
            status = (check.STATUS_TIMEOUT if lost.status == check.STATUS_TIMEOUT
                      else check.STATUS_COMPILE_ERROR)
            outcome = {"status": status, "message": f"compile: {lost}", "compile_s": None}
        elif outcome.get("compile_s") is not None:
            self.pool_compile_s.append(outcome["compile_s"])
        self.built[trial.key] = outcome
        if trial.key in self.wanted:
            self._settle(trial.key)

    def _settle(self, key: str) -> None:
        """A wanted trial's compile outcome is in: on to a GPU worker, or recorded as a failure."""
        trial, outcome = self.wanted.pop(key), self.built.pop(key)
        shared = outcome.get("shared_bytes")
        if (outcome["status"] == compile_pool.BUILT and self.max_shared_bytes and shared
                and shared > self.max_shared_bytes):
            outcome = {**outcome, "status": check.STATUS_OUT_OF_RESOURCES,
                       "message": f"shared memory: {outcome['kernel_name']} needs {shared} bytes, "
                                  f"the device has {self.max_shared_bytes}"}
        if outcome["status"] in (compile_pool.BUILT, compile_pool.DEFERRED):
            self.compile_s[key] = outcome["compile_s"]
            self.ready.append(trial)
        else:
            self.record(None, trial, {k: outcome[k] for k in ("status", "message", "compile_s")})

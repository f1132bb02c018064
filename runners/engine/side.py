"""The torch.compile side workers: how many GPUs get one, which trials are theirs, and their turns with
the trial workers on each GPU's lock.

A trial whose first call compiles (a torch.compile baseline: kernels/spec.py) runs in a worker of its own
beside the trial worker of its GPU (runners/engine/worker.py), so that no trial worker imports dynamo
and inductor and compiles under its GPU's lock. The scheduler (runners/engine/scheduler.py) asks
SideTurns whose a trial is, what a side worker does next, and whether a trial worker must wait.
"""
from __future__ import annotations

import time
from typing import Callable, Optional, Sequence

from triton_sweep.engine.process import WorkerLost, WorkerProcess
from triton_sweep.model.trial import Trial


def side_workers(side: Optional[WorkerProcess], trials: list[Trial], compiles: Callable[[Trial], bool],
                 gpu_workers: int) -> int:
    """How many GPUs get a side worker, GPU 0's being `side` (started early, where the host has a core
    for it): one a GPU up to the trials that compile on their first call, so that no trial worker
    imports dynamo and inductor and compiles under its GPU's lock (on two H200s a trial worker each
    doing so made the README sweep's trials phase 3.5-5.4 s against 2.0-3.1 s on one GPU with its side
    worker: BENCHMARKS.md, M6), and their finalists groups spread over the GPUs. None
    where no trial compiles: `side` is stopped."""
    count = sum(compiles(trial) for trial in trials if not trial.pruned_reason)
    if side is not None and not count:
        side.stop()
    return min(count, gpu_workers) if side is not None else 0


class SideTurns:
    """The torch.compile baselines (trials whose first call compiles) go to the side workers where there are
    some (one beside the trial worker of each of the first GPUs, as many as such trials), with the
    finalists groups that hold one; everything else goes to the trial workers. A side worker first
    compiles a trial ahead (a request that launches nothing and takes no lock), while the trial workers go
    on, and then runs it: a trial compiled ahead, and the finalists group that holds it, are the side
    worker's that compiled it (another would compile it again, under its GPU's lock). A side worker and
    the trial worker of its GPU take turns on that GPU's lock: the trial worker gets no new request while
    its side worker has one that holds it, and a request of the side worker may wait for the trial worker's
    request in flight, so its timeout grows by what is left of that one. The other GPUs go on meanwhile. A
    side worker that cannot start leaves its trials to the other side workers, the last one to the trial
    workers."""

    def __init__(self, sides: Sequence[WorkerProcess], gpu_workers: list[WorkerProcess],
                 compiles: Callable[[Trial], bool]):
        """`sides`: the workers of the trials that `compiles`, the i-th on the GPU of gpu_workers[i],
        sharing its lock."""
        self.sides, self.compiles = list(sides), compiles
        # id(worker) -> the worker on its GPU, both ways: a side worker's trial worker and the reverse
        self.partners = {id(w): other for side, trial in zip(self.sides, gpu_workers)
                         for w, other in ((side, trial), (trial, side))}
        self.ready: list[Trial] = []  # the side workers' trials ready to run
        self.prepared: dict[str, int] = {}  # key -> id() of the side worker that compiled it ahead (or tried)

    def takes(self, trial: Trial) -> bool:
        """Whether `trial` is the side workers' (there are some, and its first call compiles)."""
        return bool(self.sides) and self.compiles(trial)

    def of(self, trial_workers: list[WorkerProcess]) -> list[WorkerProcess]:
        """The side workers beside `trial_workers`."""
        return [side for side in self.sides if self.partners[id(side)] in trial_workers]

    def drop(self, side: WorkerProcess) -> list[Trial]:
        """Give up a side worker: what it compiled ahead is anyone's again; the last one's trials are
        returned, for the trial workers."""
        self.sides.remove(side)
        trial_worker = self.partners.pop(id(side))
        self.partners.pop(id(trial_worker), None)
        self.prepared = {key: owner for key, owner in self.prepared.items() if owner != id(side)}
        if self.sides:
            return []
        left, self.ready = self.ready, []
        return left

    def could_not_start(self, side: WorkerProcess, lost: WorkerLost) -> list[Trial]:
        """A side worker's start failed: dropped, and said; returns the trials it leaves to the trial
        workers (drop)."""
        left = self.drop(side)
        takers = "the other torch.compile workers" if self.sides else "the trial workers"
        print(f"note: {side.name} could not start ({lost}); {takers} take its trials")
        return left

    def mine(self, worker: WorkerProcess, trials: list[Trial]) -> bool:
        """Whether a trial (a list of one) or finalists group is `worker`'s: the side workers' when one
        of them compiles and there are side workers (of those, the one that compiled the first of them
        compiled ahead, where one was: a group whose two baselines two side workers compiled goes to
        one), the trial workers' otherwise."""
        for_side = bool(self.sides) and any(self.compiles(trial) for trial in trials)
        owner = next((self.prepared[trial.key] for trial in trials if trial.key in self.prepared), None)
        return for_side == (worker in self.sides) and owner in (None, id(worker))

    def queue(self, worker: WorkerProcess) -> list[Trial]:
        """The trials ready for side worker `worker`: those it compiled ahead and those no side worker
        has."""
        return [trial for trial in self.ready if self.mine(worker, [trial])]

    @staticmethod
    def busy(worker: Optional[WorkerProcess]) -> bool:
        """Whether `worker` has a request that holds the GPU's lock (a compile ahead holds none)."""
        return (worker is not None and worker.task is not None and worker.task != "start"
                and worker.task[0] != "prepare")

    def waits(self, worker: WorkerProcess) -> bool:
        """Whether trial worker `worker` must wait: its GPU's lock is its side worker's."""
        return worker not in self.sides and self.busy(self.partners.get(id(worker)))

    def lock_wait_s(self, worker: WorkerProcess) -> float:
        """How long a side worker may wait for its GPU's lock: what is left of the request in flight of
        that GPU's trial worker (it holds the lock at most until then, when it is killed); 0 otherwise."""
        partner = self.partners.get(id(worker))
        if worker not in self.sides or not self.busy(partner):
            return 0.0
        return max(partner.deadline - time.monotonic(), 0.0)

    def prepare(self, worker: WorkerProcess, trial: Trial, timeout_s: float) -> Optional[tuple]:
        """The request that compiles `trial` ahead on side worker `worker`, the first time it is handed
        one; None where it was compiled ahead already (or `worker` is a trial worker)."""
        if worker not in self.sides or trial.key in self.prepared:
            return None
        self.prepared[trial.key] = id(worker)
        return (("prepare", trial), ("prepare", trial), timeout_s, f"compiling {trial.label} ahead")

    @staticmethod
    def compiled_ahead(worker: WorkerProcess, trial: Trial, answer, lost: Optional[WorkerLost]):
        """The seconds a compile ahead took, None where it failed (said: its first call compiles it)."""
        if lost is None and answer.get("compile_s") is not None:
            return answer["compile_s"]
        if lost is None and answer.get("message"):
            print(f"note: {worker.name} could not compile {trial.label} ahead ({answer['message']}); "
                  "its first call compiles it")
        return None

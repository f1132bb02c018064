"""The finalists groups waiting for a GPU worker: spread over the GPUs, each whole on one, and a group
whose worker died in it re-timed once more from its start, on another worker where one is free.

Which groups are a worker's (a side worker's where one holds a torch.compile baseline) is SideTurns'
rule (runners/engine/side.py); the groups and their rules are runners/model/finalists.py's.
"""
from __future__ import annotations

from collections import deque
from typing import Callable, Optional

from triton_sweep.engine.process import WorkerLost, WorkerProcess
from triton_sweep.model.trial import Trial
from triton_sweep.measure.stop_rule import StopRule


class FinalistQueue:
    """The groups of Scheduler.run_finalists not handed out yet; `mine(worker, trials)` says whose."""

    def __init__(self, mine: Callable[[WorkerProcess, list[Trial]], bool]):
        self.mine = mine
        self.groups: deque[tuple[list[Trial], StopRule]] = deque()  # each with its rule
        self.lost: dict[str, int] = {}  # first trial's key -> id() of the worker that died in it
        self.tie_floor = 0.0
        self.on_result: Optional[Callable] = None

    def add(self, groups: list[list[Trial]], rules: list, tie_floor: float, on_result: Callable) -> None:
        self.groups.extend(zip(groups, rules, strict=True))
        self.tie_floor, self.on_result = tie_floor, on_result

    def has_work(self, worker: WorkerProcess) -> bool:
        return any(self.mine(worker, trials) for trials, _ in self.groups)

    def take(self, worker: WorkerProcess) -> Optional[tuple[list[Trial], StopRule]]:
        """The next group of `worker`'s, taken out; None where none is."""
        mine = [g for g in self.groups if self.mine(worker, g[0])]
        # a group lost with its worker goes to another worker where one takes it first
        group = next((g for g in mine if self.lost.get(g[0][0].key) != id(worker)), None) or next(
            iter(mine), None)
        if group is not None:
            self.groups.remove(group)
        return group

    def request(self, trials: list[Trial], rule: StopRule, peaks: dict, trial_timeout_s: float,
                wait_s: float) -> tuple:
        """The request that re-times a group round-robin."""
        # Each finalist was already timed once; the round-robin re-timing gets that long per finalist.
        timeout_s = trial_timeout_s * len(trials) + wait_s
        message = ("finalists", trials, peaks, rule, self.tie_floor)
        doing = f"re-timing {len(trials)} finalists at {trials[0].label}"
        return message, ("finalists", (trials, rule)), timeout_s, doing

    def deliver(self, worker: WorkerProcess, trials: list[Trial], rule: StopRule, answer,
                lost: Optional[WorkerLost]) -> None:
        """A group's answer to on_result, or the group queued again, once, where its worker died in it."""
        if lost is not None and lost.status == "crashed" and trials[0].key not in self.lost:
            # the worker died in the group: its rounds start again, once, on one worker (another
            # where one is free), so that no group is split and none is lost with a worker
            print(f"note: {worker.name} died re-timing the finalists at {trials[0].label} ({lost}); "
                  "they are re-timed again")
            self.lost[trials[0].key] = id(worker)
            self.groups.appendleft((trials, rule))
            return
        results = answer if lost is None else [{"status": lost.status, "message": str(lost)}]
        if results[0].pop("sticky", False):
            worker.stop()
        self.on_result(worker, trials, results)

"""One W&B run per trial: a finalist's re-timing (runners/model/finalists.py) goes into its trial's run,
whose summary is then the re-timed row's (the row the sweep's table, the export and the end table read)
with the screening row's under `screen/`, rather than into a run of its own.

A run goes to the logging processes once no re-timing can come for it: a screened row that may yet be
re-timed is held. Those are the ok baselines (re-timed beside every group of finalists) and the configs
among the top_k screened p50s of their (kernel, shape, dtype) so far: the finalists are the top_k by
screened p50 (within a margin), so a config pushed out of the top_k is never one, and its run goes at once.
A group's held rows go with its re-timing, the others once the next group's re-timing comes (a group's
re-timed rows come together), the last group's at the job's end.
"""
from __future__ import annotations

import bisect
import itertools
import math
from typing import Callable

from triton_sweep.model.trial import TRITON_PROVIDER


class TrialRuns:
    """The trial runs of one job, each sent once through `send(job_type, name, config, summary)`.
    `top_k`: the job's finalists.top_k (below 2: no finalists, nothing held)."""

    def __init__(self, top_k: int, send: Callable[[str, str, dict, dict], None]):
        self.top_k = top_k if top_k >= 2 else 0
        self.send = send
        self.held: dict[str, tuple] = {}  # trial key -> (its group, the arguments of its send), in order
        # group (kernel, shape, dtype) -> [(p50, arrival, trial key)] of our configs held, fastest first
        self.fastest: dict[tuple, list] = {}
        self.arrivals = itertools.count()  # of equal p50s the earlier row ranks first, as in the finalists
        self.retimed = None  # the group whose re-timed rows came last

    def add(self, trial, label: str, config: dict, summary: dict, phase: str) -> None:
        """A row's run: sent now, held for its re-timing, or (a re-timing) sent with its screening."""
        group = (trial.kernel, trial.shape, trial.dtype)
        if phase == "final":
            # A group's re-timed rows come together, after every screening: the next group's first
            # says that the rows still held in the one before will not be re-timed.
            if self.retimed not in (None, group):
                self._release(lambda of: of == self.retimed)
            self.retimed = group
            screened = self._take(trial.key)
            if screened is not None:
                summary = {**summary, **{f"screen/{name}": value for name, value in screened[3].items()
                                         if value is not None}}
            self.send(trial.kernel, label, config, summary)  # a trial reused from the store: its only row
            return
        p50 = summary.get("p50_us")
        if not self.top_k or summary.get("status") != "ok" or p50 is None or not math.isfinite(p50):
            self.send(trial.kernel, label, config, summary)
            return
        self._take(trial.key)  # screened again: its newest row is its record
        self.held[trial.key] = (group, (trial.kernel, label, config, summary))
        if trial.provider == TRITON_PROVIDER:
            ranked = self.fastest.setdefault(group, [])
            bisect.insort(ranked, (p50, next(self.arrivals), trial.key))
            for _, _, key in ranked[self.top_k:]:  # out of the top_k: never a finalist
                self.send(*self._take(key))

    def _take(self, key: str):
        """The arguments of a held row's send, no longer held (None where it is not)."""
        if key not in self.held:
            return None
        group, arguments = self.held.pop(key)
        ranked = self.fastest.get(group, [])
        ranked[:] = [entry for entry in ranked if entry[2] != key]
        return arguments

    def _release(self, chosen: Callable[[tuple], bool]) -> None:
        """Send the held rows of the groups `chosen` picks, as they are."""
        for key in [key for key, (group, _) in self.held.items() if chosen(group)]:
            self.send(*self._take(key))

    def close(self) -> None:
        """The job's end: the held runs that no re-timing came for, sent as they are."""
        self._release(lambda group: True)

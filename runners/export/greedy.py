"""The covering set's greedy (cover.Measured._greedy's rule) on arrays of shapes x configs, and its
leave-one-out: the list of every set of shapes less one point, without running the greedy anew for each.
Left out, a point changes a step's ranks only by its own shapes still uncovered there; so the greedy of the
other shapes replays the whole set's steps, each rank less the point's share (a few rows), until the point
is covered (then every later step is the same) or a pick differs (then the greedy goes on from there). A
store of 2,000 shapes ran the greedy 18,000 times a dtype before (issue 76)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np


DRIFT = 1e-9  # relative: sums of floats within it of the best are summed anew (Arrays.pick)


@dataclass
class Arrays:
    """One (GPU, dtype)'s figures, shape x config: `near`, within the tolerance of the best there; `wins`,
    the shape's winner (and near); `logs`, log(best / p50) where near, else 0; `weighted`, calls x best /
    p50 where near (zeros without calls); `order`, each config's place by (resources, first measured)."""

    near: np.ndarray
    figures: np.ndarray  # shape x (weighted, near, wins, logs) x config
    order: np.ndarray
    first_ids: np.ndarray
    weighted: bool = True  # whether calls weigh the shapes (else every weighted figure is 0: all tie)

    def stats(self, rows: np.ndarray) -> np.ndarray:
        """Each config's (weighted, count, wins, log sum) over the shapes of the boolean `rows`."""
        return self.figures[np.flatnonzero(rows)].sum(0)

    def pick(self, stats: np.ndarray, uncovered: np.ndarray) -> int:
        """The config the rule adds given its stats over the `uncovered` shapes (boolean): the most weighted
        speed, the most shapes, the most wins, the highest geometric mean speed, the fewest resources, the
        first. The sums of floats kept from step to step (weighted, logs) drift by a few ulps from the same
        sums taken anew, which parts an exact tie (two configs each the fastest at the shapes they gain:
        logs of 0): the configs they cannot tell apart are summed anew over `uncovered`."""
        weighted, count, wins, logs = stats
        candidates = np.flatnonzero(count > 0)
        for figure, exact in ((weighted, 0), (count, None), (wins, None), (logs / np.maximum(count, 1), 3)):
            if exact == 0 and not self.weighted:
                continue
            values = figure[candidates]
            if exact is not None:
                close = values >= values.max() - DRIFT * max(1.0, abs(values.max()))
                candidates, values = candidates[close], values[close]
                if len(candidates) > 1:
                    values = self.figures[np.flatnonzero(uncovered)[:, None], exact, candidates].sum(0)
                    values = values if exact == 0 else np.exp(values / count[candidates])
            candidates = candidates[values == values.max()]
            if len(candidates) == 1:
                return int(candidates[0])
        return int(candidates[np.argmin(self.order[candidates])])

    def greedy(self, shapes: np.ndarray) -> list[int]:
        """The covering set of `shapes` (boolean)."""
        return self.trace(shapes).picks

    def trace(self, shapes: np.ndarray, stats: Optional[np.ndarray] = None) -> "Trace":
        """The greedy of `shapes` (boolean; `stats`, theirs where known), step by step: what was uncovered
        before each pick, and the stats it was picked by (the last step's less the shapes it covered)."""
        picks, before, counts, steps, uncovered = [], [], [], [], shapes.copy()
        stats = self.stats(uncovered) if stats is None else stats
        while uncovered.any():
            before.append(uncovered.copy())
            counts.append(int(uncovered.sum()))
            steps.append(stats)
            picks.append(self.pick(stats, uncovered))
            covered = uncovered & self.near[:, picks[-1]]
            uncovered &= ~covered
            stats = stats - self.stats(covered)
        before = np.array(before) if before else np.zeros((0, len(shapes)), dtype=bool)
        return Trace(picks, before, np.array(counts, dtype=int), steps)

    def listed(self, counts: np.ndarray, chosen: list[int]) -> list[int]:
        """The covering set `chosen`, then the alternates: every other config near at one shape at least
        (`counts`: at how many of the shapes each is near), near at the most first (then the first
        measured)."""
        counts = counts.copy()
        counts[chosen] = 0
        others = np.flatnonzero(counts)
        return chosen + others[np.lexsort((self.first_ids[others], -counts[others]))].tolist()


@dataclass
class Trace:
    """The greedy's steps: each pick, the shapes uncovered before it (boolean) and how many, the stats it
    was picked by."""

    picks: list
    before: np.ndarray  # step x shape
    counts: np.ndarray
    stats: list

    def without(self, arrays: Arrays, gone: np.ndarray) -> list[int]:
        """The covering set of the traced shapes less the `gone` ones (row numbers). The ranks depend on
        the uncovered shapes alone: off the trace (a pick differs), the greedy steps on its own until its
        uncovered shapes are those of a later step of the trace less the gone ones, and follows it again."""
        lefts = self.counts - self.before[:, gone].sum(1)  # each step's uncovered less the gone ones
        picks, step = [], 0
        while step < len(self.picks):
            left = gone[self.before[step][gone]]
            if not len(left):
                return picks + self.picks[step:]  # the point is covered: every later step is the same
            if not lefts[step]:
                return picks
            rest = self.before[step].copy()
            rest[gone] = False
            stats = self.stats[step] - arrays.figures[left].sum(0)
            mine = arrays.pick(stats, rest)
            if mine == self.picks[step]:
                picks.append(mine)
                step += 1
                continue
            step = None
            while step is None:
                picks.append(mine)
                covered = rest & arrays.near[:, mine]
                rest &= ~covered
                if not rest.any():
                    return picks
                stats = stats - arrays.stats(covered)
                step = self._rejoined(rest, gone, lefts)
                mine = arrays.pick(stats, rest) if step is None else mine
        return picks

    def _rejoined(self, rest: np.ndarray, gone: np.ndarray, lefts: np.ndarray) -> Optional[int]:
        """The step of the trace whose uncovered shapes less the `gone` ones are `rest`, else None."""
        for step in np.flatnonzero(lefts == rest.sum()):
            again = self.before[step].copy()
            again[gone] = False
            if np.array_equal(again, rest):
                return int(step)
        return None


def shape_arrays(timed: np.ndarray, winners: np.ndarray, tolerance: float, calls: Optional[np.ndarray],
                 order: np.ndarray, first_ids: np.ndarray) -> Arrays:
    """Arrays from `timed` (shape x config p50s that compete, inf where none), each shape's winner (a
    config index) and its calls (or None)."""
    best = timed.min(axis=1)
    near = timed <= ((1 + tolerance) * best)[:, None]
    wins = np.zeros_like(near)
    wins[np.arange(len(winners)), winners] = True
    ratio = np.where(near, best[:, None] / np.where(near, timed, 1.0), 1.0)
    weighted = np.zeros(timed.shape) if calls is None else np.where(near, calls[:, None] * ratio, 0.0)
    figures = np.stack([weighted, near, wins & near, np.where(near, np.log(ratio), 0.0)], axis=1)
    return Arrays(near, figures, order, first_ids, bool(weighted.any()))

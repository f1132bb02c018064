"""What the exported module picks at a left-out shape (the leave-one-out estimate's two paths), played by
the module's own code (runtime.py: _kept, _choice) on the few shapes that code reads there: the cell of
the grid around the call, found on arrays of the other shapes' sizes, and the listed configs verified in
it. Where that code would look past the cell (no listed config there passes the kernel's constraints),
what it finds there, the nearest shape with a config that passes, is found on arrays of every other
shape: played with the whole list at every shape, that grew faster than the square of the shapes
(issue 76)."""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from triton_sweep.export.runtime import (ALIGNMENT, _choice, _distance_order, _identity, _kept,
                                         _next_power_of_two)


def cell(values: np.ndarray, rest: np.ndarray, sizes: dict, dims: tuple, apart: bool) -> np.ndarray:
    """The shapes around a call (runtime._around of runtime._aligned_like), as row numbers of `values`
    (every shape's sizes) among the boolean `rest`; `sizes`: dim -> the call's size."""
    matching = rest
    if apart:
        for dim, size in sizes.items():
            same = matching & ((values[:, dims.index(dim)] % ALIGNMENT == 0) == (size % ALIGNMENT == 0))
            matching = same if same.any() else matching
    around = matching.copy()
    for dim, size in sizes.items():
        column = values[:, dims.index(dim)]
        measured = column[matching]
        below, above = measured[measured < size], measured[measured > size]
        if (measured == size).any():
            around &= column == size
        else:
            around &= ((column == below.max()) if len(below) else False) | (
                (column == above.min()) if len(above) else False)
    if around.any():
        return np.flatnonzero(around)
    order = _distance_order(sizes, dims)
    return np.array([min(np.flatnonzero(matching), key=lambda i: order(tuple(values[i].tolist())))])


class Picks:
    """The two paths' picks at the left-out shapes of one point: `listed`, the list of the other shapes
    (config numbers of measured.keys); `rest`, those shapes (a boolean over measured.index); `configs`,
    each canonical config as a triton.Config; `passes(config, shape)`, the caller's check."""

    def __init__(self, measured, listed: list[int], rest: np.ndarray, configs: dict, passes: Callable):
        self.measured, self.listed, self.rest, self.passes = measured, listed, rest, passes
        self.triton, self.configs = configs, [configs[measured.keys[j]] for j in listed]
        self.shapes, self.rows = measured.shapes_all, np.flatnonzero(rest)
        self.logs = np.log(measured.values[self.rows].astype(float))
        self.verified = measured.verified

    def _cover(self, rows: np.ndarray) -> list:
        """The list as the module holds it, each config with its p50s at the shapes `rows` where it was
        ok; a config ok at none of them left out."""
        shapes = [self.shapes[i] for i in rows]
        p50s = self.measured.ok_array[np.ix_(rows, self.listed)].T.tolist()
        return [(config, {shape: p50 for shape, p50 in zip(shapes, column) if p50 == p50})  # nan: not ok
                for config, column in zip(self.configs, p50s) if any(p50 == p50 for p50 in column)]

    def _passes(self, shape: tuple) -> Callable:
        """The check at `shape`, each config's answer asked once (both paths ask)."""
        if getattr(self, "_at", None) != shape:
            self._at, self._answers = shape, {}

        def passes(config) -> bool:
            if id(config) not in self._answers:
                self._answers[id(config)] = self.passes(config, shape)
            return self._answers[id(config)]

        return passes

    def _passing(self, shape: tuple, columns) -> np.ndarray:
        """Whether each config of `columns` (numbers of measured.keys) passes the check at `shape`."""
        passes, keys = self._passes(shape), self.measured.keys
        return np.array([passes(self.triton[keys[j]]) for j in columns], dtype=bool)

    def _nearest(self, sizes: dict, dims: tuple, marked: Callable) -> Optional[int]:
        """The row of the other shapes nearest the call (runtime._distance_order over the dims of `sizes`)
        among those `marked` (rows -> boolean) marks, else None: ranked on arrays nearest first, and the
        exact order played on those within rounding of the nearest marked one."""
        index = [dims.index(dim) for dim in sizes]
        calls = np.log(np.array(list(sizes.values()), dtype=float))
        distance = np.sqrt(((self.logs[:, index] - calls) ** 2).sum(1))
        order = np.argsort(distance, kind="stable")
        ranked, start, size = distance[order], 0, 16
        while start < len(order):
            found = order[start:start + size][marked(self.rows[order[start:start + size]])]
            if len(found):
                break
            start, size = start + size, 4 * size
        else:
            return None
        within = order[start:np.searchsorted(ranked, distance[found[0]] + 1e-7, side="right")]
        rows = self.rows[within][marked(self.rows[within])]
        key = _distance_order(sizes, dims)
        return int(min(rows, key=lambda i: key(self.shapes[i])))

    def kept(self, shape: tuple, key_dims: list[str], dims: tuple, apart: bool) -> list:
        """What the prune keeps at `shape` (runtime._kept, given the key's sizes)."""
        sizes = {dim: shape[dims.index(dim)] for dim in key_dims}
        cover = self._cover(cell(self.measured.values, self.rest, sizes, dims, apart))
        passes = self._passes(shape)
        if any(passes(config) for config, _ in cover):
            return _kept(cover, sizes, passes, dims, apart=apart)
        # The prune looks past the cell: the list's fastest that passes at the nearest shape where one does.
        listed = np.array(self.listed, dtype=int)
        passing = listed[self._passing(shape, listed)]
        row = self._nearest(sizes, dims, lambda rows: self.verified[np.ix_(rows, passing)].any(1))
        if row is None:
            return []
        fastest = self.triton[self.measured.keys[passing[np.nanargmin(self.measured.ok_array[row, passing])]]]
        return [config for j, config in zip(listed, self.configs)  # each config of its identity once
                if _identity(config) == _identity(fastest) and self.verified[self.rows, j].any()]

    def chosen(self, shape: tuple, dims: tuple, apart: bool):
        """What config_for returns at `shape` (runtime._choice, given the whole shape), else None."""
        sizes = dict(zip(dims, shape))
        rows = cell(self.measured.values, self.rest, sizes, dims, apart)
        cover, passes = self._cover(rows), self._passes(shape)
        winners, keys = self.measured.winner_index, self.measured.keys
        best = {self.shapes[i]: self.triton[keys[winners[i]]] for i in rows}
        choice = _choice(cover, best, sizes, passes, dims, apart=apart)
        if any(passes(config) and len(at) == len(rows) for config, at in cover) or _fitting(
                cover, best, sizes, passes, dims):
            return choice  # chosen among the configs verified around
        # _choice looks past the cell: at the nearest shape whose winner or a listed config passes.
        listed = np.array(self.listed, dtype=int)
        passing, winning = listed[self._passing(shape, listed)], np.zeros(len(keys), dtype=bool)
        winning[np.unique(winners[self.rows])] = self._passing(shape, np.unique(winners[self.rows]))
        row = self._nearest(sizes, dims, lambda rows: winning[winners[rows]]
                            | self.verified[np.ix_(rows, passing)].any(1))
        if row is None or row in rows:
            return choice  # the cell's own nearest: the same
        if winning[winners[row]]:
            return self.triton[keys[winners[row]]]
        return self.triton[keys[passing[np.nanargmin(self.measured.ok_array[row, passing])]]]


def _fitting(cover: list, best: dict, sizes: dict, passes: Callable, dims: tuple) -> bool:
    """Whether runtime._choice finds, among the configs verified at the shapes around (`best`'s), one of
    the form their winners share (its `fitting`): then it never looks past them."""
    around, winners = list(best), list(best.values())
    forms = [(name, dim) for name in winners[0].kwargs for dim in sizes
             if all(config.kwargs.get(name) == _next_power_of_two(shape[dims.index(dim)])
                    for shape, config in zip(around, winners))]
    return bool(forms) and any(
        passes(config) and any(s in at for s in around)
        and all(config.kwargs.get(name) == _next_power_of_two(sizes[dim]) for name, dim in forms)
        for config, at in cover)

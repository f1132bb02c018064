"""What the exported module picks at a left-out shape (the leave-one-out estimate's two paths), played by
the module's own code (runtime.py: _kept, _choice) on the few shapes that code reads there: the cell of
the grid around the call, found on arrays of the other shapes' sizes, and the listed configs verified in
it. The list whole, with every other shape, is given only where that code would look past the cell (no
listed config there passes the kernel's constraints); building it at every left-out shape grew with the
square of the shapes (issue 76)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from triton_sweep.export.runtime import ALIGNMENT, _choice, _distance_order, _kept


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
        self.shapes = measured.shapes_all

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

    def kept(self, shape: tuple, key_dims: list[str], dims: tuple, apart: bool) -> list:
        """What the prune keeps at `shape` (runtime._kept, given the key's sizes)."""
        sizes = {dim: shape[dims.index(dim)] for dim in key_dims}
        cover = self._cover(cell(self.measured.values, self.rest, sizes, dims, apart))
        passes = self._passes(shape)
        if not any(passes(config) for config, _ in cover):  # the prune looks past the cell
            cover = self._cover(np.flatnonzero(self.rest))
        return _kept(cover, sizes, passes, dims, apart=apart)

    def chosen(self, shape: tuple, dims: tuple, apart: bool):
        """What config_for returns at `shape` (runtime._choice, given the whole shape), else None."""
        sizes = dict(zip(dims, shape))
        rows = cell(self.measured.values, self.rest, sizes, dims, apart)
        cover = self._cover(rows)
        passes = self._passes(shape)
        if not any(passes(config) and len(at) == len(rows) for config, at in cover):  # _choice looks past
            rows = np.flatnonzero(self.rest)
            cover = self._cover(rows)
        winners, keys = self.measured.winner_index, self.measured.keys
        best = {self.shapes[i]: self.triton[keys[winners[i]]] for i in rows}
        return _choice(cover, best, sizes, passes, dims, apart=apart)

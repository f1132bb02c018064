"""The leave-one-out's shortcuts against the plain computation they stand for: the greedy of a set less one
point replayed from the whole set's trace (greedy.Trace.without) against the greedy run on it anew, and the
cell around a call found on arrays (heldout.cell) against the module's own code (runtime._around of
runtime._aligned_like), on seeded random figures."""
import itertools
import math

import numpy as np
import pytest

from triton_sweep.export.greedy import shape_arrays
from triton_sweep.export.heldout import cell
from triton_sweep.export.runtime import _aligned_like, _around


def random_arrays(rng, shapes: int, configs: int, calls: bool):
    timed = np.exp(rng.normal(0.0, 0.05, (shapes, configs))) * rng.uniform(1, 100, (shapes, 1))
    timed[rng.random(timed.shape) < 0.3] = np.inf  # not ok there
    timed[np.arange(shapes), rng.integers(0, configs, shapes)] = timed.min(axis=1) * 0.999  # one ok a shape
    winners = timed.argmin(axis=1)
    weights = rng.integers(0, 5, shapes).astype(float) if calls else None
    return shape_arrays(timed, winners, 0.03, weights, rng.permutation(configs), np.arange(configs))


def plain_greedy(arrays, shapes) -> list[int]:
    """The rule as cover.Measured.cover states it, on sets, every sum taken anew (as before issue 76)."""
    uncovered, chosen = set(np.flatnonzero(shapes).tolist()), []
    while uncovered:
        ranks = []
        for config in range(arrays.near.shape[1]):
            gain = [s for s in uncovered if arrays.near[s, config]]
            if gain:
                weighted, _, wins, logs = (sum(arrays.figures[s, i, config] for s in gain) for i in range(4))
                ranks.append((-weighted, -len(gain), -wins, -math.exp(logs / len(gain)), arrays.order[config],
                              config))
        chosen.append(min(ranks)[-1])
        uncovered -= {s for s in uncovered if arrays.near[s, chosen[-1]]}
    return chosen


@pytest.mark.parametrize("seed,calls", [(0, False), (1, False), (2, True), (3, False)])
def test_the_replayed_greedy_is_the_greedy_run_anew(seed, calls):
    """Ties included: the winner at each shape is exactly its fastest, so that configs tie at a speed of 1."""
    rng = np.random.default_rng(seed)
    arrays = random_arrays(rng, 120, 30, calls)
    every = np.ones(120, dtype=bool)
    trace = arrays.trace(every)
    assert trace.picks == plain_greedy(arrays, every)
    points = np.array_split(rng.permutation(120), 50)  # points of 2 or 3 shapes
    for gone in points:
        rest = every.copy()
        rest[gone] = False
        assert trace.without(arrays, np.sort(gone)) == arrays.greedy(rest) == plain_greedy(arrays, rest)


def test_the_cell_is_the_modules_shapes_around():
    rng = np.random.default_rng(4)
    dims = ("rows", "cols")
    shapes = sorted({(int(r), int(c)) for r, c in zip(rng.choice([512, 1000, 1024, 4096], 60),
                                                      rng.integers(200, 9000, 60))})
    values = np.array(shapes)
    rest = rng.random(len(shapes)) < 0.8
    kept = [shape for shape, keep in zip(shapes, rest) if keep]
    calls = [{"cols": int(c)} for c in rng.integers(100, 10000, 40)] + [
        {"rows": int(r), "cols": int(c)}
        for r, c in zip(rng.integers(300, 6000, 40), rng.integers(100, 10000, 40))]
    for sizes, apart in itertools.product(calls, (False, True)):
        expected = _around(_aligned_like(kept, sizes, dims, apart), sizes, dims)
        assert sorted(shapes[i] for i in cell(values, rest, sizes, dims, apart)) == sorted(expected)

"""The leave-one-out's shortcuts against the plain computation they stand for: the greedy of a set less one
point replayed from the whole set's trace (greedy.Trace.without) against the greedy run on it anew, the
cell around a call found on arrays (heldout.cell) against the module's own code (runtime._around of
runtime._aligned_like), and the picks at each left-out shape (heldout.Picks) against the module's code
given the whole list and every other shape, on seeded random figures."""
import itertools
import math
import zlib

import numpy as np
import pytest

from triton_sweep.export.cover import Measured
from triton_sweep.export.generalization import Lookup, as_triton_config
from triton_sweep.export.greedy import shape_arrays
from triton_sweep.export.heldout import Picks, cell
from triton_sweep.export.runtime import _aligned_like, _around, _choice, _kept
from triton_sweep.store.result_store import ResultStore
from tests.fixtures.synthetic_store import softmax_sweep


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


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """48 shapes (two a row length, lengths of both kinds), 48 configs, p50s jittered by 4%."""
    cols = sorted({256 + 384 * i for i in range(12)} | {252 + 384 * i for i in range(12)})
    space = {"BLOCK_SIZE": (256, 512, 1024, 2048, 4096, 8192), "num_warps": (1, 2, 4, 8),
             "num_stages": (1, 2)}
    store = ResultStore(tmp_path_factory.mktemp("picks") / "results.sqlite")
    softmax_sweep(store, "s", seed=1, shapes=[(rows, c) for c in cols for rows in (2048, 4096)], space=space)
    frame = store.load()
    store.close()
    frame = frame[(frame["provider"] == "triton") & (frame["status"] == "ok")]
    jitter = np.exp(np.random.default_rng(3).normal(0, 0.04, len(frame)))
    return Measured(frame.assign(p50_us=frame["p50_us"] * jitter))


@pytest.mark.parametrize("refused", [7, 9])
def test_the_picks_are_the_modules_given_every_shape(measured, refused):
    """A check that refuses most configs at a shape (`refused` in 10, by a hash), so that the module's code
    often looks past the cell, and finds a config at a shape farther off, or none."""
    def rule(shape, dtype, config):
        drawn = zlib.crc32(repr((sorted(config.items()), shape)).encode()) % 10
        return "refused" if drawn < refused else None

    dims, lookup = ("rows", "cols"), Lookup(rule, "float16")
    configs = {key: as_triton_config(entry["config"]) for key, entry in measured.configs.items()}
    key_of = {id(config): key for key, config in configs.items()}

    def passes(config, shape):
        return lookup.passes(measured.configs[key_of[id(config)]]["config"], shape)

    points: dict[int, list] = {}
    for shape in measured.shapes:
        points.setdefault(shape[1], []).append(shape)
    for left_out, apart in itertools.product(points.values(), (False, True)):
        rest = measured.mask() & ~measured.mask(left_out)
        picks = Picks(measured, measured.listed_without(left_out, 0.03), rest, configs, passes)
        others = np.flatnonzero(rest)
        every = picks._cover(others)  # the whole list, each config at every other shape
        best = {picks.shapes[i]: configs[measured.keys[measured.winner_index[i]]] for i in others}
        for shape in left_out:
            check = picks._passes(shape)
            kept = _kept(every, {"cols": shape[1]}, check, dims, apart=apart)
            assert picks.kept(shape, ["cols"], dims, apart) == kept
            chosen = _choice(every, best, dict(zip(dims, shape)), check, dims, apart=apart)
            assert picks.chosen(shape, dims, apart) is chosen

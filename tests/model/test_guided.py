"""The guided search on synthetic spaces of record whose answer is known (tests/fixtures/search_space.py):
what it learns at one shape is tried first at the next, it polishes its best's neighbours, it stops
before the space is measured and says why, and where the space has no structure its stop misses the
best (the promise's end). The simulator's own accounting is checked on a space small enough to count."""
import json

import numpy as np
import pandas as pd
import pytest

from triton_sweep.model.search.guided import Guided
from triton_sweep.model.search.simulate import RecordedSpace, simulate
from tests.fixtures.search_space import SPACE, noise, recorded


def _run(space, **settings):
    budget = settings.pop("budget_trials", None)
    strategy = Guided(space.trials, budget_trials=budget, seed=0, batch=8, settings=settings)
    return strategy, simulate(space, strategy)


def test_the_next_shape_starts_from_the_best_found_at_the_one_before():
    space = recorded(shapes=((4096, 4096, 4096), (4096, 2048, 4096)))  # the same best config at both
    strategy, table = _run(space)
    lead, follower = table.iloc[0], table.iloc[1]
    assert lead["to_99"] > 8  # the first shape starts blind
    assert follower["to_99"] == 1  # the second measures the first's best first, and it is its best too
    assert follower["measured"] < lead["measured"]


def test_it_polishes_the_neighbours_of_its_best_and_stops_before_the_whole_space():
    space = recorded()
    strategy, table = _run(space)
    best = space.best()
    for _, row in table.iterrows():
        assert row["to_99"] < row["measured"] < row["configs"] / 4, row.to_dict()
        assert row["stop"].startswith("no unmeasured config predicted faster than the best"), row["stop"]
    for (shape, dtype), rows in strategy.measured.items():
        found = min(rows, key=lambda i: rows[i])
        assert rows[found] == pytest.approx(best["x".join(map(str, shape)), dtype])
        config = strategy.valid[shape, dtype][found].config
        for name, steps in SPACE.items():
            at = steps.index(config[name])
            for value in steps[max(at - 1, 0): at + 2]:
                neighbour = strategy.index[shape, dtype].get(tuple(sorted({**config, name: value}.items())))
                assert neighbour is None or neighbour in rows  # measured, or pruned


def test_where_the_space_has_no_structure_the_stop_can_miss_the_best():
    """Each config's p50 its own draw: the model learns nothing, stops early and misses; the simulator
    then counts every config of the shape, as the target's rule says."""
    table = _run(recorded(p50=noise))[1]
    missed = table[table["to_97"] == table["configs"]]
    assert len(missed) >= 1
    assert (missed["measured"] < missed["configs"]).all()


def test_small_spaces_are_measured_whole_and_a_budget_holds():
    space = recorded()
    table = _run(space, exhaustive_below=500)[1]
    assert (table["measured"] == table["configs"]).all()
    assert table["stop"].str.contains("exhaustive_below").all()
    table = _run(space, budget_trials=20)[1]
    assert (table["measured"] <= 20).all()


def test_the_simulated_wall_time_compiles_a_config_once_per_dtype(tmp_path):
    """Two configs at two shapes, one compile process: compiles end at 1 and 2 s; the GPU times the
    first trial at 1-1.5 s, waits for the second compile, then times three (the second shape's need no
    compile): 2 + 3 x 0.5 s."""
    rows = [{"shape": shape, "dtype": "float16", "config": json.dumps({"BLOCK": block}), "status": "ok",
             "p50_us": float(block), "compile_s": 1.0, "gpu_s": 0.5}
            for shape in ("64", "128") for block in (16, 32)]
    path = tmp_path / "space.csv.gz"
    RecordedSpace("vector_add", pd.DataFrame(rows)).write(path, {"gpu_name": "test"})
    space = RecordedSpace.read(path)
    assert space.kernel == "vector_add" and json.loads(space.about) == {"gpu_name": "test"}
    from triton_sweep.model.search.grid import Grid

    table = simulate(space, Grid(space.trials), compilers=1)
    assert table.attrs["wall_s"] == pytest.approx(3.5)
    assert table["to_97"].tolist() == [1, 1] and table["measured"].tolist() == [2, 2]


def test_asked_while_configs_are_in_flight_it_keeps_the_pool_busy_and_finds_the_same_bests():
    """Pipelined (asked as the compile pool runs dry, as a job asks it) against asked only once all it
    handed out is told, with compile times of a long tail: every shape within 97% of its best, in less
    simulated wall time over seeds; with a whole batch in flight, a shape gets nothing new and never
    stops."""
    space = recorded(dtypes=("float16", "bfloat16"))
    walls = {True: [], False: []}
    for seed in range(4):
        space.frame["compile_s"] = np.random.default_rng(seed).lognormal(0.5, 0.8, len(space.frame))
        for pipelined in walls:
            strategy = Guided(space.trials, seed=seed, batch=8)
            strategy.pipelined = pipelined
            table = simulate(space, strategy)
            assert (table["to_97"] < table["measured"]).all()
            walls[pipelined].append(table.attrs["wall_s"])
    assert np.median(walls[True]) < 0.9 * np.median(walls[False]), walls

    strategy = Guided(space.trials, seed=0, batch=8)
    first = [t for t in strategy.ask() if not t.pruned_reason]
    assert len(first) == 16  # the lead's seeded sample: `initial`
    for trial in first[:8]:  # 8 in flight: a whole batch
        strategy.tell(trial, {"status": "ok", "p50_us": 1.0})
    assert strategy.ask() == [] and not strategy.stop_reasons
    strategy.tell(first[8], {"status": "ok", "p50_us": 1.0})  # 7 in flight: one more
    assert len(strategy.ask()) == 1


def test_baselines_are_handed_out_once_and_teach_the_model_nothing():
    """A baseline (provider torch, no config) is handed out in the first round and told like any row."""
    from triton_sweep.model.trial import Trial

    space = recorded(shapes=((4096, 4096, 4096),))
    baseline = Trial("matmul", "torch", (4096, 4096, 4096), "float16", {})
    strategy = Guided(space.trials + [baseline], seed=0, batch=8)
    rounds, handed = 0, 0
    while batch := strategy.ask():
        rounds += 1
        handed += sum(t.provider == "triton" and not t.pruned_reason for t in batch)
        assert (baseline in batch) == (rounds == 1)
        for trial in batch:
            strategy.tell(trial, {"status": "ok", "p50_us": 1.0 if trial is baseline else
                                  space.frame["p50_us"].iloc[space.row_of[trial.key]]})
    assert rounds > 2 and handed == sum(len(rows) for rows in strategy.measured.values())

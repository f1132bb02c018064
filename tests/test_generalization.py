"""The export between and beyond its measured shapes: the leave-one-out estimate printed at export and
stored in the JSON (runners/results/generalization.py), and the generated module's ExportRangeWarning.

The store is written by the test with a latency table whose leave-one-out picks are worked out by hand
below; no kernel runs.
"""
import json
import math
import warnings

import pandas as pd
import pytest

from runners.results.export import Measured, export_kernel
from runners.results.generalization import _advice, leave_one_out, summary_line
from runners.results.store import ResultStore

GPU_ENV = {"backend": "cuda", "gpu_name": "NVIDIA H200", "driver_version": "580.159.04",
           "cuda_version": "13.0", "torch_version": "2.11.0", "triton_version": "3.6.0",
           "kernel_hash": "feedbeef0001"}
ROWS = (8, 16)  # not a key dim: a left-out point takes both rows with it
COLS = (100, 200, 400, 800)  # the key dim (softmax's n_cols -> cols)
CONFIGS = [(block, warps) for block in (128, 256, 512, 1024) for warps in (1, 4)]


def p50(rows: int, cols: int, block: int, warps: int) -> float:
    """The made-up latency: a block is ok only where it holds the row; each doubling past the row's next
    power of two costs 50%; the wrong warps 20% (1 warp is right up to 200 columns, 4 beyond)."""
    fit = 1 << (cols - 1).bit_length()
    right_warps = 1 if cols <= 200 else 4
    return rows / 8 * cols / 100 * (1 + 0.5 * math.log2(block / fit)) * (1.0 if warps == right_warps else 1.2)


@pytest.fixture
def frame(tmp_path):
    store = ResultStore(tmp_path / "results.sqlite")
    index = 0
    for rows in ROWS:
        for cols in COLS:
            for block, warps in CONFIGS:
                if block < cols:
                    continue  # never run: the block cannot hold the row
                index += 1
                store.append({**GPU_ENV, "trial_key": f"k{index}", "sweep_id": "s1", "kernel": "softmax",
                              "provider": "triton", "shape": (rows, cols), "dtype": "float16",
                              "config": {"BLOCK_SIZE": block, "num_warps": warps, "num_stages": 1},
                              "status": "ok", "phase": "screen", "p50_us": p50(rows, cols, block, warps),
                              "gbps": 1.0, "tflops": 0.1, "seed": 0, "timestamp": "2026-11-24T00:00:00"})
    loaded = store.load()
    store.close()
    return loaded


def _by_cols(result, path):
    """cols -> the pick's (BLOCK_SIZE, num_warps) and its % of best, the same at both row counts."""
    picks = {}
    for entry in result["shapes"]:
        figure = entry[path]
        config = figure["config"]
        pick = (config["BLOCK_SIZE"], config["num_warps"]) if config else None
        picks.setdefault(entry["shape"][1], set()).add((pick, figure["pct_of_best"]))
    assert all(len(both) == 1 for both in picks.values())
    return {cols: both.pop() for cols, both in picks.items()}


def test_leave_one_out_picks_as_the_module_would(frame):
    measured = Measured(frame[frame["kernel"] == "softmax"])
    result = leave_one_out(measured, 0.03, ("rows", "cols"), ["cols"])
    assert len(result["shapes"]) == len(ROWS) * len(COLS)
    # Around a left-out row length: the measured lengths next below and above it, at both row counts.
    # 100 out: below the rest's range, only 200 is around; the list's fastest there, 256/1, holds 100
    # columns: 1.0 / 1.5 of best.
    # 200 out: 100 and 400 are around; at 100 the list's fastest that holds 200 columns (the `check` of
    # the measurement: ok there) is 512/4, at 400 too: 2.0 / 3.6.
    # 400 out: at 200 and 800, the only one holding 400 columns is 1024/4: 4.0 / 6.0.
    # 800 out: the list of the rest (128/1, 256/1, 512/4) holds no block of 800 columns: no pick, 0%.
    # config_for: at each point around, the config fastest over both row counts; no shared form (a block
    # of 512 at 100 columns is not its next power of two), so the nearest (the larger at a tie).
    expected = {100: ((256, 1), 66.67), 200: ((512, 4), 55.56), 400: ((1024, 4), 66.67), 800: (None, 0.0)}
    assert _by_cols(result, "autotune") == expected
    assert _by_cols(result, "config_for") == expected
    summary = result["summary"]["autotune"]
    assert (summary["shapes"], summary["good"], summary["no_config"]) == (8, 0, 2)
    assert (summary["worst_pct"], summary["worst_shape"][1]) == (55.56, 200)  # of those with a config
    assert summary["geomean_pct"] == round((66.67 * 55.56 * 66.67) ** (1 / 3), 2)
    assert result["advice"].startswith("no measured shape serves another")  # all 8 below the bar
    line = summary_line(result, ("rows", "cols"))
    assert "autotune with the prune >= 97% of best at 0/8 (geomean 62.7%, worst 56% at cols=200), " \
           "none it offered was ok at 2;" in line


def test_the_advice_names_the_measured_sizes_around_the_worst_shape(frame):
    """At a 50% tolerance, without the 800-column shapes: 100 and 200 out are good (66.7% and 55.6%), and
    400 out, past the rest's largest block, has no pick: the grid's edge is what to widen."""
    measured = Measured(frame[~frame["shape"].isin([json.dumps([r, 800]) for r in ROWS])])
    result = leave_one_out(measured, 0.5, ("rows", "cols"), ["cols"])
    assert result["good_pct"] == 50.0 and result["summary"]["autotune"]["good"] == 4
    assert _by_cols(result, "autotune")[400] == (None, 0.0)
    assert result["advice"] == "add shapes above cols=400"
    shapes = [(8, 100), (8, 200), (8, 400)]

    def advice(at_200, at_400):
        by_hand = {"key_dims": ["cols"], "good_pct": 97.0, "shapes": [
            {"shape": [8, 200], "autotune": {"pct_of_best": at_200}, "config_for": {"pct_of_best": 99.0}},
            {"shape": [8, 400], "autotune": {"pct_of_best": at_400}, "config_for": {"pct_of_best": 99.0}}]}
        return _advice(by_hand, ("rows", "cols"), shapes)

    assert advice(80.0, 98.0) == "add shapes between cols=100 and cols=400"
    assert advice(98.0, 97.0) == "the grid is dense enough for the tolerance"
    assert advice(80.0, 0.0).startswith("no measured shape serves another: sweep a grid dense along cols")


def test_one_measured_point_has_nothing_to_leave_out(frame):
    measured = Measured(frame[frame["shape"].isin([json.dumps([8, 400]), json.dumps([16, 400])])])
    result = leave_one_out(measured, 0.03, ("rows", "cols"), ["cols"])
    assert result["shapes"] == []
    assert "nothing to leave out" in summary_line(result, ("rows", "cols"))


def test_export_prints_the_line_and_stores_the_figures(frame, tmp_path, capsys):
    export_kernel(frame, "softmax", tmp_path, key={"n_cols": "cols"})
    line = capsys.readouterr().out
    assert "softmax on NVIDIA H200, float16: between measured shapes (each cols left out in turn)" in line
    data = json.loads((tmp_path / "softmax_configs.json").read_text())
    stored = data["gpus"]["NVIDIA H200"]["3.6.0"]["dtypes"]["float16"]["leave_one_out"]
    assert stored["key_dims"] == ["cols"] and len(stored["shapes"]) == 8
    assert stored["summary"]["config_for"]["no_config"] == 2
    assert stored["advice"].startswith("no measured shape serves another")


def _module(frame, tmp_path):
    export_kernel(frame, "softmax", tmp_path, key={"n_cols": "cols"})
    namespace = {}
    path = tmp_path / "softmax_configs.py"
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace


def _range_warnings(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [w for w in caught if w.category.__name__ == "ExportRangeWarning"]


def test_the_module_warns_once_per_key_outside_what_was_measured(frame, tmp_path):
    module = _module(frame, tmp_path)

    def config_for(cols):
        return module["config_for"]("float16", gpu="NVIDIA H200", n_cols=cols)

    for inside in (100, 150, 300, 800):  # measured points and between them: silent
        assert _range_warnings(lambda: config_for(inside)) == []
    beyond = _range_warnings(lambda: config_for(3000))
    assert len(beyond) == 1 and issubclass(beyond[0].category, UserWarning)
    message = str(beyond[0].message)
    assert "cols=3000" in message and "outside the measured range of cols" in message
    assert "cols 100..800" in message
    assert _range_warnings(lambda: config_for(3000)) == []  # once per key
    assert len(_range_warnings(lambda: config_for(50))) == 1  # below the range: another key

    prune = module["make_prune"](gpu="NVIDIA H200", dtype="float16")
    assert len(_range_warnings(lambda: prune(module["CONFIGS"], {"n_cols": 5000}))) == 1
    assert _range_warnings(lambda: prune(module["CONFIGS"], {"n_cols": 250})) == []


def test_a_hole_in_the_grid_wider_than_its_spacing_warns(frame, tmp_path):
    """Measured at 100, 200, 400 and 6400 columns (steps of log 2, log 2 and log 16; the median, log 2, is
    the spacing): 1600 lies log 4 from both 400 and 6400, inside the range but farther than the spacing."""
    holes = frame[~frame["shape"].isin([json.dumps([r, 800]) for r in ROWS])]
    wide = holes[holes["shape"] == json.dumps([8, 400])].assign(
        shape=json.dumps([8, 6400]), trial_key=lambda f: f["trial_key"] + "w", id=lambda f: f["id"] + 1000)
    module = _module(pd.concat([holes, wide], ignore_index=True), tmp_path)
    caught = _range_warnings(lambda: module["config_for"]("float16", gpu="NVIDIA H200", n_cols=1600))
    assert len(caught) == 1 and "than the grid's spacing" in str(caught[0].message)
    assert _range_warnings(lambda: module["config_for"]("float16", gpu="NVIDIA H200", n_cols=300)) == []


def _runtime_cover(entries):
    """[(BLOCK_SIZE, num_warps, {shape: p50})] -> COVER's form: [(triton.Config, {shape: p50})]."""
    import triton

    return [(triton.Config({"BLOCK_SIZE": block}, num_warps=warps, num_stages=1), at)
            for block, warps, at in entries]


def _block_warps(config):
    return config.kwargs["BLOCK_SIZE"], config.num_warps


def test_config_for_carries_the_form_of_the_winners_around_the_call():
    """Measured at 11585 and 23170 columns, whose winners' blocks are each row's next power of two: at
    16384 columns (as far from both, so the larger first by distance) the block of 16384 fits the call."""
    from runners.results import export_runtime as runtime

    dims = ("rows", "cols")
    cover = _runtime_cover([(16384, 8, {(4096, 11585): 40.0}), (32768, 16, {(4096, 23170): 90.0})])
    best = {shape: config for config, at in cover for shape in at}
    passes = lambda config: True  # noqa: E731

    def choice(cols):
        return _block_warps(runtime._choice(cover, best, {"cols": cols}, passes, dims))

    assert choice(16384) == (16384, 8)  # the form fits: next_pow2(16384) is 16384
    assert choice(20000) == (32768, 16)  # next_pow2(20000) is 32768
    assert choice(12000) == (16384, 8)
    # Without a shared form (the 23170 winner's block is 65536), the nearest, larger at a tie.
    cover[1] = _runtime_cover([(65536, 16, {(4096, 23170): 90.0})])[0]
    best = {shape: config for config, at in cover for shape in at}
    assert choice(16384) == (65536, 16)


def test_config_for_takes_the_config_fastest_over_the_other_dims_and_the_prune_the_fastest_at_each():
    """At 4096 columns, measured at 1024 and 8192 rows: A wins at 1024 rows and loses 30% at 8192, B is
    3% behind at both; between 2048 and 4096 columns (2048: C alone)."""
    from runners.results import export_runtime as runtime

    dims = ("rows", "cols")
    cover = _runtime_cover([(4096, 4, {(1024, 4096): 10.0, (8192, 4096): 65.0}),
                            (4096, 8, {(1024, 4096): 10.3, (8192, 4096): 51.5}),
                            (4096, 16, {(8192, 4096): 50.0}),
                            (2048, 4, {(1024, 2048): 6.0, (8192, 2048): 26.0})])
    best = {(1024, 4096): cover[0][0], (8192, 4096): cover[2][0], (1024, 2048): cover[3][0],
            (8192, 2048): cover[3][0]}
    passes = lambda config: True  # noqa: E731
    holds = lambda config: config.kwargs["BLOCK_SIZE"] >= 3000  # noqa: E731
    assert _block_warps(runtime._choice(cover, best, {"cols": 4096}, passes, dims)) == (4096, 8)
    # 3000 columns: 2048 and 4096 around; the 2048 block shares the form, so it would come first, but
    # check refuses it: the 4096 point's config.
    assert _block_warps(runtime._choice(cover, best, {"cols": 3000}, holds, dims)) == (4096, 8)
    kept = runtime._kept(cover, {"cols": 3000}, holds, dims)  # the fastest at each shape around
    assert sorted(map(_block_warps, kept)) == [(4096, 4), (4096, 16)]
    kept = runtime._kept(cover, {"cols": 3000}, passes, dims)
    assert sorted(map(_block_warps, kept)) == [(2048, 4), (4096, 4), (4096, 16)]
    # Beyond the range: the nearest point alone.
    beyond = runtime._kept(cover, {"cols": 9000}, passes, dims)
    assert sorted(map(_block_warps, beyond)) == [(4096, 4), (4096, 16)]

"""The export between and beyond its measured shapes: the leave-one-out estimate printed at export and
stored in the JSON (runners/export/generalization.py), and the generated module's ExportRangeWarning.

The store is written by the test with a latency table whose leave-one-out picks are worked out by hand
below; no kernel runs.
"""
import json
import math
import warnings

import pandas as pd
import pytest

from triton_sweep.export import export_kernel

from triton_sweep.export.cover import Measured
from triton_sweep.export.generalization import Lookup, _advice, leave_one_out, summary_line
from triton_sweep.store.result_store import ResultStore

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


def holds_row(shape, dtype, config):
    """The kernel's rule, as its KernelSpec.constraints gives it: a block holds the row."""
    return None if config["BLOCK_SIZE"] >= shape[1] else f"BLOCK_SIZE {config['BLOCK_SIZE']} < {shape[1]}"


def test_leave_one_out_picks_as_the_module_would(frame):
    measured = Measured(frame[frame["kernel"] == "softmax"])
    result = leave_one_out(measured, 0.03, ("rows", "cols"), ["cols"], lookup=Lookup(holds_row, "float16"))
    assert len(result["shapes"]) == len(ROWS) * len(COLS)
    # Around a left-out row length: the measured lengths next below and above it, at both row counts.
    # 100 out: below the rest's range, only 200 is around; the list's fastest there, 256/1, holds 100
    # columns: 1.0 / 1.5 of best.
    # 200 out: 100 and 400 are around; at 100 the list's fastest that holds 200 columns (the kernel's
    # rule as `check`) is 512/4, at 400 too: 2.0 / 3.6.
    # 400 out: at 200 and 800, the only one holding 400 columns is 1024/4: 4.0 / 6.0.
    # 800 out: the list of the rest (128/1, 256/1, 512/4) holds no block of 800 columns: no pick, 0%.
    # config_for, given the left-out shape whole: around it the shapes of its own row count; no shared form
    # (a block of 512 at 100 columns is not its next power of two), so the nearest (the larger at a tie).
    expected = {100: ((256, 1), 66.67), 200: ((512, 4), 55.56), 400: ((1024, 4), 66.67), 800: (None, 0.0)}
    assert _by_cols(result, "autotune") == expected
    assert _by_cols(result, "config_for") == expected
    summary = result["summary"]["autotune"]
    assert (summary["shapes"], summary["good"], summary["no_config"]) == (8, 0, 2)
    assert (summary["worst_pct"], summary["worst_shape"][1]) == (55.56, 200)  # of those with a config
    assert summary["geomean_pct"] == round((66.67 * 55.56 * 66.67) ** (1 / 3), 2)
    assert result["advice"].startswith("no measured shape serves another")  # all 8 below the bar
    line = summary_line(result, ("rows", "cols"), "softmax")
    assert line.startswith("at sizes the sweep did not measure (each of the 4 measured values of cols left "
                           "out in turn, the others choosing a config for it, checked with the kernel's "
                           "constraints): ")
    assert "autotune with the prune within 3% of the fastest at 0 of 8 (on average 62.7% of the fastest, " \
           "worst 56% at cols=200), with no config that runs there at 2;" in line
    assert line.endswith("use the configs at the measured sizes only, or sweep a grid dense along cols: "
                         "triton-sweep +sweep=softmax_export")  # the kernel's export-grade sweep file


def test_without_check_a_pick_never_run_at_the_left_out_shape_is_a_miss(frame):
    """The export of a kernel it has no spec of: no check. At 800 columns config_for then returns the
    rest's pick, 512/4, which cannot hold the row and was never run there: a miss, not a figure."""
    result = leave_one_out(Measured(frame), 0.03, ("rows", "cols"), ["cols"])
    at_800 = [entry["config_for"] for entry in result["shapes"] if entry["shape"][1] == 800]
    assert [(f["config"]["BLOCK_SIZE"], f["pct_of_best"], f["status"]) for f in at_800] == [
        (512, 0.0, "not measured")] * 2
    assert result["summary"]["config_for"]["not_ok"] == 2
    line = summary_line(result, ("rows", "cols"))
    assert "left out in turn, the others choosing a config for it): " in line  # no check said
    assert "config_for within 3% of the fastest at 0 of 8 (on average 62.7% of the fastest, worst 56% at " \
           "cols=200), with one that fails there or was never run there at 2;" in line


def test_a_config_wrong_at_the_left_out_shape_is_a_miss_that_the_estimate_cannot_see_past(tmp_path):
    """A is the fastest at 100 and 400 columns and incorrect at 200; B is 2% slower everywhere. Left out,
    200 lies between two shapes A wins, so both paths pick A there, which is wrong there: a miss (the old
    estimate let the measurement at 200 act as check and reported 3/3). At 100 and 400 the remaining
    shapes are 200 (B, A being wrong there) and the other edge (A within 2%): autotune times both and
    takes A, config_for takes B at 98% of A: both good."""
    store = ResultStore(tmp_path / "results.sqlite")
    configs = {"A": {"BLOCK_SIZE": 512, "num_warps": 4, "num_stages": 1},
               "B": {"BLOCK_SIZE": 512, "num_warps": 8, "num_stages": 1}}
    for cols in (100, 200, 400):
        for name, config in configs.items():
            wrong = name == "A" and cols == 200
            store.append({**GPU_ENV, "trial_key": f"{name}{cols}", "sweep_id": "s", "kernel": "softmax",
                          "provider": "triton", "shape": (8, cols), "dtype": "float16", "config": config,
                          "status": "incorrect" if wrong else "ok", "phase": "screen",
                          "p50_us": None if wrong else cols / 100 * (1.0 if name == "A" else 1.02),
                          "seed": 0, "timestamp": "2026-11-24T00:00:00"})
    frame = store.load()
    store.close()
    export_kernel(frame, "softmax", tmp_path, key={"n_cols": "cols"}, rule=lambda shape, dtype, config: None)
    data = json.loads((tmp_path / "softmax_configs.json").read_text())
    estimate = data["gpus"]["NVIDIA H200"]["3.6.0"]["dtypes"]["float16"]["leave_one_out"]
    at_200 = next(entry for entry in estimate["shapes"] if entry["shape"] == [8, 200])
    for path in ("autotune", "config_for"):
        assert (at_200[path]["config"], at_200[path]["status"]) == (configs["A"], "incorrect")
        assert (estimate["summary"][path]["good"], estimate["summary"][path]["not_ok"]) == (2, 1)


def test_the_advice_names_the_measured_sizes_around_the_worst_shape(frame):
    """At a 50% tolerance, without the 800-column shapes, the list of the rest keeps every config within
    1.5x of the best at one of its shapes (the alternates), and between or beyond measured points the
    prune keeps every listed config within 2x of the fastest there (SPREAD):
    - 100 out: 200 alone around; 256/1, 256/4, 512/1 and 512/4 kept; 256/1 is fastest at 100: 1.0 / 1.5;
    - 200 out: 100 and 400 around; what holds 200 columns: 256/1, 512/1, 512/4, 1024/4, all kept: 256/1;
    - 400 out: 200 alone around; of the blocks that hold 400 columns only 512/1 was listed: 1.0 / 1.2.
    Every left-out shape is served within the bar, so the grid is dense enough."""
    measured = Measured(frame[~frame["shape"].isin([json.dumps([r, 800]) for r in ROWS])])
    result = leave_one_out(measured, 0.5, ("rows", "cols"), ["cols"])
    assert result["good_pct"] == 50.0 and result["summary"]["autotune"]["good"] == 6
    assert _by_cols(result, "autotune") == {100: ((256, 1), 66.67), 200: ((256, 1), 100.0),
                                            400: ((512, 1), 83.33)}
    assert result["advice"] == "the grid is dense enough for the tolerance"
    shapes = [(8, 100), (8, 200), (8, 400)]

    def advice(at_200, at_400):
        by_hand = {"key_dims": ["cols"], "good_pct": 97.0, "shapes": [
            {"shape": [8, 200], "autotune": {"pct_of_best": at_200}, "config_for": {"pct_of_best": 99.0}},
            {"shape": [8, 400], "autotune": {"pct_of_best": at_400}, "config_for": {"pct_of_best": 99.0}}]}
        return _advice(by_hand, ("rows", "cols"), shapes)

    assert advice(80.0, 98.0) == "add shapes between cols=100 and cols=400"
    assert advice(98.0, 80.0) == "add shapes above cols=400"  # the worst at the range's edge
    assert advice(98.0, 97.0) == "the grid is dense enough for the tolerance"
    assert advice(80.0, 0.0) == ("no measured shape serves another: the measured sizes are too far apart to "
                                 "say anything about those between them; use the configs at the measured "
                                 "sizes only, or sweep a grid dense along cols")


def fits_the_row(shape, dtype, config):
    """softmax's rule in short: a block holds the row and is under 4x it."""
    block, cols = config["BLOCK_SIZE"], shape[1]
    return None if cols <= block < 4 * cols else f"BLOCK_SIZE {block} does not fit {cols} columns"


def test_sizes_too_far_apart_say_so_in_plain_words_and_what_to_run(tmp_path, capsys):
    """The default sweep's case: row lengths 8x apart, each block fitting one of them alone. Left out in
    turn, no length gets a config that runs there from the others: the line says the sizes between are
    unknown, why, and the command that sweeps a dense grid."""
    store = ResultStore(tmp_path / "results.sqlite")
    for index, (cols, block) in enumerate((c, b) for c in (128, 1024, 8192) for b in (128, 1024, 8192)):
        config = {"BLOCK_SIZE": block, "num_warps": 4, "num_stages": 1}
        fits = fits_the_row((8, cols), "float16", config) is None
        store.append({**GPU_ENV, "trial_key": f"k{index}", "sweep_id": "s", "kernel": "softmax",
                      "provider": "triton", "shape": (8, cols), "dtype": "float16", "config": config,
                      "status": "ok" if fits else "pruned", "phase": "screen",
                      "p50_us": cols / 100 if fits else None,
                      "seed": 0, "timestamp": "2026-11-24T00:00:00"})
    frame = store.load()
    store.close()
    export_kernel(frame, "softmax", tmp_path, key={"n_cols": "cols"}, rule=fits_the_row)
    assert capsys.readouterr().out.splitlines()[0] == (
        "softmax on NVIDIA H200, float16: at sizes the sweep did not measure: unknown (each of the 3 "
        "measured values of cols left out in turn, the others choosing a config for it, checked with the "
        "kernel's constraints: no config they chose runs at the one left out). The measured cols (128, 1024, "
        "8192) are too far apart to say anything about the sizes between them: use these configs at the "
        "measured sizes only, or sweep a grid dense along cols: triton-sweep +sweep=softmax_export")


def test_one_measured_point_has_nothing_to_leave_out(frame):
    measured = Measured(frame[frame["shape"].isin([json.dumps([8, 400]), json.dumps([16, 400])])])
    result = leave_one_out(measured, 0.03, ("rows", "cols"), ["cols"])
    assert result["shapes"] == []
    assert summary_line(result, ("rows", "cols"), "a_kernel_of_mine") == (
        "at sizes the sweep did not measure: unknown, one value of cols was measured and there is nothing to "
        "compare with; the configs are known good at the measured sizes only. To use them at others, sweep a "
        "grid dense along cols: triton-sweep 'kernel.grid.cols=[...]'")  # no sweep file of that name


def test_export_prints_the_line_and_stores_the_figures(frame, tmp_path, capsys):
    export_kernel(frame, "softmax", tmp_path, key={"n_cols": "cols"}, rule=holds_row)
    line = capsys.readouterr().out
    assert "softmax on NVIDIA H200, float16: at sizes the sweep did not measure (each of the 4 measured " \
           "values of cols left out in turn, the others choosing a config for it, checked with the " \
           "kernel's constraints): " in line
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
    from triton_sweep.export import runtime

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


def test_config_for_takes_the_least_loss_over_the_other_dims_and_the_prune_all_within_spread():
    """At 4096 columns, measured at 1024 and 8192 rows: A (4096/4) wins at 1024 rows and loses 30% at 8192,
    B (4096/8) is 3% behind at both, C (4096/16) wins at 8192 rows and was not verified at 1024; at 2048
    columns D (2048/4) alone. The fastest of the list: 10.0 and 50.0 at 4096 columns, 6.0 and 26.0 at 2048.
    config_for's loss of a config: the weighted mean of log(p50 / fastest) over the shapes around where it
    was verified: A (log 1 + log 1.3) / 2 = .131, B log 1.03 = .030, C log 1 = 0 (its one shape)."""
    from triton_sweep.export import runtime

    dims = ("rows", "cols")
    cover = _runtime_cover([(4096, 4, {(1024, 4096): 10.0, (8192, 4096): 65.0}),
                            (4096, 8, {(1024, 4096): 10.3, (8192, 4096): 51.5}),
                            (4096, 16, {(8192, 4096): 50.0}),
                            (2048, 4, {(1024, 2048): 6.0, (8192, 2048): 26.0})])
    best = {(1024, 4096): cover[0][0], (8192, 4096): cover[2][0], (1024, 2048): cover[3][0],
            (8192, 2048): cover[3][0]}
    passes = lambda config: True  # noqa: E731
    holds = lambda config: config.kwargs["BLOCK_SIZE"] >= 3000  # noqa: E731
    no_16 = lambda config: config.num_warps != 16  # noqa: E731

    def choice(cols, check):
        return _block_warps(runtime._choice(cover, best, {"cols": cols}, check, dims))

    # 4096 columns: two measured shapes (the rows unknown), so no single winner; the winners (C, A) share
    # the form (BLOCK_SIZE = next_pow2(4096)), as do A, B and C; of them A and B were verified at both
    # shapes and come first: the least loss, B, not A (the winner at 1024 rows) nor C (its loss of 0
    # counts 8192 rows alone).
    assert choice(4096, passes) == (4096, 8)
    assert choice(4096, no_16) == (4096, 8)
    # Given the rows too: at 1024 and 8192 rows, measured shapes, their winners A and C; between, the
    # weight of 8192 rows is log(rows / 1024) / log 8: at 1100 rows .034, A's loss .034 x .262 = .009 < B's
    # .030; at 2048 rows 1/3, A's .087 > B's.
    by_rows = {rows: _block_warps(runtime._choice(cover, best, {"rows": rows, "cols": 4096}, passes, dims))
               for rows in (1024, 1100, 2048, 8192)}
    assert by_rows == {1024: (4096, 4), 1100: (4096, 4), 2048: (4096, 8), 8192: (4096, 16)}
    assert choice(4096, lambda config: config.num_warps != 8) == (4096, 4)  # A, verified at both, before C
    # 3000 columns: 2048 and 4096 around (weights log(3000/2048) / log 2 = .551 for 4096, .449 for 2048);
    # the winners share the form (2048 at 2048, 4096 at 4096): next_pow2(3000) = 4096, so A, B, C, none
    # verified at the 2048 shapes (so none first); over the 4096 shapes, both weighed .551, the losses
    # above: C, else B.
    assert choice(3000, holds) == (4096, 16)
    assert choice(3000, passes) == (4096, 16)
    assert choice(3000, lambda config: holds(config) and no_16(config)) == (4096, 8)
    # The prune at 3000 columns, between measured points: at each shape around, every listed config that
    # passes within 2x (SPREAD) of the fastest that passes there: at 8192x4096 A 65, B 51.5, C 50 (<= 100),
    # at 1024x4096 A 10, B 10.3 (<= 20); at the 2048-column shapes only D, which check refuses (a block
    # shorter than the row): nothing there.
    kept = runtime._kept(cover, {"cols": 3000}, holds, dims)
    assert list(map(_block_warps, kept)) == [(4096, 4), (4096, 8), (4096, 16)]
    kept = runtime._kept(cover, {"cols": 3000}, passes, dims)  # without check, D too (alone at 2048)
    assert list(map(_block_warps, kept)) == [(4096, 4), (4096, 8), (4096, 16), (2048, 4)]
    # Beyond the range: the nearest point's shapes alone (4096 columns), every config within 2x there.
    beyond = runtime._kept(cover, {"cols": 9000}, passes, dims)
    assert list(map(_block_warps, beyond)) == [(4096, 4), (4096, 8), (4096, 16)]
    # At the measured point itself: the fastest at each of its shapes, C at 8192 rows and A at 1024.
    at_point = runtime._kept(cover, {"cols": 4096}, passes, dims)
    assert sorted(map(_block_warps, at_point)) == [(4096, 4), (4096, 16)]


def _spread_cover():
    """X wins at 8x1000 and 64x1000 and is 10% behind at 8x4000; Y 1.9x and 1.2x X at the 1000s; Z 2.1x
    at 8x1000 and 2.25x at 8x4000; W wins at 8x4000; V 1.975x W there."""
    return _runtime_cover([(1024, 4, {(8, 1000): 10.0, (64, 1000): 25.0, (8, 4000): 44.0}),  # X
                           (1024, 8, {(8, 1000): 19.0, (64, 1000): 30.0}),  # Y
                           (2048, 4, {(8, 1000): 21.0, (8, 4000): 90.0}),  # Z
                           (4096, 4, {(8, 4000): 40.0}),  # W
                           (4096, 8, {(8, 4000): 79.0})])  # V


def test_the_prune_between_measured_points_keeps_every_config_within_spread():
    """1500 columns lies between 1000 and 4000: around it 64x1000, 8x1000 and 8x4000. Within 2x (SPREAD)
    of the fastest there: 64x1000 X, Y (<= 50); 8x1000 X, Y (<= 20; Z 21 out); 8x4000 X, W, V (<= 80; Z 90
    out): X, Y, W, V, in the list's order. spread=1.0: the fastest at each, X, X and W. At a measured
    point the spread does not apply: only the fastest at each shape of it."""
    from triton_sweep.export import runtime

    dims, cover = ("rows", "cols"), _spread_cover()
    passes = lambda config: True  # noqa: E731
    assert runtime.SPREAD == 2.0
    kept = runtime._kept(cover, {"cols": 1500}, passes, dims)
    assert list(map(_block_warps, kept)) == [(1024, 4), (1024, 8), (4096, 4), (4096, 8)]
    kept = runtime._kept(cover, {"cols": 1500}, passes, dims, spread=1.0)
    assert list(map(_block_warps, kept)) == [(1024, 4), (4096, 4)]
    # check refusing blocks shorter than 2000: the spread counts from the fastest that passes, Z at 8x1000
    # (alone there, so kept) and W at 8x4000 (V kept, Z out: 90 > 80); none passes at 64x1000.
    long = lambda config: config.kwargs["BLOCK_SIZE"] >= 2000  # noqa: E731
    kept = runtime._kept(cover, {"cols": 1500}, long, dims)
    assert list(map(_block_warps, kept)) == [(2048, 4), (4096, 4), (4096, 8)]
    # At measured points: 8x4000 alone, W (X, 10% behind, is dropped whatever the spread); at 1000 columns
    # X, the fastest at both shapes, not Y (1.9x and 1.2x) nor Z.
    for spread in (1.0, 2.0, 3.0):
        assert list(map(_block_warps, runtime._kept(cover, {"cols": 4000}, passes, dims, spread))) == [
            (4096, 4)]
        assert list(map(_block_warps, runtime._kept(cover, {"cols": 1000}, passes, dims, spread))) == [
            (1024, 4)]


def test_config_for_between_two_measured_points_weighs_the_loss_by_the_distance_to_each():
    """A (128/4) wins at 1000 columns, 10% ahead of B (256/4); at 4000, B wins and A is 30% slower. No
    shared form (128 and 256 are no row's next power of two); both verified at both points. The weight of
    4000 is s = log(cols / 1000) / log 4, of 1000 1 - s: loss A = s log 1.3 = .262 s, loss B = (1 - s)
    log 1.1 = .095 (1 - s); A is picked where s < .095 / .358 = .267, below about 1447 columns.
    1100: s = .069, A .018 < B .089: A.       1400: s = .243, A .064 < B .072: A.
    1500: s = .292, A .077 > B .067: B.       2000: s = .5, A .131 > B .048: B.
    3600: s = .924, A .243 > B .007: B.       At 1000 and 4000 themselves, their winners."""
    from triton_sweep.export import runtime

    dims = ("rows", "cols")
    cover = _runtime_cover([(128, 4, {(8, 1000): 10.0, (8, 4000): 52.0}),
                            (256, 4, {(8, 1000): 11.0, (8, 4000): 40.0})])
    best = {(8, 1000): cover[0][0], (8, 4000): cover[1][0]}
    passes = lambda config: True  # noqa: E731
    picks = {cols: _block_warps(runtime._choice(cover, best, {"cols": cols}, passes, dims))[0]
             for cols in (1000, 1100, 1400, 1500, 2000, 3600, 4000)}
    assert picks == {1000: 128, 1100: 128, 1400: 128, 1500: 256, 2000: 256, 3600: 256, 4000: 256}
    # Refused, A gives way to B even at 1100.
    no_a = lambda config: config.kwargs["BLOCK_SIZE"] != 128  # noqa: E731
    assert _block_warps(runtime._choice(cover, best, {"cols": 1100}, no_a, dims)) == (256, 4)


def test_make_prune_refuses_a_spread_below_one_and_passes_one_through(frame, tmp_path):
    """Through a generated module (the frame's list at 3%: each shape's winner, none other within 3%). At
    300 columns, between 200 and 400: within 2x at 200 256/1 (1.0) and 512/4 (1.5 x 1.2 = 1.8; 1024/4 2.4
    out), at 400 512/4 (1.0) and 1024/4 (1.5); spread=1.0: the fastest at each, 256/1 and 512/4."""
    module = _module(frame, tmp_path)
    with pytest.raises(ValueError, match="spread=0.5"):
        module["make_prune"](gpu="NVIDIA H200", dtype="float16", spread=0.5)

    def kept(**options):
        prune = module["make_prune"](gpu="NVIDIA H200", dtype="float16", **options)
        return sorted(map(_block_warps, prune(module["CONFIGS"], {"n_cols": 300})))

    assert kept() == [(256, 1), (512, 4), (1024, 4)]
    assert kept(spread=1.0) == [(256, 1), (512, 4)]


ALIGNED = (1024, 2048, 4096, 8192)  # multiples of 16
UNALIGNED = (1020, 2044, 4092, 8188)  # not: Triton compiles another kernel for these


def _store_of(tmp_path, cols_sizes, p50_of):
    """A store of 8-row shapes at `cols_sizes`, two configs (512/4 and 256/4, both valid at every length,
    as a looped kernel's blocks are) timed by p50_of(cols, block)."""
    store = ResultStore(tmp_path / "kinds.sqlite")
    for index, (cols, block) in enumerate((c, b) for c in cols_sizes for b in (512, 256)):
        store.append({**GPU_ENV, "trial_key": f"a{index}", "sweep_id": "s2", "kernel": "softmax",
                      "provider": "triton", "shape": (8, cols), "dtype": "float16",
                      "config": {"BLOCK_SIZE": block, "num_warps": 4, "num_stages": 1},
                      "status": "ok", "phase": "screen", "p50_us": p50_of(cols, block),
                      "gbps": 1.0, "tflops": 0.1, "seed": 0, "timestamp": "2026-11-24T00:00:00"})
    loaded = store.load()
    store.close()
    return loaded


def _by_kind(cols, block):
    """512 wins by 1.5x where the row length is a multiple of 16, 256 where it is not."""
    right = 512 if cols % 16 == 0 else 256
    return cols / 100 * (1.0 if block == right else 1.5)


def test_sizes_of_each_kind_are_looked_up_apart_where_the_estimate_says_so(tmp_path, capsys):
    """Together, the shapes around a left-out 2048 are 2044 and 4092 (the nearest measured lengths), whose
    winner 256 is 1.5x slower at 2048: 66.67%; at the edges, 1020 and 8192 take the nearest, of the other
    kind: 66.67% too. Apart, around 2048 are 1024 and 4096, whose winner 512 is right: 100%, and every
    left-out length is served right (the edges by the nearest of their kind). Autotune serves all either
    way: the prune keeps both configs (1.5x, within SPREAD). So the export looks the kinds up apart, and
    the module's config_for follows the call's kind."""
    from triton_sweep.export.generalization import estimate

    frame = _store_of(tmp_path, ALIGNED + UNALIGNED, _by_kind)
    result = estimate(Measured(frame), 0.03, ("rows", "cols"), ["cols"])
    assert result["aligned_apart"] is True
    assert {entry["config_for"]["pct_of_best"] for entry in result["shapes"]} == {100.0}
    assert result["together"]["config_for"]["good"] == 0
    assert "sizes that are multiples of 16 and sizes that are not looked up apart (the other shapes chose " \
           "apart at 8/8 left-out points; all together: autotune 8/8, config_for 0/8 at the bar)" in \
           summary_line(result, ("rows", "cols"))
    module = _module(frame, tmp_path)
    assert module["ALIGNED_APART"] == {("NVIDIA H200", "3.6.0", "float16")}

    def block(cols):
        return module["config_for"]("float16", gpu="NVIDIA H200", n_cols=cols).kwargs["BLOCK_SIZE"]

    assert [block(cols) for cols in (3000, 3008, 2046, 2048, 6000, 6004)] == [256, 512, 256, 512, 512, 256]


def test_kinds_whose_best_configs_agree_are_looked_up_together(tmp_path):
    """512 wins at every length: apart, each kind's grid is twice as sparse and serves no better."""
    frame = _store_of(tmp_path, ALIGNED + UNALIGNED, lambda cols, block: cols / 100 * (1.0 if block == 512
                                                                                          else 1.5))
    module = _module(frame, tmp_path)
    assert module["ALIGNED_APART"] == set()
    section = json.loads((tmp_path / "softmax_configs.json").read_text())["gpus"]["NVIDIA H200"]["3.6.0"]
    assert section["dtypes"]["float16"]["leave_one_out"]["aligned_apart"] is False
    # Looked up together, the twins' steps (1020 to 1024, ...) are no spacing: a call half-way between two
    # measured lengths of its kind (log 0.35 to 0.38 from each, steps of log 2) is silent, one past them
    # is not.
    for cols in (1448, 1456, 3000):
        assert _range_warnings(lambda: module["config_for"]("float16", gpu="NVIDIA H200", n_cols=cols)) == []
    assert len(_range_warnings(lambda: module["config_for"]("float16", gpu="NVIDIA H200", n_cols=9000))) == 1


def test_a_size_of_a_kind_never_measured_warns_once_per_dim_and_kind(tmp_path):
    module = _module(_store_of(tmp_path, ALIGNED, _by_kind), tmp_path)

    def config_for(cols):
        return _range_warnings(lambda: module["config_for"]("float16", gpu="NVIDIA H200", n_cols=cols))

    assert config_for(3008) == []  # a multiple of 16, between measured lengths: silent
    caught = config_for(3000)
    assert len(caught) == 1
    assert "cols=3000 on NVIDIA H200 float16 is not a multiple of 16, unlike every measured cols" in str(
        caught[0].message)
    assert config_for(5000) == []  # the same kind again: warned once already


def test_the_kind_filters_dim_by_dim_where_the_call_s_kind_was_measured():
    """A call of M=100 (no measured M is of its kind: M does not filter), N=1000 (not a multiple of 16,
    like 1000 and 3000): the shapes with N of its kind, whatever their M; not apart, all of them."""
    from triton_sweep.export import runtime

    dims = ("M", "N")
    shapes = [(64, 1024), (64, 1000), (128, 3000), (128, 2048)]
    assert runtime._aligned_like(shapes, {"M": 100, "N": 1000}, dims, True) == [(64, 1000), (128, 3000)]
    assert runtime._aligned_like(shapes, {"M": 64, "N": 4096}, dims, True) == [(64, 1024), (128, 2048)]
    assert runtime._aligned_like(shapes, {"M": 100, "N": 1000}, dims, apart=False) == shapes


def test_the_choice_of_apart_at_a_left_out_point_sees_only_the_other_shapes(tmp_path, monkeypatch):
    """Choosing apart or together by the better of two estimates over the same left-out points would report
    the better of two draws: at each point the choice is made by the same comparison over the other shapes
    alone (an estimate of their own, both ways), and the point's figure is that of the way they chose."""
    from triton_sweep.export import generalization

    frame = _store_of(tmp_path, ALIGNED + UNALIGNED, _by_kind)
    calls = []
    original = generalization.leave_one_out

    def recorded(measured, *args, **kwargs):
        calls.append((frozenset(measured.shapes), kwargs.get("apart", False)))
        return original(measured, *args, **kwargs)

    monkeypatch.setattr(generalization, "leave_one_out", recorded)
    result = generalization.estimate(Measured(frame), 0.03, ("rows", "cols"), ["cols"])
    every = frozenset((8, cols) for cols in ALIGNED + UNALIGNED)
    for cols in ALIGNED + UNALIGNED:
        rest = every - {(8, cols)}
        assert {(rest, False), (rest, True)} <= set(calls)  # the other shapes' own estimate, both ways
    assert (result["apart_at"], result["points"]) == (8, 8)


def test_past_folds_points_each_choice_is_made_by_shapes_outside_its_fold(tmp_path, monkeypatch):
    """24 points, FOLDS folds: FOLDS estimates of the other shapes (both ways), not one a point; each
    point is chosen for by exactly one of them, and none of them holds the point it chooses for; the
    folds are dealt in the order of the points' values (each spread over the range, no hole of a fold's
    width). A choice stubbed per fold (apart for odd folds) shows whose choice each point reports."""
    from triton_sweep.export import generalization

    sizes = tuple(512 * i for i in range(1, 13)) + tuple(512 * i - 4 for i in range(1, 13))
    frame = _store_of(tmp_path, sizes, _by_kind)
    monkeypatch.setattr(generalization, "PARALLEL_FROM_POINTS", 10 ** 6)
    estimates = []
    original = generalization.leave_one_out

    def recorded(measured, *args, **kwargs):
        result = original(measured, *args, **kwargs)
        if len(measured.shapes) < len(sizes):  # a fold's estimate: its own score decides
            estimates.append((frozenset(measured.shapes), kwargs.get("apart", False)))
            fold = list(dict.fromkeys(rest for rest, _ in estimates)).index(estimates[-1][0])
            apart_wins = fold % 2 == 1
            figure = 100.0 if kwargs.get("apart") == apart_wins else 50.0
            result = {**result, "shapes": [{**e, **{path: {**e[path], "pct_of_best": figure}
                                                    for path in generalization.PATHS}}
                                           for e in result["shapes"]]}
        return result

    monkeypatch.setattr(generalization, "leave_one_out", recorded)
    result = generalization.estimate(Measured(frame), 0.03, ("rows", "cols"), ["cols"])
    every = frozenset((8, cols) for cols in sizes)
    rests = list(dict.fromkeys(rest for rest, _ in estimates))
    assert len(rests) == generalization.FOLDS and len(estimates) == 2 * generalization.FOLDS
    held_out = [every - rest for rest in rests]
    assert sorted(cols for fold in held_out for _, cols in fold) == sorted(sizes)  # each point once
    ordered = sorted(sizes)
    for index, fold in enumerate(held_out):
        assert sorted(cols for _, cols in fold) == ordered[index::generalization.FOLDS]
    assert result["apart_at"] == sum(len(fold) for index, fold in enumerate(held_out) if index % 2 == 1)


def test_the_inner_estimates_in_forked_processes_give_the_figures_computed_here(tmp_path, monkeypatch):
    """From PARALLEL_FROM_POINTS left-out points on, the estimates of the shapes outside each fold are
    computed in forked processes: the estimate is the same as computed here, every figure, and the work
    did leave this process."""
    import os

    from triton_sweep.export import generalization

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: the estimate never forks")
    sizes = tuple(512 * i for i in range(1, 13)) + tuple(512 * i - 4 for i in range(1, 13))
    frame = _store_of(tmp_path, sizes, _by_kind)
    monkeypatch.setattr(generalization, "PARALLEL_FROM_POINTS", 10 ** 6)
    here = generalization.estimate(Measured(frame), 0.03, ("rows", "cols"), ["cols"])
    pids = tmp_path / "pids"
    original = generalization.leave_one_out

    def recorded(measured, *args, **kwargs):  # the inner ones: on the shapes less one
        if len(measured.shapes) < len(sizes):
            with open(pids, "a") as file:
                file.write(f"{os.getpid()}\n")
        return original(measured, *args, **kwargs)

    monkeypatch.setattr(generalization, "leave_one_out", recorded)
    monkeypatch.setattr(generalization, "PARALLEL_FROM_POINTS", 2)
    forked = generalization.estimate(Measured(frame), 0.03, ("rows", "cols"), ["cols"])
    assert forked == here
    inner_pids = pids.read_text().split()
    assert here["points"] == len(sizes)
    assert len(inner_pids) == 2 * generalization.FOLDS  # a fold's estimate together and apart
    assert str(os.getpid()) not in inner_pids

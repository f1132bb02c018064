"""triton_sweep.outputs.plots.figures and the triton_sweep.plot command from synthetic stores: the PNGs
exist and are real images (a link at one's path replaced, not written through), the ceilings, the choice
of the heatmap's axes, and the sweeps a plot cannot be drawn for (skipped with a reason, never a
traceback)."""

import subprocess
import sys
import warnings

import numpy as np
import pytest
from matplotlib.image import imread

from triton_sweep import plot
from triton_sweep.outputs.plots import figures as plots
from triton_sweep.store.result_store import ResultStore
from tests.conftest import user_env
from tests.fixtures.synthetic_store import PEAKS, SHAPES, row, softmax_sweep


def _store(tmp_path, **sweep):
    store = ResultStore(tmp_path / "r.sqlite")
    softmax_sweep(store, "s", **sweep)
    return store


def _plot(capsys, tmp_path, *args):
    status = plot.main([f"--store={tmp_path}/r.sqlite", "--sweep-id=s", f"--out={tmp_path}/plots", *args])
    out = capsys.readouterr()
    return status, out.out, out.err


def _assert_image(path):
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = imread(path)
    assert pixels.shape[0] >= 300 and pixels.shape[1] >= 400
    colours = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
    assert len(colours) > 20  # drawn: axes, text, markers or cells, not one flat colour


def test_every_plot_of_a_full_sweep_is_a_readable_image(tmp_path, capsys):
    _store(tmp_path).close()
    (tmp_path / "plots").mkdir()
    (tmp_path / "outside.png").write_text("precious")
    (tmp_path / "plots" / "roofline.png").symlink_to(tmp_path / "outside.png")  # replaced, not followed
    status, out, err = _plot(capsys, tmp_path)
    names = ["roofline.png", "heatmap_softmax.png", "speedup_softmax.png"]
    assert status == 0 and err == "" and "skipped" not in out
    assert out.split() == [str(tmp_path / "plots" / name) for name in names]
    for name in names:
        assert not (tmp_path / "plots" / name).is_symlink()
        _assert_image(tmp_path / "plots" / name)
    assert (tmp_path / "outside.png").read_text() == "precious"


def test_ceilings_come_from_the_store_else_from_the_rows(tmp_path):
    store = _store(tmp_path)
    frame = store.load(sweep_id="s")
    assert plots.ceilings(frame, store) == PEAKS
    store.close()
    derived = plots.ceilings(frame, None)  # rows carry % of peak: gbps / pct_copy_bw gives the ceiling back
    assert derived == pytest.approx(
        {"copy_gbps": PEAKS["copy_gbps"], "matmul_tflops_float16": PEAKS["matmul_tflops_float16"]}
    )
    assert plots.ceilings(frame.assign(backend="interpret"), None) == {}


def test_heatmap_axes_default_to_the_most_varied_and_can_be_chosen(tmp_path):
    store = _store(
        tmp_path, space={"BLOCK_SIZE": (1024, 2048, 4096), "num_warps": (1, 2, 4, 8), "num_stages": (1, 2)}
    )
    ours = store.load(sweep_id="s").query("provider == 'triton'")
    store.close()
    assert plots.meta_axes(ours, None, None, "softmax") == ("num_warps", "BLOCK_SIZE")
    assert plots.meta_axes(ours, "num_stages", None, "softmax") == ("num_stages", "num_warps")
    assert plots.meta_axes(ours, None, "num_stages", "softmax") == ("num_warps", "num_stages")
    with pytest.raises(plots.PlotError, match="--y: 'BLOCK_M' is not a meta-parameter of softmax"):
        plots.meta_axes(ours, "num_warps", "BLOCK_M", "softmax")


def test_an_unknown_axis_or_sweep_is_an_error_naming_the_argument(tmp_path, capsys):
    _store(tmp_path).close()
    status, _, err = _plot(capsys, tmp_path, "--x=warps")
    assert status == 2 and "--x: 'warps' is not a meta-parameter of softmax" in err and "num_warps" in err
    status = plot.main([f"--store={tmp_path}/r.sqlite", "--sweep-id=nope"])
    err = capsys.readouterr().err
    assert (
        status == 2
        and "--sweep-id: no trials of sweep 'nope'" in err
        and "(sweeps with rows there: s)" in err
    )


def test_one_shape_no_baselines_one_meta_parameter_skip_what_cannot_be_drawn(tmp_path, capsys):
    space = {"BLOCK_SIZE": (2048,), "num_warps": (1, 2, 4, 8), "num_stages": (1,)}
    _store(tmp_path, shapes=SHAPES[:1], baselines={}, finalists=False, space=space).close()
    status, out, _ = _plot(capsys, tmp_path)
    assert status == 0
    # The command's own flags (the sweep's line names the command: tests/commands/test_sweep.py).
    assert ("plot skipped: heatmap of softmax: softmax varies only num_warps in this sweep; a heatmap needs "
            "two (name them: --x num_warps --y BLOCK_SIZE)") in out
    assert (
        "plot skipped: speedup of softmax: no shape of softmax where both a config of ours and a baseline"
        in out
    )
    assert [p.name for p in (tmp_path / "plots").iterdir()] == ["roofline.png"]
    _assert_image(tmp_path / "plots" / "roofline.png")
    # Named, the fixed one makes a one-row heatmap.
    status, out, _ = _plot(capsys, tmp_path, "--x=num_warps", "--y=BLOCK_SIZE")
    assert status == 0 and "plot skipped: heatmap" not in out
    _assert_image(tmp_path / "plots" / "heatmap_softmax.png")


def test_a_sweep_where_nothing_was_ok_draws_nothing_and_says_why(tmp_path, capsys):
    store = ResultStore(tmp_path / "r.sqlite")
    rng = np.random.default_rng(0)
    config = {"BLOCK_SIZE": 1024, "num_warps": 1}
    for warps in (1, 2):
        crashed = row("s", "triton", SHAPES[0], {**config, "num_warps": warps}, None, rng, status="crashed")
        store.append(crashed)
    store.append(row("s", "triton", SHAPES[0], {**config, "BLOCK_SIZE": 512}, None, rng, status="pruned"))
    store.close()
    status, out, _ = _plot(capsys, tmp_path)
    assert status == 1
    assert "plot skipped: roofline: no ok trial with a FLOP and a byte count" in out
    assert "plot skipped: heatmap of softmax: no ok config of softmax" in out
    assert not list((tmp_path / "plots").iterdir())


def test_interpreter_rows_plot_without_ceilings(tmp_path, capsys):
    store = ResultStore(tmp_path / "r.sqlite")
    rng = np.random.default_rng(0)
    interpreter = {"backend": "interpret", "gpu_name": "Triton interpreter (CPU)"}
    for warps in (1, 2, 4):
        for block in (1024, 2048):
            config = {"BLOCK_SIZE": block, "num_warps": warps}
            store.append(row("s", "triton", SHAPES[0], config, 5000.0 * warps, rng, **interpreter,
                             pct_copy_bw=None, pct_matmul=None))
    store.append(row("s", "torch", SHAPES[0], {}, 80.0, rng, **interpreter))
    store.close()
    status, out, _ = _plot(capsys, tmp_path)
    assert status == 0 and "skipped" not in out
    for name in ("roofline.png", "heatmap_softmax.png", "speedup_softmax.png"):
        _assert_image(tmp_path / "plots" / name)


def test_plots_for_sweep_without_matplotlib_costs_the_plots_only(tmp_path, capsys, monkeypatch):
    store = _store(tmp_path)
    frame = store.load(sweep_id="s")
    store.close()
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import fails as if absent
    assert plots.plots_for_sweep(tmp_path / "r.sqlite", "s", frame, tmp_path / "run") == []
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("warning: plots skipped:") and "matplotlib" in out


def test_a_heatmap_of_many_shapes_is_one_summary_panel_per_dtype(tmp_path, capsys, monkeypatch):
    """Past MAX_PANELS shapes the grid of small multiples (120 panels: 14 s to draw, unreadable) becomes
    one panel per dtype with the shapes along x; every shape's cells and its winner are in it."""
    shapes = tuple((rows, cols) for rows in (1024, 2048, 4096) for cols in (256, 512, 1024, 2048, 4096, 8192))
    _store(tmp_path, shapes=shapes).close()
    drawn = {}
    real = plots.summary_heatmap

    def spy(panels, kernel, path, x, y):
        drawn.update(panels=len(panels), axes=(x, y))
        return real(panels, kernel, path, x, y)

    monkeypatch.setattr(plots, "summary_heatmap", spy)
    status, out, err = _plot(capsys, tmp_path)
    assert status == 0, out + err
    assert drawn["panels"] == len(shapes) > plots.MAX_PANELS
    _assert_image(tmp_path / "plots" / "heatmap_softmax.png")
    monkeypatch.setattr(plots, "MAX_PANELS", len(shapes))  # at the cap: the small multiples, as before
    drawn.clear()
    assert _plot(capsys, tmp_path)[0] == 0 and not drawn


def test_a_speedup_chart_of_many_shapes_is_a_point_per_shape_and_baseline(tmp_path, capsys, monkeypatch):
    """Past MAX_BARS shapes the labelled bars (2,000 shapes: 39 s to draw, unreadable) become a point per
    shape and baseline, every shape's speedups in it; at the cap, the bars as before."""
    _store(tmp_path).close()
    drawn = {}
    real = plots.summary_speedup

    def spy(bars, providers, kernel, path):
        drawn.update(bars=bars, providers=providers)
        return real(bars, providers, kernel, path)

    monkeypatch.setattr(plots, "summary_speedup", spy)
    monkeypatch.setattr(plots, "MAX_BARS", len(SHAPES) - 1)
    assert _plot(capsys, tmp_path)[0] == 0
    assert len(drawn["bars"]) == len(SHAPES) and drawn["providers"]
    assert all(speed > 0 for speeds in drawn["bars"].values() for speed in speeds.values())
    _assert_image(tmp_path / "plots" / "speedup_softmax.png")
    monkeypatch.setattr(plots, "MAX_BARS", len(SHAPES))
    drawn.clear()
    assert _plot(capsys, tmp_path)[0] == 0 and not drawn


def test_a_heatmap_cell_holds_the_best_config_with_its_two_values():
    """Two configs share a (num_warps, BLOCK_SIZE) cell, apart in num_stages: the cell shows the faster
    (100% of the best), as the plot's title says; it showed the slower (50%) before."""
    import pandas as pd

    ours = pd.DataFrame({"id": [1, 2, 3], "trial_key": ["a", "b", "c"], "phase": ["screen"] * 3,
                         "p50_us": [10.0, 20.0, 40.0],
                         "config": ['{"num_warps": 4, "BLOCK_SIZE": 1024, "num_stages": 1}',
                                    '{"num_warps": 4, "BLOCK_SIZE": 1024, "num_stages": 2}',
                                    '{"num_warps": 8, "BLOCK_SIZE": 1024, "num_stages": 1}']})
    cells = [(4, 1024), (8, 1024), (8, 2048)]
    values = plots._percent_of_best(ours, cells, ("num_warps", "BLOCK_SIZE"))
    assert values[:2] == [100.0, 25.0] and np.isnan(values[2])


def test_a_roofline_of_many_groups_keeps_its_layout(tmp_path):
    """120 (dtype, shape) groups: the legend names the markers, not 360 (group, provider) entries that
    made it taller than the figure (matplotlib: "constrained_layout not applied because axes sizes
    collapsed to zero"); no warning reaches the terminal."""
    shapes = tuple((rows, 256 * i) for rows in (1024, 8192) for i in range(1, 31))
    store = ResultStore(tmp_path / "r.sqlite")
    for dtype in ("float16", "bfloat16"):
        softmax_sweep(store, "s", shapes=shapes, space={"BLOCK_SIZE": (8192,), "num_warps": (4,)},
                      finalists=False, dtype=dtype)
    frame = store.load(sweep_id="s")
    store.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert plots.roofline(frame, PEAKS, tmp_path / "roofline.png", "many") is None
    assert [str(w.message) for w in caught] == []
    _assert_image(tmp_path / "roofline.png")


def test_the_font_cache_built_at_the_first_plot_is_not_said_among_the_sweep_s_lines(tmp_path):
    """A machine's first plot builds matplotlib's font cache, which matplotlib says at INFO; the sweep's
    logging (Hydra's) prints INFO, so the plots keep that logger at WARNING."""
    _store(tmp_path, shapes=SHAPES[:1]).close()
    code = ("import logging, sys; logging.basicConfig(level=logging.INFO); "
            "from triton_sweep import plot; "
            f"sys.exit(plot.main(['--store={tmp_path}/r.sqlite', '--sweep-id=s', '--out={tmp_path}/plots']))")
    cache = tmp_path / "matplotlib"  # a fresh one: the cache is built in this run
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=user_env(MPLCONFIGDIR=str(cache)), timeout=300)
    assert result.returncode == 0, result.stderr
    assert list(cache.glob("fontlist-*.json"))  # built here
    assert "fontManager" not in result.stderr + result.stdout and "INFO" not in result.stderr


@pytest.mark.parametrize("damage", ["kernel", "samples_us"])
def test_a_row_merged_in_that_no_sweep_writes_is_named_and_nothing_is_drawn(tmp_path, capsys, monkeypatch,
                                                                             damage):
    """A kernel named ../../evil (it would name heatmap_../../evil.png, outside outputs/), or a samples
    blob of odd length: exit 2, one line naming the row and field, no PNG anywhere."""
    store = _store(tmp_path, **({"kernel": "../../evil"} if damage == "kernel" else {}))
    store.close()
    if damage == "samples_us":
        import sqlite3

        db = sqlite3.connect(tmp_path / "r.sqlite")
        db.execute("UPDATE trials SET samples_us = x'0102030405' WHERE id = 3")
        db.commit()
        db.close()
    (tmp_path / "a" / "b").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a" / "b")
    status = plot.main([f"--store={tmp_path}/r.sqlite", "--sweep-id=s"])  # default --out: outputs/plots/s
    out = capsys.readouterr()
    (line,) = out.err.splitlines()
    assert status == 2 and out.out == "" and f"row {1 if damage == 'kernel' else 3}" in line
    assert f"{damage}:" in line and "a row no sweep writes" in line
    assert not list(tmp_path.rglob("*.png"))


def test_the_command_reads_only_what_it_plots_and_draws_what_every_column_draws(tmp_path, capsys):
    """plot loads PLOT_COLUMNS (no samples): the same PNGs, byte for byte, as render given every column
    (event_p50_us set: the speedups are its ratios, not the p50s')."""
    store = _store(tmp_path, event_p50_us=5.0)
    full = store.load(sweep_id="s")
    drawn = plots.render(full, tmp_path / "every", plots.ceilings(full, store))
    store.close()
    status, out, _ = _plot(capsys, tmp_path)
    assert status == 0 and len(drawn) == 3 and "samples_us" not in plot.READ
    for path in drawn:
        assert (tmp_path / "plots" / path.name).read_bytes() == path.read_bytes(), path.name

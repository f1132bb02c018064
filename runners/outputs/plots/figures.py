"""The plots of one sweep, as PNG, drawn from its rows: for the end of a sweep (runners/outputs/finisher.py)
and for the command `python -m triton_sweep.plot` (runners/plot.py).
- roofline.png: achieved TFLOP/s against arithmetic intensity under the device's measured ceilings (copy
  bandwidth, cuBLAS matmul per dtype); every ok config of ours a grey dot, each winner a star, the
  baselines a marker per provider, one colour per (kernel, dtype, shape).
- heatmap_<kernel>.png: % of the best p50 over two meta-parameters (the two with the most values, or
  --x and --y), a panel per (dtype, shape), each cell the best config with those two values; past
  MAX_PANELS, one panel per dtype (heatmap says why).
- speedup_<kernel>.png: the end-to-end speedup of our winner over each baseline per (dtype, shape).
Winners and baselines are the end table's (runners/outputs/table/report.py); a plot with nothing to show is
skipped with a line saying why. Drawn on matplotlib's Agg canvas through `Figure` (no pyplot, no global
state), matplotlib imported when a plot is drawn."""
from __future__ import annotations

import functools
import io
import json
import math
from pathlib import Path
from typing import Callable, Optional

import pandas as pd

from triton_sweep.model.files import write_atomic
from triton_sweep.model.finalists import winners
from triton_sweep.model.trial import TRITON_PROVIDER
from triton_sweep.outputs.output import DEFAULT_STORE, shown
from triton_sweep.outputs.table.report import speedups
from triton_sweep.store.result_store import ResultStore, shape_label
from triton_sweep.store.schema import PEAK_KEY

DPI = 110
MAX_PANELS = 12  # heatmap panels of one figure; past it, the summary (one panel a dtype)
MAX_BARS = 60  # (dtype, shape)s of a speedup chart drawn as labelled bars; past it, a point each (summary)
BASELINE_MARKERS = "osD^vP<>hX"
# Roofline groups named in its legend, a colour each (tab10's); past them the legend names the markers
# alone: 120 groups' 480 entries made a legend taller than the figure, and its layout collapse.
LEGEND_GROUPS = 10
# The columns the plots read (render, ceilings: the device's PEAK_KEY too), all the command loads of a store.
PLOT_COLUMNS = ("id", "trial_key", "sweep_id", "kernel", "provider", "shape", "dtype", "config", "status",
                "phase", "chosen", "p50_us", "event_p50_us", "gbps", "tflops", "pct_copy_bw", "pct_matmul",
                "backend", *PEAK_KEY)


class PlotError(ValueError):
    """Bad input (an unknown meta-parameter for --x/--y); the message names the argument."""


class NothingToShow(Exception):
    """A plot without the data it needs; the message says what is missing."""


def _pct(value: float) -> str:
    return f"{value:.0f}"


def _newest(rows: pd.DataFrame) -> pd.DataFrame:
    """Each trial's row to plot: its newest finalist row where it has one, else its newest row."""
    rows = rows.assign(_final=rows["phase"] == "final").sort_values(["_final", "id"])
    return rows.groupby("trial_key", sort=False).tail(1).drop(columns="_final").sort_values("id")


def _groups(frame: pd.DataFrame):
    """(kernel, dtype, shape) -> (each ok config of ours once: _newest, the baselines' rows to use, our
    winner's row or None); the newest rows picked once for the whole frame, not per group."""
    ok = frame[frame["status"] == "ok"]
    keys = ["kernel", "dtype", "shape"]
    newest = _newest(ok)
    mine = newest["provider"] == TRITON_PROVIDER
    shown = dict(tuple(newest[mine].groupby(keys, sort=False)))
    baselines = newest[~mine].groupby([*keys, "provider"], sort=False).tail(1)  # the newest of each
    theirs = dict(tuple(baselines.groupby(keys, sort=False)))
    ours = ok[ok["provider"] == TRITON_PROVIDER]
    won = {(kernel, dtype, shape): index for (kernel, dtype), rows in ours.groupby(["kernel", "dtype"])
           for shape, index in winners(rows).items()}  # one pass a (kernel, dtype), not one a shape
    none = newest.iloc[:0]
    for key in ok.groupby(keys, sort=False).groups:
        best = ok.loc[won[key]] if key in won else None
        yield key, shown.get(key, none), theirs.get(key, none), best


def _configs(texts: pd.Series) -> list[dict]:
    """Each row's config, each distinct JSON text parsed once (a sweep has far fewer configs than rows)."""
    return [_config(text) for text in texts]


@functools.lru_cache(maxsize=1 << 14)
def _config(text: str) -> dict:  # read, never changed: one dict for every row of a config
    return json.loads(text)


def ceilings(frame: pd.DataFrame, store: Optional[ResultStore]) -> dict:
    """The measured ceilings of the GPU of the newest GPU row: from the store's device_peaks, else
    derived from the rows' % of peak (gbps / pct_copy_bw, tflops / pct_matmul). {} for interpreter rows."""
    gpu_rows = frame[frame["backend"] == "cuda"]
    if gpu_rows.empty:
        return {}
    newest = gpu_rows.loc[gpu_rows["id"].idxmax()]
    peaks = store.peaks(newest.to_dict()) if store is not None else None
    if peaks:
        return peaks
    same_gpu = gpu_rows[gpu_rows["gpu_name"] == newest["gpu_name"]]
    derived = {}
    copy = (100 * same_gpu["gbps"] / same_gpu["pct_copy_bw"]).dropna()
    if not copy.empty:
        derived["copy_gbps"] = float(copy.median())
    for dtype, rows in same_gpu.groupby("dtype"):
        matmul = (100 * rows["tflops"] / rows["pct_matmul"]).dropna()
        if not matmul.empty:
            derived[f"matmul_tflops_{dtype}"] = float(matmul.median())
    return derived


def _figure(width: float, height: float):
    import logging

    # matplotlib's first use on a machine builds its font cache and says so at INFO, which the sweep's
    # logging (Hydra's, at INFO) would print among its lines; its warnings still show.
    logging.getLogger("matplotlib.font_manager").setLevel(logging.WARNING)
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def _save(fig, path: Path) -> None:
    """The figure as a PNG at path, written whole (runners/model/files.py)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    write_atomic(path, buffer.getvalue())


def roofline(frame: pd.DataFrame, peaks: dict, path: Path, title: str,
             groups: Optional[list] = None) -> Optional[str]:
    """Draw the roofline to path; returns why it was skipped, or None. `groups`: _groups's, if known."""
    import numpy as np
    from matplotlib import colormaps

    points = frame[(frame["status"] == "ok") & (frame["gbps"] > 0) & (frame["tflops"] > 0)]
    if points.empty:
        return "no ok trial with a FLOP and a byte count"
    fig = _figure(9, 6)
    ax = fig.subplots()
    colours = colormaps["tab10"]
    intensity = lambda rows: 1000 * rows["tflops"] / rows["gbps"]  # (TFLOP/s) / (GB/s) = 1000 FLOP/byte
    low, high = intensity(points).min() / 4, intensity(points).max() * 4
    tops = [points["tflops"].max()]
    copy = peaks.get("copy_gbps")
    dtypes = sorted(points["dtype"].unique())
    ceiling_text = []
    if copy:
        ceiling_text.append(f"copy {copy:.0f} GB/s")
        for dtype in dtypes:
            matmul = peaks.get(f"matmul_tflops_{dtype}")
            if matmul:
                high = max(high, 4 * 1000 * matmul / copy)  # show the ridge point
                ceiling_text.append(f"matmul {dtype} {matmul:.0f} TFLOP/s")
        x = np.geomspace(low, high, 200)
        roofs = [(d, peaks[f"matmul_tflops_{d}"]) for d in dtypes if peaks.get(f"matmul_tflops_{d}")]
        for i, (dtype, matmul) in enumerate(roofs):  # the roof: the lower of the two ceilings
            ax.plot(x, np.minimum(copy * x / 1000, matmul), color="black", lw=1.2, ls=["-", "--", ":"][i % 3],
                    label=f"measured: copy {copy:.0f} GB/s, cuBLAS {dtype} {matmul:.0f} TFLOP/s")
            tops.append(matmul)
        if not roofs:
            ax.plot(x, copy * x / 1000, color="black", lw=1.2, label=f"measured copy {copy:.0f} GB/s")
    groups = list(_groups(frame)) if groups is None else groups
    markers, named = _markers(ax, groups)
    for i, ((kernel, dtype, shape), ours, baselines, best) in enumerate(groups):
        colour = colours(i % 10)
        name = f"{kernel} {dtype} {shape_label(shape)}"
        ours = ours[(ours["gbps"] > 0) & (ours["tflops"] > 0)]
        ax.scatter(intensity(ours), ours["tflops"], s=12, color="grey", alpha=0.4, lw=0)
        if best is not None and best["gbps"] > 0 and best["tflops"] > 0:
            ax.scatter([1000 * best["tflops"] / best["gbps"]], [best["tflops"]], marker="*", s=220,
                       color=colour, edgecolor="black", lw=0.6, zorder=3,
                       label=f"{name}: ours (best)" if named else None)
        for _, row in baselines.iterrows():
            if row["gbps"] > 0 and row["tflops"] > 0:
                ax.scatter([1000 * row["tflops"] / row["gbps"]], [row["tflops"]], s=60, color=colour,
                           marker=markers[row["provider"]], edgecolor="black", lw=0.5, zorder=3,
                           label=f"{name}: {row['provider']}" if named else None)
    ax.set(xscale="log", yscale="log", xlim=(low, high), ylim=(points["tflops"].min() / 4, max(tops) * 2),
           xlabel="arithmetic intensity (FLOP per byte moved)", ylabel="achieved TFLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    note = "ceilings measured: " + ", ".join(ceiling_text) if ceiling_text else "no measured ceilings"
    ax.set_title(f"{title}\n{note}\ngrey: every ok config of ours", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", ncol=1 + len(ax.get_legend_handles_labels()[1]) // 14)
    _save(fig, path)
    return None


def _markers(ax, groups: list) -> tuple[dict, bool]:
    """Each baseline provider's marker, and whether the roofline's legend names every group (at most
    LEGEND_GROUPS); past them, the legend names the markers alone: grey stand-ins, drawn nowhere."""
    providers = dict.fromkeys(p for _, _, baselines, _ in groups for p in baselines["provider"])
    markers = {p: BASELINE_MARKERS[j % len(BASELINE_MARKERS)] for j, p in enumerate(providers)}
    if len(groups) <= LEGEND_GROUPS:
        return markers, True
    ax.scatter([], [], marker="*", s=220, color="lightgrey", edgecolor="black", lw=0.6,
               label=f"ours (best) at each of {len(groups)} (kernel, dtype, shape)s, colours repeating")
    for provider, marker in markers.items():
        ax.scatter([], [], s=60, color="lightgrey", marker=marker, edgecolor="black", lw=0.5, label=provider)
    return markers, False


def _flags(x: str, y: str) -> str:
    return f"name them: --x {x} --y {y}"  # the plot command's own


def meta_axes(ours: pd.DataFrame, x: Optional[str], y: Optional[str], kernel: str,
              name_axes: Callable[[str, str], str] = _flags) -> tuple[str, str]:
    """The two meta-parameters of the heatmap: as asked, else the two with the most distinct values.
    PlotError for an unknown name, NothingToShow when there is no second one (saying, through
    `name_axes`, how to draw it with one that does not vary)."""
    configs = _configs(ours["config"])
    distinct = {}
    for config in configs:
        for name, value in config.items():
            distinct.setdefault(name, set()).add(value)
    for flag, name in (("--x", x), ("--y", y)):
        if name is not None and name not in distinct:
            raise PlotError(f"{flag}: {name!r} is not a meta-parameter of {kernel} "
                            f"(it has {', '.join(distinct) or 'none'})")
    if x is not None and x == y:
        raise PlotError(f"--x and --y: both are {x!r}; choose two meta-parameters")
    varying = sorted((n for n in distinct if len(distinct[n]) > 1 and n not in (x, y)),
                     key=lambda n: -len(distinct[n]))  # stable: ties keep the config's order
    chosen = [n for n in (x, y) if n is not None]
    chosen += varying[:2 - len(chosen)]
    if len(chosen) < 2:
        fixed = [n for n in distinct if n not in chosen]
        named = f" ({name_axes(*(chosen + fixed)[:2])})" if len(distinct) >= 2 else ""
        raise NothingToShow(f"{kernel} varies only {', '.join(chosen) or 'no meta-parameter'} in this sweep; "
                            f"a heatmap needs two{named}")
    if x is None and y is not None:
        chosen.reverse()  # keep y on the y axis
    return chosen[0], chosen[1]


def heatmap(frame: pd.DataFrame, kernel: str, path: Path, x: Optional[str] = None,
            y: Optional[str] = None, name_axes: Callable[[str, str], str] = _flags,
            groups: Optional[list] = None) -> Optional[str]:
    """Draw the kernel's heatmaps to path; returns why it was skipped, or None. `groups`: _groups's.

    Each cell holds the best config with those two values (the best over the other meta-parameters;
    100 = the fastest config of ours at that shape); empty cells were pruned or failed. Past MAX_PANELS
    (dtype, shape)s, one panel per dtype instead: shapes along x, the (y, x) pairs along y, no numbers
    in the cells (a grid of 120 panels took 14 s to draw and came out unreadable)."""
    import numpy as np
    from matplotlib.patches import Rectangle

    rows = frame[(frame["kernel"] == kernel) & (frame["provider"] == TRITON_PROVIDER)]
    if rows.empty:
        return f"no config of {kernel} in this sweep"
    try:
        x, y = meta_axes(rows, x, y, kernel, name_axes)
    except NothingToShow as reason:
        return str(reason)
    configs = _configs(rows["config"])
    x_values = sorted({c.get(x) for c in configs} - {None})
    y_values = sorted({c.get(y) for c in configs} - {None})
    panels = [(key, ours, best) for key, ours, _, best in (_groups(frame) if groups is None else groups)
              if key[0] == kernel and not ours.empty]
    if not panels:
        return f"no ok config of {kernel}"
    if len(panels) > MAX_PANELS:
        return summary_heatmap(panels, kernel, path, x, y)
    columns = min(3, len(panels))
    lines = math.ceil(len(panels) / columns)
    fig = _figure(max(4.5, 0.9 * len(x_values) + 2.5) * columns, max(3.5, 0.5 * len(y_values) + 2) * lines)
    axes = np.atleast_1d(fig.subplots(lines, columns, squeeze=False)).ravel()
    image = None
    cells = [(y_value, x_value) for y_value in y_values for x_value in x_values]
    for ax, ((_, dtype, shape), ours, best) in zip(axes, panels):
        best_p50 = ours["p50_us"].min()
        grid = np.array(_percent_of_best(ours, cells, (y, x))).reshape(len(y_values), len(x_values))
        image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", vmin=0, vmax=100, origin="lower",
                          aspect="auto")
        for (i, j), value in np.ndenumerate(grid):
            ax.text(j, i, "-" if np.isnan(value) else _pct(value), ha="center", va="center", fontsize=8,
                    color="white" if not np.isnan(value) and value < 60 else "black")
        config = json.loads(best["config"]) if best is not None else {}
        if config.get(x) in x_values and config.get(y) in y_values:
            ax.add_patch(Rectangle((x_values.index(config[x]) - 0.5, y_values.index(config[y]) - 0.5), 1, 1,
                                   fill=False, edgecolor="red", lw=2))
        ax.set_xticks(range(len(x_values)), [str(v) for v in x_values])
        ax.set_yticks(range(len(y_values)), [str(v) for v in y_values])
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.set_title(f"{dtype} {shape_label(shape)}: best {best_p50:.2f} us", fontsize=9)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    fig.colorbar(image, ax=axes[:len(panels)].tolist(), label="% of the best p50 (100 = fastest)")
    fig.suptitle(f"{kernel}: % of the best p50 by {x} and {y} (each cell: the best over the other "
                 "meta-parameters; red: the winner; -: pruned or failed)", fontsize=10)
    _save(fig, path)
    return None


def _percent_of_best(ours: pd.DataFrame, cells: list, axes: tuple) -> list:
    """% of the best p50 at each (y value, x value) cell: the best config with those two values (ours:
    each config once, _groups)."""
    best_p50 = ours["p50_us"].min()
    found: dict = {}
    for config, p50 in zip(_configs(ours["config"]), ours["p50_us"]):
        cell = (config.get(axes[0]), config.get(axes[1]))
        found[cell] = max(found.get(cell, 0.0), 100 * best_p50 / p50)
    return [found.get(cell, float("nan")) for cell in cells]


def summary_heatmap(panels: list, kernel: str, path: Path, x: str, y: str) -> None:
    """The heatmap of many shapes: one panel per dtype, its shapes along x (as the sweep ordered them),
    every (y, x) pair measured along y, the winner of each shape framed."""
    import numpy as np

    dtypes = list(dict.fromkeys(dtype for (_, dtype, _), _, _ in panels))
    cells = sorted({(c.get(y), c.get(x)) for _, ours, _ in panels for c in _configs(ours["config"])
                    if c.get(x) is not None and c.get(y) is not None})
    widest = max(sum(1 for (_, d, _), _, _ in panels if d == dtype) for dtype in dtypes)
    fig = _figure(min(30.0, max(8.0, 0.14 * widest + 3)), (0.22 * len(cells) + 1.8) * len(dtypes))
    axes = np.atleast_1d(fig.subplots(len(dtypes), 1, squeeze=False)).ravel()
    image = None
    for ax, dtype in zip(axes, dtypes):
        mine = [(shape, ours, best) for (_, d, shape), ours, best in panels if d == dtype]
        grid = np.array([_percent_of_best(ours, cells, (y, x)) for _, ours, _ in mine]).T
        image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", vmin=0, vmax=100, origin="lower",
                          aspect="auto", interpolation="nearest")
        won = [_config(best["config"]) if best is not None else {} for _, _, best in mine]
        won = [(column, cells.index((c.get(y), c.get(x)))) for column, c in enumerate(won)
               if (c.get(y), c.get(x)) in cells]
        if won:  # one collection of every winner's frame, not a collection each
            ax.scatter(*zip(*won), s=12, marker="s", facecolors="none", edgecolors="red", linewidths=1)
        step = max(1, len(mine) // 40)  # at most ~40 labels along x
        ax.set_xticks(range(0, len(mine), step), [shape_label(s) for s, _, _ in mine][::step], rotation=90,
                      fontsize=6)
        ax.set_yticks(range(len(cells)), [f"{y}={a} {x}={b}" for a, b in cells], fontsize=6)
        ax.set_title(f"{dtype}: {len(mine)} shapes", fontsize=9)
    fig.colorbar(image, ax=axes.tolist(), label="% of the best p50 (100 = fastest)")
    fig.suptitle(f"{kernel}: % of the best p50 at each shape by {y} and {x}\n(each cell: the best over the "
                 "other meta-parameters; red: the winner; blank: pruned or failed)", fontsize=10)
    _save(fig, path)


def speedup(frame: pd.DataFrame, kernel: str, path: Path, groups: Optional[list] = None) -> Optional[str]:
    """Draw the kernel's speedups over its baselines to path; returns why it was skipped, or None. Past
    MAX_BARS (dtype, shape)s, a point per shape and baseline, the shapes along x (summary_speedup)."""
    import numpy as np

    bars = {}  # (dtype, shape text) -> {provider: speedup}
    for (name, dtype, shape), _, baselines, best in _groups(frame) if groups is None else groups:
        if name == kernel and best is not None and not baselines.empty:
            bars[(dtype, shape_label(shape))] = {row["provider"]: speedups(row, best)[0]
                                                 for _, row in baselines.iterrows()}
    if not bars:
        return f"no shape of {kernel} where both a config of ours and a baseline are ok"
    providers = sorted({p for speeds in bars.values() for p in speeds})
    if len(bars) > MAX_BARS:
        return summary_speedup(bars, providers, kernel, path)
    fig = _figure(max(6.0, 1.2 * len(bars) * len(providers) + 2), 4.5)
    ax = fig.subplots()
    width = 0.8 / len(providers)
    for i, provider in enumerate(providers):
        values = [speeds.get(provider, np.nan) for speeds in bars.values()]
        positions = np.arange(len(bars)) + (i - (len(providers) - 1) / 2) * width
        drawn = ax.bar(positions, values, width, label=f"vs {provider}")
        ax.bar_label(drawn, labels=["" if np.isnan(v) else f"{v:.2f}x" for v in values], fontsize=7)
    ax.axhline(1.0, color="black", lw=1)
    ax.set_xticks(range(len(bars)), [f"{dtype}\n{shape}" for dtype, shape in bars])
    ax.set_ylabel("end-to-end speedup (> 1: ours faster)")
    ax.set_title(f"{kernel}: speedup of the best config over each baseline", fontsize=10)
    ax.legend(fontsize=8)
    _save(fig, path)
    return None


def summary_speedup(bars: dict, providers: list, kernel: str, path: Path) -> None:
    """The speedups of many shapes: a point per shape and baseline, the shapes along x as the sweep
    ordered them (about 40 named), no numbers (2,000 labelled bars took 39 s to draw, unreadable)."""
    import numpy as np

    fig = _figure(min(30.0, max(8.0, 0.14 * len(bars) + 3)), 4.5)
    ax = fig.subplots()
    for provider in providers:
        ax.plot(np.arange(len(bars)), [speeds.get(provider, np.nan) for speeds in bars.values()], ".",
                ms=3, label=f"vs {provider}")
    ax.axhline(1.0, color="black", lw=1)
    step = max(1, len(bars) // 40)
    ax.set_xticks(range(0, len(bars), step), [f"{d} {s}" for d, s in bars][::step], rotation=90, fontsize=6)
    ax.set_ylabel("end-to-end speedup (> 1: ours faster)")
    ax.set_title(f"{kernel}: speedup of the best config over each baseline, {len(bars)} shapes", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    _save(fig, path)


def render(frame: pd.DataFrame, out_dir: str | Path, peaks: dict, x: Optional[str] = None,
           y: Optional[str] = None, say: Callable[[str], None] = print,
           name_axes: Callable[[str, str], str] = _flags) -> list[Path]:
    """Every plot of the rows in frame (one sweep) into out_dir; returns the paths written. Plots with
    nothing to show are skipped with one line each through say(); `name_axes(x, y)`: how the reader
    draws a heatmap of those axes (the plot command's flags, or the command itself)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sweeps = ", ".join(sorted(frame["sweep_id"].unique()))
    gpus = ", ".join(sorted(frame["gpu_name"].unique()))
    title = f"sweep {sweeps} on {gpus}"
    groups = list(_groups(frame))  # once for every plot
    jobs = [("roofline", out_dir / "roofline.png", lambda p: roofline(frame, peaks, p, title, groups))]
    for kernel in frame["kernel"].unique():
        jobs += [(f"heatmap of {kernel}", out_dir / f"heatmap_{kernel}.png",
                  lambda p, k=kernel: heatmap(frame, k, p, x, y, name_axes, groups)),
                 (f"speedup of {kernel}", out_dir / f"speedup_{kernel}.png",
                  lambda p, k=kernel: speedup(frame, k, p, groups))]
    written = []
    for name, path, draw in jobs:
        reason = draw(path)
        if reason is None:
            written.append(path)
        else:
            say(f"plot skipped: {name}: {reason}")
    return written


def plots_for_sweep(store_path: str | Path, sweep_id: str, frame: pd.DataFrame,
                    out_dir: str | Path) -> list[Path]:
    """The end of a sweep: render() with the store's ceilings. Every measured row is in the store, the
    parquet file and the export by then, so whatever stops the plots (no matplotlib, an unwritable
    directory, an older matplotlib than pyproject asks for) costs the plots only: one line says why,
    and the sweep's exit status stays that of its measuring."""
    store = ResultStore(store_path)
    where = "" if shown(store_path) == DEFAULT_STORE else f" --store {shown(store_path)}"

    def name_axes(x: str, y: str) -> str:
        return f"triton-sweep-plot --sweep-id {sweep_id}{where} --x {x} --y {y} draws it"

    try:
        paths = render(frame, out_dir, ceilings(frame, store), name_axes=name_axes)
    except ImportError as error:
        print(f"warning: plots skipped: {error} (pip install matplotlib)")
        return []
    except OSError as error:
        print(f"warning: plots skipped: cannot write to {shown(out_dir)}: {error}")
        return []
    except Exception as error:  # a plotting bug or a library mismatch; triton-sweep-plot shows where
        print(f"warning: plots skipped: {type(error).__name__}: {error} (triton-sweep-plot shows where)")
        return []
    finally:
        store.close()
    if paths:
        print(f"plots: {', '.join(p.name for p in paths)} in {shown(out_dir)}")
    return paths


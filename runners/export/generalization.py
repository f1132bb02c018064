"""How well an export holds between the shapes it measured: the leave-one-out estimate printed at export
and stored in each (GPU, dtype) section as "leave_one_out".

Each measured point of the export key is left out in turn; the export built from the other shapes then
picks a config at each left-out shape with the exported module's own lookup code (runtime.py: _kept for
the prune, _choice for config_for), knowing only what the module would know there. What the sweep
measured at the left-out shape scores the pick, never steers it: the best p50 there over the pick's, a
pick good at or above 1 - tolerance (leave_one_out says how each path is scored). Leaving a point out
opens a hole twice the grid's spacing, so the estimate is for a grid of half the density: cautious
between measured points, silent beyond the measured range. The same estimate decides, per (GPU, dtype),
whether the module looks the two kinds of size (multiples of 16 and not) up apart (estimate).
A GPU's whole section is built here (gpu_section): provenance, covering sets (cover.py), the estimate."""
from __future__ import annotations

import datetime
import math
import multiprocessing
import os
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from triton_sweep.export.runtime import ALIGNMENT, _is_aligned
from triton_sweep.export.cover import Measured
from triton_sweep.export.heldout import Picks
from triton_sweep.export.render import LAUNCH_OPTIONS

PROVENANCE = ("timing_method", "driver_version", "cuda_version", "torch_version", "triton_version",
              "kernel_hash")

INTERPRET = "interpret"  # the backend of interpreter rows, and the `backend` of their section
PATHS = ("autotune", "config_for")  # the two ways a module picks a config, as the line names them


def as_triton_config(config: dict):
    """A stored config as the module holds it: a triton.Config."""
    import triton

    return triton.Config({k: v for k, v in config.items() if k not in LAUNCH_OPTIONS},
                         **{k: config[k] for k in LAUNCH_OPTIONS if k in config})


# What autotune does with a config it times at a left-out shape, by the status the sweep recorded there:
# it skips one that fails to compile or run out of resources (Triton's autotuner times those as inf);
# one that ran but was wrong there (or that the kernel's own constraints refused, and so was never
# checked) it may pick, since it never checks results: the estimate counts that as a miss.
WRONG_THERE = ("incorrect", "crashed", "pruned")


def _figure(measured: Measured, key: Optional[str], shape: tuple, status: str = "ok") -> dict:
    """The pick `key` at the left-out shape: its % of the best measured there; 0 with the pick's status
    where it was not ok there (a miss), or where nothing was picked (the module would have raised)."""
    if key is None:
        return {"config": None, "pct_of_best": 0.0}
    config = measured.configs[key]["config"]
    if status != "ok":
        return {"config": config, "pct_of_best": 0.0, "status": status}
    best = float(np.nanmin(measured.ok_array[measured.index[shape]]))
    return {"config": config, "pct_of_best": round(100 * best / measured.p50_at(key, shape), 2)}


def estimate(measured: Measured, tolerance: float, dims: tuple, key_dims: list[str],
             lookup: Optional["Lookup"] = None) -> dict:
    """The leave-one-out estimate of one (GPU, dtype), with "aligned_apart": whether the module looks the
    kinds of size up apart; where both kinds were measured, "apart_at": at how many left-out points the
    shapes outside the point's fold chose apart, and "together": the summary had every point looked up
    together.

    Where both kinds of size were measured in a key dim (multiples of 16 and not: runtime.ALIGNMENT),
    the shapes around a left-out one can be taken among all the measured shapes or among those of its kind
    alone. The module looks sizes up apart (ALIGNED_APART) where the estimate of all points is higher so (the
    mean log figure over both paths). The figure reported at each left-out point is that of the way the
    shapes outside its fold (FOLDS: a fold is a point up to that many points) chose, by the same comparison
    over them alone, so that the choice never sees the point it is scored on. Apart, each kind's grid is the
    sparser, so apart wins only where the kinds' best configs differ (layernorm's on an H200: BENCHMARKS.md,
    E9)."""
    lookup = lookup or Lookup()
    together = leave_one_out(measured, tolerance, dims, key_dims, lookup=lookup)
    both_kinds = any(len({_is_aligned(shape[dims.index(dim)]) for shape in measured.shapes}) == 2
                     for dim in key_dims)
    if not (both_kinds and together["shapes"]):
        return {**together, "aligned_apart": False}
    apart = leave_one_out(measured, tolerance, dims, key_dims, apart=True, lookup=lookup)
    # The figure at a left-out point is that of the way the shapes outside its fold chose (their own
    # leave-one-out, both ways): choosing by the better of two estimates on the same points would
    # report the better of two draws.
    by_point = _by_point(together, dims, key_dims)
    points = sorted(by_point)
    folds = [points[start::FOLDS] for start in range(min(FOLDS, len(points)))]
    rests = [measured.without([tuple(e["shape"]) for point in fold for e in by_point[point]])
             for fold in folds]
    choices = {}  # point -> whether the shapes outside its fold chose apart
    for fold, inner in zip(folds, _inner_estimates(rests, len(points), tolerance, dims, key_dims, lookup)):
        choices.update(dict.fromkeys(fold, bool(inner[1]["shapes"]) and _score(inner[1]) > _score(inner[0])))
    apart_by_point = _by_point(apart, dims, key_dims)
    chosen = [entry for point in by_point
              for entry in (apart_by_point if choices[point] else by_point)[point]]
    result = {**together, "shapes": chosen, "aligned_apart": _score(apart) > _score(together),
              "apart_at": sum(choices.values()), "points": len(points), "together": together["summary"]}
    result["summary"] = {path: _summary(result, path) for path in PATHS}
    result["advice"] = _advice(result, dims, measured.shapes)
    return result


# The points are dealt, in the order of their values, into at most this many folds; the choice at every
# point of a fold is made by the estimate of the shapes outside it (both ways), which sees none of the
# points it chooses for. One fold a point grows with the cube of the points: 0.5 s
# of export at 15 shapes of two dtypes, 29.8 s at 120 (`python -m triton_sweep.benchmarks.bench_export_scale`,
# this project's CPU host), 2.3-3.1 s of an H100 host's finish at 30 points; FOLDS of them grow as the
# estimate itself does (about linearly since issue 76). Up to FOLDS points, a fold is a point.
FOLDS = 8
# The inner estimates (one a fold, each a leave-one-out of the shapes outside it, both ways) are spread
# over forked processes, one a core this process may use, from this many points on.
PARALLEL_FROM_POINTS = 24
_inner_work: Optional[tuple] = None  # what the forked processes of _inner_estimates read (inherited)


def _inner(task: tuple[int, bool]) -> dict:
    rests, tolerance, dims, key_dims, lookup = _inner_work
    index, apart = task
    return leave_one_out(rests[index], tolerance, dims, key_dims, apart=apart, lookup=lookup)


def _inner_estimates(rests: list, points: int, tolerance: float, dims: tuple, key_dims: list[str],
                     lookup: "Lookup") -> list[list[dict]]:
    """Each of `rests`' own leave-one-out, together and apart, in order: here, or from
    PARALLEL_FROM_POINTS `points` on in processes forked from this one, one estimate a task (they
    inherit the rows and the kernel's rule, which need not pickle, and send their figures back: the
    same figures)."""
    global _inner_work
    tasks = [(index, apart) for index in range(len(rests)) for apart in (False, True)]
    processes = min(len(tasks), len(os.sched_getaffinity(0)))
    _inner_work = (rests, tolerance, dims, key_dims, lookup)
    try:
        if points < PARALLEL_FROM_POINTS or processes < 2:
            figures = [_inner(task) for task in tasks]
        else:
            with multiprocessing.get_context("fork").Pool(processes) as pool:
                figures = pool.map(_inner, tasks, chunksize=1)
    finally:
        _inner_work = None
    return [figures[index:index + 2] for index in range(0, len(figures), 2)]


def _by_point(result: dict, dims: tuple, key_dims: list[str]) -> dict[tuple, list]:
    """The left-out entries of a result grouped by their point of the key."""
    points: dict[tuple, list] = {}
    for entry in result["shapes"]:
        points.setdefault(tuple(entry["shape"][dims.index(d)] for d in key_dims), []).append(entry)
    return points


def _score(result: dict) -> float:
    """The mean log figure over both paths and every left-out shape (no config, or one not ok there: 1%)."""
    figures = [max(entry[path]["pct_of_best"], 1.0) for entry in result["shapes"] for path in PATHS]
    return sum(map(math.log, figures)) / len(figures) if figures else -math.inf


class Lookup:
    """What the module would know at a shape it never measured, and what happened there: `rule` (the
    kernel's constraints, (shape, dtype, config) -> the reason it cannot run or None), played as the
    `check` a caller passes (none where the export has no spec of the kernel); `statuses`, (canonical
    config, shape) -> the status the sweep recorded there, for the picks that were not ok."""

    def __init__(self, rule=None, dtype: Optional[str] = None, statuses: Optional[dict] = None):
        self.rule, self.dtype, self.statuses = rule, dtype, statuses or {}

    def passes(self, config: dict, shape: tuple) -> bool:
        return self.rule is None or self.rule(shape, self.dtype, config) is None

    def status(self, measured: Measured, key: str, shape: tuple) -> str:
        if measured.p50_at(key, shape) is not None:
            return "ok"
        return self.statuses.get((key, shape), "not measured")


def leave_one_out(measured: Measured, tolerance: float, dims: tuple, key_dims: list[str],
                  apart: bool = False, lookup: Optional[Lookup] = None) -> dict:
    """The per-shape figures and their summary, for one (GPU, dtype); `key_dims`: the dims of the export
    key (all dims where it names none); `apart`: the kinds of size looked up apart.

    Each measured point of the export key (a combination of the key's dims' values, with every shape that has
    it, whatever its other dims: at run time a call that lies between measured points has none of them)
    is left out in turn. The export built from the other shapes (the same list rule, the same
    winners) then picks a config at each left-out shape with the exported module's own lookup code
    (runtime.py: _kept for the prune, _choice for config_for), knowing there only what the module
    would know: the kernel's constraints as the caller's `check` where the export has the kernel's spec
    (built in, or --spec), else no check at all. What the sweep measured at the left-out shape only scores
    the pick, never steers it:
    - autotune with the prune: autotune times what the prune keeps and takes the fastest; here, the one of
      them with the lowest p50 measured at the left-out shape (an autotune that ranks as our timer does).
      One that failed to compile or run there is skipped, as autotune skips it; where one it kept was wrong
      there (incorrect, crashed, or refused by the kernel's constraints and never checked), autotune may take
      it without knowing: a miss;
    - config_for: what it returns given the left-out shape whole (every dim, the rows too, as a caller that
      holds the tensors gives them: README), where the prune reads only the key's dims (autotune's key); a
      config that was not ok there is a miss.
    The figure at a left-out shape is the best p50 measured there over the pick's p50 there (p50s of record:
    a finalist's re-timed one); a pick is good at or above 1 - tolerance, the covering set's own bar.
    Leaving a point out opens a hole twice the grid's spacing there, so the estimate is for a grid of half
    the density: on the cautious side for calls between measured points, and it says nothing about calls
    beyond the measured range (the module warns about those at run time)."""
    lookup = lookup or Lookup()
    index = [dims.index(d) for d in key_dims]
    points: dict[tuple, list] = {}
    for shape in measured.shapes:
        points.setdefault(tuple(shape[i] for i in index), []).append(shape)
    result = {"key_dims": list(key_dims), "good_pct": round(100 * (1 - tolerance), 2),
              "check": "the kernel's constraints" if lookup.rule else None, "shapes": []}
    if len(points) < 2:
        return result
    configs = {key: as_triton_config(entry["config"]) for key, entry in measured.configs.items()}
    key_of = {id(config): key for key, config in configs.items()}

    def passes(config, shape):
        return lookup.passes(measured.configs[key_of[id(config)]]["config"], shape)

    own = measured.mask()
    for left_out in points.values():
        picks = Picks(measured, measured.listed_without(left_out, tolerance), own & ~measured.mask(left_out),
                      configs, passes)
        for shape in left_out:
            kept = [key_of[id(c)] for c in picks.kept(shape, key_dims, dims, apart)]
            chosen = picks.chosen(shape, dims, apart)  # the whole shape
            chosen = None if chosen is None else key_of[id(chosen)]
            status = "ok" if chosen is None else lookup.status(measured, chosen, shape)
            result["shapes"].append({"shape": list(shape),
                                     "autotune": _autotuned(measured, kept, shape, lookup),
                                     "config_for": _figure(measured, chosen, shape, status)})
    result["summary"] = {path: _summary(result, path) for path in PATHS}
    result["advice"] = _advice(result, dims, measured.shapes)
    return result


def _autotuned(measured: Measured, kept: list[str], shape: tuple, lookup: Lookup) -> dict:
    """Autotune over what the prune kept: a miss where one of them was wrong there (WRONG_THERE: it may
    be the one taken), else the fastest of those ok there (one that failed to compile or run is skipped,
    as autotune skips it; one never measured there is left out: nothing is known of it)."""
    statuses = {key: lookup.status(measured, key, shape) for key in kept}
    wrong = [key for key in kept if statuses[key] in WRONG_THERE]
    if wrong:
        return _figure(measured, wrong[0], shape, statuses[wrong[0]])
    ok = [key for key in kept if statuses[key] == "ok"]
    return _figure(measured, min(ok, key=lambda key: measured.p50_at(key, shape), default=None), shape)


def _point(shape: list, dims: tuple, key_dims: list[str]) -> str:
    return ", ".join(f"{d}={shape[dims.index(d)]}" for d in key_dims)


def _summary(result: dict, path: str) -> dict:
    """One path's figures over the left-out shapes: how many were good, how many got no config (none of
    the list was measured ok there), how many a config that was not ok there (a miss: "not_ok"), the
    geometric mean and the worst of the others."""
    shapes = result["shapes"]
    picked = [s for s in shapes if s[path]["config"] is not None and "status" not in s[path]]
    figures = [s[path]["pct_of_best"] for s in picked]
    summary = {"shapes": len(shapes), "good": sum(f >= result["good_pct"] for f in figures),
               "no_config": sum(s[path]["config"] is None for s in shapes),
               "not_ok": sum("status" in s[path] for s in shapes), "geomean_pct": None, "worst_pct": None,
               "worst_shape": None}
    if picked:
        worst = min(picked, key=lambda s: s[path]["pct_of_best"])
        summary.update(geomean_pct=round(math.exp(sum(map(math.log, figures)) / len(figures)), 2),
                       worst_pct=worst[path]["pct_of_best"], worst_shape=worst["shape"])
    return summary


def _advice(result: dict, dims: tuple, measured_shapes: list) -> str:
    """Where to add shapes: none where every left-out shape was served within the bar; a denser grid where
    none was; else between the measured values of each key dim on either side of the worst shape."""
    def figure(entry):
        return min(entry[path]["pct_of_best"] for path in PATHS)  # no config: 0

    if all(figure(entry) >= result["good_pct"] for entry in result["shapes"]):
        return "the grid is dense enough for the tolerance"
    if all(figure(entry) < result["good_pct"] for entry in result["shapes"]):
        return ("no measured shape serves another: the measured sizes are too far apart to say anything "
                "about those between them; use the configs at the measured sizes only, or sweep a grid dense "
                f"along {', '.join(result['key_dims'])}")
    worst = min(result["shapes"], key=figure)
    between, edges = [], []
    for dim in result["key_dims"]:
        i = dims.index(dim)
        value = worst["shape"][i]
        lower = [s[i] for s in measured_shapes if s[i] < value]
        higher = [s[i] for s in measured_shapes if s[i] > value]
        if lower and higher:
            between.append(f"between {dim}={max(lower)} and {dim}={min(higher)}")
        elif lower or higher:
            edges.append(f"{'above' if lower else 'below'} {dim}={value}")
    # At an edge in every dim, the range itself is too narrow; else the hole inside it is what to fill.
    return "add shapes " + " and ".join(between or edges)


def how_to_sweep(kernel: Optional[str], key_dims: list[str]) -> str:
    """The command or config keys that sweep more sizes of the export key: the kernel's export-grade sweep
    file where there is one (the working directory's sweeps/, or the tool's), else its grid's keys."""
    from importlib.resources import files

    name = f"{kernel}_export.yaml"
    if kernel and any(folder.joinpath(name).is_file()
                      for folder in (Path("sweeps"), files("triton_sweep.conf").joinpath("sweep"))):
        return f"triton-sweep +sweep={kernel}_export"
    return "triton-sweep " + " ".join(f"'kernel.grid.{dim}=[...]'" for dim in key_dims)


def _path_said(result: dict, path: str, name: str, dims: tuple) -> str:
    """How one path did: within the tolerance at how many left-out shapes, its mean and worst figures, and
    where it offered no config that runs there or one that fails there."""
    summary, tolerance = result["summary"][path], 100 - result["good_pct"]
    said = f"{name} within {tolerance:g}% of the fastest at {summary['good']} of {summary['shapes']}"
    if summary["geomean_pct"] is not None:
        worst = _point(summary["worst_shape"], dims, result["key_dims"])
        said += (f" (on average {summary['geomean_pct']:.1f}% of the fastest, worst "
                 f"{summary['worst_pct']:.0f}% at {worst})")
    if summary["no_config"]:
        said += f", with no config that runs there at {summary['no_config']}"
    if summary["not_ok"]:
        said += f", with one that fails there or was never run there at {summary['not_ok']}"
    return said


def summary_line(result: dict, dims: tuple, kernel: Optional[str] = None) -> str:
    """The line export prints for one (GPU, dtype), in plain words: how the configs do at sizes the sweep
    did not measure (each measured point of the key left out in turn, the others choosing for it), path by
    path, and what to sweep where that is unknown or poor (`kernel`'s sweep file or grid: how_to_sweep)."""
    key = ", ".join(result["key_dims"])
    how = how_to_sweep(kernel, result["key_dims"])
    if not result["shapes"]:
        return (f"at sizes the sweep did not measure: unknown, one value of {key} was measured and there "
                "is nothing to compare with; the configs are known good at the measured sizes only. To use "
                f"them at others, sweep a grid dense along {key}: {how}")
    points = sorted({tuple(entry["shape"][dims.index(d)] for d in result["key_dims"])
                     for entry in result["shapes"]})
    check = ", checked with the kernel's constraints" if result.get("check") else ""
    method = (f"each of the {len(points)} measured values of {key} left out in turn, the others choosing a "
              f"config for it{check}")
    if all(result["summary"][path]["no_config"] == len(result["shapes"]) for path in PATHS):
        measured = ", ".join("/".join(map(str, point)) for point in points)
        return (f"at sizes the sweep did not measure: unknown ({method}: no config they chose runs at the "
                f"one left out). The measured {key} ({measured}) are too far apart to say anything about the "
                f"sizes between them: use these configs at the measured sizes only, or sweep a grid dense "
                f"along {key}: {how}")
    parts = [_path_said(result, path, name, dims)
             for path, name in zip(PATHS, ("autotune with the prune", "config_for"))]
    if "apart_at" in result:
        together = [f"{name} {result['together'][name]['good']}/{result['together'][name]['shapes']}"
                    for name in PATHS]
        parts.append(f"sizes that are multiples of {ALIGNMENT} and sizes that are not looked up "
                     f"{'apart' if result['aligned_apart'] else 'together'} (the other shapes chose apart "
                     f"at {result['apart_at']}/{result['points']} left-out points; all together: "
                     f"{', '.join(together)} at the bar)")
    advice = result["advice"]
    if advice.startswith("add shapes"):
        advice += f" ({', '.join(f'kernel.grid.{dim}' for dim in result['key_dims'])})"
    elif not advice.startswith("the grid is dense"):
        advice += f": {how}"
    return f"at sizes the sweep did not measure ({method}): " + "; ".join(parts) + "; " + advice


def gpu_section(rows: pd.DataFrame, covered: dict, tolerance: float, dims: Optional[tuple] = None,
                key_dims: Optional[list] = None, rule=None, statuses: Optional[dict] = None) -> dict:
    """One GPU's section: provenance (`backend: interpret` for the interpreter's rows, exported only when
    asked) and, of every dtype of its rows, the covering set (`covered`: dtype
    -> (Measured, covering set), cover.covered's); given the dims and the export key's dims, each dtype's
    leave-one-out estimate too (estimate), with the kernel's constraints `rule` as its check and
    `statuses` ((dtype, canonical config, shape) -> status, every status) to score the picks that were
    not ok."""
    newest = rows.loc[rows["id"].idxmax()]
    dtypes = {}
    for dtype, (measured, cover) in covered.items():
        estimated = {}
        if dims is not None:
            of_dtype = {(key, shape): status for (d, key, shape), status in (statuses or {}).items()
                        if d == dtype}
            estimated["leave_one_out"] = estimate(measured, tolerance, dims, key_dims,
                                                  Lookup(rule, dtype, of_dtype))
        dtypes[dtype] = {**cover, **estimated}  # the covering set's keys first
    interpreted = newest.get("backend") == INTERPRET  # labelled: never taken for a GPU's section
    return {
        **{name: (None if pd.isna(newest[name]) else str(newest[name])) for name in PROVENANCE},
        **({"backend": INTERPRET} if interpreted else {}),
        "sweep_ids": sorted(rows["sweep_id"].unique().tolist()),
        "exported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "trials": int(len(rows)),
        "tolerance": tolerance,
        "dtypes": dtypes,
    }


def gpu_sections(kernel: str, by_gpu: dict, covered: dict, tolerance: float, dims: tuple, key: dict,
                 rule=None) -> dict[str, dict]:
    """gpu -> its section (gpu_section), from what each GPU exports (rows.OfGpu) and its covering sets
    (gpu -> cover.covered's); each (GPU, dtype)'s estimate printed in one line, and its call-weighted
    loss where calls weigh it."""
    key_dims = [d for d in dims if d in key.values()] or list(dims)  # no key: a call gives every dim
    sections = {gpu: gpu_section(of.rows, covered[gpu], tolerance, dims, key_dims, rule, of.statuses)
                for gpu, of in by_gpu.items()}
    for gpu, section in sections.items():
        for dtype, dtype_data in section["dtypes"].items():
            print(f"{kernel} on {gpu}, {dtype}: {summary_line(dtype_data['leave_one_out'], dims, kernel)}")
            if dtype_data.get("weighted_loss") is not None:
                total = sum(dtype_data["calls"].values())
                print(f"{kernel} on {gpu}, {dtype}: weighted by {total} calls, the list loses "
                      f"{100 * dtype_data['weighted_loss']:.2f}% of the best p50 on average")
    return sections

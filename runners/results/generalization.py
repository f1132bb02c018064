"""How well an export holds between the shapes it measured: the leave-one-out estimate printed at export
and stored in each (GPU, dtype) section as "leave_one_out".

Each measured point of the export key (a combination of the key's dims' values, with every shape that has
it, whatever its other dims: at run time a call that lies between measured points has none of them)
is left out in turn. The export built from the other shapes (the same list rule, the same
winners) then picks a config at each left-out shape with the exported module's own lookup code
(export_runtime.py: _kept for the prune, _choice for config_for), where the kernel's `check` is played
by the measurement itself: a config passes where it was ok at the left-out shape.
- autotune with the prune: autotune times what the prune keeps and takes the fastest; here, the one of
  them with the lowest p50 measured at the left-out shape (an autotune that ranks as our timer does);
- config_for: what it returns given the left-out shape whole (every dim, the rows too, as a caller that
  holds the tensors gives them: README), where the prune reads only the key's dims (autotune's key).
The figure at a left-out shape is the best p50 measured there over the pick's p50 there (p50s of record:
a finalist's re-timed one); a pick is good at or above 1 - tolerance, the covering set's own bar.
Leaving a point out opens a hole twice the grid's spacing there, so the estimate is for a grid of half
the density: on the cautious side for calls between measured points, and it says nothing about calls
beyond the measured range (the module warns about those at run time).

Where both kinds of size were measured in a key dim (multiples of 16 and not: export_runtime.ALIGNMENT),
the estimate is made twice, with the shapes around a left-out one taken among all the measured shapes and
among those of its kind alone; the module looks sizes up apart (ALIGNED_APART) where the second is higher
(the mean log figure over both paths). Apart, each kind's grid is the sparser, so apart wins only where
the kinds' best configs differ (layernorm's on an H200: BENCHMARKS.md, issue 20).
"""
from __future__ import annotations

import json
import math
from typing import Optional

from runners.results import export_runtime as runtime
from runners.results.export import LAUNCH_OPTIONS, Measured, _canonical

PATHS = ("autotune", "config_for")  # the two ways a module picks a config, as the line names them


def as_triton_config(config: dict):
    """A stored config as the module holds it: a triton.Config."""
    import triton

    return triton.Config({k: v for k, v in config.items() if k not in LAUNCH_OPTIONS},
                         **{k: config[k] for k in LAUNCH_OPTIONS if k in config})


def _figure(measured: Measured, key: Optional[str], shape: tuple) -> dict:
    if key is None:  # nothing passed: the module would have raised
        return {"config": None, "pct_of_best": 0.0}
    best = min(entry["ok_at"][shape]["p50_us"] for entry in measured.configs.values()
               if shape in entry["ok_at"])
    return {"config": json.loads(key), "pct_of_best": round(100 * best / measured.p50_at(key, shape), 2)}


def estimate(measured: Measured, tolerance: float, dims: tuple, key_dims: list[str]) -> dict:
    """The leave-one-out estimate of one (GPU, dtype), with "aligned_apart": whether the module looks the
    kinds of size up apart (module doc); where it does, "together": the summary had it not."""
    together = leave_one_out(measured, tolerance, dims, key_dims)
    both_kinds = any(len({runtime._is_aligned(shape[dims.index(dim)]) for shape in measured.shapes}) == 2
                     for dim in key_dims)
    if both_kinds and together["shapes"]:
        apart = leave_one_out(measured, tolerance, dims, key_dims, apart=True)
        if _score(apart) > _score(together):
            return {**apart, "aligned_apart": True, "together": together["summary"]}
    return {**together, "aligned_apart": False}


def _score(result: dict) -> float:
    """The mean log figure over both paths and every left-out shape (no config: 1%)."""
    figures = [max(entry[path]["pct_of_best"], 1.0) for entry in result["shapes"] for path in PATHS]
    return sum(map(math.log, figures)) / len(figures)


def leave_one_out(measured: Measured, tolerance: float, dims: tuple, key_dims: list[str],
                  apart: bool = False) -> dict:
    """The per-shape figures and their summary (module doc), for one (GPU, dtype); `key_dims`: the dims
    of the export key (all dims where it names none); `apart`: the kinds of size looked up apart."""
    index = [dims.index(d) for d in key_dims]
    points: dict[tuple, list] = {}
    for shape in measured.shapes:
        points.setdefault(tuple(shape[i] for i in index), []).append(shape)
    result = {"key_dims": list(key_dims), "good_pct": round(100 * (1 - tolerance), 2), "shapes": []}
    if len(points) < 2:
        return result
    configs = {key: as_triton_config(entry["config"]) for key, entry in measured.configs.items()}
    key_of = {id(config): key for key, config in configs.items()}
    for point, left_out in points.items():
        rest = [s for s in measured.shapes if tuple(s[i] for i in index) != point]
        cover = [(configs[key], {s: at["p50_us"] for s, at in measured.configs[key]["ok_at"].items()
                                  if s in rest}) for key in measured.listed(rest, tolerance)]
        best = {s: configs[_canonical(measured.winners[s]["config"])] for s in rest}
        for shape in left_out:
            sizes = dict(zip(key_dims, (shape[i] for i in index)))

            def passes(config, shape=shape):
                return measured.p50_at(key_of[id(config)], shape) is not None

            kept = [key_of[id(c)] for c in runtime._kept(cover, sizes, passes, dims, apart=apart)]
            timed = min(kept, key=lambda key: measured.p50_at(key, shape), default=None)
            chosen = runtime._choice(cover, best, dict(zip(dims, shape)), passes, dims, apart=apart)  # whole
            result["shapes"].append({
                "shape": list(shape), "autotune": _figure(measured, timed, shape),
                "config_for": _figure(measured, None if chosen is None else key_of[id(chosen)], shape)})
    result["summary"] = {path: _summary(result, path) for path in PATHS}
    result["advice"] = _advice(result, dims, measured.shapes)
    return result


def _point(shape: list, dims: tuple, key_dims: list[str]) -> str:
    return ", ".join(f"{d}={shape[dims.index(d)]}" for d in key_dims)


def _summary(result: dict, path: str) -> dict:
    """One path's figures over the left-out shapes: how many were good, how many got no config (none of
    the list was measured ok there), the geometric mean and the worst of the others."""
    shapes = result["shapes"]
    picked = [s for s in shapes if s[path]["config"] is not None]
    figures = [s[path]["pct_of_best"] for s in picked]
    summary = {"shapes": len(shapes), "good": sum(f >= result["good_pct"] for f in figures),
               "no_config": len(shapes) - len(picked), "geomean_pct": None, "worst_pct": None,
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
        return (f"no measured shape serves another: sweep a grid dense along {', '.join(result['key_dims'])} "
                "(sweeps/*_export.yaml)")
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


def summary_line(result: dict, dims: tuple) -> str:
    """The line export prints for one (GPU, dtype): how many left-out shapes each path served within
    the bar, the geometric mean and the worst, and where to add shapes."""
    if not result["shapes"]:
        return (f"between measured shapes: one measured point of {', '.join(result['key_dims'])}, nothing "
                "to leave out; the configs hold only at the measured sizes (sweep a grid: README)")
    parts = []
    for path, name in zip(PATHS, ("autotune with the prune", "config_for")):
        summary = result["summary"][path]
        part = f"{name} >= {result['good_pct']:g}% of best at {summary['good']}/{summary['shapes']}"
        if summary["geomean_pct"] is not None:
            part += (f" (geomean {summary['geomean_pct']:.1f}%, worst {summary['worst_pct']:.0f}% at "
                     f"{_point(summary['worst_shape'], dims, result['key_dims'])})")
        if summary["no_config"]:
            part += f", none it offered was ok at {summary['no_config']}"
        parts.append(part)
    if result.get("aligned_apart"):
        together = [f"{name} {result['together'][name]['good']}/{result['together'][name]['shapes']}"
                    for name in PATHS]
        parts.append(f"sizes that are multiples of {runtime.ALIGNMENT} and sizes that are not looked up "
                     f"apart (together: {', '.join(together)} at the bar)")
    return (f"between measured shapes (each {', '.join(result['key_dims'])} left out in turn): "
            + "; ".join(parts) + "; " + result["advice"])

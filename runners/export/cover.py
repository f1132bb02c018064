"""The covering set of one (GPU, dtype): the smallest list found such that at every measured shape the
fastest config of the list that was ok there is within `tolerance` (default 3%) of the fastest config
measured there (the finalists' re-timed p50s where they were re-timed, so that every time compared was
taken in the same rounds; elsewhere screening's). Greedy set cover (Measured.cover), weighted by calls
where the capture counted them (`kernel.calls`); the section then gives the call-weighted expected loss.

The exported list is the covering set followed by the alternates: every other config within `tolerance`
of the fastest at one measured shape at least. The covering set is enough at the measured shapes;
between them the best is often a config that was only near-best at the points around (why:
CONTRIBUTING.md, "Design notes"). The prune (runtime.py) keeps only the alternates plausible around a
call, and at a measured shape none."""
from __future__ import annotations

import copy
import json
from typing import Optional

import numpy as np
import pandas as pd

from triton_sweep.model.finalists import resource_key, winning_records
from triton_sweep.export.greedy import Arrays, shape_arrays
from triton_sweep.export.rows import baselines_by_shape, canonical, row_figures, json_number, parse_shape

WINNER_FIELDS = ("p50_us", "gbps", "tflops", "pct_copy_bw")  # of each shape's winner, in BEST_BY_SHAPE
READ = ("id", "shape", "config", "p50_us", "phase",  # what Measured reads of a row, row_figures' fields too
        "repetitions", "p50_precision", "rep_p50s_us", "rep_noise")


class Measured:
    """One (GPU, dtype)'s rows, as the covering set and the leave-one-out estimate read them: every
    config (canonical JSON -> the config, its first row id, {shape: its figures there} where ok), the
    p50s that compete at each shape (`timed`: the finalists' where they were re-timed), the best of them,
    and each shape's winner row (its fields, a dict)."""

    def __init__(self, rows: pd.DataFrame):
        rows = rows.sort_values("id")
        # Plain records, not a pandas row or group at a time: that took 0.3 s a dtype at 120 shapes of 16
        # configs, built twice (`python -m triton_sweep.benchmarks.bench_export_scale`: 3.2 s of export at 120
        # shapes, 1.6 s with this and the dtype's one build, on this project's 2-core CPU host).
        # Only the fields read, and each shape and config parsed once (issue 76: 1,000,000 rows).
        by_shape: dict[tuple, list[dict]] = {}
        self.configs: dict[str, dict] = {}
        shapes, keys = ({text: parse(text) for text in rows[name].unique()}
                        for name, parse in (("shape", parse_shape), ("config", canonical)))
        for record in rows[[name for name in READ if name in rows]].to_dict("records"):
            shape, key = shapes[record["shape"]], keys[record["config"]]
            record["key"] = key
            by_shape.setdefault(shape, []).append(record)
            entry = self.configs.setdefault(key, {"config": json.loads(record["config"]),
                                                  "first_id": record["id"], "ok_at": {}})
            entry["ok_at"][shape] = {"p50_us": float(record["p50_us"]), **row_figures(record)}
        self.shapes = list(by_shape)
        self.best, self.timed = {}, {}
        for shape, group in by_shape.items():
            competing = [r for r in group if r["phase"] == "final"] or group
            self.timed[shape] = {r["key"]: float(r["p50_us"]) for r in competing}
            self.best[shape] = min(self.timed[shape].values())
        self.winners = {parse_shape(shape): record for shape, record in winning_records(rows).items()}
        self.winner_keys = {shape: canonical(row["config"]) for shape, row in self.winners.items()}
        self._index_arrays()

    def _index_arrays(self) -> None:
        """Every shape and config numbered (all of them: a `without` shares them), the p50s that compete
        as a shape x config array (inf where none), those of record (nan where not ok), and what the
        greedy's ties read: each shape's winner, each config's first row id and place by resources."""
        self.index = {shape: i for i, shape in enumerate(self.shapes)}
        self.shapes_all, self.values = list(self.shapes), np.array(self.shapes)
        self.keys = list(self.configs)
        column = {key: j for j, key in enumerate(self.keys)}
        self.timed_array = np.full((len(self.shapes), len(self.keys)), np.inf)
        self.ok_array = np.full(self.timed_array.shape, np.nan)
        for shape, timed in self.timed.items():
            self.timed_array[self.index[shape], [column[key] for key in timed]] = list(timed.values())
        for j, key in enumerate(self.keys):
            at = self.configs[key]["ok_at"]
            self.ok_array[[self.index[s] for s in at], j] = [figures["p50_us"] for figures in at.values()]
        self.verified = ~np.isnan(self.ok_array)  # where each config was ok
        self.winner_index = np.array([column[self.winner_keys[s]] for s in self.shapes])
        self.first_ids = np.array([self.configs[key]["first_id"] for key in self.keys])
        ranked = sorted(range(len(self.keys)),
                        key=lambda j: (resource_key(self.configs[self.keys[j]]["config"]), self.first_ids[j]))
        self.order = np.argsort(ranked)
        self._arrays: dict = {}  # (tolerance, calls) -> greedy.Arrays, shared by every `without`
        self._traces: dict = {}  # tolerance -> the greedy's Trace of these shapes

    def arrays(self, tolerance: float, calls: Optional[dict] = None) -> Arrays:
        key = (tolerance, None if not calls else tuple(calls.get(s, 0) for s in self.index))
        if key not in self._arrays:
            weights = None if key[1] is None else np.array(key[1], dtype=float)
            self._arrays[key] = shape_arrays(self.timed_array, self.winner_index, tolerance, weights,
                                             self.order, self.first_ids)
        return self._arrays[key]

    def mask(self, shapes: Optional[list] = None) -> np.ndarray:
        """`shapes` (default these) as a boolean over every shape."""
        mask = np.zeros(len(self.index), dtype=bool)
        mask[[self.index[s] for s in (self.shapes if shapes is None else shapes)]] = True
        return mask

    def without(self, shapes: list) -> "Measured":
        """The same rows less those at `shapes` (the leave-one-out's remaining shapes)."""
        rest = copy.copy(self)
        gone = set(shapes)
        rest.shapes = [s for s in self.shapes if s not in gone]
        rest.configs = {key: {**entry, "ok_at": {s: at for s, at in entry["ok_at"].items() if s not in gone}}
                        for key, entry in self.configs.items()}
        rest.best, rest.timed, rest.winners, rest.winner_keys = (
            {s: v for s, v in table.items() if s not in gone}
            for table in (self.best, self.timed, self.winners, self.winner_keys))
        rest._traces = {}
        return rest

    def listed_without(self, gone: list, tolerance: float) -> list[int]:
        """listed() of these shapes less `gone` (no calls), as config numbers: the greedy's trace of these
        shapes replayed (greedy.Trace.without)."""
        arrays = self.arrays(tolerance)
        if tolerance not in self._traces:
            self._traces[tolerance] = arrays.near[self.mask()].sum(0), arrays.trace(self.mask())
        counts, trace = self._traces[tolerance]
        rows = np.array([self.index[s] for s in gone])
        return arrays.listed(counts - arrays.near[rows].sum(0), trace.without(arrays, rows))

    def p50_at(self, key: str, shape: tuple) -> Optional[float]:
        """The config's p50 of record at the shape (its re-timed one where it was a finalist), None where
        it was not ok there."""
        at = self.configs[key]["ok_at"].get(shape)
        return None if at is None else at["p50_us"]

    def near(self, shapes: list, tolerance: float) -> dict[str, list]:
        """Each config -> the shapes of `shapes` where it is within `tolerance` of the best, in order."""
        rows = [self.index[s] for s in shapes]
        near = self.arrays(tolerance).near[rows]
        return {key: [shapes[i] for i in np.flatnonzero(near[:, j])] for j, key in enumerate(self.keys)}

    def cover(self, shapes: list, tolerance: float, calls: Optional[dict] = None) -> list[str]:
        """The covering set of `shapes`, as canonical configs, best first (greedy.Arrays on arrays).

        Each step adds the config that covers the most shapes still uncovered; ties go to the config that
        is the winner (the finalists' choice, else the lowest p50) at more of those shapes, then to the
        higher geometric mean of best p50 / its p50 over them, then to the fewest resources (num_stages,
        num_warps, BLOCK product: the finalists' tie rule), then to the first measured. Weighted by
        `calls` (shape -> count), each step first adds the config with the most call-weighted speed over
        the shapes it newly covers (the sum of calls x best p50 / its p50), so that the shapes called most
        get the configs nearest their best; the tolerance still bounds every shape, a shape of no calls
        included. Every shape has an ok config (its fastest covers it), so the list is never empty; greedy
        may return up to 1 + ln(number of shapes) times the minimum (the set-cover bound)."""
        return [self.keys[j] for j in self.arrays(tolerance, calls).greedy(self.mask(shapes))]

    def listed(self, shapes: list, tolerance: float, calls: Optional[dict] = None) -> list[str]:
        """The exported list (module doc): the covering set of `shapes`, then the alternates, every other
        config within `tolerance` of the best at one of them at least, those within it at more shapes
        first (then the first measured)."""
        arrays, mask = self.arrays(tolerance, calls), self.mask(shapes)
        return [self.keys[j] for j in arrays.listed(arrays.near[mask].sum(0), arrays.greedy(mask))]


def weighted_loss(list_p50: dict, best: dict, calls: dict) -> Optional[float]:
    """The mean over calls of list p50 / best p50 - 1 (shape -> figure), None without calls."""
    total = sum(calls.get(s, 0) for s in best)
    if not total:
        return None
    return sum(calls.get(s, 0) * (list_p50[s] / best[s] - 1) for s in best) / total


def covering_set(measured: Measured, tolerance: float, baselines: Optional[pd.DataFrame] = None,
                 calls: Optional[dict] = None, searched: Optional[dict] = None) -> dict:
    """The covering set and the winner of each shape, from one (GPU, dtype)'s rows as `measured` reads
    them (module doc: how); weighted by `calls` (shape -> count) where given; with each shape's winner,
    how many configs were measured there of how many (`searched`: shape -> rows.searched's figures)."""
    shapes, configs, timed, winners = measured.shapes, measured.configs, measured.timed, measured.winners
    chosen = measured.listed(shapes, tolerance, calls)
    covers = measured.near(shapes, tolerance)
    baselines_of = baselines_by_shape(baselines)
    # (p50, canonical config) of the list's fastest at each shape
    list_best = {s: min((timed[s][key], key) for key in chosen if key in timed[s]) for s in shapes}
    weighted = {}
    if calls:
        loss = weighted_loss({s: p50 for s, (p50, _) in list_best.items()}, measured.best, calls)
        weighted = {"calls": {json.dumps(list(s)): calls.get(s, 0) for s in shapes}, "weighted_loss": loss}
    return {
        **weighted,
        "configs": [{"config": configs[key]["config"],
                     "ok_at": [{"shape": list(s), **configs[key]["ok_at"][s]} for s in shapes
                               if s in configs[key]["ok_at"]],
                     "covers": [list(s) for s in covers[key]]} for key in chosen],
        "best_by_shape": [{"shape": list(s), "config": json.loads(winners[s]["config"]),
                           **{name: json_number(winners[s][name]) for name in WINNER_FIELDS},
                           **row_figures(winners[s]),
                           "fastest_p50_us": measured.best[s], "list_p50_us": list_best[s][0],
                           "list_config": json.loads(list_best[s][1]),
                           "baselines": baselines_of.get(json.dumps(list(s)), {}),
                           **(searched or {}).get(s, {})} for s in shapes],
    }


def covered(rows: pd.DataFrame, tolerance: float, baselines: Optional[pd.DataFrame] = None,
            calls: Optional[dict] = None, searched: Optional[dict] = None
            ) -> dict[str, tuple[Measured, dict]]:
    """dtype -> (one GPU's rows of it as Measured reads them, their covering_set), with the baselines
    measured beside them and how many configs were measured of how many (`searched`: rows.searched's),
    for each shape's winner."""
    found = {}
    for dtype, group in sorted(rows.groupby("dtype")):
        measured = Measured(group)
        found[dtype] = measured, covering_set(
            measured, tolerance, None if baselines is None else baselines[baselines["dtype"] == dtype], calls,
            {shape: figures for (d, shape), figures in (searched or {}).items() if d == dtype})
    return found

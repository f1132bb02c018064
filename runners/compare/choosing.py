"""Which rows runners/compare/matching.py compares, chosen a whole side at a time (sorts, drop_duplicates and
merges, not a DataFrame a trial): each trial's row on each side (matched_labels), each side's winner of
every (kernel, dtype, shape) (winner_labels); with the report's name and order of rows (described) and
the clock step their samples were read at (steps).
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from triton_sweep.measure.stop_rule import CLOCK_JITTER_S, quantum
from triton_sweep.model.trial import TRITON_PROVIDER
from triton_sweep.store.result_store import shape_label


def _newest(frame: pd.DataFrame, match_on: list[str]) -> pd.DataFrame:
    """Per key (match_on, in key order): the index label of its newest row (`any`), of its newest
    finalist row (`final`) and of its newest screening row (`screen`; NaN where none)."""
    rows = frame[match_on + ["phase"]].assign(label=frame.index, id=frame["id"]).sort_values("id")
    found = rows.drop_duplicates(match_on, keep="last")[match_on + ["label"]].rename(columns={"label": "any"})
    for phase in ("final", "screen"):
        newest = rows[rows["phase"] == phase].drop_duplicates(match_on, keep="last")
        found = found.merge(newest[match_on + ["label"]].rename(columns={"label": phase}), on=match_on,
                            how="left")
    return found.sort_values(match_on, kind="stable")


def matched_labels(base: pd.DataFrame, new: pd.DataFrame, match_on: list[str]) -> tuple:
    """The rows compared of every trial both sides hold, in key order: the newest finalist rows where both
    have one, else the newest screening rows where both have one, else each side's newest row (index
    labels of base and of new); and for each side, the newest row of each trial only it holds."""
    sides = _newest(base, match_on), _newest(new, match_on)
    both = sides[0].merge(sides[1], on=match_on, suffixes=("_b", "_n")).sort_values(match_on, kind="stable")
    final = (both["final_b"].notna() & both["final_n"].notna()).to_numpy()
    screen = ~final & (both["screen_b"].notna() & both["screen_n"].notna()).to_numpy()
    labels = [np.where(final, both[f"final{s}"], np.where(screen, both[f"screen{s}"], both[f"any{s}"]))
              .astype(np.int64) for s in ("_b", "_n")]
    only = []
    for mine, other in (sides, sides[::-1]):
        held = mine.merge(other[match_on], on=match_on, how="left", indicator=True)
        only.append(held.loc[held["_merge"] == "left_only", "any"].to_numpy(np.int64))
    return labels[0], labels[1], only


def winner_labels(base: pd.DataFrame, new: pd.DataFrame, group_by: list[str]) -> pd.DataFrame:
    """Each side's winner (its index label, columns b and n) of every group both measured ok, in group
    order: of its ok rows of ours, the finalist chosen in the newest round, else the lowest p50 (the
    first row of it in the rows' order), as runners/model/finalists.py's `winners` chooses."""

    def winners(frame):
        rows = frame[(frame["status"] == "ok") & (frame["provider"] == TRITON_PROVIDER)]
        best = rows.groupby(group_by, observed=True)["p50_us"].idxmin()  # categoricals: pandas 2 too
        chosen = rows[rows["chosen"].fillna(False).astype(bool)]
        best.update(chosen.groupby(group_by, observed=True)["id"].idxmax())
        return best.astype(np.int64)

    found = pd.concat([winners(base), winners(new)], axis=1, join="inner", keys=["b", "n"])
    return found.sort_index()


def described(frame: pd.DataFrame) -> tuple[list, list]:
    """Each row's name as the report prints it (kernel, provider, dtype, shape, config) and its place in
    the report (kernel, ours before the baselines, dtype, shape by size, config); each config and shape
    read once, each name one object."""
    configs, shapes, seen = {}, {}, {}
    names, orders = [], []
    columns = (frame[name].tolist() for name in ("kernel", "provider", "dtype", "shape", "config"))
    for kernel, provider, dtype, shape, config in zip(*columns):
        kernel, provider, dtype = (seen.setdefault(v, v) for v in (kernel, provider, dtype))
        if config not in configs:
            items = json.loads(config)
            configs[config] = (" ".join(f"{k}={v}" for k, v in items.items()) or "-", sorted(items.items()))
        if shape not in shapes:
            shapes[shape] = (shape_label(shape), json.loads(shape))
        (config_text, config_order), (shape_text, shape_order) = configs[config], shapes[shape]
        names.append((kernel, provider, dtype, shape_text, config_text))
        orders.append((kernel, provider != TRITON_PROVIDER, provider, dtype, shape_order, config_order))
    return names, orders


def steps(samples: pd.Series) -> np.ndarray:
    """The clock step each row's samples were read at (stop_rule.quantum of them sorted, in us; 0 where a
    row has none): rows of one count of samples sorted together, those whose samples all differ 0 at
    once, the rest one at a time."""
    values = samples.tolist()
    counts = np.array([-1 if v is None or (isinstance(v, float) and np.isnan(v)) else len(v) for v in values])
    found = np.zeros(len(values))
    for count in np.unique(counts[counts > 0]):
        rows = np.flatnonzero(counts == count)
        ordered = np.sort(np.stack([values[i] for i in rows]), axis=1)
        distinct = (np.diff(ordered, axis=1) != 0).all(axis=1) & np.isfinite(ordered).all(axis=1)
        for row in np.flatnonzero(~distinct):
            found[rows[row]] = quantum(ordered[row], CLOCK_JITTER_S * 1e6)
    return found

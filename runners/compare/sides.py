"""The two sides of a comparison: a store's rows or an export's (export_frame: the configs it ships with
the figures it recorded), an export kept to the Triton version the other side ran (versions_against), and
what BASE ships (shipped_keys: what the gate judges). runners/compare/matching.py matches them.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pandas as pd

from triton_sweep.model.columns import COLUMN_NAMES, COLUMNS as STORED, NAMED
from triton_sweep.model.trial import TRITON_PROVIDER, Trial
from triton_sweep.export.cover import Measured, covering_set
from triton_sweep.export.fileformat import sections
from triton_sweep.export.runtime import pick_version, version_key

EXPORT_PHASE = "export"  # a row read from an export's JSON
# What compare reads of a store's rows: the trial, its figures, where it ran (NAMED), what an export reads.
COLUMNS = tuple(dict.fromkeys((
    "id", "trial_key", "sweep_id", "kernel", "provider", "shape", "dtype", "config", "status", "message",
    "phase", "rank", "tie", "chosen", "p50_us", "p50_precision", "samples_us", "repetitions", "rep_p50s_us",
    "rep_noise", "pct_copy_bw", "pct_matmul", "gbps", "tflops", *NAMED)))
# Read as categoricals: its text columns but the two with a value a row (a million rows: 330 MiB less).
CATEGORIES = tuple(c.name for c in STORED if c.name in COLUMNS and c.sql.startswith("TEXT")
                   and c.name not in ("trial_key", "message"))

# What runners/export/cover.py's Measured reads of a row.
MEASURED = ("id", "kernel", "gpu_name", "triton_version", "dtype", "shape", "config", "phase", "chosen",
            "p50_us", "p50_precision", "repetitions", "rep_p50s_us", "rep_noise", "gbps", "tflops",
            "pct_copy_bw")


def shared_categories(base: pd.DataFrame, new: pd.DataFrame) -> None:
    """The CATEGORIES columns of both sides made categoricals of one set of categories, in place: pandas
    compares two categoricals only so (and an export's side is read as text); sorted as text sorts, as
    a groupby of text orders its groups."""
    for name in [n for n in CATEGORIES if n in base and n in new]:
        values = {value for frame in (base, new) for value in frame[name].astype("category").cat.categories}
        kind = pd.CategoricalDtype(sorted(values, key=str))
        base[name], new[name] = base[name].astype(kind), new[name].astype(kind)


class CompareError(ValueError):
    """Bad input; the message names the argument."""


@dataclass
class Side:
    label: str  # BASE or NEW
    source: str  # what the argument resolved to, for the report
    frame: pd.DataFrame
    shipped: Optional[set] = None  # an export's (trial key, gpu) pairs: what it ships, where
    path: Optional[Path] = None  # the store the rows are from (none for an export)


def export_frame(data: dict, keep: Optional[list] = None) -> tuple[pd.DataFrame, set]:
    """An export's data as rows: one per exported config at each shape where it was verified (ok), each
    shape's winner and the baselines measured beside it, in every section (GPU and Triton version) or
    those of `keep` ((gpu, version) pairs); and what it ships: (trial key, GPU, Triton version) of each
    config at the shapes it covers."""
    kernel, rows, shipped = data["kernel"], {}, set()

    def add(gpu, section, dtype, config, shape, figures, chosen, provider=TRITON_PROVIDER):
        trial = Trial(kernel, provider, tuple(shape), dtype, config)
        entry = rows.setdefault((trial.key, gpu, section["triton_version"]), {
            **{name: None for name in COLUMN_NAMES}, **{name: section.get(name) for name in NAMED
                                                         if name in section},
            "trial_key": trial.key, "sweep_id": ",".join(section.get("sweep_ids", [])), "kernel": kernel,
            "provider": provider, "shape": json.dumps(list(shape)), "dtype": dtype,
            "config": json.dumps(config), "status": "ok", "phase": EXPORT_PHASE,
            "backend": section.get("backend", "cuda"),  # "interpret": an export --interpreter's section
            "gpu_name": gpu, "p50_us": figures.get("p50_us"), "repetitions": figures.get("repetitions"),
            "rep_noise": figures.get("rep_noise"), "rep_p50s_us": figures.get("rep_p50s_us"),
            "p50_precision": figures.get("p50_precision"), "chosen": False})
        entry["chosen"] = entry["chosen"] or chosen
        return trial.key

    for gpu, version, section in sections(data):
        if keep is not None and (gpu, version) not in keep:
            continue
        for dtype, lists in section["dtypes"].items():
            for item in lists["configs"]:
                covers = {tuple(s) for s in item.get("covers", [])}
                for at in item["ok_at"]:
                    key = add(gpu, section, dtype, item["config"], at["shape"], at, False)
                    if tuple(at["shape"]) in covers:
                        shipped.add((key, gpu, version))
            for best in lists["best_by_shape"]:
                key = add(gpu, section, dtype, best["config"], best["shape"], best, True)
                shipped.add((key, gpu, version))
                for provider, figures in best.get("baselines", {}).items():
                    add(gpu, section, dtype, {}, best["shape"], figures, False, provider)
    frame = pd.DataFrame(list(rows.values()))
    frame["id"] = range(1, len(frame) + 1)
    for name in ("samples_us", "event_samples_us", "late_event_samples_us"):
        frame[name] = None
    return frame, shipped


def versions_against(side: Side, other: Side) -> Side:
    """An export side kept to one Triton version a GPU: the version the other side ran (its newest row's
    on that GPU), else the nearest older measured, else the nearest newer (the generated module's rule,
    runners/export/runtime.py)."""
    if side.shipped is None:
        return side
    frame = side.frame
    keep = pd.Series(False, index=frame.index)
    for gpu, rows in frame.groupby("gpu_name", observed=True):  # categoricals (CATEGORIES): pandas 2 too
        theirs = other.frame[other.frame["gpu_name"] == gpu]
        measured = sorted(set(rows["triton_version"]), key=version_key)
        running = theirs.loc[theirs["id"].idxmax(), "triton_version"] if not theirs.empty else measured[-1]
        version, _ = pick_version(measured, running)
        keep |= (frame["gpu_name"] == gpu) & (frame["triton_version"] == version)
    kept = frame[keep]
    sections_kept = set(zip(kept["gpu_name"], kept["triton_version"]))
    shipped = {item for item in side.shipped if (item[1], item[2]) in sections_kept}
    return Side(side.label, side.source, kept, shipped)


def shipped_keys(side: Side, tolerance: float) -> set:
    """(trial key, GPU, Triton version) of what BASE ships: an export's configs at the shapes they cover;
    for a store, the list runners/export/ would export from its ok rows (newest row a
    trial) per kernel, GPU, Triton version and dtype."""
    if side.shipped is not None:
        return side.shipped
    frame = side.frame
    ok = frame[(frame["status"] == "ok") & (frame["provider"] == TRITON_PROVIDER) & frame["p50_us"].notna()]
    ok = ok.sort_values("id").groupby(["trial_key", "gpu_name", "triton_version"], as_index=False,
                                      observed=True).tail(1)
    keys = set()
    ok = ok[list(MEASURED)]  # Measured makes a record of each row: of what it reads only
    for (kernel, gpu, version, dtype), rows in ok.groupby(["kernel", "gpu_name", "triton_version", "dtype"],
                                                          observed=True):
        for item in covering_set(Measured(rows), tolerance)["configs"]:
            keys |= {(Trial(kernel, TRITON_PROVIDER, tuple(shape), dtype, item["config"]).key, gpu, version)
                     for shape in item["covers"]}
    return keys

"""What an export holds: its rows. Only ok trials of the kernel itself (not baselines) timed on a GPU
are exported; interpreter timings are refused unless asked for (--interpreter, export.interpreter: to try
the flow on a CPU; they form a section of their own, the interpreter's). Per GPU, the rows measured with
its newest kernel source and versions (a version that was not recorded, NULL, compares equal to itself),
the newest row of each trial; beside them the baselines measured in that environment, and every status of
our trials there (the leave-one-out estimate scores a pick that was not ok at a shape). Each row's figures
travel with the config: its p50 and, where it was timed in repetitions, their medians and spread, else its
one median's precision, which triton_sweep.compare and triton_sweep.revalidate judge a later measurement
against.

A store may hold rows of someone else's (merged in): every row of the kernel is checked before the export
reads it (fileformat.checked_rows, against the file format's types).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Optional

import pandas as pd

from triton_sweep.model.columns import ENV_KEY
from triton_sweep.model.trial import TRITON_PROVIDER
from triton_sweep.export.settings import ExportError

# Rows exported together share the resume environment; backend and GPU name are already fixed here.
EXPORT_ENV = [name for name in ENV_KEY if name not in ("backend", "gpu_name")]
BACKENDS_WITH_INTERPRETER = ("cuda", "interpret")  # what --interpreter exports


def newest_per_trial(rows: pd.DataFrame) -> pd.DataFrame:
    return rows.sort_values("id").groupby("trial_key", as_index=False).tail(1)


def _same_env(group: pd.DataFrame) -> pd.Series:
    """Rows measured in the environment of the group's newest row; a missing value equals a missing one
    (pandas' NaN != NaN dropped every row whose driver_version was NULL)."""
    env = group[EXPORT_ENV].astype(object)
    newest = env.loc[group["id"].idxmax()]
    same = pd.Series(True, index=group.index)
    for name in EXPORT_ENV:
        if pd.isna(newest[name]):
            same &= env[name].isna()
        else:
            same &= env[name] == newest[name]
    return same


def select_rows(frame: pd.DataFrame, kernel: str, interpreter: bool = False) -> dict[str, pd.DataFrame]:
    """gpu_name -> the exportable rows measured on it; `interpreter`: the interpreter's rows too, under its
    own name (measure/device.py's INTERPRETER_DEVICE_NAME), which a GPU never takes."""
    rows = frame[(frame["kernel"] == kernel) & (frame["provider"] == TRITON_PROVIDER)
                 & (frame["status"] == "ok") & frame["p50_us"].notna()]
    if rows.empty:
        raise ExportError(f"no ok trials of kernel {kernel!r} to export")
    gpu_rows = rows[rows["backend"].isin(BACKENDS_WITH_INTERPRETER if interpreter else ("cuda",))]
    if gpu_rows.empty:
        raise ExportError(
            f"refusing to export {kernel!r}: its ok trials are interpreter timings (backend=interpret), "
            "which say nothing about a GPU; run the sweep on a GPU, or export them to try the flow on a CPU "
            "with triton-sweep-export --interpreter (export.interpreter=true)"
        )
    return {gpu: newest_per_trial(group[_same_env(group)]) for gpu, group in gpu_rows.groupby("gpu_name")}


@dataclass(frozen=True)
class OfGpu:
    """What one GPU exports: its exportable rows, the ok baselines measured beside them (baseline_rows),
    every status of our trials there (trial_statuses) and how many configs were measured of how many
    (searched)."""

    rows: pd.DataFrame
    baselines: pd.DataFrame
    statuses: dict
    searched: dict


def exported_rows(frame: pd.DataFrame, kernel: str,
                  interpreter: bool = False) -> tuple[dict[str, OfGpu], int]:
    """The kernel's rows of the store (checked: fileformat.checked_rows), loaded once: gpu_name -> what it
    exports (`interpreter`: select_rows's); and the rank of their shapes."""
    by_gpu = select_rows(frame, kernel, interpreter)
    rank = len(parse_shape(next(iter(by_gpu.values()))["shape"].iloc[0]))
    of_gpu = {}
    for gpu, rows in by_gpu.items():
        beside = beside_rows(frame, rows)
        of_gpu[gpu] = OfGpu(rows, baseline_rows(beside), trial_statuses(beside), searched(beside))
    return of_gpu, rank


def beside_rows(frame: pd.DataFrame, ours: pd.DataFrame) -> pd.DataFrame:
    """Every row of the store measured beside `ours` (one GPU's exportable rows): the same kernel, GPU
    and environment, any provider and status."""
    newest = ours.loc[ours["id"].idxmax()]
    rows = frame[(frame["kernel"] == newest["kernel"]) & (frame["gpu_name"] == newest["gpu_name"])]
    for name in EXPORT_ENV:
        rows = rows[rows[name].isna()] if pd.isna(newest[name]) else rows[rows[name] == newest[name]]
    return rows


def baseline_rows(beside: pd.DataFrame) -> pd.DataFrame:
    """The ok baseline rows of `beside` (beside_rows's), the newest row of each trial (the finalists' rounds
    where they were re-timed)."""
    rows = beside[(beside["provider"] != TRITON_PROVIDER) & (beside["status"] == "ok")
                  & beside["p50_us"].notna()]
    return newest_per_trial(rows)


def trial_statuses(beside: pd.DataFrame) -> dict:
    """(dtype, canonical config, shape) -> the status of the newest row of each of our trials of `beside`
    (beside_rows's), whatever the status."""
    rows = newest_per_trial(beside[beside["provider"] == TRITON_PROVIDER])
    configs = {text: canonical(text) for text in rows["config"].unique()}  # each parsed once
    shapes = {text: parse_shape(text) for text in rows["shape"].unique()}
    return {(dtype, configs[config], shapes[shape]): status for dtype, config, shape, status
            in zip(rows["dtype"], rows["config"], rows["shape"], rows["status"])}


def searched(beside: pd.DataFrame) -> dict:
    """(dtype, shape) -> {"configs_measured": how many of our configs have a row of `beside` (beside_rows's)
    there, pruned ones aside; "configs_planned": of how many passed the constraints}, where the rows say
    (planned_configs: a whole number; older rows have none)."""
    rows = beside[(beside["provider"] == TRITON_PROVIDER) & (beside["status"] != "pruned")]
    planned = pd.to_numeric(rows.get("planned_configs", pd.Series(index=rows.index, dtype=float)),
                            errors="coerce")
    counts = rows.assign(planned=planned.where((planned >= 1) & (planned < 2 ** 31))).groupby(
        ["dtype", "shape"]).agg(measured=("trial_key", "nunique"), planned=("planned", "max"))
    return {(dtype, parse_shape(shape)): {"configs_measured": int(measured), "configs_planned": int(most)}
            for (dtype, shape), measured, most in zip(counts.index, counts["measured"], counts["planned"])
            if pd.notna(most)}


def canonical(config_json: str) -> str:
    return json.dumps(json.loads(config_json), sort_keys=True)


def parse_shape(shape_json: str) -> tuple:
    return tuple(json.loads(shape_json))


def json_number(value):
    """A JSON-safe float: None for a missing value (NaN is not JSON)."""
    return None if value is None or pd.isna(value) else float(value)


def row_figures(row) -> dict:
    """What `triton_sweep.compare` judges a later measurement of the export against: a row's (a pandas row,
    or a dict of its fields) repetitions, their medians (the mean of their logs is the figure it
    compares) and the spread of their logs, where it was timed in several; else the precision of its one
    median (the half-width of its 95% interval)."""
    repetitions = row.get("repetitions")
    if repetitions is None or pd.isna(repetitions) or repetitions < 2:
        precision = json_number(row.get("p50_precision"))
        return {} if precision is None or not math.isfinite(precision) else {"p50_precision": precision}
    medians = row.get("rep_p50s_us")
    return {"repetitions": int(repetitions), "rep_noise": json_number(row.get("rep_noise")),
            **({"rep_p50s_us": [round(float(m), 4) for m in medians]} if medians is not None else {})}


def baselines_by_shape(baselines: Optional[pd.DataFrame]) -> dict[str, dict]:
    """shape (its JSON) -> provider -> the p50 (and repetitions) of each baseline measured there (the
    last of its rows where several)."""
    found: dict[str, dict] = {}
    for row in [] if baselines is None else baselines.to_dict("records"):
        found.setdefault(row["shape"], {})[row["provider"]] = {"p50_us": float(row["p50_us"]),
                                                                **row_figures(row)}
    return found

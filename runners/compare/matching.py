"""Two sides matched and judged: every trial measured ok on both, and each side's winner of every (kernel,
dtype, shape), read into a Pair of figures and judged by the rule of runners/compare/between_runs.py;
compare returns what runners/compare/report.py prints (and triton_sweep.revalidate judges a re-timed export
by). Also a calibration's runs in a store read into run figures (load_calibration, calibration_of) and
the spread each shift is judged against (spreads_of).
"""
from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from triton_sweep.model.finalists import winner
from triton_sweep.model.columns import NAMED
from triton_sweep.model.trial import TRITON_PROVIDER
from triton_sweep.measure.stop_rule import CLOCK_JITTER_S, quantum
from triton_sweep.compare import between_runs
from triton_sweep.compare.calibration import MIN_RUNS, Spread, calibrate
from triton_sweep.compare.figures import Figure, Pair, RunFigure, pd_missing
from triton_sweep.compare.sides import EXPORT_PHASE, CompareError
from triton_sweep.store.damage import StoreError
from triton_sweep.store.result_store import ResultStore, shape_label



def _sound(value) -> bool:
    """A median an ok row may carry: a finite, positive number."""
    return not pd_missing(value) and math.isfinite(value) and value > 0


def _check_figures(frame: pd.DataFrame, label: str) -> None:
    """CompareError naming the first ok row whose p50 or a repetition median is missing, NaN, infinite,
    zero or negative (a damaged or hand-edited store): never judged, before anything is compared."""
    ok = frame[frame["status"] == "ok"]
    reps = ok["rep_p50s_us"] if "rep_p50s_us" in ok else pd.Series(None, index=ok.index, dtype=object)
    sound = ok["p50_us"].map(_sound) & reps.map(
        lambda medians: medians is None or pd_missing(medians) or all(map(_sound, medians)))
    if not sound.all():
        _figure(ok.loc[sound[~sound].index[0]], label)  # raises, naming it


def _figure(row: pd.Series, label: str) -> Figure:
    """An ok row's figure (figures.Figure), with its own error where it has one repetition and the
    resolution of the clock its samples were read off; a p50 or a repetition median that is missing,
    NaN, zero or negative is bad input, named, never a verdict."""
    p50, reps = row["p50_us"], row.get("rep_p50s_us")
    reps = None if reps is None or pd_missing(reps) or len(reps) == 0 else np.asarray(
        [math.nan if v is None else v for v in reps], dtype=np.float64)
    if not (_sound(p50) and (reps is None or all(map(_sound, reps)))):
        medians = "" if reps is None else f" and repetition medians {', '.join(f'{v:g}' for v in reps)}"
        raise CompareError(f"{label}: {' '.join(_describe(row))} is ok with a p50 of {p50}{medians}: an ok "
                           "row needs a finite, positive p50 and repetition medians (a damaged or "
                           "hand-edited store?); it is not judged")
    samples = row.get("samples_us")
    step = (0.0 if samples is None or pd_missing(samples)
            else quantum(np.sort(samples), CLOCK_JITTER_S * 1e6))  # samples in us
    resolution = math.inf if math.isnan(step) else step / float(p50)
    return Figure.of(float(p50), reps, row.get("repetitions"), row.get("rep_noise"),
                                  row.get("p50_precision"), resolution)


def _domain(base_row: pd.Series, new_row: pd.Series) -> tuple[str, str, str]:
    """What one shift is common to: a provider of a kernel on a GPU (two GPU models: both named, no spread
    of one kind judges that shift)."""
    gpus = (base_row["gpu_name"], new_row["gpu_name"])
    return (gpus[0] if gpus[0] == gpus[1] else f"{gpus[0]} -> {gpus[1]}", base_row["kernel"],
            base_row["provider"])


def _kind(row: pd.Series) -> str:
    """What bounds a row by its own figures: the larger of its shares of the measured copy bandwidth and
    matmul rate (their ratio is the kernel's byte and FLOP model's at its shape, whatever the config's
    speed); '' where neither was measured (the interpreter, an export)."""
    copy, matmul = (row.get(name) for name in ("pct_copy_bw", "pct_matmul"))
    copy, matmul = (0.0 if pd_missing(v) else float(v) for v in (copy, matmul))
    if not (copy > 0 or matmul > 0):
        return ""
    return "memory-bound" if copy >= matmul else "compute-bound"


def _control(domain: tuple, group: tuple) -> tuple:
    """What the machine moves alike: every provider of the kernel at one shape and dtype on a GPU."""
    return domain[0], domain[1], *group


def load_calibration(argument: str, sides: tuple) -> tuple[dict, str]:
    """(GPU, kernel, provider) -> Spread, from the runs in a store (`STORE`: every sweep in it is a run;
    `STORE:id,id,...`: those) by calibration.calibrate, and a line saying which: a run that is BASE's or
    NEW's own rows is left out (NEW may hold the very change being judged; BASE would judge itself)."""
    head, colon, tail = argument.rpartition(":")
    path, ids = (Path(head), tail.split(",")) if colon and Path(head).is_file() else (Path(argument), None)
    if not path.is_file():
        raise CompareError(f"--calibration: {argument!r} is not a store file (STORE or STORE:id,id,...)")
    try:
        store = ResultStore(path)
        ids = ids or sorted(store.load()["sweep_id"].unique())
        frames = {sweep_id: store.load(sweep_id=sweep_id) for sweep_id in ids}
        store.close()
    except (StoreError, sqlite3.DatabaseError) as error:
        raise CompareError(f"--calibration: {path}: {error}") from None
    left_out = {}
    for side in sides:
        if side.path is not None and side.path.resolve() == path.resolve():
            for sweep_id, frame in frames.items():
                if set(frame["id"]) & set(side.frame["id"]):
                    left_out[sweep_id] = side.label
    runs = [frame for sweep_id, frame in frames.items() if not frame.empty and sweep_id not in left_out]
    if len(runs) < MIN_RUNS:
        raise CompareError(f"--calibration: {argument} holds {len(runs)} run(s) with rows besides BASE's "
                           f"and NEW's; the spread of runs needs {MIN_RUNS} or more (the same "
                           "sweep, run again, force=true)")
    note = ", ".join(f"{sweep_id} ({label}'s run)" for sweep_id, label in left_out.items())
    return (calibration_of(runs, f"calibrated on {path}: "),
            f"calibration: {len(runs)} runs of {path}" + (f"; left out: {note}" if note else ""))


def calibration_of(frames: list[pd.DataFrame], source: str) -> dict:
    """(GPU, kernel, provider) -> Spread of these runs (a sweep's rows each), by calibration.calibrate."""
    return calibrate([_run_figures(frame, "--calibration") for frame in frames], source)


def _run_figures(frame: pd.DataFrame, label: str) -> dict:
    """{(trial, GPU): RunFigure} of one run: each trial's newest re-timed row, else its newest, where ok."""
    figures = {}
    for (key, gpu), rows in frame.groupby(["trial_key", "gpu_name"]):
        final = rows[rows["phase"] == "final"]
        chosen = final if not final.empty else rows
        row = chosen.loc[chosen["id"].idxmax()]
        if row["status"] == "ok":
            domain, group = (gpu, row["kernel"], row["provider"]), (row["dtype"], row["shape"])
            figures[(key, gpu)] = RunFigure(domain, group, _figure(row, label),
                                                         _control(domain, group))
    return figures


def spreads_of(domains: list[tuple], calibrated: dict, stated: Optional[float]) -> dict:
    """domain -> the Spread its shift is judged against: stated with --machine-spread, else calibrated on
    runs of this GPU, kernel and provider; else None (the shift cannot be judged)."""
    spreads = {}
    for domain in domains:
        if " -> " in domain[0]:
            spreads[domain] = None
        elif stated is not None:
            given = Spread(stated, math.inf, stated, math.inf, "stated by --machine-spread")
            spreads[domain] = replace(given, control=given)
        else:
            spreads[domain] = calibrated.get(domain)
    return spreads


def _pick(base: pd.DataFrame, new: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """One row a side for one trial: the newest finalist rows where both have one, else the newest
    screening rows where both have one, else each side's newest row."""
    for phase in ("final", "screen"):
        b, n = base[base["phase"] == phase], new[new["phase"] == phase]
        if not b.empty and not n.empty:
            return b.loc[b["id"].idxmax()], n.loc[n["id"].idxmax()]
    return base.loc[base["id"].idxmax()], new.loc[new["id"].idxmax()]


def _describe(row: pd.Series) -> tuple[str, str, str, str, str]:
    shape = shape_label(row["shape"])
    config = " ".join(f"{k}={v}" for k, v in json.loads(row["config"]).items()) or "-"
    return row["kernel"], row["provider"], row["dtype"], shape, config


def _order(row: pd.Series) -> tuple:
    """Report order: kernel, ours before the baselines, dtype, shape by size, config."""
    config = sorted(json.loads(row["config"]).items())
    baseline = row["provider"] != TRITON_PROVIDER  # False sorts first
    return row["kernel"], baseline, row["provider"], row["dtype"], json.loads(row["shape"]), config


def _same_value(a, b) -> bool:
    """Environment values as equal: a missing value (None or NaN, as pandas reads a NULL) equals a
    missing one."""
    return (pd.isna(a) and pd.isna(b)) or (not pd.isna(a) and not pd.isna(b) and str(a) == str(b))


def _on_common_gpus(base: pd.DataFrame, new: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, bool]:
    """Where the two sides measured a GPU in common, each side's rows of those GPUs, matched on (trial,
    GPU); else every row, matched on the trial alone (another GPU's rows compared, and named)."""
    common = set(base["gpu_name"].dropna()) & set(new["gpu_name"].dropna())
    if not common:
        return base, new, False
    return base[base["gpu_name"].isin(common)], new[new["gpu_name"].isin(common)], True


def compare(base: pd.DataFrame, new: pd.DataFrame, rule: between_runs.Rule = between_runs.Rule(),
            shipped: Optional[set] = None, gate_all: bool = False, calibrated: Optional[dict] = None,
            stated: Optional[float] = None) -> dict:
    """Everything the report prints: matched trials and winners with their verdicts (`judged` where the
    gate looks at them), the shift of each provider of a kernel on a GPU, status changes, only-in lists,
    and the environment fields that differ between matched rows with how many pairs differ in each."""
    _check_figures(base, "BASE")
    _check_figures(new, "NEW")
    base, new, by_gpu = _on_common_gpus(base, new)
    match_on = ["trial_key", "gpu_name"] if by_gpu else ["trial_key"]
    base_by_key = dict(tuple(base.groupby(match_on)))
    new_by_key = dict(tuple(new.groupby(match_on)))
    matched, status_changes, env_diffs = [], [], {}
    for key in sorted(base_by_key.keys() & new_by_key.keys()):
        base_row, new_row = _pick(base_by_key[key], new_by_key[key])
        _environment(base_row, new_row, env_diffs)
        if base_row["status"] == "ok" and new_row["status"] == "ok":
            where = (base_row["trial_key"], base_row["gpu_name"], base_row["triton_version"])
            matched.append((base_row, new_row, {"judged": gate_all or where in (shipped or set())}))
        elif base_row["status"] != new_row["status"]:
            message = new_row["message"] if new_row["status"] != "ok" else base_row["message"]
            status_changes.append({"order": _order(new_row), "row": _describe(new_row),
                                   "base": base_row["status"], "new": new_row["status"], "message": message})
    winners = _winner_pairs(base, new, ["kernel", "gpu_name", "dtype", "shape"] if by_gpu
                            else ["kernel", "dtype", "shape"])
    pairs, index_of, shared = _pairs(matched + winners)
    domains = list(dict.fromkeys(p.domain for p in pairs))
    spreads = spreads_of(domains, calibrated or {}, stated)
    judgement = between_runs.judge(pairs, rule, spreads)

    def entry(base_row, new_row, extra: dict) -> dict:
        index = index_of[(base_row["id"], new_row["id"])]
        phase = new_row["phase"] if isinstance(new_row["phase"], str) else "screen"
        figures = (pairs[index].base, pairs[index].new)
        return {"order": _order(new_row), "row": _describe(new_row), "base_p50": base_row["p50_us"],
                "new_p50": new_row["p50_us"], "phase": phase, **judgement.rows[index], **extra,
                "judged": pairs[index].judged,
                # in repetitions, yet every sample one value: the clock's resolution is unknown (_figure)
                "clock_unknown": any(f.repetitions > 1 and math.isinf(f.own) for f in figures)}

    only = {}
    for side, by_key, other in (("BASE", base_by_key, new_by_key), ("NEW", new_by_key, base_by_key)):
        newest = [rows.loc[rows["id"].idxmax()] for key, rows in by_key.items() if key not in other]
        only[side] = [_describe(r) + (r["status"],) for r in sorted(newest, key=_order)]
    status_changes.sort(key=lambda r: r["order"])
    return {"matched": sorted((entry(*m) for m in matched), key=lambda r: r["order"]),
            "winners": [entry(*w) for w in winners], "shifts": judgement.shifts,
            "status_changes": status_changes, "only": only, "env_diffs": env_diffs,
            "classes": _noise_by_shape(pairs, judgement), "shared": shared,
            "gpu_models": None if by_gpu else _gpu_models(base, new)}


def _gpu_models(base: pd.DataFrame, new: pd.DataFrame) -> Optional[tuple[str, str]]:
    """BASE's and NEW's GPU models, named, where the sides share none and ran on GPUs of different
    models (no rule judges a regression across them); else None."""
    models = [sorted(set(side["gpu_name"].dropna().astype(str))) for side in (base, new)]
    return None if models[0] == models[1] else tuple(", ".join(m) or "none named" for m in models)


def _pairs(compared: list[tuple]) -> tuple[list[Pair], dict, dict]:
    """One Pair a compared (BASE row, NEW row, extra) (a winner that is a matched trial: one pair, judged
    where either is), each pair's index by its rows' ids, and how many compared rows of each side were
    measured while another process ran kernels on the GPU."""
    pairs, index_of = [], {}
    shared = {"BASE": 0, "NEW": 0}  # compared rows measured while another process ran kernels on the GPU
    for base_row, new_row, extra in compared:
        domain, group = _domain(base_row, new_row), (base_row["dtype"], base_row["shape"])
        key = (base_row["id"], new_row["id"])
        if key in index_of:
            pairs[index_of[key]].judged |= extra["judged"]
            continue
        index_of[key] = len(pairs)
        for side, row in (("BASE", base_row), ("NEW", new_row)):
            shared[side] += not pd.isna(row.get("gpu_shared")) and bool(row.get("gpu_shared"))
        pairs.append(Pair(
            domain, group, _figure(base_row, "BASE"), _figure(new_row, "NEW"), float(base_row["p50_us"]),
            extra["judged"], _same_value(base_row["timing_method"], new_row["timing_method"]),
            _control(domain, group), _kind(base_row)))
    return pairs, index_of, shared


def _environment(base_row: pd.Series, new_row: pd.Series, env_diffs: dict) -> None:
    """Count the environment fields that differ between two matched rows."""
    for name in NAMED:
        if EXPORT_PHASE in (base_row["phase"], new_row["phase"]) and (
                pd.isna(base_row[name]) or pd.isna(new_row[name])):
            continue  # an export records fewer of them: what it lacks is not a difference
        if not _same_value(base_row[name], new_row[name]):
            pair = (name, str(base_row[name]), str(new_row[name]))
            env_diffs[pair] = env_diffs.get(pair, 0) + 1


def _noise_by_shape(pairs: list, judgement) -> dict:
    """(kernel, provider, dtype, shape) -> the repetition spread its rows were judged by, for the report."""
    shown = {}
    for pair, row in zip(pairs, judgement.rows):
        if row["noise_from"].startswith("shape s="):
            key = (pair.domain[1], pair.domain[2], pair.group[0], shape_label(pair.group[1]))
            shown[key] = row["noise_from"].split(" reps")[0].removeprefix("shape ")
    return shown


def _winner_pairs(base: pd.DataFrame, new: pd.DataFrame, group_by: list[str]) -> list[tuple]:
    """Each side's winner of every (kernel, dtype, shape) both measured ok (per GPU where the sides
    share GPUs): the chosen finalist, else the lowest p50; compared whatever their configs."""

    def ours(frame):
        rows = frame[(frame["status"] == "ok") & (frame["provider"] == TRITON_PROVIDER)]
        return dict(tuple(rows.groupby(group_by)))

    base_groups, new_groups = ours(base), ours(new)
    found = []
    for group in sorted(base_groups.keys() & new_groups.keys()):
        base_row = base_groups[group].loc[winner(base_groups[group])]
        new_row = new_groups[group].loc[winner(new_groups[group])]
        found.append((base_row, new_row, {"base_config": _describe(base_row)[4], "judged": True}))
    return found

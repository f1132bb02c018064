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

from triton_sweep.model.columns import NAMED
from triton_sweep.measure.stop_rule import CLOCK_JITTER_S, quantum
from triton_sweep.compare import between_runs, choosing
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
    p50 = pd.to_numeric(ok["p50_us"], errors="coerce").to_numpy(np.float64)
    reps = ok["rep_p50s_us"].dropna() if "rep_p50s_us" in ok else pd.Series([], dtype=object)
    sound = pd.Series(np.isfinite(p50) & (p50 > 0), index=ok.index)
    sound[reps.index] &= np.array([all(map(_sound, medians)) for medians in reps], dtype=bool)
    if not sound.all():
        _figure(ok.loc[sound[~sound].index[0]], label)  # raises, naming it


def _figure(row: pd.Series, label: str) -> Figure:
    """An ok row's figure (figures.Figure), with its own error where it has one repetition and the
    resolution of the clock its samples were read off; a p50 or a repetition median that is missing,
    NaN, zero or negative is bad input, named, never a verdict."""
    p50, reps = row["p50_us"], _medians(row.get("rep_p50s_us"))
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


def _medians(reps) -> Optional[np.ndarray]:
    """A row's repetition medians as float64 (a missing one NaN); None where it kept none."""
    return None if reps is None or pd_missing(reps) or len(reps) == 0 else np.asarray(
        [math.nan if v is None else v for v in reps], dtype=np.float64)


def _kind(row: pd.Series) -> str:
    """What bounds a row by its own figures: the larger of its shares of the measured copy bandwidth and
    matmul rate (their ratio is the kernel's byte and FLOP model's at its shape, whatever the config's
    speed); '' where neither was measured (the interpreter, an export)."""
    return _kind_of(row.get("pct_copy_bw"), row.get("pct_matmul"))


def _kind_of(copy, matmul) -> str:
    """_kind of a row's shares of the copy bandwidth and matmul rate."""
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


def _describe(row: pd.Series) -> tuple[str, str, str, str, str]:
    shape = shape_label(row["shape"])
    config = " ".join(f"{k}={v}" for k, v in json.loads(row["config"]).items()) or "-"
    return row["kernel"], row["provider"], row["dtype"], shape, config


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


def _gpu_models(base: pd.DataFrame, new: pd.DataFrame) -> Optional[tuple[str, str]]:
    """BASE's and NEW's GPU models, named, where the sides share none and ran on GPUs of different
    models (no rule judges a regression across them); else None."""
    models = [sorted(set(side["gpu_name"].dropna().astype(str))) for side in (base, new)]
    return None if models[0] == models[1] else tuple(", ".join(m) or "none named" for m in models)


def _noise_by_shape(pairs: list, judgement) -> dict:
    """(kernel, provider, dtype, shape) -> the repetition spread its rows were judged by, for the report."""
    shown, labels = {}, {}
    for pair, row in zip(pairs, judgement.rows):
        if row["noise_from"].startswith("shape s="):
            shape = pair.group[1]
            label = labels[shape] if shape in labels else labels.setdefault(shape, shape_label(shape))
            shown[(pair.domain[1], pair.domain[2], pair.group[0], label)] = \
                row["noise_from"].split(" reps")[0].removeprefix("shape ")
    return shown




# What _pairs and _entries read of each compared row.
COMPARED = ["id", "gpu_shared", "gpu_name", "kernel", "provider", "dtype", "shape", "config", "phase",
            "p50_us", "timing_method", "pct_copy_bw", "pct_matmul", "samples_us", "rep_p50s_us",
            "repetitions", "rep_noise", "p50_precision"]


def compare(base: pd.DataFrame, new: pd.DataFrame, rule: between_runs.Rule = between_runs.Rule(),
            shipped: Optional[set] = None, gate_all: bool = False, calibrated: Optional[dict] = None,
            stated: Optional[float] = None) -> dict:
    """Everything the report prints: matched trials and winners with their verdicts (`judged` where the
    gate looks at them), the shift of each provider of a kernel on a GPU, status changes, only-in lists,
    and the environment fields that differ between matched rows with how many pairs differ in each."""
    _check_figures(base, "BASE")
    _check_figures(new, "NEW")
    base, new, by_gpu = _on_common_gpus(base, new)
    base_labels, new_labels, only_labels = choosing.matched_labels(
        base, new, ["trial_key", "gpu_name"] if by_gpu else ["trial_key"])
    b, n = base.loc[base_labels].reset_index(drop=True), new.loc[new_labels].reset_index(drop=True)
    env_diffs = _environment(b, n)
    ok = ((b["status"] == "ok") & (n["status"] == "ok")).to_numpy()
    status_changes = _status_changes(b[~ok & (b["status"] != n["status"]).to_numpy()],
                                     n[~ok & (b["status"] != n["status"]).to_numpy()])
    b, n = b[ok], n[ok]
    judged = [gate_all or where in (shipped or set())
              for where in zip(b["trial_key"], b["gpu_name"], b["triton_version"])]
    winners = choosing.winner_labels(base, new, ["kernel", "gpu_name", "dtype", "shape"] if by_gpu
                                     else ["kernel", "dtype", "shape"])
    compared = [pd.concat([rows[COMPARED], side.loc[winners[column], COMPARED]], ignore_index=True)
                for rows, side, column in ((b, base, "b"), (n, new, "n"))]
    matched = len(b)
    del b, n  # a million rows: their copies of every column, no longer read
    pairs, index, shared = _pairs(*compared, judged + [True] * len(winners))
    spreads = spreads_of(list(dict.fromkeys(p.domain for p in pairs)), calibrated or {}, stated)
    judgement = between_runs.judge(pairs, rule, spreads)
    classes = _noise_by_shape(pairs, judgement)
    # Each pair's (judged, clock unknown: in repetitions, yet every sample one value); then no figures kept.
    marks = [(pair.judged, any(f.repetitions > 1 and math.isinf(f.own) for f in (pair.base, pair.new)))
             for pair in pairs]
    del pairs
    entries = _entries(*compared, marks, index, judgement, matched)
    only = {}
    for side, frame, labels in (("BASE", base, only_labels[0]), ("NEW", new, only_labels[1])):
        rows = frame.loc[labels]
        names, orders = choosing.described(rows)
        listed = sorted(zip(orders, names, rows["status"].tolist()), key=lambda item: item[0])
        only[side] = [name + (status,) for _, name, status in listed]
    return {"matched": sorted(entries[:matched], key=lambda r: r["order"]), "winners": entries[matched:],
            "shifts": judgement.shifts, "status_changes": status_changes, "only": only,
            "env_diffs": env_diffs, "classes": classes, "shared": shared,
            "gpu_models": None if by_gpu else _gpu_models(base, new)}


def _status_changes(base: pd.DataFrame, new: pd.DataFrame) -> list[dict]:
    """Matched trials whose status differs (not both ok), in report order, with NEW's message where NEW
    failed, else BASE's."""
    names, orders = choosing.described(new)
    changes = [{"order": order, "row": name, "base": b, "new": n, "message": nm if n != "ok" else bm}
               for order, name, b, n, bm, nm in zip(orders, names, base["status"].tolist(),
                                                    new["status"].tolist(), base["message"].tolist(),
                                                    new["message"].tolist())]
    return sorted(changes, key=lambda r: r["order"])


def _environment(base: pd.DataFrame, new: pd.DataFrame) -> dict:
    """(field, BASE's value, NEW's value) -> how many matched pairs differ so in that environment field
    (a missing value equals a missing one; where a row is an export's, what either lacks is no
    difference: an export records fewer of them)."""
    export = ((base["phase"] == EXPORT_PHASE) | (new["phase"] == EXPORT_PHASE)).to_numpy(bool)
    diffs = {}
    for name in NAMED:
        b, n = base[name].to_numpy(object), new[name].to_numpy(object)
        b_missing, n_missing = pd.isna(b), pd.isna(n)
        b, n = np.where(b_missing, None, b), np.where(n_missing, None, n)  # "None", whatever the type
        differ = (b_missing != n_missing) | (~b_missing & ~n_missing & (b != n))
        for i in np.flatnonzero(differ & ~(export & (b_missing | n_missing))):
            if not _same_value(b[i], n[i]):
                pair = (name, str(b[i]), str(n[i]))
                diffs[pair] = diffs.get(pair, 0) + 1
    return diffs


def _pairs(base: pd.DataFrame, new: pd.DataFrame, judged: list[bool]) -> tuple[list[Pair], np.ndarray, dict]:
    """One Pair a compared (BASE row, NEW row) (a winner that is a matched trial: one pair, judged where
    either is), the index of each compared row's pair, and how many compared rows of each side were
    measured while another process ran kernels on the GPU."""
    ids = pd.DataFrame({"base": base["id"].to_numpy(), "new": new["id"].to_numpy()})
    index = ids.groupby(["base", "new"], sort=False).ngroup().to_numpy()
    first = ~ids.duplicated().to_numpy()
    judged = pd.Series(judged).groupby(index).any().tolist()
    base, new = base[first], new[first]
    shared = {label: sum(not pd.isna(v) and bool(v) for v in side["gpu_shared"].tolist())
              for label, side in (("BASE", base), ("NEW", new))}
    # One object for each distinct name, domain and group (a million pairs: not a copy of each a pair).
    seen = {}
    one = lambda value: seen.setdefault(value, value)
    b, n = ({name: list(map(one, side[name].tolist())) for name in NAMES} for side in (base, new))
    b.update({name: base[name].tolist() for name in ("p50_us", "pct_copy_bw", "pct_matmul")})
    pairs = []
    for i, (base_figure, new_figure) in enumerate(zip(_figures(base), _figures(new))):
        gpus = b["gpu_name"][i], n["gpu_name"][i]
        domain = one((gpus[0] if gpus[0] == gpus[1] else f"{gpus[0]} -> {gpus[1]}", b["kernel"][i],
                      b["provider"][i]))
        group = one((b["dtype"][i], b["shape"][i]))
        pairs.append(Pair(domain, group, base_figure, new_figure, float(b["p50_us"][i]), judged[i],
                          _same_value(b["timing_method"][i], n["timing_method"][i]),
                          one(_control(domain, group)), _kind_of(b["pct_copy_bw"][i], b["pct_matmul"][i])))
    return pairs, index, shared


NAMES = ("gpu_name", "kernel", "provider", "dtype", "shape", "timing_method")  # what _pairs reads as text


def _figures(frame: pd.DataFrame) -> list[Figure]:
    """The figure of each ok row (as _figure, rows _check_figures passed), the clock steps of all at once."""
    p50s = frame["p50_us"].tolist()
    resolutions = [math.inf if math.isnan(step) else step / float(p50)
                   for step, p50 in zip(choosing.steps(frame["samples_us"]), p50s)]
    return [Figure.of(float(p50), _medians(reps), repetitions, noise, precision, resolution)
            for p50, reps, repetitions, noise, precision, resolution in zip(
                p50s, frame["rep_p50s_us"].tolist(), frame["repetitions"].tolist(),
                frame["rep_noise"].tolist(), frame["p50_precision"].tolist(), resolutions)]


def _entries(base: pd.DataFrame, new: pd.DataFrame, marks: list[tuple[bool, bool]], index: np.ndarray,
             judgement, matched: int) -> list[dict]:
    """What the report prints of each compared row (the first `matched` the matched trials, the rest the
    winners, which name BASE's config too); `marks`: each pair's (judged, clock unknown)."""
    names, orders = choosing.described(new)
    base_configs = choosing.described(base.iloc[matched:])[0]
    phases = [p if isinstance(p, str) else "screen" for p in new["phase"].tolist()]
    entries, used = [], set()
    for i, (pair_index, base_p50, new_p50) in enumerate(zip(index.tolist(), base["p50_us"].tolist(),
                                                              new["p50_us"].tolist())):
        # the judgement's row itself where it is this pair's first (a million rows: no copy of each)
        entry = judgement.rows[pair_index] if pair_index not in used else dict(judgement.rows[pair_index])
        used.add(pair_index)
        entry.update({"order": orders[i], "row": names[i], "base_p50": base_p50, "new_p50": new_p50,
                      "phase": phases[i], "judged": marks[pair_index][0],
                      "clock_unknown": marks[pair_index][1]})
        if i >= matched:
            entry["base_config"] = base_configs[i - matched][4]
        entries.append(entry)
    return entries

"""Two sides of a comparison matched and judged, and the report: what runners.compare prints and gates on,
and what runners.revalidate judges a re-timed export by. A side is a store's rows or an export's
(export_frame: the configs it ships with the figures it recorded); every trial measured ok on both gets a
verdict by the rule of runners/compare/between_runs.py, and so does each side's winner of every (kernel,
dtype, shape); the report lists them with their thresholds and reach, the shift of each kernel's provider,
the status changes, the trials only on one side and the environment fields that differ; gate_verdict is
the exit status of `--fail-on-slow` (runners/compare/command.py's docstring says when it fails and refuses).
"""
from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from runners.model.finalists import winner
from runners.model.columns import COLUMN_NAMES, NAMED
from runners.model.trial import TRITON_PROVIDER, Trial
from runners.measure.stop_rule import CLOCK_JITTER_S, quantum
from runners.compare import between_runs
from runners.export.cover import Measured, covering_set
from runners.export.fileformat import sections
from runners.export.runtime import pick_version, version_key
from runners.store.result_store import ResultStore, StoreError, shape_label

LISTED = 20  # trials listed per only-in / failing list unless --all
OTHER_TIMER = "OTHER TIMER"  # the two rows were timed by different methods: not comparable
NO_REPETITIONS = "NO REPETITIONS"  # neither side has the noise of the row's class: no verdict
VERDICTS = ("SAME", "FAST", "SLOW", between_runs.MACHINE, between_runs.ONE_SHAPE, OTHER_TIMER, NO_REPETITIONS)
JUDGED = VERDICTS[:4]  # a row or shift judged (whatever it was judged to be)
EXPORT_PHASE = "export"  # a row read from an export's JSON


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
            "config": json.dumps(config), "status": "ok", "phase": EXPORT_PHASE, "backend": "cuda",
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
    for gpu, rows in frame.groupby("gpu_name"):
        theirs = other.frame[other.frame["gpu_name"] == gpu]
        measured = sorted(set(rows["triton_version"]), key=version_key)
        running = theirs.loc[theirs["id"].idxmax(), "triton_version"] if not theirs.empty else measured[-1]
        version, _ = pick_version(measured, running)
        keep |= (frame["gpu_name"] == gpu) & (frame["triton_version"] == version)
    kept = frame[keep]
    sections_kept = set(zip(kept["gpu_name"], kept["triton_version"]))
    shipped = {item for item in side.shipped if (item[1], item[2]) in sections_kept}
    return Side(side.label, side.source, kept, shipped)


# --- what the rule reads --------------------------------------------------------------------------

def _sound(value) -> bool:
    """A median an ok row may carry: a finite, positive number."""
    return not between_runs.pd_missing(value) and math.isfinite(value) and value > 0


def _check_figures(frame: pd.DataFrame, label: str) -> None:
    """CompareError naming the first ok row whose p50 or a repetition median is missing, NaN, infinite,
    zero or negative (a damaged or hand-edited store): never judged, before anything is compared."""
    ok = frame[frame["status"] == "ok"]
    reps = ok["rep_p50s_us"] if "rep_p50s_us" in ok else pd.Series(None, index=ok.index, dtype=object)
    sound = ok["p50_us"].map(_sound) & reps.map(
        lambda medians: medians is None or between_runs.pd_missing(medians) or all(map(_sound, medians)))
    if not sound.all():
        _figure(ok.loc[sound[~sound].index[0]], label)  # raises, naming it


def _figure(row: pd.Series, label: str) -> between_runs.Figure:
    """An ok row's figure (between_runs.Figure), with its own error where it has one repetition and the
    resolution of the clock its samples were read off; a p50 or a repetition median that is missing,
    NaN, zero or negative is bad input, named, never a verdict."""
    p50, reps = row["p50_us"], row.get("rep_p50s_us")
    reps = None if reps is None or between_runs.pd_missing(reps) or len(reps) == 0 else np.asarray(
        [math.nan if v is None else v for v in reps], dtype=np.float64)
    if not (_sound(p50) and (reps is None or all(map(_sound, reps)))):
        medians = "" if reps is None else f" and repetition medians {', '.join(f'{v:g}' for v in reps)}"
        raise CompareError(f"{label}: {' '.join(_describe(row))} is ok with a p50 of {p50}{medians}: an ok "
                           "row needs a finite, positive p50 and repetition medians (a damaged or "
                           "hand-edited store?); it is not judged")
    samples = row.get("samples_us")
    step = (0.0 if samples is None or between_runs.pd_missing(samples)
            else quantum(np.sort(samples), CLOCK_JITTER_S * 1e6))  # samples in us
    resolution = math.inf if math.isnan(step) else step / float(p50)
    return between_runs.Figure.of(float(p50), reps, row.get("repetitions"), row.get("rep_noise"),
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
    copy, matmul = (0.0 if between_runs.pd_missing(v) else float(v) for v in (copy, matmul))
    if not (copy > 0 or matmul > 0):
        return ""
    return "memory-bound" if copy >= matmul else "compute-bound"


def _control(domain: tuple, group: tuple) -> tuple:
    """What the machine moves alike: every provider of the kernel at one shape and dtype on a GPU."""
    return domain[0], domain[1], *group


def _name(domain: tuple) -> str:
    """A shift's (domain, kind) as the report names it."""
    (gpu, kernel, provider), kind = domain
    return " ".join(filter(None, [kernel, "" if provider == TRITON_PROVIDER else provider,
                                  kind and f"({kind})"])) + f" on {gpu}"


def load_calibration(argument: str, sides: tuple) -> tuple[dict, str]:
    """(GPU, kernel, provider) -> Spread, from the runs in a store (`STORE`: every sweep in it is a run;
    `STORE:id,id,...`: those) by between_runs.calibrate, and a line saying which: a run that is BASE's or
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
    if len(runs) < between_runs.MIN_RUNS:
        raise CompareError(f"--calibration: {argument} holds {len(runs)} run(s) with rows besides BASE's "
                           f"and NEW's; the spread of runs needs {between_runs.MIN_RUNS} or more (the same "
                           "sweep, run again, force=true)")
    note = ", ".join(f"{sweep_id} ({label}'s run)" for sweep_id, label in left_out.items())
    return (calibration_of(runs, f"calibrated on {path}: "),
            f"calibration: {len(runs)} runs of {path}" + (f"; left out: {note}" if note else ""))


def calibration_of(frames: list[pd.DataFrame], source: str) -> dict:
    """(GPU, kernel, provider) -> Spread of these runs (a sweep's rows each), by between_runs.calibrate."""
    return between_runs.calibrate([_run_figures(frame, "--calibration") for frame in frames], source)


def _run_figures(frame: pd.DataFrame, label: str) -> dict:
    """{(trial, GPU): RunFigure} of one run: each trial's newest re-timed row, else its newest, where ok."""
    figures = {}
    for (key, gpu), rows in frame.groupby(["trial_key", "gpu_name"]):
        final = rows[rows["phase"] == "final"]
        chosen = final if not final.empty else rows
        row = chosen.loc[chosen["id"].idxmax()]
        if row["status"] == "ok":
            domain, group = (gpu, row["kernel"], row["provider"]), (row["dtype"], row["shape"])
            figures[(key, gpu)] = between_runs.RunFigure(domain, group, _figure(row, label),
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
            given = between_runs.Spread(stated, math.inf, stated, math.inf, "stated by --machine-spread")
            spreads[domain] = replace(given, control=given)
        else:
            spreads[domain] = calibrated.get(domain)
    return spreads


# --- matching and comparing -------------------------------------------------------------------------

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


def shipped_keys(side: Side, tolerance: float) -> set:
    """(trial key, GPU, Triton version) of what BASE ships: an export's configs at the shapes they cover;
    for a store, the list runners/export/ would export from its ok rows (newest row a
    trial) per kernel, GPU, Triton version and dtype."""
    if side.shipped is not None:
        return side.shipped
    frame = side.frame
    ok = frame[(frame["status"] == "ok") & (frame["provider"] == TRITON_PROVIDER) & frame["p50_us"].notna()]
    ok = ok.sort_values("id").groupby(["trial_key", "gpu_name", "triton_version"], as_index=False).tail(1)
    keys = set()
    for (kernel, gpu, version, dtype), rows in ok.groupby(["kernel", "gpu_name", "triton_version", "dtype"]):
        for item in covering_set(Measured(rows), tolerance)["configs"]:
            keys |= {(Trial(kernel, TRITON_PROVIDER, tuple(shape), dtype, item["config"]).key, gpu, version)
                     for shape in item["covers"]}
    return keys


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
    pairs, index_of = [], {}
    shared = {"BASE": 0, "NEW": 0}  # compared rows measured while another process ran kernels on the GPU
    for base_row, new_row, extra in matched + winners:  # a winner that is a matched trial: one pair
        domain, group = _domain(base_row, new_row), (base_row["dtype"], base_row["shape"])
        key = (base_row["id"], new_row["id"])
        if key in index_of:
            pairs[index_of[key]].judged |= extra["judged"]
            continue
        index_of[key] = len(pairs)
        for side, row in (("BASE", base_row), ("NEW", new_row)):
            shared[side] += not pd.isna(row.get("gpu_shared")) and bool(row.get("gpu_shared"))
        pairs.append(between_runs.Pair(
            domain, group, _figure(base_row, "BASE"), _figure(new_row, "NEW"), float(base_row["p50_us"]),
            extra["judged"], _same_value(base_row["timing_method"], new_row["timing_method"]),
            _control(domain, group), _kind(base_row)))
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
            "classes": _noise_by_shape(pairs, judgement), "shared": shared}


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


# --- the report -----------------------------------------------------------------------------------------

def _percent(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{100 * value:.1f}%"


def _table(rows: list[dict], winners: bool) -> list[str]:
    head = ["kernel", "provider", "dtype", "shape", "config"]
    head[4:5] = ["BASE config", "NEW config"] if winners else ["config"]
    head += ["phase", "BASE p50 us", "NEW p50 us", "NEW/BASE", "vs shift", "vs controls", "threshold",
             "catches",
             "noise from", "gate", "verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        kernel, provider, dtype, shape, config = r["row"]
        configs = [r["base_config"], config] if winners else [config]
        catches = f"+{_percent(r['catches'])}" if r["judged"] and not math.isnan(r["catches"]) else "-"
        cells = [kernel, provider, dtype, shape, *configs, r["phase"], f"{r['base_p50']:.2f}",
                 f"{r['new_p50']:.2f}", f"{r['ratio']:.3f}", _ratio(r["vs_shift"]), _ratio(r["vs_controls"]),
                 f"±{_percent(r['threshold'])}", catches, r["noise_from"],
                 "judged" if r["judged"] else "info", r["verdict"]]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _ratio(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3f}"


def _counts(rows: list[dict]) -> str:
    counts = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    text = ", ".join(f"{counts[v]} {v}" for v in VERDICTS if v in counts) or "none"
    slow = [r for r in rows if r["verdict"] == "SLOW"]
    if slow:
        worst = max(slow, key=lambda r: r["vs_shift"])
        text += f" (worst {100 * (worst['vs_shift'] - 1):+.1f}% against the shift: {' '.join(worst['row'])})"
    return text


def shift_lines(result: dict) -> list[str]:
    """One line per provider of a kernel on a GPU and kind of bound: the shift every row of it shares, and
    its verdict."""
    lines = []
    for domain, shift in result["shifts"].items():
        name = _name(domain)
        if shift is None:
            lines.append(f"  {name}: no row with repetitions, no shift")
            continue
        head = (f"  {name} ({'judged' if shift.judged else 'info'}): NEW/BASE "
                f"{math.exp(shift.value):.3f} over {shift.groups} shape(s)")
        if shift.spread is None:
            lines.append(f"{head}: NOT JUDGED: {_unjudged(domain[0][0], bool(result.get('calibration')))}")
            continue
        spread = shift.spread
        machine = ("" if shift.verdict != between_runs.MACHINE else
                   f" (the other providers at its shapes moved alike: {math.exp(shift.vs_controls):.3f} "
                   "against theirs; the machine's, not the code's)")
        lines.append(f"{head}, threshold ±{_percent(math.expm1(shift.threshold))}: {shift.verdict}"
                     f"{machine}; catches a slowdown of every row of +{_percent(math.expm1(shift.catches))} "
                     f"in 95% of runs (spread of runs: shift {_percent(spread.shift)}, per shape "
                     f"{_percent(spread.shape)}; {spread.source})")
    return lines


def refusals(result: dict) -> list[str]:
    """Why the gate cannot judge this comparison (exit 2): compared rows measured while another process
    ran kernels on their GPU; no judged row or shift with a verdict; judged rows whose noise was not
    measured; a kernel's shift that no measured spread can judge."""
    judged = [r for r in result["matched"] + result["winners"] if r["judged"]]
    reasons = []
    if any(result["shared"].values()):
        reasons.append(f"{_shared_rows(result)} were measured while another process ran kernels on their GPU "
                       "(gpu_shared): their figures are its work's as much as the code's; sweep that side "
                       "again on a GPU of its own")
    shifts = [s for s in result["shifts"].values() if s is not None and s.judged]
    if not any(r["verdict"] in JUDGED for r in judged) and not any(s.verdict in JUDGED for s in shifts):
        why = _counts(judged) if judged else "no trial ok on both sides"
        reasons.append(f"no judged row has a verdict ({why})")
    bare = {" ".join(r["row"]) for r in judged if r["verdict"] == NO_REPETITIONS and not r["clock_unknown"]}
    if bare:
        reasons.append(f"{len(bare)} judged row(s) have no measured noise: no repetitions on either side of "
                       "their shape or size class, or a single median without an interval (finalists."
                       "repetitions >= 2 gives them; sweep BASE again)")
    coarse = {" ".join(r["row"]) for r in judged if r["verdict"] == NO_REPETITIONS and r["clock_unknown"]}
    if coarse:
        reasons.append(f"{len(coarse)} judged row(s) read every sample as one value (e.g. "
                       f"{sorted(coarse)[0]}): a clock too coarse for the kernel, whose resolution, and so "
                       "the row's error, is unknown (time it with CUPTI, or a larger shape)")
    for domain, shift in result["shifts"].items():
        if shift is not None and shift.judged and shift.spread is None:
            reasons.append(f"the shift of {_name(domain)} (NEW/BASE {math.exp(shift.value):.3f}) cannot be "
                           f"judged: {_unjudged(domain[0][0], bool(result.get('calibration')))}")
    return reasons


def _shared_rows(result: dict) -> str:
    return f"{result['shared']['BASE']} of BASE's and {result['shared']['NEW']} of NEW's compared rows"


def _unjudged(gpu: str, calibrated: bool) -> str:
    """Why a shift has no spread to be judged against."""
    if " -> " in gpu:
        return "the sides ran on different GPU models"
    if calibrated:
        return ("the calibration gives no spread of runs of this GPU, kernel and provider: its runs hold "
                "none of their trials in every run with repetitions (sweep them with finalists.repetitions "
                ">= 2, on this GPU model), or give --machine-spread")
    return ("no spread of runs of this GPU, kernel and provider was measured (give --calibration STORE: 3 "
            "or more runs of the sweep on machines of the kind, with this kernel; or --machine-spread)")


def report(result: dict, base: Side, new: Side, rule: between_runs.Rule, gate: bool,
           changed_only: bool = False, list_all: bool = False) -> tuple[str, int]:
    """The printed report and the exit status (`gate`: --fail-on-slow, at rule.fail_on_slow)."""
    lines = [f"BASE: {base.source}", f"NEW:  {new.source}", *filter(None, [result.get("calibration")]),
             "rule: NEW/BASE of the geometric means of the repetitions' medians; the shift of each kernel's "
             "provider on a GPU, the median over shapes, is what a second run of every row shares; a row is "
             "SLOW / FAST when its NEW/BASE against that shift is beyond its threshold: the t quantile of "
             f"its family's share of alpha {rule.alpha:g} times sqrt(s^2/R_base + s^2/R_new + 2 tau^2 + "
             "var(shift)) (s: the spread of the repetitions' medians, tau: each shape's own part of a run's "
             f"shift), at least {100 * rule.min_effect:g}%; the shift is judged against the spread of runs "
             "of the machine's kind, sqrt(2 sigma^2 + var(shift)); shapes are judged with those of their "
             "kind of bound (memory or compute); a SLOW or FAST row or shift is MACHINE where the other "
             "providers at its shapes moved alike (runners/compare/between_runs.py)"]
    if result["env_diffs"]:
        lines.append("environment differs between matched rows (BASE -> NEW, matched pairs):")
        differences = sorted(result["env_diffs"].items())
        lines += [f"  {name}: {b} -> {n} ({count})" for (name, b, n), count in differences]
    else:
        lines.append("environment: the same for every matched row (" + ", ".join(NAMED) + ")")
    if any(result["shared"].values()):
        lines.append("measured while another process ran kernels on their GPU (gpu_shared): "
                     + _shared_rows(result))
    classes = [f"{' '.join(map(str, c))} {s}" for c, s in result["classes"].items()]
    lines.append("repetition noise by shape (kernel provider dtype shape: s): "
                 + ("; ".join(classes) or "none"))
    lines += ["shift of every row, per kernel, provider and GPU:"] + shift_lines(result)
    shown = [r for r in result["matched"] if not changed_only or r["verdict"] != "SAME"]
    count = f"{len(result['matched'])}" + (f", {len(shown)} not SAME shown" if changed_only else "")
    lines += ["", f"## Trials measured on both sides ({count})", ""]
    lines += _table(shown, winners=False) if shown else ["(none)"]
    lines += ["", "## Winners of each (kernel, dtype, shape), whatever their configs", ""]
    lines += _table(result["winners"], winners=True) if result["winners"] else ["(none ok on both sides)"]
    lines += _lists(result, list_all)
    only = result["only"]
    lines += ["", f"summary: {len(result['matched'])} trials on both sides: {_counts(result['matched'])}; "
              f"winners: {_counts(result['winners'])}; {len(broken(result))} ok in BASE and failing in NEW; "
              f"{len(only['BASE'])} only in BASE, {len(only['NEW'])} only in NEW"]
    lines += _reach(result)
    if not gate:
        return "\n".join(lines), 0
    line, status = gate_verdict(result, rule)
    return "\n".join(lines + [line]), status


def _lists(result: dict, list_all: bool) -> list[str]:
    lines = []
    changes = [f"{c['base']} -> {c['new']}: {' '.join(c['row'])}: {str(c['message'])[:120]}"
               for c in result["status_changes"]]
    lists = [("status changed", changes)]
    lists += [(f"only in {side}", [f"{' '.join(row[:5])} ({row[5]})" for row in rows])
                 for side, rows in result["only"].items()]
    for title, items in lists:
        if items:
            lines += ["", f"{title} ({len(items)}):"]
            lines += [f"  {item}" for item in (items if list_all else items[:LISTED])]
            if len(items) > LISTED and not list_all:
                lines.append(f"  ... {len(items) - LISTED} more (--all lists them)")
    return lines


def _reach(result: dict) -> list[str]:
    """What the comparison could have caught: the judged rows' smallest slowdowns caught in 95% of runs,
    best and worst, and each shift's."""
    judged = [r for r in result["matched"] + result["winners"]
              if r["judged"] and not math.isnan(r["catches"])]
    if not judged:
        return []
    best, worst = min(judged, key=lambda r: r["catches"]), max(judged, key=lambda r: r["catches"])
    line = (f"reach: a slowdown of one judged row is caught in 95% of runs from +{_percent(best['catches'])} "
            f"(best) to +{_percent(worst['catches'])} (worst: {' '.join(worst['row'])})")
    shifts = [f"{_name(domain)} +{_percent(math.expm1(s.catches))}"
              for domain, s in result["shifts"].items()
              if s is not None and s.judged and not math.isnan(s.catches)]
    return [line + ("; of every row of a kernel: " + ", ".join(shifts) if shifts else "")]


def broken(result: dict) -> list[dict]:
    """The trials ok in BASE that fail in NEW (not pruned: a config that stopped working)."""
    return [c for c in result["status_changes"] if c["base"] == "ok" and c["new"] != "pruned"]


def gate_verdict(result: dict, rule: between_runs.Rule) -> tuple[str, int]:
    """The gate's line and exit status: 2 where rows were measured beside another process's kernels
    (refusals: a SLOW there may be its work); else 1 when a judged row is SLOW against its shift by more
    than the gate's share (rule.fail_on_slow), a shift is, or a trial ok in BASE fails in NEW; else 2
    where it cannot judge (refusals); else 0."""
    limit = f"{100 * rule.fail_on_slow:g}%"
    failing = broken(result)
    reasons = refusals(result)
    judged = [r for r in result["matched"] + result["winners"] if r["judged"]]
    slow = [r for r in judged if r["verdict"] == "SLOW" and r["vs_shift"] - 1 > rule.fail_on_slow]
    shifts = [_name(domain) for domain, s in result["shifts"].items()
              if s is not None and s.judged and s.verdict == "SLOW"
              and math.expm1(s.value) > rule.fail_on_slow]
    head = f"gate --fail-on-slow {limit} on {len(judged)} judged rows (winners and shipped configs): "
    if any(result["shared"].values()):
        return head + "REFUSED: " + "; ".join(reasons), 2
    if slow or shifts or failing:
        named = f" ({', '.join(shifts)})" if shifts else ""
        return head + (f"FAIL: {len(slow)} SLOW by more than {limit} against their shift, "
                       f"{len(shifts)} shift(s) SLOW by more than {limit}{named}, "
                       f"{len(failing)} failing in NEW"), 1
    if reasons:
        return head + "REFUSED: " + "; ".join(reasons), 2
    return head + "pass", 0

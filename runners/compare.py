"""Compare two sweeps, or an export with a store or another export, and gate CI on it:

    python -m runners.compare BASE NEW [--fail-on-slow 2%]

BASE and NEW are each a sweep id in --store, a store file (all its rows), `store.sqlite:sweep_id`, or an
export's JSON (`outputs/exports/<kernel>_configs.json`: the configs it ships with the p50s it recorded).
Every (kernel, provider, shape, dtype, config) measured on both sides gets NEW/BASE of its p50s and a
verdict; so does each side's winner of every (kernel, dtype, shape), whichever config won there. Where
both sides measured a GPU in common, rows are matched on it; else by trial alone, and the environment
fields that differ are named.

The unit of replication is the run. The samples of one run share where its buffers landed, the clocks
its GPU settled at and its neighbours, so their spread says nothing of how far a second run of the same
code may fall (seen on an H200: an unchanged re-run moved a 5 us softmax by 2.4%, while a rank test of
the samples gave p = 1e-28). What a second run meets is measured by repetitions: a trial's samples taken
in blocks on buffers placed anew (finalists: `finalists.repetitions`, 5 by default; runners/measure/
timing.py), the median of each kept in the store. The rule, per compared pair of rows:
- d = ln(NEW p50 / BASE p50).
- s: the standard deviation of ln(a repetition's median), pooled over the compared rows of the pair's
  class on both sides: the rows of that kernel, provider, dtype and shape (the same buffers, whose
  placement is what moves a small kernel), else, where none of those has repetitions, of that
  kernel, provider and size class of p50 (under 10 us, 10-100 us, 0.1-1 ms, 1 ms and over); with no
  repetition in either, ASSUMED_NOISE, said as "assumed". Pooled, so that a few repetitions of one
  row are not the whole evidence (a row's screening has one).
- The two p50s then differ by chance with a standard deviation of sqrt(s^2/R_base + s^2/R_new +
  2 r^2): R the repetitions of each row, r what every repetition of a run shares, which repetitions
  cannot show (the process, the machine, a clock state): `--run-noise`, RUN_NOISE by default.
- SLOW when d exceeds the threshold, FAST when d is below minus it, SAME otherwise. The threshold is
  that standard deviation times the two-sided quantile of alpha / K (Student's t where s rests on few
  repetitions), and at least ln(1 + `--min-effect`) (1%). K is the number of rows of the row's family:
  the rows the gate judges are one family, the others another, so that unchanged code gets a verdict
  other than SAME in at most `--alpha` (1%) of comparisons in each (Bonferroni), however many trials
  a sweep has. The report gives each row's threshold and where its noise came from.
Rows timed by different methods (the CUPTI kernel time against the CUDA-event time of older stores, ~3 us
a call more) get no verdict: OTHER TIMER.

Why repetitions and a stated r, and no calibration stored per GPU (BENCHMARKS.md, "2026-11-24"): on an
H200 what moves a small kernel between runs is where its buffers land (a 5 us softmax: 1.7-2.2% from
one allocation to the next, 0.2-0.6% on the same buffers), which repetitions on buffers placed anew
measure in every row at 0.3-0.4 s of GPU time a sweep; what every repetition of a run shares came to
0.03-0.31% across six runs on one machine. A calibration from runs on one machine would set r there,
but a second machine moved a matmul by 1.6% where one machine's runs moved it by 0.2-0.9%: r from one
machine would fail a gate run on another. RUN_NOISE, 0.5%, is above every run-level share measured,
and each row's repetitions carry the rest (a matmul's 1.2% clock spread is in its s).

The gate judges what is shipped: every winner, and BASE's exported configs at the shapes they are
exported for (the list runners/export.py exports at `--tolerance`, or the configs of a BASE export);
other trials are listed as information (`--gate all` judges every trial). With `--fail-on-slow X` the
exit status is 1 when a judged row is SLOW and slower by more than X, or a trial ok in BASE fails in NEW
(not pruned: a config that stopped working is a regression); else 0; 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from runners.engine.finalists import winner
from runners.engine.trials import TRITON_PROVIDER, Trial
from runners.export import sweep_export_conf
from runners.results.export import ExportError, covering_set, read_export, sections
from runners.results.export_runtime import pick_version, version_key
from runners.engine.row import COLUMN_NAMES, NAMED
from runners.results.store import DamagedStore, ResultStore, shape_label
DEFAULT_MIN_EFFECT = 0.01
DEFAULT_ALPHA = 0.01
# What every repetition of one run shares, as a standard deviation of ln(p50): above the 0.03-0.31%
# measured across six runs on an H200 (BENCHMARKS.md, 2026-11-24; the module docstring: why not lower).
RUN_NOISE = 0.005
# The repetition noise assumed for a row whose class has no repetitions (stores written before them):
# about the largest placement noise measured on an H200 for kernels under 1 ms (a 5 us softmax, 2.2%).
ASSUMED_NOISE = 0.02
SIZE_CLASSES = ((10.0, "<10us"), (100.0, "10-100us"), (1000.0, "0.1-1ms"), (math.inf, ">=1ms"))
LISTED = 20  # trials listed per only-in / failing list unless --all
OTHER_TIMER = "OTHER TIMER"  # the two rows were timed by different methods: not comparable
EXPORT_PHASE = "export"  # a row read from an export's JSON


class CompareError(ValueError):
    """Bad input; the message names the argument."""


@dataclass
class Side:
    label: str  # BASE or NEW
    source: str  # what the argument resolved to, for the report
    frame: pd.DataFrame
    shipped: Optional[set] = None  # an export's (trial key, gpu) pairs: what it ships, where


def parse_share(text: str, name: str) -> float:
    """'2%' or '0.02' -> 0.02. A bare number of 1 or more is refused: '2' could mean either."""
    percent = text.endswith("%")
    try:
        number = float(text[:-1] if percent else text)
    except ValueError:
        raise CompareError(f"{name}: {text!r} is not a share; write e.g. 2% or 0.02") from None
    if not percent and number >= 1:
        raise CompareError(f"{name}: {text!r} is ambiguous; write {text}% or {number / 100:g}")
    value = number / 100 if percent else number
    if not 0 <= value < 1:
        raise CompareError(f"{name}: {text!r} must be between 0% and 100%")
    return value


# --- reading the two sides ----------------------------------------------------------------------

def load_side(argument: str, store_path: str, label: str) -> Side:
    """A sweep id in store_path, a store file, store_file:sweep_id, or an export's JSON."""
    if argument.endswith(".json"):
        return _export_side(Path(argument), label)
    path, sweep_id = None, None
    head, colon, tail = argument.rpartition(":")
    if colon and Path(head).is_file():
        path, sweep_id = Path(head), tail
    elif Path(argument).is_file():
        path = Path(argument)
    else:
        path, sweep_id = Path(store_path), argument
        if not path.is_file():
            raise CompareError(f"{label}: {argument!r} is not a file, and --store {store_path} to find it in "
                               "as a sweep id does not exist")
    try:
        store = ResultStore(path)
        frame = store.load(sweep_id=sweep_id or None)
        everything = store.load() if frame.empty and sweep_id else None
        store.close()
    except DamagedStore as error:
        raise CompareError(f"{label}: {error}") from None
    except sqlite3.DatabaseError as error:
        raise CompareError(f"{label}: {path} is not a results store ({error})") from None
    if frame.empty:
        if sweep_id:
            known = ", ".join(sorted(everything["sweep_id"].unique())) or "none"
            raise CompareError(f"{label}: no sweep {sweep_id!r} in {path} (sweeps with rows there: {known})")
        raise CompareError(f"{label}: the store {path} holds no trials")
    source = f"sweep {sweep_id} in {path}" if sweep_id else f"every trial in {path}"
    return Side(label, source, frame)


def _export_side(path: Path, label: str) -> Side:
    """An export's JSON (format 2 or 3) as a side of the comparison (export_frame)."""
    try:
        data = read_export(path)
    except ExportError as error:
        raise CompareError(f"{label}: {error}") from None
    frame, shipped = export_frame(data)
    count = sum(1 for _ in sections(data))
    return Side(label, f"the export {path} ({count} section(s): GPU, Triton version)", frame, shipped)


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
            "gpu_name": gpu, "p50_us": figures["p50_us"], "repetitions": figures.get("repetitions"),
            "rep_noise": figures.get("rep_noise"), "chosen": False})
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
    for name in ("samples_us", "event_samples_us", "rep_p50s_us"):
        frame[name] = None
    return frame, shipped


def versions_against(side: Side, other: Side) -> Side:
    """An export side kept to one Triton version a GPU: the version the other side ran (its newest row's
    on that GPU), else the nearest older measured, else the nearest newer (the generated module's rule,
    runners/results/export_runtime.py)."""
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


# --- the noise between runs and the verdict --------------------------------------------------------

def size_class(p50_us: float) -> str:
    return next(name for bound, name in SIZE_CLASSES if p50_us < bound)


def _repetitions(row) -> int:
    value = row.get("repetitions")
    return 1 if value is None or pd.isna(value) else int(value)


def _rep_noise(row) -> Optional[float]:
    value = row.get("rep_noise")
    return None if value is None or pd.isna(value) or _repetitions(row) < 2 else float(value)


def _classes_of(row) -> tuple[tuple, tuple]:
    """The row's shape class and size class (the module docstring: the rule)."""
    return ((row["kernel"], row["provider"], row["dtype"], row["shape"]),
            (row["kernel"], row["provider"], size_class(row["p50_us"])))


def pooled_noise(rows) -> tuple[Optional[float], int]:
    """(s, degrees of freedom) pooled over rows with repetitions: sqrt(sum (R-1) s^2 / sum (R-1))."""
    squares, freedom = 0.0, 0
    for row in rows:
        noise = _rep_noise(row)
        if noise is not None:
            squares += (_repetitions(row) - 1) * noise**2
            freedom += _repetitions(row) - 1
    return (math.sqrt(squares / freedom), freedom) if freedom else (None, 0)


def quantile(alpha: float, freedom: float) -> float:
    """Two-sided critical value at level alpha: the normal's, corrected toward Student's t for `freedom`
    degrees of freedom (Cornish-Fisher, Abramowitz & Stegun 26.7.5; within 1% of t from 4 on)."""
    z = statistics.NormalDist().inv_cdf(1 - alpha / 2)
    if not math.isfinite(freedom):
        return z
    v = freedom
    return (z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
            + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4))


@dataclass(frozen=True)
class Rule:
    alpha: float = DEFAULT_ALPHA
    min_effect: float = DEFAULT_MIN_EFFECT
    run_noise: float = RUN_NOISE


def judge(base_row, new_row, classes: dict, rule: Rule, alpha: float) -> dict:
    """The verdict of one pair of rows by the module's rule at level `alpha` (the rule's, shared out over
    the row's family), with its threshold and where its noise came from."""
    ratio = new_row["p50_us"] / base_row["p50_us"]
    result = {"ratio": ratio, "threshold": math.nan, "noise_from": "-"}
    if not _same_value(base_row["timing_method"], new_row["timing_method"]):
        # CUDA events include ~3 us of event pair a call that the CUPTI kernel time does not: no verdict.
        return {**result, "verdict": OTHER_TIMER}
    (by_shape, shape_freedom), (by_size, size_freedom) = (classes.get(c, (None, 0))
                                                          for c in _classes_of(base_row))
    if by_shape is not None:
        s, freedom, where = by_shape, shape_freedom, "shape"
    elif by_size is not None:
        s, freedom, where = by_size, size_freedom, "size class"
    else:
        s, freedom, where = ASSUMED_NOISE, math.inf, "assumed"
    r_base, r_new = _repetitions(base_row), _repetitions(new_row)
    sd = math.sqrt(s**2 / r_base + s**2 / r_new + 2 * rule.run_noise**2)
    threshold = max(quantile(alpha, freedom) * sd, math.log1p(rule.min_effect))
    d = math.log(ratio)
    verdict = "SLOW" if d > threshold else "FAST" if d < -threshold else "SAME"
    noise_from = f"{where} s={100 * s:.2f}% reps {r_base}+{r_new}"
    return {**result, "verdict": verdict, "threshold": math.expm1(threshold), "noise_from": noise_from}


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
    for a store, the list runners/results/export.py would export from its ok rows (newest row a
    trial) per kernel, GPU, Triton version and dtype."""
    if side.shipped is not None:
        return side.shipped
    frame = side.frame
    ok = frame[(frame["status"] == "ok") & (frame["provider"] == TRITON_PROVIDER) & frame["p50_us"].notna()]
    ok = ok.sort_values("id").groupby(["trial_key", "gpu_name", "triton_version"], as_index=False).tail(1)
    keys = set()
    for (kernel, gpu, version, dtype), rows in ok.groupby(["kernel", "gpu_name", "triton_version", "dtype"]):
        for item in covering_set(rows, tolerance)["configs"]:
            keys |= {(Trial(kernel, TRITON_PROVIDER, tuple(shape), dtype, item["config"]).key, gpu, version)
                     for shape in item["covers"]}
    return keys


def compare(base: pd.DataFrame, new: pd.DataFrame, rule: Rule = Rule(), shipped: Optional[set] = None,
            gate_all: bool = False) -> dict:
    """Everything the report prints: matched trials and winners with their verdicts (`judged` where the
    gate looks at them), status changes, only-in lists, and the environment fields that differ between
    matched rows with how many pairs differ in each."""
    base, new, by_gpu = _on_common_gpus(base, new)
    match_on = ["trial_key", "gpu_name"] if by_gpu else ["trial_key"]
    base_by_key = dict(tuple(base.groupby(match_on)))
    new_by_key = dict(tuple(new.groupby(match_on)))
    pairs, status_changes, env_diffs = [], [], {}
    for key in sorted(base_by_key.keys() & new_by_key.keys()):
        base_row, new_row = _pick(base_by_key[key], new_by_key[key])
        for name in NAMED:
            if EXPORT_PHASE in (base_row["phase"], new_row["phase"]) and (
                    pd.isna(base_row[name]) or pd.isna(new_row[name])):
                continue  # an export records fewer of them: what it lacks is not a difference
            if not _same_value(base_row[name], new_row[name]):
                pair = (name, str(base_row[name]), str(new_row[name]))
                env_diffs[pair] = env_diffs.get(pair, 0) + 1
        if base_row["status"] == "ok" and new_row["status"] == "ok":
            where = (base_row["trial_key"], base_row["gpu_name"], base_row["triton_version"])
            ships = where in (shipped or set())
            pairs.append((base_row, new_row, {"judged": gate_all or ships}))
        elif base_row["status"] != new_row["status"]:
            message = new_row["message"] if new_row["status"] != "ok" else base_row["message"]
            status_changes.append({"order": _order(new_row), "row": _describe(new_row),
                                   "base": base_row["status"], "new": new_row["status"], "message": message})
    winner_pairs = _winner_pairs(base, new, ["kernel", "gpu_name", "dtype", "shape"] if by_gpu
                                 else ["kernel", "dtype", "shape"])
    # The noise of a class is pooled over every row compared, winners included, on both sides.
    compared = {(side, row["id"]): row for b, n, _ in pairs + winner_pairs
                for side, row in (("B", b), ("N", n))}
    by_class: dict[tuple, list] = {}
    for row in compared.values():
        for cls in _classes_of(row):
            by_class.setdefault(cls, []).append(row)
    classes = {c: pooled_noise(rows) for c, rows in by_class.items()}
    # Two families, each at rule.alpha in all (Bonferroni): the rows the gate judges, and the others.
    family = {judged: sum(extra["judged"] == judged for *_, extra in pairs + winner_pairs)
              for judged in (True, False)}

    def entry(base_row, new_row, extra: dict) -> dict:
        phase = new_row["phase"] if isinstance(new_row["phase"], str) else "screen"
        alpha = rule.alpha / max(family[extra["judged"]], 1)
        return {"order": _order(new_row), "row": _describe(new_row), "base_p50": base_row["p50_us"],
                "new_p50": new_row["p50_us"], "phase": phase,
                **judge(base_row, new_row, classes, rule, alpha), **extra}

    matched = sorted((entry(*pair) for pair in pairs), key=lambda r: r["order"])
    winners = [entry(*pair) for pair in winner_pairs]
    only = {}
    for side, by_key, other in (("BASE", base_by_key, new_by_key), ("NEW", new_by_key, base_by_key)):
        newest = [rows.loc[rows["id"].idxmax()] for key, rows in by_key.items() if key not in other]
        only[side] = [_describe(r) + (r["status"],) for r in sorted(newest, key=_order)]
    status_changes.sort(key=lambda r: r["order"])
    return {"matched": matched, "winners": winners, "status_changes": status_changes, "only": only,
            "env_diffs": env_diffs, "classes": classes}


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
    head += ["phase", "BASE p50 us", "NEW p50 us", "NEW/BASE", "threshold", "noise from", "gate", "verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        kernel, provider, dtype, shape, config = r["row"]
        configs = [r["base_config"], config] if winners else [config]
        cells = [kernel, provider, dtype, shape, *configs, r["phase"], f"{r['base_p50']:.2f}",
                 f"{r['new_p50']:.2f}", f"{r['ratio']:.3f}", f"±{_percent(r['threshold'])}", r["noise_from"],
                 "judged" if r["judged"] else "info", r["verdict"]]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _counts(rows: list[dict]) -> str:
    counts = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    text = ", ".join(f"{counts[v]} {v}" for v in ("SAME", "FAST", "SLOW", OTHER_TIMER) if v in counts)
    text = text or "none"
    slow = [r for r in rows if r["verdict"] == "SLOW"]
    if slow:
        worst = max(slow, key=lambda r: r["ratio"])
        text += f" (worst {100 * (worst['ratio'] - 1):+.1f}%: {' '.join(worst['row'])})"
    return text


def report(result: dict, base: Side, new: Side, rule: Rule, fail_on_slow: Optional[float],
           changed_only: bool = False, list_all: bool = False) -> tuple[str, int]:
    """The printed report and the exit status."""
    lines = [f"BASE: {base.source}", f"NEW:  {new.source}",
             f"rule: SLOW / FAST when ln(NEW/BASE) of the p50s is beyond a threshold: the chance difference "
             f"of two runs, sqrt(s^2/R_base + s^2/R_new + 2 x {100 * rule.run_noise:g}%^2) (s: the spread of "
             f"the repetitions' medians, R: repetitions), times the two-sided quantile of {rule.alpha:g} / "
             f"the rows of its family (judged by the gate, or not), and at least {100 * rule.min_effect:g}%; "
             "else SAME"]
    if result["env_diffs"]:
        lines.append("environment differs between matched rows (BASE -> NEW, matched pairs):")
        differences = sorted(result["env_diffs"].items())
        lines += [f"  {name}: {b} -> {n} ({count})" for (name, b, n), count in differences]
    else:
        lines.append("environment: the same for every matched row (" + ", ".join(NAMED) + ")")
    classes = [f"{' '.join(map(str, c))} {_percent(s)} ({freedom} df)" for c, (s, freedom) in
               result["classes"].items() if s is not None and len(c) == 4]
    lines.append("repetition noise by shape (kernel provider dtype shape: s): " + ("; ".join(classes) or
                 f"none measured: {100 * ASSUMED_NOISE:g}% assumed where no size class has it"))
    shown = [r for r in result["matched"] if not changed_only or r["verdict"] != "SAME"]
    count = f"{len(result['matched'])}" + (f", {len(shown)} not SAME shown" if changed_only else "")
    lines += ["", f"## Trials measured on both sides ({count})", ""]
    lines += _table(shown, winners=False) if shown else ["(none)"]
    lines += ["", "## Winners of each (kernel, dtype, shape), whatever their configs", ""]
    lines += _table(result["winners"], winners=True) if result["winners"] else ["(none ok on both sides)"]
    broken = [c for c in result["status_changes"] if c["base"] == "ok" and c["new"] != "pruned"]
    changes = [f"{c['base']} -> {c['new']}: {' '.join(c['row'])}: {str(c['message'])[:120]}"
               for c in result["status_changes"]]
    sections = [("status changed", changes)]
    sections += [(f"only in {side}", [f"{' '.join(row[:5])} ({row[5]})" for row in rows])
                 for side, rows in result["only"].items()]
    for title, items in sections:
        if items:
            lines += ["", f"{title} ({len(items)}):"]
            lines += [f"  {item}" for item in (items if list_all else items[:LISTED])]
            if len(items) > LISTED and not list_all:
                lines.append(f"  ... {len(items) - LISTED} more (--all lists them)")
    only = result["only"]
    judged = [r for r in result["matched"] + result["winners"] if r["judged"]]
    lines += ["", f"summary: {len(result['matched'])} trials on both sides: {_counts(result['matched'])}; "
              f"winners: {_counts(result['winners'])}; {len(broken)} ok in BASE and failing in NEW; "
              f"{len(only['BASE'])} only in BASE, {len(only['NEW'])} only in NEW"]
    status = 0
    if fail_on_slow is not None:
        limit = f"{100 * fail_on_slow:g}%"
        slow = [r for r in judged if r["verdict"] == "SLOW" and r["ratio"] - 1 > fail_on_slow]
        status = 1 if slow or broken else 0
        lines.append(f"gate --fail-on-slow {limit} on {len(judged)} judged rows (winners and shipped "
                     "configs): "
                     + (f"FAIL: {len(slow)} SLOW by more than {limit}, {len(broken)} failing in NEW"
                        if status else "pass"))
    return "\n".join(lines), status


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="The rule and the exit status: runners/compare.py's docstring.")
    parser.add_argument("base", metavar="BASE", help="sweep id in --store, store file, file:sweep_id, or an "
                                                     "export's .json")
    parser.add_argument("new", metavar="NEW", help="the same, for what is compared against BASE")
    parser.add_argument("--store", default="outputs/results.sqlite", help="where sweep ids are looked up")
    parser.add_argument("--min-effect", default=f"{100 * DEFAULT_MIN_EFFECT:g}%",
                        help="smallest p50 change called FAST or SLOW (default %(default)s)")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                        help="chance that unchanged code gets any verdict but SAME among the rows the gate "
                             "judges, and among the others (default %(default)s)")
    parser.add_argument("--run-noise", default=f"{100 * RUN_NOISE:g}%",
                        help="what every repetition of a run shares, as a standard deviation of the p50 "
                             "(default %(default)s, measured on an H200)")
    parser.add_argument("--fail-on-slow", metavar="SHARE",
                        help="exit 1 when a judged row is SLOW by more than this (e.g. 2%%), or a trial "
                             "ok in BASE fails in NEW")
    parser.add_argument("--gate", choices=("shipped", "all"), default="shipped",
                        help="judge the winners and BASE's exported configs (default), or every trial")
    parser.add_argument("--tolerance", type=float,
                        help="the export's tolerance for BASE's exported configs (default: the "
                             "sweep's export.tolerance)")
    parser.add_argument("--changed-only", action="store_true", help="list only matched trials not SAME")
    parser.add_argument("--all", dest="list_all", action="store_true",
                        help="list all only-in / changed trials")
    args = parser.parse_args(argv)
    try:
        rule = Rule(alpha=args.alpha, min_effect=parse_share(args.min_effect, "--min-effect"),
                    run_noise=parse_share(args.run_noise, "--run-noise"))
        fail_on_slow = None if args.fail_on_slow is None else parse_share(args.fail_on_slow, "--fail-on-slow")
        if not 0 < args.alpha < 1:
            raise CompareError(f"--alpha: {args.alpha} must be between 0 and 1")
        if args.tolerance is not None and not 0 <= args.tolerance < 1:
            raise CompareError(f"--tolerance: {args.tolerance} must be a share in [0, 1), e.g. 0.03")
        base = load_side(args.base, args.store, "BASE")
        new = load_side(args.new, args.store, "NEW")
        base, new = versions_against(base, new), versions_against(new, base)
    except CompareError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    tolerance = args.tolerance if args.tolerance is not None else sweep_export_conf().tolerance
    result = compare(base.frame, new.frame, rule, shipped_keys(base, tolerance), args.gate == "all")
    text, status = report(result, base, new, rule, fail_on_slow, args.changed_only, args.list_all)
    print(text)
    return status


if __name__ == "__main__":
    sys.exit(main())

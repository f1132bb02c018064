"""Compare two sweeps trial by trial: `python -m runners.compare BASE NEW [--fail-on-slow 2%]`.

BASE and NEW are each a sweep id in --store, a store file (all its rows), or `store.sqlite:sweep_id`.
Every (kernel, provider, shape, dtype, config) measured on both sides gets the ratio of its p50s
(NEW / BASE, the store's figure of record) and a verdict; so does each side's winner of every
(kernel, shape, dtype), whichever config won there. Trials are matched by trial alone: rows from
other GPUs, versions or kernel sources are compared, and the environment fields that differ are named.

The rule (a difference must be both real and large enough to matter):
- SLOW when NEW's p50 is more than `--min-effect` (default 2%) above BASE's and a two-sided
  Mann-Whitney rank test of the two sample sets gives p < `--alpha` (default 0.01); FAST likewise
  below; SAME otherwise.
- Why a rank test, not nvbench's noise rule (a change is real when |ratio - 1| exceeds the relative
  standard deviation of the samples): GPU samples have a long right tail (a sample that met a clock
  change or a neighbour lies far above the median), so the standard deviation follows the few worst
  samples, while the rank test and the median do not. The test needs no distribution and sees a shift that
  the standard deviation would hide.
- Why a minimum effect as well: with thousands of samples the test finds shifts of a few tenths of a
  percent that are real between two runs but are not the kernel's (BENCHMARKS.md: a kernel's own
  run-to-run spread is 1-3% at 20-70 us on an H200). Lower it for long kernels re-timed as finalists.
- Why p < 0.01 and not smaller although hundreds of rows are compared: the minimum effect is what keeps
  rows of one distribution SAME (the median of 10 samples at 1% noise moves about 0.4%, so a 2% ratio is
  out of its reach), while the level decides what a few noisy samples can show. With 10 samples a side,
  complete separation gives p = 0.0002, and one sample of the faster side above all of the slower side (an
  outlier) p = 0.003; with 5 or fewer a side nothing reaches 0.01: such rows stay SAME.
  tests/test_compare.py checks both on seeded samples: no verdict on 200 pairs drawn from one
  distribution, every 5% shift found with 30 a side.
- Rows timed by different methods (`timing_method`: the CUPTI kernel time against the CUDA-event time
  of older stores, which adds ~3 us a call) get no verdict: OTHER TIMER, outside the gate.
- Samples are per-sample microseconds of each row (screening, or the finalists' round-robin).
  Which rows: a trial's newest finalist rows where both sides re-timed it, else its newest screening
  rows, so that both sides were measured the same way.

Exit status: 0; 1 when `--fail-on-slow X` is given and a matched trial or winner is SLOW by more than X,
or a trial ok in BASE failed in NEW (a config that stopped working is a regression too); 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from runners.engine.finalists import winner
from runners.engine.trials import TRITON_PROVIDER
from runners.results.store import COLUMN_NAMES, ENV_KEY, DamagedStore, ResultStore

# Named when they differ between matched rows: the resume key, then what else a row says of where it ran.
_RUN_ON = ("cuda_version", "python_version", "git_sha", "host")
ENVIRONMENT = tuple(name for name in dict.fromkeys((*ENV_KEY, *_RUN_ON)) if name in COLUMN_NAMES)
DEFAULT_MIN_EFFECT = 0.02
DEFAULT_ALPHA = 0.01
LISTED = 20  # trials listed per only-in / failing list unless --all


class CompareError(ValueError):
    """Bad input; the message names the argument."""


@dataclass
class Side:
    label: str  # BASE or NEW
    source: str  # what the argument resolved to, for the report
    frame: pd.DataFrame


def rank_test(a, b) -> float:
    """Two-sided p-value of the Mann-Whitney U test that samples a and b come from one distribution:
    normal approximation with the tie correction and a continuity correction (SciPy's `method="asymptotic"`
    gives the same). 1.0 when a side has fewer than 2 samples or every value is equal."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    n1, n2 = len(a), len(b)
    if n1 < 2 or n2 < 2:
        return 1.0
    values = np.concatenate([a, b])
    order = np.argsort(values, kind="mergesort")
    _, first, counts = np.unique(values[order], return_index=True, return_counts=True)
    ranks = np.empty(len(values))
    ranks[order] = np.repeat(first + (counts + 1) / 2, counts)  # 1-based, ties get their average rank
    u = ranks[:n1].sum() - n1 * (n1 + 1) / 2
    n = n1 + n2
    ties = float((counts.astype(np.float64) ** 3 - counts).sum())
    variance = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if variance <= 0:
        return 1.0
    z = max(0.0, abs(u - n1 * n2 / 2) - 0.5) / math.sqrt(variance)
    return min(1.0, math.erfc(z / math.sqrt(2)))


OTHER_TIMER = "OTHER TIMER"  # the two rows were timed by different methods: not comparable


def verdict(base_samples, new_samples, ratio: float, min_effect: float = DEFAULT_MIN_EFFECT,
            alpha: float = DEFAULT_ALPHA) -> tuple[str, float]:
    """(SAME | FAST | SLOW, p-value) for NEW against BASE by the module's rule; ratio = NEW p50 / BASE p50."""
    if base_samples is None or new_samples is None:
        return "NO SAMPLES", math.nan
    p = rank_test(base_samples, new_samples)
    if p >= alpha or abs(ratio - 1) <= min_effect:
        return "SAME", p
    return ("SLOW" if ratio > 1 else "FAST"), p


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


def load_side(argument: str, store_path: str, label: str) -> Side:
    """A sweep id in store_path, a store file, or store_file:sweep_id."""
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


def _pick(base: pd.DataFrame, new: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """One row a side for one trial: the newest finalist rows where both have one, else the newest
    screening rows where both have one, else each side's newest row."""
    for phase in ("final", "screen"):
        b, n = base[base["phase"] == phase], new[new["phase"] == phase]
        if not b.empty and not n.empty:
            return b.loc[b["id"].idxmax()], n.loc[n["id"].idxmax()]
    return base.loc[base["id"].idxmax()], new.loc[new["id"].idxmax()]


def _describe(row: pd.Series) -> tuple[str, str, str, str, str]:
    shape = "x".join(map(str, json.loads(row["shape"])))
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


def _compared(base_row: pd.Series, new_row: pd.Series, min_effect: float, alpha: float, **extra) -> dict:
    ratio = new_row["p50_us"] / base_row["p50_us"]
    if not _same_value(base_row["timing_method"], new_row["timing_method"]):
        # CUDA events include ~3 us of event pair a call that the CUPTI kernel time does not: no verdict.
        label, p = OTHER_TIMER, math.nan
    else:
        label, p = verdict(base_row["samples_us"], new_row["samples_us"], ratio, min_effect, alpha)
    phase = new_row["phase"] if isinstance(new_row["phase"], str) else "screen"
    return {"order": _order(new_row), "row": _describe(new_row), "base_p50": base_row["p50_us"],
            "new_p50": new_row["p50_us"], "ratio": ratio, "p": p, "verdict": label, "phase": phase, **extra}


def compare(base: pd.DataFrame, new: pd.DataFrame, min_effect: float = DEFAULT_MIN_EFFECT,
            alpha: float = DEFAULT_ALPHA) -> dict:
    """Everything the report prints: matched trials, winners, status changes, only-in lists, and the
    environment fields that differ between matched rows with how many pairs differ in each."""
    base_by_key = dict(tuple(base.groupby("trial_key")))
    new_by_key = dict(tuple(new.groupby("trial_key")))
    matched, status_changes, env_diffs = [], [], {}
    for key in sorted(base_by_key.keys() & new_by_key.keys()):
        base_row, new_row = _pick(base_by_key[key], new_by_key[key])
        for name in ENVIRONMENT:
            if not _same_value(base_row[name], new_row[name]):
                pair = (name, str(base_row[name]), str(new_row[name]))
                env_diffs[pair] = env_diffs.get(pair, 0) + 1
        if base_row["status"] == "ok" and new_row["status"] == "ok":
            matched.append(_compared(base_row, new_row, min_effect, alpha))
        elif base_row["status"] != new_row["status"]:
            message = new_row["message"] if new_row["status"] != "ok" else base_row["message"]
            status_changes.append({"order": _order(new_row), "row": _describe(new_row),
                                   "base": base_row["status"], "new": new_row["status"], "message": message})
    only = {}
    for side, by_key, other in (("BASE", base_by_key, new_by_key), ("NEW", new_by_key, base_by_key)):
        newest = [rows.loc[rows["id"].idxmax()] for key, rows in by_key.items() if key not in other]
        only[side] = [_describe(r) + (r["status"],) for r in sorted(newest, key=_order)]
    matched.sort(key=lambda r: r["order"])
    status_changes.sort(key=lambda r: r["order"])
    return {"matched": matched, "winners": _winners(base, new, min_effect, alpha),
            "status_changes": status_changes, "only": only, "env_diffs": env_diffs}


def _winners(base: pd.DataFrame, new: pd.DataFrame, min_effect: float, alpha: float) -> list[dict]:
    """Each side's winner of every (kernel, dtype, shape) both measured ok (the chosen finalist, else the
    lowest p50), compared whatever their configs."""

    def ours(frame):
        rows = frame[(frame["status"] == "ok") & (frame["provider"] == TRITON_PROVIDER)]
        return dict(tuple(rows.groupby(["kernel", "dtype", "shape"])))

    base_groups, new_groups = ours(base), ours(new)
    found = []
    for group in sorted(base_groups.keys() & new_groups.keys()):
        base_row = base_groups[group].loc[winner(base_groups[group])]
        new_row = new_groups[group].loc[winner(new_groups[group])]
        base_config = _describe(base_row)[4]
        found.append(_compared(base_row, new_row, min_effect, alpha, base_config=base_config))
    return found


def _table(rows: list[dict], winners: bool) -> list[str]:
    head = ["kernel", "provider", "dtype", "shape", "config"]
    head[4:5] = ["BASE config", "NEW config"] if winners else ["config"]
    head += ["phase", "BASE p50 us", "NEW p50 us", "NEW/BASE", "p", "verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        kernel, provider, dtype, shape, config = r["row"]
        configs = [r["base_config"], config] if winners else [config]
        p = "-" if math.isnan(r["p"]) else f"{r['p']:.1e}"
        cells = [kernel, provider, dtype, shape, *configs, r["phase"], f"{r['base_p50']:.2f}",
                 f"{r['new_p50']:.2f}", f"{r['ratio']:.3f}", p, r["verdict"]]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _counts(rows: list[dict]) -> str:
    counts = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    verdicts = ("SAME", "FAST", "SLOW", "NO SAMPLES", OTHER_TIMER)
    text = ", ".join(f"{counts[v]} {v}" for v in verdicts if v in counts) or "none"
    slow = [r for r in rows if r["verdict"] == "SLOW"]
    if slow:
        worst = max(slow, key=lambda r: r["ratio"])
        text += f" (worst {100 * (worst['ratio'] - 1):+.1f}%: {' '.join(worst['row'])})"
    return text


def report(result: dict, base: Side, new: Side, min_effect: float, alpha: float,
           fail_on_slow: Optional[float], changed_only: bool = False,
           list_all: bool = False) -> tuple[str, int]:
    """The printed report and the exit status."""
    lines = [f"BASE: {base.source}", f"NEW:  {new.source}",
             f"rule: SLOW / FAST when NEW/BASE of the p50s is beyond 1 +/- {100 * min_effect:g}% and a "
             f"Mann-Whitney rank test of the samples gives p < {alpha:g}; else SAME"]
    if result["env_diffs"]:
        lines.append("environment differs between matched rows (BASE -> NEW, matched pairs):")
        differences = sorted(result["env_diffs"].items())
        lines += [f"  {name}: {b} -> {n} ({count})" for (name, b, n), count in differences]
    else:
        lines.append("environment: the same for every matched row (" + ", ".join(ENVIRONMENT) + ")")
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
    lines += ["", f"summary: {len(result['matched'])} trials on both sides: {_counts(result['matched'])}; "
              f"winners: {_counts(result['winners'])}; {len(broken)} ok in BASE and failing in NEW; "
              f"{len(only['BASE'])} only in BASE, {len(only['NEW'])} only in NEW"]
    status = 0
    if fail_on_slow is not None:
        limit = f"{100 * fail_on_slow:g}%"
        slow = [r for r in result["matched"] + result["winners"]
                if r["verdict"] == "SLOW" and r["ratio"] - 1 > fail_on_slow]
        status = 1 if slow or broken else 0
        lines.append(f"gate --fail-on-slow {limit}: " + (
            f"FAIL: {len(slow)} trial(s) or winner(s) SLOW by more than {limit}, {len(broken)} failing in NEW"
            if status else "pass"))
    return "\n".join(lines), status


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="The rule and the exit status: runners/compare.py's docstring.")
    parser.add_argument("base", metavar="BASE", help="sweep id in --store, store file, or file:sweep_id")
    parser.add_argument("new", metavar="NEW", help="the same, for the sweep compared against BASE")
    parser.add_argument("--store", default="outputs/results.sqlite", help="where sweep ids are looked up")
    parser.add_argument("--min-effect", default=f"{100 * DEFAULT_MIN_EFFECT:g}%",
                        help="smallest p50 change called FAST or SLOW (default %(default)s)")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="rank test level (%(default)s)")
    parser.add_argument("--fail-on-slow", metavar="SHARE",
                        help="exit 1 when a matched trial or winner is SLOW by more than this (e.g. 2%%), "
                             "or a trial ok in BASE fails in NEW")
    parser.add_argument("--changed-only", action="store_true", help="list only matched trials not SAME")
    parser.add_argument("--all", dest="list_all", action="store_true",
                        help="list all only-in / changed trials")
    args = parser.parse_args(argv)
    try:
        min_effect = parse_share(args.min_effect, "--min-effect")
        fail_on_slow = None if args.fail_on_slow is None else parse_share(args.fail_on_slow, "--fail-on-slow")
        if not 0 < args.alpha < 1:
            raise CompareError(f"--alpha: {args.alpha} must be between 0 and 1")
        base = load_side(args.base, args.store, "BASE")
        new = load_side(args.new, args.store, "NEW")
    except CompareError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    result = compare(base.frame, new.frame, min_effect, args.alpha)
    text, status = report(result, base, new, min_effect, args.alpha, fail_on_slow, args.changed_only,
                          args.list_all)
    print(text)
    return status


if __name__ == "__main__":
    sys.exit(main())

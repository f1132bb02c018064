"""Compare two sweeps, or an export with a store or another export, and gate CI on it:

    python -m triton_sweep.compare BASE NEW [--fail-on-slow 2%] [--calibration RUNS.sqlite]

BASE and NEW: a sweep id in --store, a store file, `store.sqlite:sweep_id`, or an export's JSON. Every
trial measured on both sides, and each side's winner of every (kernel, dtype, shape), gets NEW/BASE and
a verdict by runners/compare/between_runs.py's rule (runners/compare/GATE.md says it whole); the gate
judges what is shipped: the winners and BASE's exported configs (`--gate all`: every trial).
Exit status, with `--fail-on-slow X`: 1 when a judged row or a kernel's shift is SLOW by more than X, or a
trial ok in BASE fails in NEW; 2 when it cannot judge (no verdict, noise not measured, a shift no spread
judges, sides on different GPU models: --across-gpus reads those as information, exit 0), on bad input
(a missing, NaN, infinite or zero p50) and on a fault of its own; else 0. `--list [STORE]` lists sweeps."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path

from triton_sweep import version
from triton_sweep.compare import between_runs
from triton_sweep.compare.matching import compare, load_calibration
from triton_sweep.compare.report import report
from triton_sweep.compare.sides import (CATEGORIES, COLUMNS, CompareError, Side, export_frame,
                                        shared_categories, shipped_keys, versions_against)
from triton_sweep.export.fileformat import read_export, sections
from triton_sweep.export.settings import ExportError, sweep_export_conf
from triton_sweep.model.trial import aligned
from triton_sweep.store.damage import StoreError
from triton_sweep.store.reader import StoreReader
from triton_sweep.store.result_store import ResultStore

DEFAULT_MIN_EFFECT = 0.01
DEFAULT_ALPHA = 0.01


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

def load_side(argument: str, store_path: str, label: str, opened: dict) -> Side:
    """A sweep id in store_path, a store file, store_file:sweep_id, or an export's JSON; `opened`: the
    stores opened so far by path, kept open (a store is checked whole as it opens: once for both sides)."""
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
        if path.resolve() not in opened:
            opened[path.resolve()] = ResultStore(path)
        store = opened[path.resolve()]
        frame = store.load(sweep_id=sweep_id or None, columns=COLUMNS, categories=CATEGORIES)
        everything = store.load(columns=["sweep_id"]) if frame.empty and sweep_id else None
    except StoreError as error:
        raise CompareError(f"{label}: {error}") from None
    except sqlite3.DatabaseError as error:
        raise CompareError(f"{label}: {path} is not a results store ({error})") from None
    if frame.empty:
        if sweep_id:
            known = ", ".join(sorted(everything["sweep_id"].unique())) or "none"
            raise CompareError(f"{label}: no sweep {sweep_id!r} in {path} (sweeps with rows there: {known})")
        raise CompareError(f"{label}: the store {path} holds no trials")
    source = f"sweep {sweep_id} in {path}" if sweep_id else f"every trial in {path}"
    return Side(label, source, frame, path=path)


def _export_side(path: Path, label: str) -> Side:
    """An export's JSON (format 2 or 3) as a side of the comparison (export_frame)."""
    try:
        data = read_export(path)
    except ExportError as error:
        raise CompareError(f"{label}: {error}") from None
    frame, shipped = export_frame(data)
    count = sum(1 for _ in sections(data))
    return Side(label, f"the export {path} ({count} section(s): GPU, Triton version)", frame, shipped)


def list_sweeps(path: str) -> int:
    """`--list`: a line a sweep of the store (runners/store/reader.py: one query), newest last; exit 2 on
    a missing or damaged store."""
    if not Path(path).is_file():
        print(f"error: --list: {path}: no such store file", file=sys.stderr)
        return 2
    try:
        reader = StoreReader(path, check=False)  # a damaged page fails the query that reads it
        try:
            sweeps = reader.sweeps()
        finally:
            reader.close()
    except (StoreError, sqlite3.DatabaseError) as error:
        print(f"error: --list: {error}", file=sys.stderr)
        return 2
    heads = ("sweep", "kernel", "device", "backend", "newest row (UTC)", "rows", "ok", "failed", "pruned",
             "finalists")
    lines = [heads] + [(s["sweep_id"], s["kernels"], s["devices"], s["backends"],
                        s["last"][:16].replace("T", " "), str(s["rows"]), str(s["ok"]),
                        str(s["rows"] - s["finalists"] - s["ok"] - s["pruned"]), str(s["pruned"]),
                        str(s["finalists"])) for s in sweeps]
    print("\n".join(aligned(lines, left=5)))
    print(f"{len(sweeps)} sweep(s) in {path}, newest last; triton-sweep-compare BASE NEW --store {path} "
          "compares two of them")
    return 0


def arguments(argv) -> argparse.Namespace:
    """The command line, parsed; BASE and NEW required unless --list."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="The rule: runners/compare/between_runs.py; the exit status: "
                                            "runners/compare/command.py's docstring.")
    parser.add_argument("--version", action="version", version=version())
    parser.add_argument("base", metavar="BASE", nargs="?", help="sweep id in --store, store file, "
                                                                 "file:sweep_id, or an export's .json")
    parser.add_argument("new", metavar="NEW", nargs="?", help="the same, for what is compared against BASE")
    parser.add_argument("--list", nargs="?", const=True, metavar="STORE",
                        help="list the sweeps of STORE (default: --store), a line each, newest last; exit")
    parser.add_argument("--store", default="outputs/results.sqlite", help="where sweep ids are looked up")
    parser.add_argument("--min-effect", default=f"{100 * DEFAULT_MIN_EFFECT:g}%",
                        help="smallest p50 change called FAST or SLOW (default %(default)s)")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                        help="chance that unchanged code fails the gate (default %(default)s)")
    parser.add_argument("--calibration", metavar="STORE[:ID,ID,...]",
                        help="runs of the same sweep on machines of the kind NEW runs on (3 or more; every "
                             "sweep in STORE, or those named): the spread a whole run's shift is judged by")
    parser.add_argument("--machine-spread", metavar="SHARE",
                        help="state the spread of runs instead of measuring it (e.g. 0.5%%): the sd of a "
                             "run's shift and of each shape's own part, said so in the report")
    parser.add_argument("--fail-on-slow", metavar="SHARE",
                        help="exit 1 when a judged row (against its kernel's shift) or a kernel's shift is "
                             "SLOW by more than this (e.g. 2%%), or a trial ok in BASE fails in NEW; exit 2 "
                             "when that cannot be judged")
    parser.add_argument("--across-gpus", action="store_true",
                        help="sides on different GPU models: compare them as information, exit 0 (without "
                             "it, --fail-on-slow refuses them: exit 2)")
    parser.add_argument("--gate", choices=("shipped", "all"), default="shipped",
                        help="judge the winners and BASE's exported configs (default), or every trial")
    parser.add_argument("--tolerance", type=float,
                        help="the export's tolerance for BASE's exported configs (default: the "
                             "sweep's export.tolerance)")
    parser.add_argument("--changed-only", action="store_true", help="list only matched trials not SAME")
    parser.add_argument("--all", dest="list_all", action="store_true",
                        help="list all only-in / changed trials")
    args = parser.parse_args(argv)
    if not args.list and args.new is None:
        parser.error("BASE and NEW are required (or --list)")
    return args


def main(argv=None) -> int:
    args = arguments(argv)
    if args.list:
        return list_sweeps(args.store if args.list is True else args.list)
    try:
        fail_on_slow = None if args.fail_on_slow is None else parse_share(args.fail_on_slow, "--fail-on-slow")
        rule = between_runs.Rule(alpha=args.alpha, min_effect=parse_share(args.min_effect, "--min-effect"),
                                 fail_on_slow=fail_on_slow or 0.0)
        stated = None if args.machine_spread is None else parse_share(args.machine_spread, "--machine-spread")
        if not 0 < args.alpha < 1:
            raise CompareError(f"--alpha: {args.alpha} must be between 0 and 1")
        if args.tolerance is not None and not 0 <= args.tolerance < 1:
            raise CompareError(f"--tolerance: {args.tolerance} must be a share in [0, 1), e.g. 0.03")
        opened = {}
        try:
            base = load_side(args.base, args.store, "BASE", opened)
            new = load_side(args.new, args.store, "NEW", opened)
        finally:
            for store in opened.values():
                store.close()
        base, new = versions_against(base, new), versions_against(new, base)
        shared_categories(base.frame, new.frame)
        calibrated, note = load_calibration(args.calibration, (base, new)) if args.calibration else ({}, "")
        tolerance = args.tolerance if args.tolerance is not None else sweep_export_conf().tolerance
        result = compare(base.frame, new.frame, rule, shipped_keys(base, tolerance), args.gate == "all",
                         calibrated, stated)
        result["calibration"] = note
        text, status = report(result, base, new, rule, fail_on_slow is not None, args.changed_only,
                              args.list_all, args.across_gpus)
    except CompareError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # a failure to judge, never a regression: exit 1 is the gate's alone
        print(f"error: could not judge ({type(error).__name__}: {error}); this is a fault of "
              "triton_sweep.compare, not a verdict: please report it with the command", file=sys.stderr)
        return 2
    print(text)
    return status


"""The table printed at the end of a sweep: the best config per (kernel, dtype, shape), next to baselines."""
from __future__ import annotations

import json
from typing import Optional

import pandas as pd

from triton_sweep.model.finalists import winning_records
from triton_sweep.model.trial import TRITON_PROVIDER, counted
from triton_sweep.store.result_store import shape_label


TABLE_COLUMNS = ("id", "trial_key", "kernel", "dtype", "shape", "provider", "config", "phase", "status",
                 "message", "chosen", "planned_configs", "p50_us", "event_p50_us", "gbps", "pct_copy_bw",
                 "timers_disagree", "backend")
INTERPRET = "interpret"


def _fmt(value, spec: str) -> str:
    return "-" if value is None or pd.isna(value) else format(value, spec)


def speedups(baseline, ours) -> tuple[Optional[float], Optional[float]]:
    """(end-to-end, GPU-time) speedup of ours over a baseline row (pandas rows, or dicts of their fields).

    End to end (the speedup quoted) divides CUDA-event times, taken the same way on both sides: an
    eager baseline's extra launches and the gaps between its kernels count against it, as they do in
    a program (launch overhead is a real cost of eager code). GPU time divides the kernel times of
    record (the time each call's kernels kept the GPU busy), what the GPU spends computing. Rows
    without event times (interpreter, or CUDA events only) give the p50 ratio for both."""
    gpu = baseline["p50_us"] / ours["p50_us"]
    e2e = gpu
    if pd.notna(baseline.get("event_p50_us")) and pd.notna(ours.get("event_p50_us")):
        e2e = baseline["event_p50_us"] / ours["event_p50_us"]
    return e2e, gpu


def _statuses(rows: pd.DataFrame) -> str:
    """'2 ok, 1 pruned, 1 incorrect': each status's count, ok and pruned first, the others by name."""
    counts = rows["status"].value_counts().to_dict()
    first = [status for status in ("ok", "pruned") if status in counts]
    order = first + sorted(set(counts) - set(first))
    return ", ".join(f"{counts[status]} {status}" for status in order)


def counts_line(frame: pd.DataFrame) -> str:
    """The sweep's trials in one line that adds up: its configs and baselines (each trial once, by its
    newest row's status), then the finalists re-timed (configs, the baselines beside them, groups)."""
    rows = frame.sort_values("id") if "id" in frame.columns else frame
    final = rows[rows["phase"] == "final"]
    if "trial_key" in rows.columns:
        trials, final = rows.groupby("trial_key").tail(1), final.groupby("trial_key").tail(1)
    else:
        trials = rows[rows["phase"] != "final"]
    ours = trials["provider"] == TRITON_PROVIDER
    parts = [f"{counted(ours.sum(), 'config')} ({_statuses(trials[ours])})" if ours.any() else "no configs"]
    if (~ours).any():
        parts.append(f"{counted((~ours).sum(), 'baseline')} ({_statuses(trials[~ours])})")
    line = f"{counted(len(trials), 'trial')}: " + ", ".join(parts)
    if len(final):
        finalists = (final["provider"] == TRITON_PROVIDER).sum()
        groups = final.groupby(["kernel", "shape", "dtype"]).ngroups
        line += (f"; finalists: {counted(finalists, 'config')}"
                 + (f" and {counted(len(final) - finalists, 'baseline')}" if len(final) > finalists else "")
                 + f" re-timed in {counted(groups, '(shape, dtype) group')}")
    return line


def _bests_and_baselines(ok: pd.DataFrame) -> tuple[dict, dict]:
    """(kernel, dtype, shape) -> the chosen finalist's row, else the fastest's; and -> each baseline's
    newest row, its finalist-phase one where it was re-timed with our finalists. From selections of all
    groups at once, read as plain records: selections a group took 1.0 s at 240 groups (120 shapes,
    2 dtypes) on the CPU host, these 0.05 s."""
    ours = ok[ok["provider"] == TRITON_PROVIDER]
    best_of = {}
    for (kernel, dtype), rows in ours.groupby(["kernel", "dtype"], sort=False):
        best_of.update({(kernel, dtype, shape): row for shape, row in winning_records(rows).items()})
    theirs = ok[ok["provider"] != TRITON_PROVIDER]
    theirs = theirs.assign(final=theirs["phase"] == "final").sort_values(["final", "id"])
    baselines_of: dict[tuple, list] = {}
    for row in theirs.groupby(["kernel", "dtype", "shape", "provider"], sort=False).tail(1).sort_values(
            "id").to_dict("records"):
        baselines_of.setdefault((row["kernel"], row["dtype"], row["shape"]), []).append(row)
    return best_of, baselines_of


def _searched(frame: pd.DataFrame) -> dict:
    """(kernel, dtype, shape) -> "measured/planned": how many of our configs have a row there (pruned ones
    aside) of how many passed the constraints (the rows' planned_configs); {} where no row says."""
    if frame.get("planned_configs", pd.Series(dtype=float)).isna().all():
        return {}
    ours = frame[(frame["provider"] == TRITON_PROVIDER) & (frame["status"] != "pruned")]
    counts = ours.groupby(["kernel", "dtype", "shape"]).agg(
        measured=("trial_key", "nunique"), planned=("planned_configs", "max"))
    return {group: f"{measured}/{_fmt(planned, '.0f')}"
            for group, measured, planned in zip(counts.index, counts["measured"], counts["planned"])}


def _best_cells(best, gpu: bool) -> tuple:
    """The best config's cells of a line: its config, p50, GB/s and % of the copy ceiling (GB/s and the
    ceiling left out for an interpreter row, marked * among GPU rows)."""
    if best is None:
        return "(no ok config)", None, None, None
    config = " ".join(f"{k}={v}" for k, v in json.loads(best["config"]).items())
    if best.get("backend") == INTERPRET:
        return config + (" *" if gpu else ""), best["p50_us"], None, None
    return config, best["p50_us"], best["gbps"], best["pct_copy_bw"]


def best_table(frame: pd.DataFrame) -> str:
    """The counts (counts_line), then one line per (kernel, dtype, shape): how many of our configs were
    measured of how many passed the constraints (where the rows say: a search may stop short), the best
    ok config of ours with p50 (GPU time), GB/s, % of the measured copy bandwidth (the ceiling), and each
    baseline's p50 with the end-to-end and GPU-time speedups (see speedups()). Where finalists were
    re-timed, the best is the chosen finalist and its p50 the round-robin one, and each baseline's p50 is
    the one from the same rounds. Interpreter rows (backend=interpret) are said to be, without GB/s or
    ceilings."""
    # Only the columns read here: the selections below copy every column they hold (the rows' samples
    # too), which took the export sweeps' tables (240 groups) 2.1 s on the CPU host.
    frame = frame[[column for column in TABLE_COLUMNS if column in frame.columns]]
    lines = [counts_line(frame)]
    ok = frame[frame["status"] == "ok"]
    if ok.empty:
        lines.append("no ok trials")
        return "\n".join(lines)
    interpreted = ok["backend"] == INTERPRET if "backend" in ok.columns else pd.Series(False, ok.index)
    gpu = not interpreted.all()  # GB/s and % of the copy ceiling: GPU timings only
    if interpreted.any():
        lines.append("interpreter timings (backend=interpret: the Triton interpreter on the CPU)"
                     + (", marked *" if gpu else "") + ": they say nothing of a GPU's speed")
    searched = _searched(frame)  # a column of its own where the rows say how many configs were planned
    header = (f"{'kernel':<12} {'dtype':<9} {'shape':<14} " + (f"{'measured':>11} " if searched else "")
              + f"{'best config':<44} {'p50 us':>9} "
              + (f"{'GB/s':>7} {'%copy':>6}  " if gpu else " ")
              + "baselines (p50 us; speedup end to end, GPU time)")
    lines += [header, "-" * len(header)]
    best_of, baselines_of = _bests_and_baselines(ok)
    for group in dict.fromkeys(zip(ok["kernel"], ok["dtype"], ok["shape"])):
        kernel, dtype, shape = group
        best = best_of.get(group)
        best_config, p50, gbps, pct = _best_cells(best, gpu)

        def compared(row) -> str:
            e2e, gpu = speedups(row, best) if best is not None else (None, None)
            return f"{row['provider']} {row['p50_us']:.2f} ({_fmt(e2e, '.2f')}x, {_fmt(gpu, '.2f')}x)"

        others = ", ".join(compared(row) for row in baselines_of.get(group, []))
        lines.append(
            f"{kernel:<12} {dtype:<9} {shape_label(shape):<14} "
            + (f"{searched.get(group, '-'):>11} " if searched else "")
            + f"{best_config:<44} {_fmt(p50, '9.2f')} "
            + (f"{_fmt(gbps, '7.0f')} {_fmt(pct, '6.1f')}  " if gpu else " ") + others
        )
    disagree = ok[ok["timers_disagree"].fillna(False).astype(bool)]
    if len(disagree):
        lines.append(f"  {len(disagree)} row(s) where the CUDA-event time and the kernel time "
                     "disagree by more "
                     "than launch overhead explains (timers_disagree): see event_p50_us against p50_us")
    failed = frame[~frame["status"].isin(["ok", "pruned"])]
    for _, row in failed.head(5).iterrows():
        lines.append(f"  {row['status']}: {row['kernel']} {row['config']} -- {str(row['message'])[:160]}")
    if len(failed) > 5:
        lines.append(f"  ... {len(failed) - 5} more failed trials in the store")
    return "\n".join(lines)

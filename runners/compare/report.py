"""The text triton_sweep.compare prints and the gate's exit status (report, gate_verdict), and the lines
triton_sweep.revalidate prints too (shift_lines): the matched trials and winners with their thresholds and
reach, the shift of each kernel's provider, status changes, the trials only on one side and the
environment fields that differ; refusals says why the gate cannot judge (runners/compare/command.py's
docstring says when it fails and refuses).
"""
from __future__ import annotations

import math

from triton_sweep.model.columns import NAMED
from triton_sweep.model.trial import TRITON_PROVIDER
from triton_sweep.compare import between_runs
from triton_sweep.compare.between_runs import JUDGED, NO_REPETITIONS, VERDICTS
from triton_sweep.compare.sides import Side

LISTED = 20  # trials listed per only-in / failing list unless --all


def _name(domain: tuple) -> str:
    """A shift's (domain, kind) as the report names it."""
    (gpu, kernel, provider), kind = domain
    return " ".join(filter(None, [kernel, "" if provider == TRITON_PROVIDER else provider,
                                  kind and f"({kind})"])) + f" on {gpu}"


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
        against = f"{math.exp(shift.vs_controls):.3f} against the other providers at its shapes"
        machine = "" if math.isnan(shift.vs_controls) else {
            between_runs.MACHINE: f" ({against}: they moved alike; the machine's, not the code's)",
            "SLOW": f" ({against}; the gate counts it where it is slower than them too)",
        }.get(shift.verdict, "")
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
           changed_only: bool = False, list_all: bool = False, across_gpus: bool = False) -> tuple[str, int]:
    """The printed report and the exit status (`gate`: --fail-on-slow, at rule.fail_on_slow;
    `across_gpus`: sides on different GPU models compared as information, gate_verdict)."""
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
    line, status = gate_verdict(result, rule, across_gpus)
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


def gate_verdict(result: dict, rule: between_runs.Rule, across_gpus: bool = False) -> tuple[str, int]:
    """The gate's line and exit status: 2 where the sides ran on different GPU models (0 with
    `across_gpus`: information, never a verdict), or where rows were measured beside another process's
    kernels (refusals: a SLOW there may be its work); else 1 when a judged row is SLOW against its shift
    by more than the gate's share (rule.fail_on_slow), a shift is, or a trial ok in BASE fails in NEW;
    else 2 where it cannot judge (refusals); else 0."""
    limit = f"{100 * rule.fail_on_slow:g}%"
    failing = broken(result)
    reasons = refusals(result)
    judged = [r for r in result["matched"] + result["winners"] if r["judged"]]
    slow, failed = between_runs.failures(judged, result["shifts"], rule)
    shifts = [_name(domain) for domain in failed]
    head = f"gate --fail-on-slow {limit} on {len(judged)} judged rows (winners and shipped configs): "
    if result.get("gpu_models"):
        models = "BASE on {}, NEW on {}".format(*result["gpu_models"])
        if across_gpus:
            return head + f"NOT GATED: {models}; compared as information (--across-gpus), no verdict", 0
        return head + (f"REFUSED: {models}: no rule tells a regression from the GPUs' own difference; "
                       "compare sweeps of one GPU model, or give --across-gpus to read this as "
                       "information (exit 0)"), 2
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

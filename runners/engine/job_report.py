"""What a job says of itself (runners/engine/job.py): the lines that begin (on a resume) and end its trials
phase and begin its finalists, and at its end its counts, where the time went (time_spent), summary.json,
and with verbose=true the job's time by phase and where the finish went."""
from __future__ import annotations

import json
import time
from typing import Optional

from triton_sweep.model.files import write_atomic
from triton_sweep.model.trial import TRITON_PROVIDER, counted


def to_measure(job, done: dict) -> tuple[int, int, str]:
    """Before the trials phase: how many of the planned trials are left to measure (not pruned, not in
    the store for this GPU and versions: `done`), how many the store holds (kept, not measured again),
    and on a resume the line that says both; '' where it holds none."""
    trials = job.plan.trials
    left = [t for t in trials if t.key not in done]
    pruned = sum(t.pruned_reason is not None for t in left)
    kept = len(trials) - len(left)
    if not kept:
        return len(left) - pruned, 0, ""
    budget = job.cfg.search.budget_trials or job.cfg.search.budget_s
    return len(left) - pruned, kept, (
        f"resuming: {kept} of the {counted(len(trials), 'trial')} planned kept from the store (measured on "
        f"{job.env['gpu_name']} with these versions; force=true measures them again), "
        f"{'at most ' if budget else ''}{len(left) - pruned} left to measure"
        + (f", {pruned} to record as pruned" if pruned else ""))


def trials_said(job, budget_s: Optional[float], note: str) -> str:
    """The line after the trials phase: the trials reused where a budgeted search took fewer than the
    store held (to_measure said those), those the budget left out, and with verbose=true who compiled
    what (`note`: compile_note's), then what a search that stops by itself says of each (shape, dtype)
    (Strategy.said); '' where there is nothing to say."""
    said = []
    if len(job.reused_ids) != job.kept:
        said.append(f"{len(job.reused_ids)} of those kept reused by the search")
    if job.scheduler.not_run:
        said.append(f"search budget of {budget_s:g} s reached, {job.scheduler.not_run} trials not run")
    if note and job.cfg.get("verbose"):  # who compiled what, and how long it took
        said.append(note.removeprefix("; "))
    searched = job.plan.search.said()
    return "\n".join(filter(None, ["; ".join(said)] + [f"search: {line}" for line in searched]))


def finalists_said(final, groups: list, rules: list, verbose) -> str:
    """The finalists phase's first line: how many configs and groups, and with verbose=true the rule."""
    caps = sorted(rule.max_time_s for rule in rules)
    configs = sum(t.provider == TRITON_PROVIDER for g in groups for t in g.trials)
    baselines = sum(len(g.trials) for g in groups) - configs
    detail = ""
    if verbose:
        span = f"{caps[0]:.3f}" + (f"-{caps[-1]:.3f}" if caps[-1] != caps[0] else "")
        detail = (f": the top {final.top_k} within {100 * final.screen_margin:g}% of the screened best "
                  f"(at least 2), for up to {span} s a group"
                  + (f" ({final.of_screening:g}x the seconds its screening took, at most "
                     f"{final.max_time_s:g} s)" if final.of_screening is not None else ""))
    return (f"finalists: re-timing {counted(configs, 'config')} of "
            f"{counted(len(groups), '(shape, dtype) group')} round-robin"
            + (f" with {counted(baselines, 'baseline')}" if baselines else "") + detail)


def summary(job, finalist_groups: int) -> dict:
    """The job's counts, as summary.json keeps them."""
    scheduler = job.scheduler
    return {"sweep_id": job.sweep_id, "kernel": job.plan.spec.name, "planned": len(job.plan.trials),
            "reused": len(job.reused_ids), "statuses": job.statuses, "not_run": scheduler.not_run,
            "finalist_groups": finalist_groups, "gpu_workers": len(scheduler.gpu_workers),
            "compile_workers": job.plan.compilers,
            "worker_restarts": sum(w.starts - 1 for w in scheduler.on_gpu),
            **(job.watch.summary() if job.watch is not None else {"gpu_shared_rows": None})}


def outputs_seconds(outputs, summary: dict) -> dict:
    """What the outputs report of themselves (W&B runs and seconds), where the finish did not."""
    return {key: value for output in outputs.all for key, value in output.seconds().items()
            if key not in summary}


def time_spent(job) -> dict:
    """Where the trials and finalists phases went, against the limit of this host: its start as it
    took, the pool's compile seconds over its processes, and the seconds in the timer's loops (the
    GPUs busy with kernels, flushes and holds) over the GPUs: a phase's GPU-busy share is of the
    time of all its GPUs (on two H200s a share of the phase alone read 120%). Kept in summary.json;
    printed with verbose=true."""
    spent = {phase: dict(values) for phase, values in job.spent.items()}
    if "final" in spent:
        spent["final"]["measure_s"] = sum(job.final_loops.values())
    processes = max(job.plan.compilers, 1) if job.plan else 1
    gpus = len(job.scheduler.gpu_workers) if job.scheduler and job.scheduler.gpu_workers else 1
    for name, phase in (("trials", "screen"), ("finalists", "final")):
        if phase in spent and job.phases.get(name):
            spent[phase]["busy_share"] = spent[phase]["measure_s"] / (job.phases[name] * gpus)
    measuring = sum(values["measure_s"] for values in spent.values())
    compiling = sum(values["compile_s"] for values in spent.values())
    limit = {"start_s": job.phases.get("start", 0.0), "compile_s": compiling / processes,
             "measure_s": measuring / gpus}
    took = sum(job.phases.get(name, 0.0) for name in ("start", "trials", "finalists"))
    screen = spent.get("screen")
    if screen and job.cfg.get("verbose"):
        unit = "GPUs" if job.cfg.backend == "cuda" else "interpreter workers"
        on = f" on {gpus} {unit}" if gpus > 1 else ""
        busy = f" ({100 * screen['busy_share']:.0f}% of the phase{on})" if "busy_share" in screen else ""
        final = spent.get("final", {})
        final_busy = (f"; finalists in the timer's loops {final['measure_s']:.1f} s "
                      f"({100 * final['busy_share']:.0f}%)" if "busy_share" in final else "")
        over = f"{measuring:.1f}/{gpus}" if gpus > 1 else f"{measuring:.1f}"
        print(f"time spent: trials in the timer's loops {screen['measure_s']:.1f} s{busy}, first calls "
              f"{screen['first_call_s']:.1f} s, compiling {compiling:.1f} s in {processes} process(es)"
              f"{final_busy}; the limit on this host: start {limit['start_s']:.1f} + compiling "
              f"{limit['compile_s']:.1f} + measuring {over} = {sum(limit.values()):.1f} s, "
              f"against {took:.1f} s for start, trials and finalists")
    return {"phases": spent, "limit": limit, "took_s": took, "gpus": gpus}


def report(job, summary: dict) -> dict:
    """summary.json; with verbose=true, the job's time by phase, the share W&B took, where the finish
    went."""
    summary["wall_seconds"] = time.perf_counter() - job.began
    summary["phase_seconds"] = job.phases
    summary["before_job_seconds"] = job.before_job_s
    summary["time_spent"] = time_spent(job)
    logging_seconds = (summary.get("wandb_seconds") or 0.0) + (
        summary.get("finish_seconds", {}).get("wandb") or 0.0)
    share = 100 * logging_seconds / summary["wall_seconds"]
    verbose = job.cfg.get("verbose")
    if verbose:  # the phase kept as "peaks" in summary.json is the ceilings' (README: ceilings)
        print(f"wall time {summary['wall_seconds']:.1f} s ("
              + ", ".join(f"{'ceilings' if name == 'peaks' else name} {seconds:.1f}"
                          for name, seconds in job.phases.items())
              + f"); W&B logging {logging_seconds:.2f} s of it ({share:.1f}%)")
    if verbose and ("finish_seconds" in summary or job.before_job_s is not None):
        parts = summary.get("finish_seconds", {})
        where = ", ".join(f"{name.replace('_', ' ')} {value:.2f}" for name, value in parts.items())
        print(f"finish {where}"
              + (f"; before the job {job.before_job_s:.1f} s (Python, imports, Hydra's composition)"
                 if job.before_job_s is not None else ""))
    write_atomic(job.output_dir / "summary.json", json.dumps(summary, indent=2))
    return summary

"""A job's plan, printed instead of run (dry_run=true): per (shape, dtype) the configs its search would
measure, those the kernel's constraints prune (the reasons counted over the job), those a resume would
keep from the store, and an estimate of the time; then the job ends. It starts no worker, compiles and
launches nothing, and writes nothing: no store row, no W&B run, no output (the sweep command removes
the run folder Hydra made).

The plan is the job's own: runners/model/plan.py's validate and the search's first ask, as Job.start
makes them; the input is checked as a run checks it (the outputs' settings with the command's `check`).
The store is read with the read-only reader the command hands in (the engine imports no store)."""
from __future__ import annotations

import re
from collections import Counter
from typing import Callable, Optional

from omegaconf import DictConfig

from triton_sweep.model.columns import ENV_KEY
from triton_sweep.model.trial import TRITON_PROVIDER, aligned, counted

# Seconds a trial takes where the store holds no earlier row of the kernel on the device: a guess, said
# so. cuda: half a second of compile a config, 0.04-0.11 s of timing at the default preset (BENCHMARKS.md,
# T18) and at most the preset's max_time_s; the interpreter: about a second each.
GUESS_S = {"cuda": {"compile_s": 0.5, "first_call_s": 0.05, "measure_s": 0.1},
           "interpret": {"compile_s": 0.0, "first_call_s": 1.0, "measure_s": 1.0}}


def known_env(cfg: DictConfig, spec) -> dict:
    """The part of the resume key (ENV_KEY) known before a worker describes its device: the backend,
    versions and kernel source; the interpreter's device and timer; a GPU's model and driver where NVML
    names one model. The timing method of a GPU is known only once its worker starts."""
    import torch
    import triton

    from triton_sweep.measure.device import INTERPRETER_DEVICE_NAME, nvml_gpu
    from triton_sweep.measure.timing import METHOD_WALL
    from triton_sweep.model.spec_sources import kernel_source_hash

    env = {"backend": cfg.backend.value, "torch_version": torch.__version__,
           "triton_version": triton.__version__, "kernel_hash": kernel_source_hash(spec)}
    if cfg.backend == "interpret":
        return {**env, "gpu_name": INTERPRETER_DEVICE_NAME, "driver_version": None,
                "timing_method": METHOD_WALL}
    return {**env, **(nvml_gpu() or {})}


def reason_kind(reason: str) -> str:
    """A prune reason without its numbers, so that one rule counts once over every config it prunes."""
    return re.sub(r"\d+", "…", reason)


def plan_groups(trials: list, chosen: list, kept: set, up_front: bool, budget: Optional[int]) -> list[dict]:
    """One dict a (shape, dtype), in plan order: configs, pruned, to_run (those the search hands out;
    a search that asks in rounds: at most its budget of the unpruned), kept (of those, in the store),
    to_measure, baselines and baselines_kept."""
    chosen_keys = {t.key for t in chosen}
    groups: dict[tuple, dict] = {}
    for trial in trials:
        group = groups.setdefault((trial.shape, trial.dtype), dict.fromkeys(
            ("configs", "pruned", "to_run", "kept", "baselines", "baselines_kept"), 0))
        if trial.provider != TRITON_PROVIDER:
            group["baselines"] += 1
            group["baselines_kept"] += trial.key in kept
        elif trial.pruned_reason:
            group["configs"] += 1
            group["pruned"] += 1
        else:
            group["configs"] += 1
            runs = trial.key in chosen_keys or not up_front
            group["to_run"] += runs
            group["kept"] += runs and trial.key in kept
    for group in groups.values():
        if not up_front and budget is not None:  # the most it measures; kept: the most it may reuse
            group["to_run"] = min(group["to_run"], budget)
            group["kept"] = min(group["kept"], group["to_run"])
        group["to_measure"] = group["to_run"] - group["kept"]
    return [{"shape": shape, "dtype": dtype, **group} for (shape, dtype), group in groups.items()]


def estimate_s(measured: int, groups: int, seconds: dict, plan, cfg: DictConfig) -> float:
    """Seconds the trials to measure would take: the GPU workers' part (load or first call, and timing;
    the compile too, where no pool compiles) over the workers, or the pool's compiles over its
    processes, whichever is slower, since the pool compiles while the GPUs time; then the finalists, at
    most finalists.max_time_s a group and no longer than of_screening x the screening's timing
    (runners/model/finalists.py: group_rule)."""
    gpu = (seconds["first_call_s"] or 0.0) + (seconds["measure_s"] or 0.0)
    pool = (seconds["compile_s"] or 0.0) / plan.compilers if plan.compilers else 0.0
    if not plan.compilers:
        gpu += seconds["compile_s"] or 0.0
    final = cfg.finalists
    finalists = groups * final.max_time_s if final.top_k >= 2 else 0.0
    if final.of_screening is not None:
        finalists = min(finalists, final.of_screening * measured * (seconds["measure_s"] or 0.0))
    return measured * max(gpu / plan.workers, pool) + finalists


def said_seconds(seconds: float) -> str:
    return (f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min" if seconds < 7200
            else f"{seconds / 3600:.1f} h")


def table_lines(groups: list[dict], up_front: bool) -> list[str]:
    """The plan's table, one line a (shape, dtype); `≤` where a search that asks in rounds decides."""
    most = "" if up_front else "≤"
    heads = ("shape", "dtype", "configs", "pruned", "to run", "kept", "to measure", "baselines (kept)")
    rows = [("x".join(map(str, g["shape"])), g["dtype"], str(g["configs"]), str(g["pruned"]),
             most + str(g["to_run"]), most + str(g["kept"]), most + str(g["to_measure"]),
             f"{g['baselines']} ({g['baselines_kept']})") for g in groups]
    return aligned([heads, *rows], left=2)


# How the resume key's parts are said, where a dry run cannot match on all of them.
ENV_WORDS = {"backend": "backend", "timing_method": "timing method", "gpu_name": "GPU model",
             "driver_version": "driver", "torch_version": "torch", "triton_version": "Triton",
             "kernel_hash": "kernel source"}


def totals_line(groups: list[dict], cfg: DictConfig, env: dict, store_exists: bool) -> str:
    """The plan's totals, and what the store's rows were matched on where not the whole resume key."""
    total = {name: sum(g[name] for g in groups)
             for name in ("to_measure", "kept", "pruned", "baselines", "baselines_kept")}
    baselines = total["baselines"] - total["baselines_kept"]
    kept = total["kept"] + total["baselines_kept"]
    unknown = [ENV_WORDS[name] for name in ENV_KEY if name not in env]
    if cfg.force:
        resume = "force=true: none kept from the store"
    elif not store_exists:
        resume = f"0 trials kept: no store at {cfg.store} yet"
    else:
        resume = f"{counted(kept, 'trial')} kept from {cfg.store} (resume)"
        if unknown:
            said = ", ".join(unknown[:-1]) + " and " * (len(unknown) > 1) + unknown[-1]
            resume += f", matched on all but the {said} (known once a worker starts)"
    return (f"total: {counted(total['to_measure'] + baselines, 'trial')} to measure "
            f"({counted(total['to_measure'], 'config')}, {counted(baselines, 'baseline')}); {resume}; "
            f"{total['pruned']} pruned")


def time_line(groups: list[dict], seconds: Optional[dict], env: dict, plan, cfg: DictConfig) -> tuple:
    """(the seconds estimated, the line saying how)."""
    measured = sum(g["to_measure"] + g["baselines"] - g["baselines_kept"] for g in groups)
    finalist_groups = sum(1 for g in groups if g["to_measure"])
    device = env.get("gpu_name") or "any GPU"
    if seconds is not None:
        how = (f"the mean of {seconds['rows']} earlier rows of {plan.spec.name} on {device} in the store")
    else:
        guess = GUESS_S[env["backend"]]
        seconds = {**guess, "measure_s": min(guess["measure_s"], cfg.timing.max_time_s)}  # the preset's cap
        how = f"a guess: the store holds no earlier row of {plan.spec.name} on {device}"
    total = estimate_s(measured, finalist_groups, seconds, plan, cfg)
    parts = ", ".join(f"{name.removesuffix('_s').replace('_', ' ')} {seconds[name] or 0:.2f} s"
                      for name in ("compile_s", "first_call_s", "measure_s"))
    finalists = (f" and the finalists of {counted(finalist_groups, 'group')}"
                 if cfg.finalists.top_k >= 2 and finalist_groups else "")
    budget = f"; search.budget_s={cfg.search.budget_s:g} stops it sooner" if cfg.search.budget_s else ""
    return total, (f"time: about {said_seconds(total)} for {counted(measured, 'trial')}{finalists}, on "
                   f"{plan.workers} worker(s) and {plan.compilers} compile worker(s), plus their start "
                   f"({how}: {parts} a trial){budget}")


def device_said(cfg: DictConfig, env: dict) -> str:
    if cfg.backend == "interpret":
        return "the Triton interpreter (CPU)"
    return env.get("gpu_name") or "a GPU"


def dry_run(cfg: DictConfig, sweep_id: str, open_reader: Callable,
            check_outputs: Callable) -> dict:
    """Print the job's plan (module docstring) and return it: the groups, the prune reasons counted and
    the seconds estimated. open_reader(path): a read-only store (runners/store/reader.py: StoreReader);
    check_outputs(cfg, spec): the outputs' own checks of their settings, as before a run."""
    import torch

    from triton_sweep.engine.startup import imported_line
    from triton_sweep.model.plan import validate

    plan = validate(cfg)
    check_outputs(cfg, plan.spec)
    search = plan.search
    chosen = search.ask()  # a search that decides up front: the whole plan
    env = known_env(cfg, plan.spec)
    reader = open_reader(cfg.store)
    try:
        kept = set() if cfg.force else set(reader.measured(env))
        seconds = reader.trial_seconds(plan.spec.name, env["backend"], env.get("gpu_name"))
    finally:
        reader.close()
    groups = plan_groups(plan.trials, chosen, kept, search.decides_up_front, search.budget)
    reasons = Counter(reason_kind(t.pruned_reason) for t in plan.trials if t.pruned_reason)
    configs = sum(g["configs"] for g in groups)
    print(f"dry run of sweep {sweep_id}: {plan.spec.name}, {counted(len(plan.trials), 'trial')} planned "
          f"({counted(configs, 'config')}, {counted(len(plan.trials) - configs, 'baseline')}; "
          f"{type(search).__name__} search"
          + (f", at most {search.budget} a (shape, dtype)" if search.budget else "")
          + f") on {device_said(cfg, env)}; nothing is launched or written" + imported_line(plan.spec))
    if cfg.backend == "cuda" and not torch.cuda.is_available():
        print("note: no CUDA GPU is visible here: a run here would stop (backend=interpret runs on the CPU)")
    if not search.decides_up_front:
        print(f"{type(search).__name__} asks in rounds, by what it measures: ≤ is the most it runs, and the "
              "most it may reuse from the store")
    print("\n".join(table_lines(groups, search.decides_up_front)))
    print(totals_line(groups, cfg, env, reader.exists))
    if reasons:
        print("pruned by the kernel's constraints (… stands for the numbers of each config and shape):")
        print("\n".join(f"{count:>8}  {reason}" for reason, count in reasons.most_common()))
    total, said = time_line(groups, seconds, env, plan, cfg)
    print(said)
    return {"sweep_id": sweep_id, "dry_run": True, "groups": groups, "pruned_reasons": dict(reasons),
            "estimate_s": total}

"""What a job will run, checked before anything is launched: the stopping rules, the kernel and its
trials, the search, the workers; every bad input a ConfigError naming its field.

What needs neither torch nor the kernel's module is checked first (check_early), before the job starts
anything; the rest (validate) after the first trial worker and the fork server have started, since it
imports torch and the kernel's module as they do (runners/engine/job.py: why at once).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from omegaconf import DictConfig, OmegaConf

from triton_sweep.model.trial import TRITON_PROVIDER, ConfigError

NO_GPU_MESSAGE = (
    "backend=cuda but no CUDA GPU is visible (torch.cuda.is_available() is False). To run the whole "
    "pipeline on the CPU through the Triton interpreter, add backend=interpret (use small shapes; its "
    "timings are marked as interpreter timings, exported only with triton-sweep-export --interpreter)."
)


def stop_rules(cfg: DictConfig):
    """The screening and the finalists' schema objects (each a StopRule with fields of its own), which
    check their fields as they are made (runners/measure/stop_rule.py); a wrong one named with its
    group."""
    from triton_sweep.measure.stop_rule import StopRuleError

    made = []
    for group in ("timing", "finalists"):
        try:
            made.append(OmegaConf.to_object(cfg[group]))
        except StopRuleError as error:
            raise ConfigError(f"{group}.{error}") from None
    return tuple(made)


def check_settings(cfg: DictConfig) -> None:
    """The settings every job checks before it plans: stopping rules, compile, search and logger."""
    stop_rules(cfg)
    if cfg.compile.timeout_s <= 0 or (cfg.compile.workers is not None and cfg.compile.workers < 0):
        raise ConfigError("compile: workers must be >= 0 (or null: one per CPU core) and timeout_s > 0")
    if cfg.search.budget_s is not None and cfg.search.budget_s <= 0:
        raise ConfigError(f"search.budget_s: {cfg.search.budget_s} must be > 0 (or null: no limit)")
    if cfg.logger.auto_trials < 0:
        raise ConfigError(f"logger.auto_trials: {cfg.logger.auto_trials} must be >= 0")


def check_early(cfg: DictConfig) -> None:
    """The checks that need neither torch nor the kernel's module: the settings and, for a built-in
    kernel, its shapes, dtypes, space and baselines against what its module's literals declare
    (kernels/__init__.py: outline). The sweep runs them before it starts anything, so that a refusal
    comes in about a second; validate() checks the same with the spec itself."""
    from triton_sweep.kernels import builtin, outline
    from triton_sweep.model.space import plan_trials

    check_settings(cfg)
    spec = outline(cfg.kernel.name) if cfg.kernel.spec is None and cfg.kernel.name in builtin() else None
    if spec is not None:
        kernel = OmegaConf.to_container(cfg.kernel, resolve=True)
        if kernel["shapes"] is None and spec.default_shapes is None:  # not literals: checked later
            kernel["shapes"] = [[1] * len(spec.dims)]
        if spec.baselines is None:
            kernel["baselines"] = []
        plan_trials(spec, kernel, cfg.backend.value, cfg.max_trials)


@dataclass
class Plan:
    spec: object  # the KernelSpec
    trials: list  # every trial of the job, pruned ones included
    search: object  # a Strategy (runners/model/search/): which configs run, batch by batch
    workers: int  # trial workers (GPUs, or interpreter processes)
    compilers: int  # compile workers


def _workers(cfg: DictConfig) -> int:
    available = 1
    if cfg.backend == "cuda":
        import torch

        if torch.cuda.is_available():
            available = torch.cuda.device_count()  # the GPUs CUDA_VISIBLE_DEVICES leaves visible
        elif cfg.get("dry_run"):  # a plan for a GPU host, made where none is visible (the dry run says so)
            available = cfg.gpu_workers or 1
        else:
            raise ConfigError(NO_GPU_MESSAGE)
    workers = cfg.gpu_workers if cfg.gpu_workers is not None else available
    if workers < 1 or (cfg.backend == "cuda" and workers > available):
        raise ConfigError(f"gpu_workers: {workers} must be between 1 and the {available} visible GPU(s)")
    return workers


def validate(cfg: DictConfig, trials: Optional[list] = None) -> Plan:
    """Everything that can be wrong with the input and that the schema does not catch at composition,
    checked before any launch (the stopping rules first). trials: these exact trials instead of the grid
    of kernel.shapes x dtypes x space (runners/revalidate.py re-times what an export ships)."""
    from triton_sweep.model.search import load_strategy
    from triton_sweep.model.spec_sources import load_spec
    from triton_sweep.model.space import plan_trials

    check_settings(cfg)
    if cfg.backend == "interpret":
        os.environ["TRITON_INTERPRET"] = "1"  # before any kernel module is imported
    spec = load_spec(cfg.kernel.name, cfg.kernel.spec)
    if trials is None:
        trials = plan_trials(spec, OmegaConf.to_container(cfg.kernel, resolve=True), cfg.backend.value,
                             cfg.max_trials)
    search = load_strategy(cfg.search, trials)
    workers = _workers(cfg)
    to_compile = sum(1 for t in trials if t.provider == TRITON_PROVIDER and not t.pruned_reason)
    compilers = 0
    if cfg.backend == "cuda":  # the interpreter has nothing to compile
        compilers = min((os.cpu_count() or 1) if cfg.compile.workers is None else cfg.compile.workers,
                        to_compile)
    return Plan(spec, trials, search, workers, compilers)

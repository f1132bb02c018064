"""The start of a job's processes: the first trial worker, the compile pool's fork server and the worker
of the torch.compile baselines before the input is validated (start_early: they import torch, Triton and
the kernel's module at once), the other trial workers and the compile workers after (start_workers),
and what the job says of them (the `ready after` line, who compiled)."""
from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from omegaconf import DictConfig

from triton_sweep.engine.fork_server import ForkServer
from triton_sweep.engine.process import WorkerProcess, stop_all

if TYPE_CHECKING:
    from triton_sweep.engine.scheduler import Scheduler
    from triton_sweep.model.trial import Trial


def gpu_lock_file(cfg: DictConfig, index: int = 0) -> Optional[str]:
    """A new file for the lock of GPU `index` (runners/engine/worker.py: GpuLock), shared by its trial
    worker and its side worker; None for the interpreter. The job removes it when it ends."""
    if cfg.backend != "cuda":
        return None
    descriptor, path = tempfile.mkstemp(prefix=f"triton-sweep-gpu{index}-", suffix=".lock")
    os.close(descriptor)
    return path


# This process, the first trial worker and the fork server import at once; the side worker starts with
# them where the host has a core more.
IMPORTERS = 3


def start_early(cfg: DictConfig, rule, lock_file: Optional[str]) -> list[Optional[WorkerProcess]]:
    """[the first trial worker (GPU 0, or the interpreter), the compile pool's fork server, the side
    worker], started before this process validates the input: validation imports torch and the
    kernel's module, as each of them does first, so they import at once instead of one after another
    (a kernel library's module may take seconds). The side worker (runners/engine/worker.py) starts
    where the config may hold torch.compile baselines (kernel.baselines not []) and the host has a
    core for it; side.side_workers stops it once validation says there are none. Starting a
    worker launches nothing; a ConfigError stops them at once, unready (runners/engine/job.py). None
    for what is not needed or cannot be named yet (an unknown kernel)."""
    from triton_sweep.engine.compile_pool import fork_server, kernel_module
    from triton_sweep.engine.worker import trial_worker

    if kernel_module(cfg.kernel.name, cfg.kernel.spec) is None:
        return [None, None, None]
    gpu = trial_worker(cfg.backend.value, cfg.kernel.name, cfg.kernel.spec, rule, cfg.timing.warmup_s,
                       cfg.seed, 0, lock_file)
    gpu.start()
    server = side = None
    if cfg.backend == "cuda" and cfg.compile.workers != 0:  # the interpreter has nothing to compile
        server = fork_server(cfg.kernel.name, cfg.kernel.spec)
        server.start()
    # `!= []`: None (the kernel's own) or a list naming some; a wrong value is validation's to name
    if lock_file is not None and cfg.kernel.get("baselines") != [] and (os.cpu_count() or 1) > IMPORTERS:
        side = trial_worker(cfg.backend.value, cfg.kernel.name, cfg.kernel.spec, rule, cfg.timing.warmup_s,
                            cfg.seed, 0, lock_file, side=True)
        side.start()
    return [gpu, server, side]


def plan_line(cfg: DictConfig, sweep_id: str, plan, sides: int) -> str:
    """The job's first line: what it plans, and the workers it starts (`sides`: the GPUs with a side
    worker)."""
    from triton_sweep.model.trial import TRITON_PROVIDER, counted

    configs = sum(t.provider == TRITON_PROVIDER for t in plan.trials)
    budget = cfg.search.budget_trials
    return (f"sweep {sweep_id}: {plan.spec.name}, {counted(len(plan.trials), 'trial')} planned "
            f"({counted(configs, 'config')}"
            + (f", at most {budget} a (shape, dtype) measured" if budget else "")
            + f", {counted(len(plan.trials) - configs, 'baseline')}; {type(plan.search).__name__} search); "
            f"starting {plan.workers} {cfg.backend.value} worker(s) and {plan.compilers} compile worker(s)"
            + (", and a worker for the torch.compile baselines" if sides else "")
            + (f" on each of {sides} GPUs" if sides > 1 else "") + imported_line(plan.spec))


def imported_line(spec) -> str:
    """The line that says where a kernel's code is imported from, where its spec says (a replay's)."""
    return f"\n{spec.name}: its kernel is imported from {spec.imported_from}" if spec.imported_from else ""


def start_workers(cfg: DictConfig, workers: int, compilers: int, rule, first_batch: list[Trial],
                  early: list[Optional[WorkerProcess]],
                  compiles: Callable[[Trial], bool] = lambda trial: False,
                  lock_files: Sequence[Optional[str]] = ()) -> Scheduler:
    """Start the trial workers start_early did not (each imports torch and triton), and a side worker
    beside those of the GPUs with a lock file after GPU 0's (side.side_workers), and return once the trial
    workers are ready; the pool compiles the first batch meanwhile, its workers forked from the fork
    server as soon as it has imported the kernel's module. Keeps the trial workers of the first GPU's
    model."""
    from triton_sweep.engine import compile_pool
    from triton_sweep.engine.scheduler import Scheduler, WorkerStartError
    from triton_sweep.engine.worker import trial_worker
    from triton_sweep.measure.device import nvml_compile_target

    first, server, side = early

    def worker(index: int, is_side: bool = False) -> WorkerProcess:
        lock = lock_files[index] if index < len(lock_files) else None
        return trial_worker(cfg.backend.value, cfg.kernel.name, cfg.kernel.spec, rule, cfg.timing.warmup_s,
                            cfg.seed, index, lock, side=is_side)

    gpu = [first] if first is not None else []
    gpu += [worker(i) for i in range(len(gpu), workers)]
    sides = [side] + [worker(i, is_side=True) for i in range(1, len(lock_files))] if side is not None else []
    pool = compile_pool.compile_workers(compilers, cfg.kernel.name, cfg.kernel.spec, server) if compilers \
        else []
    if not pool and server is not None:
        server.stop()  # nothing of this job to compile, or no pool on this Triton
        server = None
    target = nvml_compile_target() if cfg.backend == "cuda" else None
    scheduler = Scheduler(gpu, pool, cfg.trial_timeout_s, cfg.compile.timeout_s, target, sides, compiles)
    try:
        scheduler.start(first_batch)
    except WorkerStartError:
        stop_all(scheduler.on_gpu + pool)
        raise
    first_model = gpu[0].info["gpu_name"]
    others = [w for w in gpu if w.info["gpu_name"] != first_model]
    if others:  # one result set never mixes GPU models
        print(f"note: using the {len(gpu) - len(others)} {first_model} GPU(s) only; not "
              + ", ".join(f"{w.name} ({w.info['gpu_name']})" for w in others))
        scheduler.keep_gpu_workers([w for w in gpu if w not in others])
    ready = [f"{w.name} {w.ready_s:.1f} s{_start_parts(w.info)}" for w in scheduler.gpu_workers]
    print("ready after " + ", ".join(ready)
          + (f"; {_server_note(scheduler.placement.server)}; the compile pool has compiled "
             f"{len(scheduler.placement.built)} "
             "configs meanwhile" if pool else ""))
    return scheduler


def _start_parts(info: dict) -> str:
    """' (imports 1.0, kernel module 0.1, gpu (lock 0.0, cuda context 0.2, ...), gpu after imports 0.9,
    ...)': a worker's start_seconds, nested parts in their own brackets; '' without them."""
    parts = info.get("start_seconds")
    if not parts:
        return ""

    def said(name: str, value) -> str:
        shown = _start_parts({"start_seconds": value}) if isinstance(value, dict) else f" {value:.1f}"
        return name.replace("_", " ") + shown

    return " (" + ", ".join(said(name, value) for name, value in parts.items()) + ")"


def _server_note(server: Optional[ForkServer]) -> str:
    if server is None or not server.ready:
        return "the fork server is still importing"
    modules = ", ".join(server.info["preload"][-1:])  # the kernel's module; torch and triton before it
    failed = f"; could not import {', '.join(server.info['failed'])}" if server.info["failed"] else ""
    return (f"fork server {server.ready_s:.1f} s ({server.info['seconds']:.1f} importing torch, triton, "
            f"{modules}{failed})")



def compile_note(scheduler: Scheduler) -> str:
    """Who compiled the job's configs: the pool (forked workers, median seconds) and the GPU workers."""
    import statistics

    sides, placement = scheduler.turns.sides, scheduler.placement
    side_note = ""
    if len(sides) == 1 and sides[0].ready_s is not None:
        side_note = (f"; the torch.compile baselines in a worker of their own (ready after "
                     f"{sides[0].ready_s:.1f} s{_start_parts(sides[0].info)})")
    elif len(sides) > 1:
        ready = [f"{side.ready_s:.1f}" for side in sides if side.ready_s is not None]
        unready = len(sides) - len(ready)
        side_note = (f"; the torch.compile baselines in workers of their own on {len(sides)} GPUs (ready "
                     f"after {', '.join(ready)} s"
                     + (f"; {unready} not waited for: the others took every baseline" if unready else "")
                     + ")")
    forked = sum(w.starts > 0 for w in placement.compilers)
    if not placement.compilers:
        return side_note
    pool, gpu = placement.pool_compile_s, placement.gpu_compile_s
    return (f"; compiled: {len(pool)} in the pool ({forked} of {len(placement.compilers)} compile workers "
            "forked" + (f", median {statistics.median(pool):.2f} s" if pool else "")
            + f"), {len(placement.gpu_compiled)} by the GPU workers themselves"
            + (f" (median first call {statistics.median(gpu):.2f} s)" if gpu else "") + side_note)

"""The start of a job's processes: the first trial worker, the compile pool's fork server and the worker
of the torch.compile baselines before the input is validated (start_early: they import torch, Triton and
the kernel's module at once), the other trial workers and the compile workers after (start_workers),
and what the job says of them (the `ready after` line, who compiled)."""
from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Callable, Optional

from omegaconf import DictConfig

from runners.engine.process import ForkServer, WorkerProcess, stop_all

if TYPE_CHECKING:
    from runners.engine.scheduler import Scheduler
    from runners.engine.trial import Trial


def gpu_lock_file(cfg: DictConfig) -> Optional[str]:
    """A new file for the lock of GPU 0 (runners/engine/worker.py: GpuLock), shared by its trial worker
    and the side worker; None for the interpreter. The job removes it when it ends."""
    if cfg.backend != "cuda":
        return None
    descriptor, path = tempfile.mkstemp(prefix="triton-sweep-gpu0-", suffix=".lock")
    os.close(descriptor)
    return path


# This process, the first trial worker, the fork server and the finishing process import at once; the
# side worker starts with them where the host has a core more.
IMPORTERS = 4


def start_early(cfg: DictConfig, rule, lock_file: Optional[str]) -> list[Optional[WorkerProcess]]:
    """[the first trial worker (GPU 0, or the interpreter), the compile pool's fork server, the side
    worker], started before this process validates the input: validation imports torch and the
    kernel's module, as each of them does first, so they import at once instead of one after another
    (a kernel library's module may take seconds). The side worker (runners/engine/worker.py) starts
    where the config may hold torch.compile baselines (kernel.baselines not []) and the host has a
    core for it; keep_side stops it once validation says there are none or several GPUs. Starting a
    worker launches nothing; a ConfigError stops them at once, unready (runners/engine/job.py). None
    for what is not needed or cannot be named yet (an unknown kernel)."""
    from runners.engine.compile_pool import fork_server, kernel_module
    from runners.engine.worker import trial_worker

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


def keep_side(side: Optional[WorkerProcess], trials: list[Trial], compiles: Callable[[Trial], bool],
              gpu_workers: int) -> Optional[WorkerProcess]:
    """The side worker where the job runs on one GPU and some trial compiles on its first call; else it
    is stopped (None). On several GPUs each trial worker compiles its own: one side worker on GPU 0
    would take every finalists group that holds such a baseline, which the GPUs share otherwise."""
    if side is not None and (gpu_workers > 1
                             or not any(compiles(trial) for trial in trials if not trial.pruned_reason)):
        side.stop()
        return None
    return side


def start_workers(cfg: DictConfig, workers: int, compilers: int, rule, first_batch: list[Trial],
                  early: list[Optional[WorkerProcess]],
                  compiles: Callable[[Trial], bool] = lambda trial: False) -> Scheduler:
    """Start the trial workers start_early did not (each imports torch and triton) and return once all
    are ready; the pool compiles the first batch meanwhile, its workers forked from the fork server as
    soon as it has imported the kernel's module. Keeps the trial workers of the first GPU's model."""
    from runners.engine import compile_pool
    from runners.engine.scheduler import Scheduler, WorkerStartError
    from runners.engine.worker import trial_worker
    from runners.measure.device import nvml_compile_target

    first, server, side = early
    gpu = [first] if first is not None else []
    gpu += [trial_worker(cfg.backend.value, cfg.kernel.name, cfg.kernel.spec, rule, cfg.timing.warmup_s,
                         cfg.seed, i)
            for i in range(len(gpu), workers)]
    if not compilers and server is not None:
        server.stop()  # nothing of this job to compile
        server = None
    pool = []
    if compilers:
        pool = compile_pool.compile_workers(compilers, cfg.kernel.name, cfg.kernel.spec, server)
    target = nvml_compile_target() if cfg.backend == "cuda" else None
    scheduler = Scheduler(gpu, pool, cfg.trial_timeout_s, cfg.compile.timeout_s, target, side, compiles)
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
          + (f"; {_server_note(scheduler.server)}; the compile pool has compiled {len(scheduler.built)} "
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

    side = scheduler.side
    side_note = (f"; the torch.compile baselines in a worker of their own (ready after {side.ready_s:.1f} s"
                 f"{_start_parts(side.info)})" if side is not None and side.ready_s is not None else "")
    forked = sum(w.starts > 0 for w in scheduler.compilers)
    if not scheduler.compilers:
        return side_note
    pool, gpu = scheduler.pool_compile_s, scheduler.gpu_compile_s
    return (f"; compiled: {len(pool)} in the pool ({forked} of {len(scheduler.compilers)} compile workers "
            "forked" + (f", median {statistics.median(pool):.2f} s" if pool else "")
            + f"), {len(scheduler.gpu_compiled)} by the GPU workers themselves"
            + (f" (median first call {statistics.median(gpu):.2f} s)" if gpu else "") + side_note)

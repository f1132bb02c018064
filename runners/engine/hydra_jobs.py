"""What the project adds to Hydra's launchers, for a multirun whose jobs run apart: in processes of their
own on this host, or on SLURM nodes (the presets conf/hydra/launcher/local.yaml and slurm.yaml; the
launcher classes are in hydra_plugins/triton_sweep_launcher/, where Hydra looks for plugins, and use
what is here). Nothing heavy is imported: Hydra imports the plugin module at every start.

- Under every launcher but Hydra's basic one (runs_jobs_apart), each job writes a store of its own in
  its job directory (an SQLite file must not be shared over a network filesystem), and the multirun's
  end merges them (runners/sweep.py, runners/merge.py).
- Local jobs take GPUs of their own (take_gpus): a lock file per GPU in the sweep directory, held for
  the job's life, so two jobs never share a GPU; a job that finds none free waits.
- The launcher's parameters are checked before anything is submitted (check_params), naming the field.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from triton_sweep.model.files import write_atomic

BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
GPU_LOCKS = ".gpu_locks"  # in the sweep directory: one lock file per GPU of the host
GPU_WAIT_S = 2.0  # a job waiting for a free GPU looks again this often
_held_locks: list = []  # open lock files of the GPUs this process took: closed (released) when it exits


def runs_jobs_apart(hydra_conf: DictConfig) -> bool:
    """Whether the multirun's launcher runs its jobs in processes of their own, perhaps on other
    machines: every launcher but Hydra's basic one, which runs them one after another in this process."""
    return OmegaConf.select(hydra_conf, "launcher._target_", default=BASIC_LAUNCHER) != BASIC_LAUNCHER


_stopped_by: list = []  # the signal that stopped this process


def stop_on_signals() -> None:
    """SIGINT and SIGTERM raise KeyboardInterrupt in this process, once, so the clean-up of Ctrl-C runs: a
    second one while it runs (the workers stopped, a multirun's jobs stopped and their rows merged) is
    ignored, never cutting it short."""
    def stop(signum, frame):
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, signal.SIG_IGN)
        _stopped_by.append(signum)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, stop)


def stopped_status() -> int:
    """The exit status a shell gives a command its signal ended: 130 for Ctrl-C (also where a library
    raised a KeyboardInterrupt of its own for it, as Ray's get does), 143 for SIGTERM."""
    return 128 + (_stopped_by[0] if _stopped_by else signal.SIGINT)


def write_failed_summary(job_dir: Path, number: int, message: str) -> None:
    """The summary.json of job `number` that failed with `message` (the launcher's, for a job that died)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(job_dir / "summary.json", json.dumps({"job": number, "error": message}))


class LauncherConfigError(ValueError):
    """A launcher parameter that cannot work; the message names the field."""


def check_params(params: dict) -> None:
    """What submitit would find out only at submission, or never: sizes must be positive, and a job is
    one task on one node (its trial workers take the GPUs it was given)."""
    for name, least in (("timeout_min", 1), ("cpus_per_task", 1), ("mem_gb", 1), ("gpus_per_node", 0),
                        ("gpus_per_task", 0)):
        value = params.get(name)
        if value is not None and value < least:
            raise LauncherConfigError(f"hydra.launcher.{name}: {value} must be >= {least}")
    if params.get("nodes", 1) != 1:
        raise LauncherConfigError(f"hydra.launcher.nodes: {params['nodes']}: a job runs on one node; split "
                                  "the sweep into more jobs instead (-m, README: Run on a SLURM cluster)")
    if params.get("tasks_per_node", 1) != 1:
        raise LauncherConfigError(f"hydra.launcher.tasks_per_node: {params['tasks_per_node']} would run the "
                                  "whole job that many times at once; a job is one task")


def host_gpus() -> list[str]:
    """The GPUs this host lets the jobs use: CUDA_VISIBLE_DEVICES's entries where it is set, else every
    GPU NVML sees (by index); none on a machine without NVML."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [entry.strip() for entry in visible.split(",") if entry.strip()]
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except Exception as error:  # NVMLError's subclasses are made at run time: told apart by name
        if isinstance(error, (ImportError, OSError)) or type(error).__name__.startswith("NVMLError"):
            return []
        raise
    return [str(index) for index in range(count)]


def take_gpus(pool: list[str], count: int, lock_dir: Path) -> list[str]:
    """Lock `count` GPUs of `pool` for this process (an exclusive flock per GPU, released when the
    process ends, however it ends) and return them; wait while fewer are free."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    waiting_since = None
    while True:
        taken = []
        for gpu in pool:
            handle = open(lock_dir / f"gpu-{re.sub(r'[^A-Za-z0-9_.-]', '_', gpu)}.lock", "a")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            taken.append((gpu, handle))
            if len(taken) == count:
                _held_locks.extend(handle for _, handle in taken)
                if waiting_since is not None:
                    waited = time.monotonic() - waiting_since
                    print(f"took GPU(s) {[g for g, _ in taken]} after waiting {waited:.0f} s", flush=True)
                return [g for g, _ in taken]
        # All or none: two jobs each holding half of what they need would wait for each other forever.
        for _, handle in taken:
            handle.close()
        if waiting_since is None:
            waiting_since = time.monotonic()
            print(f"waiting for {count} free GPU(s) of {pool}: the other jobs hold them", flush=True)
        time.sleep(GPU_WAIT_S)



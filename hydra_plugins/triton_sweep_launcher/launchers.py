"""The launcher classes of conf/hydra/launcher/local.yaml, slurm.yaml (on hydra-submitit-launcher's) and
ray_gpus.yaml (on hydra-ray-launcher's, where the [ray] extra is installed):

- Every job is waited for; a job that died (node lost, SLURM time limit, kill -9) is reported as a failed
  job is (its summary.json holds the error), so the multirun still reaches its end and exits 1 naming
  it, every job's rows merged. (The plugin's launcher raises at the first job that died.)
- local: each job takes `gpus_per_node` of the GPUs this host shows (CUDA_VISIBLE_DEVICES, else every
  GPU) for itself, and waits while none is free. (submitit's gives every job GPUs 0..gpus_per_node-1.)
- SIGINT or SIGTERM to the command stops every job (each stops its workers) and waits for them; on Ray
  too, whose init had taken SIGTERM for itself.
- The parameters are checked when the launcher is made, before anything is submitted.
Hydra imports this module at every start: it imports nothing heavy (engine/hydra_jobs.py has the helpers)."""
from __future__ import annotations

import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra_plugins.hydra_submitit_launcher import submitit_launcher
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from omegaconf import DictConfig, open_dict

from triton_sweep.engine.hydra_jobs import (GPU_LOCKS, LauncherConfigError, check_params, host_gpus,
                                            stop_on_signals, take_gpus, write_failed_summary)

log = logging.getLogger(__name__)
STOP_WAIT_S = 60  # how long a stopped multirun waits for its jobs to stop their workers and end


class _WaitsForEveryJob:
    """The launch shared by the local and SLURM launchers (mixed in before the plugin's class)."""

    _EXECUTOR: str
    params: dict
    config: Optional[DictConfig]

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        check_params(self.params)

    def _executor(self):
        """submitit's executor with this preset's parameters: those every executor knows as they are,
        the others under the cluster's prefix (partition -> slurm_partition)."""
        import submitit

        params = dict(self.params)
        folder = params.pop("submitit_folder")
        init = {}
        if "max_num_timeout" in params:  # how often a job cut by its time limit is submitted again
            init[f"{self._EXECUTOR}_max_num_timeout"] = params.pop("max_num_timeout")
        executor = submitit.AutoExecutor(folder=folder, cluster=self._EXECUTOR, **init)
        shared = set(BaseQueueConf.__dataclass_fields__)
        executor.update_parameters(**{name if name in shared else f"{self._EXECUTOR}_{name}": value
                                      for name, value in params.items()})
        return executor

    def _before_submit(self, sweep_dir: Path) -> None:
        """What a launcher prepares in the launching process before it submits."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from submitit.core.utils import UncompletedJobError

        assert self.config is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        self._before_submit(sweep_dir)
        executor = self._executor()
        numbers = list(range(initial_job_idx, initial_job_idx + len(job_overrides)))
        log.info(f"submitit {self._EXECUTOR}: {len(numbers)} job(s), sweep directory {sweep_dir}")
        for number, overrides in zip(numbers, job_overrides):
            log.info(f"\t#{number} : {' '.join(filter_overrides(overrides))}")
        n = len(numbers)
        # One call per job: self(overrides, "hydra.sweep.dir", number, a placeholder id, Hydra's singletons).
        # The processes submitted ignore SIGINT until a job takes it (__call__): a Ctrl-C at the terminal
        # reaches them all, and submitit's local controller would kill its job 1 s later, mid-clean-up.
        ctrl_c = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            jobs = executor.map_array(self, [list(o) for o in job_overrides], ["hydra.sweep.dir"] * n,
                                      numbers, [f"job_id_for_{i}" for i in numbers],
                                      [Singleton.get_state()] * n)
        finally:
            signal.signal(signal.SIGINT, ctrl_c)
        returns = []
        try:
            for number, overrides, job in zip(numbers, job_overrides, jobs):  # every job, whatever others did
                try:
                    returns.append(job.results()[0])
                except UncompletedJobError as error:  # FailedJobError too: it died or was killed first
                    returns.append(self._died(number, list(overrides), job, error))
        except KeyboardInterrupt:
            self._stop_all(jobs)
            raise
        return returns

    def __call__(self, sweep_overrides: list, job_dir_key: str, job_num: int, job_id: str,
                 singleton_state: dict) -> JobReturn:
        stop_on_signals()  # in the job's process: SIGINT or SIGTERM stops its workers, then the job
        self._before_job(job_num)
        return super().__call__(sweep_overrides, job_dir_key, job_num, job_id, singleton_state)

    def _before_job(self, job_num: int) -> None:
        """What a launcher prepares in the job's process before the job runs."""

    def _stop(self, job) -> None:
        job.cancel(check=False)  # SLURM: scancel, which sends the job SIGTERM

    def _stop_all(self, jobs: list) -> None:
        """Stop every job and wait for them to end; the command then merges the rows they stored
        (runners/sweep.py: cli), as the multirun's end would have."""
        print(f"stopping {len(jobs)} job(s)...", file=sys.stderr, flush=True)
        for job in jobs:
            if not job.done():
                self._stop(job)
        deadline = time.monotonic() + STOP_WAIT_S
        while not all(job.done() for job in jobs) and time.monotonic() < deadline:
            time.sleep(0.2)
        for job in jobs:
            if not job.done():
                print(f"error: job {job.job_id} has not ended {STOP_WAIT_S} s after it was stopped",
                      file=sys.stderr)

    def _died(self, number: int, overrides: list, job, error: Exception) -> JobReturn:
        """Write the job's summary.json as a job that failed does, so the multirun's end reports it and
        exits 1; the rows it committed before dying are in its store and are merged with the others'."""
        first_lines = " / ".join(line.strip() for line in str(error).strip().splitlines()[:3])
        message = (f"the job died before it finished ({type(error).__name__}: {first_lines}); "
                   f"its output: {job.paths.stdout} and {job.paths.stderr}")
        job_dir = self._job_dir(number, overrides, job.job_id)
        write_failed_summary(job_dir, number, message)
        print(f"error: job #{number} ({' '.join(filter_overrides(overrides))}): {message}", file=sys.stderr)
        return JobReturn(overrides=overrides, status=JobStatus.COMPLETED, _return_value=None)

    def _job_dir(self, number: int, overrides: list, job_id: str) -> Path:
        """The job's output directory, as Hydra composes it in the job (hydra.sweep.dir / subdir)."""
        assert self.config is not None and self.hydra_context is not None
        config = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        with open_dict(config.hydra.job):
            config.hydra.job.num = number
            config.hydra.job.id = job_id
        return Path(str(config.hydra.sweep.dir)) / str(config.hydra.sweep.subdir)


class LocalLauncher(_WaitsForEveryJob, submitit_launcher.LocalLauncher):
    """Jobs in processes of their own on this host, each on `gpus_per_node` GPUs of its own."""

    def _before_submit(self, sweep_dir: Path) -> None:
        self.gpus = host_gpus()  # travels with the launcher to each job
        per_job = self.params.get("gpus_per_node") or 0
        if self.gpus and per_job > len(self.gpus):
            raise LauncherConfigError(f"hydra.launcher.gpus_per_node: {per_job} GPUs per job, but this host "
                                      f"shows {len(self.gpus)} ({', '.join(self.gpus)})")
        if per_job and not self.gpus:
            log.info("no GPU visible on this host: the jobs run without one (backend=interpret)")
        self.lock_dir = str(sweep_dir / GPU_LOCKS)

    def _stop(self, job) -> None:
        # SIGTERM to the job's controller (its pid is the job id), which sends it on to the job and waits
        # (submitit's cancel sends SIGINT, after which the controller kills the job within a second)
        try:
            os.kill(int(job.job_id), signal.SIGTERM)
        except ProcessLookupError:
            pass

    def _before_job(self, job_num: int) -> None:
        # In the job's process, before anything there touches CUDA: the GPUs it holds, and only those.
        per_job = self.params.get("gpus_per_node") or 0
        taken = take_gpus(self.gpus, per_job, Path(self.lock_dir)) if self.gpus and per_job else []
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(taken)
        print(f"job #{job_num}: GPU(s) {', '.join(taken) or 'none'} of this host (CUDA_VISIBLE_DEVICES)",
              flush=True)


class SlurmLauncher(_WaitsForEveryJob, submitit_launcher.SlurmLauncher):
    """One SLURM job per job of the multirun, on the GPUs SLURM allocates it (CUDA_VISIBLE_DEVICES)."""


try:
    from hydra_plugins.hydra_ray_launcher.ray_launcher import RayLauncher as _RayPlugin
except ImportError:  # the [ray] extra is not installed
    _RayPlugin = None
RayLauncher = None
if _RayPlugin is not None:
    class RayLauncher(_RayPlugin):  # noqa: F811
        """hydra-ray-launcher's jobs as Ray tasks; SIGINT or SIGTERM cancels every task (a KeyboardInterrupt
        in it: the job stops its workers) and waits for them, the command then merging their rows."""

        def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
            import ray
            from hydra.core.utils import setup_globals
            from hydra_plugins.hydra_ray_launcher._launcher_util import launch_job_on_ray, start_ray

            assert self.config is not None and self.hydra_context is not None
            setup_globals()
            Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
            start_ray(self.ray_cfg.init)
            stop_on_signals()  # ray.init set Ray's SIGTERM handler in this process, which exits at once
            tasks = []
            for number, overrides in enumerate(job_overrides, initial_job_idx):
                log.info(f"\t#{number} : {' '.join(filter_overrides(overrides))}")
                config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
                with open_dict(config):
                    config.hydra.job.id, config.hydra.job.num = f"job_id_for_{number}", number
                tasks.append(launch_job_on_ray(self.hydra_context, self.ray_cfg.remote, config,
                                               self.task_function, Singleton.get_state()))
            try:
                return ray.get(tasks)
            except KeyboardInterrupt:
                print(f"stopping {len(tasks)} job(s)...", file=sys.stderr, flush=True)
                for task in tasks:
                    ray.cancel(task)
                if ray.wait(tasks, num_returns=len(tasks), timeout=STOP_WAIT_S)[1]:
                    print(f"error: jobs have not ended {STOP_WAIT_S} s after they were stopped",
                          file=sys.stderr)
                raise

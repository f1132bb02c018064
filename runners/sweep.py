"""Sweep a Triton kernel's configs: `python -m runners.sweep [overrides]` (add -m for a Hydra multirun).

One job: compose and validate the config (no launch before this passes) -> plan trials (prune with
reasons) -> skip trials the store already holds -> start the trial worker -> for each trial: correctness
gate, timing, append to the store, queue a W&B run -> at the end (of the job, or of the whole multirun
through SweepEndCallback): parquet file, results table, triton.Config export, W&B summary run.
"""
from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Optional

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from runners.trials import ConfigError, Trial, kernel_source_hash, load_spec, plan_trials


NO_GPU_MESSAGE = (
    "backend=cuda but no CUDA GPU is visible (torch.cuda.is_available() is False). To run the whole "
    "pipeline on the CPU through the Triton interpreter, add backend=interpret (use small shapes; its "
    "timings are marked as interpreter timings and never exported)."
)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


def git_sha() -> Optional[str]:
    """HEAD of the repository the runner lives in, '+dirty' when it has uncommitted changes."""
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None  # not a git checkout (e.g. a copied tree)
    return sha + ("+dirty" if dirty else "")


def sweep_id_of(cfg: DictConfig) -> str:
    """cfg.sweep_id, else the name of the Hydra run directory (multirun: the sweep directory)."""
    if cfg.sweep_id:
        return str(cfg.sweep_id)
    hydra_conf = HydraConfig.get()
    directory = hydra_conf.sweep.dir if hydra_conf.mode == RunMode.MULTIRUN else hydra_conf.run.dir
    return Path(directory).name


def validate(cfg: DictConfig):
    """Everything that can be wrong with the input and that the schema does not catch at composition,
    checked before any launch. Returns (spec, trials)."""
    if cfg.timing.min_samples < 2 or cfg.timing.max_noise <= 0 or cfg.timing.max_time_s <= 0:
        raise ConfigError("timing: min_samples must be >= 2, max_noise and max_time_s > 0")
    if cfg.backend == "interpret":
        os.environ["TRITON_INTERPRET"] = "1"  # before any kernel module is imported
    spec = load_spec(cfg.kernel.name, cfg.kernel.spec)
    trials = plan_trials(spec, OmegaConf.to_container(cfg.kernel, resolve=True), cfg.backend.value)
    if cfg.backend == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(NO_GPU_MESSAGE)
    return spec, trials


def _is_throttled(result: dict, max_clock: Optional[int], ratio: float) -> Optional[bool]:
    clocks = [result.get("sm_clock_start_mhz"), result.get("sm_clock_end_mhz")]
    if max_clock is None or None in clocks:
        return None
    return min(clocks) < ratio * max_clock


def _wandb_config(trial: Trial, spec, row: dict, timing: dict) -> dict:
    """The trial's resolved config as W&B shows it: flat keys for parallel-coordinates panels."""
    return {
        "kernel": trial.kernel, "provider": trial.provider, "dtype": trial.dtype, "shape": list(trial.shape),
        **dict(zip(spec.dims, trial.shape)), **trial.config,
        "seed": row["seed"], "backend": row["backend"], "gpu_name": row["gpu_name"],
        "driver_version": row["driver_version"], "torch_version": row["torch_version"],
        "triton_version": row["triton_version"], "kernel_hash": row["kernel_hash"],
        "git_sha": row["git_sha"], "timing": timing,
    }


SUMMARY_KEYS = ("status", "message", "stop_reason", "p20_us", "p50_us", "p80_us", "min_us", "noise",
                "n_samples", "gbps", "tflops", "pct_copy_bw", "pct_matmul", "throttled")


def run_job(cfg: DictConfig, sweep_id: str, output_dir: Path, finish: bool) -> dict:
    """Measure every trial of one job; returns the job summary (also written to output_dir/summary.json)."""
    from tqdm import tqdm

    from runners.store import ResultStore
    from runners.wandb_logger import TrialLogger
    from runners.worker import TrialWorker

    began = time.perf_counter()
    spec, trials = validate(cfg)
    timing = OmegaConf.to_container(cfg.timing, resolve=True)
    store = ResultStore(cfg.store)
    worker = TrialWorker(cfg.backend.value, cfg.kernel.name, cfg.kernel.spec, timing)
    logger = None
    statuses: dict[str, int] = {}
    try:
        print(f"sweep {sweep_id}: {spec.name}, {len(trials)} trials planned; starting the {cfg.backend.value} worker")
        env = dict(worker.start(), kernel_hash=kernel_source_hash(spec))
        peaks = {}
        if cfg.backend == "cuda":
            peaks = store.peaks(env)
            if peaks is None:
                print(f"measuring the ceilings of {env['gpu_name']} (copy bandwidth, cuBLAS matmul); cached in {cfg.store}")
                peaks = worker.request(("peaks",), cfg.trial_timeout_s, "measuring peaks")
                store.save_peaks(env, peaks, _now())
        done = {} if cfg.force else store.measured(env)
        reused = [done[t.key] for t in trials if t.key in done]
        store.adopt(reused, sweep_id)
        todo = [t for t in trials if t.key not in done]
        print(f"{len(reused)} trials already in the store for this GPU and versions (force=true re-measures), "
              f"{len(todo)} to run on {env['gpu_name']}")

        logger = TrialLogger(OmegaConf.to_container(cfg.logger, resolve=True, enum_to_str=True), sweep_id)
        base = {"sweep_id": sweep_id, "seed": cfg.seed, "git_sha": git_sha(),
                **{k: env[k] for k in ("backend", "gpu_name", "driver_version", "cuda_version", "torch_version",
                                       "triton_version", "python_version", "sm_count", "l2_bytes", "host",
                                       "kernel_hash", "sm_clock_max_mhz")}}
        progress = tqdm(todo, unit="trial", desc=spec.name, dynamic_ncols=True, mininterval=1.0)
        for trial in progress:
            if trial.pruned_reason:
                result = {"status": "pruned", "message": trial.pruned_reason}
            else:
                result = worker.run_trial(trial, cfg.seed, peaks, cfg.trial_timeout_s)
            row = {**base, "trial_key": trial.key, "kernel": trial.kernel, "provider": trial.provider,
                   "shape": trial.shape, "dtype": trial.dtype, "config": trial.config, **result,
                   "throttled": _is_throttled(result, env["sm_clock_max_mhz"], cfg.timing.throttle_ratio),
                   "timestamp": _now()}
            store.append(row)
            statuses[row["status"]] = statuses.get(row["status"], 0) + 1
            if row["status"] != "pruned":
                logger.log(trial.kernel, trial.label, _wandb_config(trial, spec, row, timing),
                           {k: row.get(k) for k in SUMMARY_KEYS})
            progress.set_postfix_str(f"{row['status']} {row.get('p50_us') or 0:.1f}us", refresh=False)
        progress.close()
    finally:
        worker.stop()
        if logger is not None:
            logger.close()
        store.close()

    summary = {"sweep_id": sweep_id, "kernel": spec.name, "planned": len(trials), "reused": len(reused),
               "statuses": statuses, "worker_restarts": worker.restarts, "wandb_runs": logger.runs,
               "wandb_seconds": logger.seconds}
    if finish:
        summary.update(finish_sweep(cfg, sweep_id, output_dir))
    summary["wall_seconds"] = time.perf_counter() - began
    logging_seconds = summary["wandb_seconds"] + summary.get("wandb_summary_seconds", 0.0)
    share = 100 * logging_seconds / summary["wall_seconds"]
    print(f"wall time {summary['wall_seconds']:.1f} s; W&B logging {logging_seconds:.2f} s of it ({share:.1f}%)")
    (output_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def finish_sweep(cfg: DictConfig, sweep_id: str, output_dir: Path) -> dict:
    """After the last trial of a sweep: parquet, table, export, W&B summary run."""
    from runners.export import ExportError, export_kernel
    from runners.report import best_table
    from runners.store import ResultStore, write_parquet
    from runners.wandb_logger import log_sweep_summary

    store = ResultStore(cfg.store)
    frame = store.load(sweep_id=sweep_id)
    store.close()
    parquet = write_parquet(frame, output_dir / "results.parquet")
    print(best_table(frame))
    exports = []
    for kernel in frame["kernel"].unique():
        try:
            exports += export_kernel(frame, kernel, cfg.export_dir)
        except ExportError as error:
            print(f"export skipped: {error}")
    logger_conf = OmegaConf.to_container(cfg.logger, resolve=True, enum_to_str=True)
    seconds = log_sweep_summary(logger_conf, sweep_id, frame, exports)
    print(f"results: {cfg.store} (sweep {sweep_id}), {parquet}")
    for path in exports:
        print(f"exported: {path}")
    if logger_conf["mode"] == "offline":
        print(f"W&B offline runs in {logger_conf['dir']}/wandb; upload with: wandb sync {logger_conf['dir']}/wandb/offline-run-*")
    return {"parquet": str(parquet), "exports": [str(p) for p in exports], "wandb_summary_seconds": seconds}


class SweepEndCallback(Callback):
    """At the end of a multirun: one table, parquet file, export and W&B summary for all its jobs."""

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_id = str(config.sweep_id) if config.sweep_id else sweep_dir.name
        finish_sweep(config, sweep_id, sweep_dir)
        failed = [path.parent.name for path in sorted(sweep_dir.glob("*/summary.json"))
                  if "error" in json.loads(path.read_text())]
        if failed:
            print(f"error: {len(failed)} job(s) of the multirun failed: {', '.join(failed)} "
                  f"(messages above and in {sweep_dir}/<job>/summary.json)", file=sys.stderr)
            sys.exit(1)


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> Optional[dict]:
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    sweep_id = sweep_id_of(cfg)
    output_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        return run_job(cfg, sweep_id, output_dir, finish=not multirun)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        if not multirun:
            sys.exit(2)
        failure = str(error)
    except Exception as error:  # any other failure of one job of a multirun: keep the others' results
        if not multirun:
            raise
        traceback.print_exc()
        failure = f"{type(error).__name__}: {error}"
    # The other jobs go on; the end-of-sweep callback still writes the sweep's results, reports this
    # job and exits 1.
    (output_dir / "summary.json").write_text(json.dumps({"sweep_id": sweep_id, "error": failure}))
    return None


if __name__ == "__main__":
    from runners.schema import register_configs

    register_configs()
    main()

"""Sweep a Triton kernel's configs: `python -m runners.sweep [overrides]` (add -m for a Hydra multirun).

One job: the first trial worker and the compile pool's fork server start at once, while this process
validates the config (no launch before that passes: a bad input stops them and is reported, naming the
field) -> plan trials (prune with reasons) -> search picks the configs to run (grid, random, optuna;
budgets) -> the other trial workers (one per GPU) start, the pool compiling the first batch meanwhile ->
skip trials the store already holds -> each trial: compiled in the pool (or by the GPU worker itself
when the pool cannot be sooner: runners/engine/scheduler.py), then on a free GPU worker the correctness gate
and timing, append to the store, queue a W&B run -> the top configs of each (shape, dtype) re-timed
round-robin (finalists) -> at the end (of the job, or of the whole multirun through SweepEndCallback):
parquet file, results table, triton.Config export here; plots and the W&B summary run in a process
started with the workers, or once they are ready on a host of few cores (runners/results/finisher.py), waited
for a bounded time. Under a launcher that
runs the jobs apart (hydra/launcher=local, slurm; runners/engine/launch.py) each job writes a store of its own
in its job directory, resuming from a copy of the store of record, and the multirun's end merges them
into the store of record first (runners/merge.py).

Only light modules are imported here at the top: torch, Triton, pandas and the kernel's module are
imported inside the job, after its workers have been started, so that the three processes import them
at once (and a spawned worker, which imports this module again, does not pay for them twice).
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
from typing import TYPE_CHECKING, Optional

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from runners.engine.launch import runs_jobs_apart
from runners.engine.process import ForkServer, WorkerProcess, ask_to_stop, stop_all

if TYPE_CHECKING:
    from runners.engine.scheduler import Scheduler
    from runners.engine.trials import Trial

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
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
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


def process_age_s() -> Optional[float]:
    """Seconds since this process started (Linux /proc, to 10 ms); None where that cannot be read."""
    try:
        with open("/proc/self/stat") as stat:
            start_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/uptime") as uptime:
            return float(uptime.read().split()[0]) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def job_store_paths(cfg: DictConfig) -> tuple[str, Optional[Path]]:
    """Where this job writes its rows, and the store it also resumes from (None: none). cfg.store, except
    in a multirun whose launcher runs the jobs apart, perhaps on several machines, where an SQLite file
    must not be shared: there a store of the job's own in its job directory (merged into cfg.store at
    the multirun's end), and the copy of cfg.store that the multirun's start left in the sweep directory."""
    from runners.merge import JOB_STORE, PRIOR_STORE

    hydra_conf = HydraConfig.get()
    if hydra_conf.mode != RunMode.MULTIRUN or not runs_jobs_apart(hydra_conf):
        return str(cfg.store), None
    prior = Path(hydra_conf.sweep.dir) / PRIOR_STORE
    return str(Path(hydra_conf.runtime.output_dir) / JOB_STORE), (prior if prior.is_file() else None)


def _check_stop_rule(group: str, rule: DictConfig, count_field: str) -> None:
    """The fields of a stopping rule (timing, finalists), each checked with its name and value."""
    from runners.engine.trials import ConfigError
    from runners.measure.timing import MIN_SAMPLES_FOR_INTERVAL

    count = rule[count_field]
    if count < MIN_SAMPLES_FOR_INTERVAL:
        raise ConfigError(f"{group}.{count_field}: {count} must be >= {MIN_SAMPLES_FOR_INTERVAL} "
                          "(fewer samples give no 95% interval of the median)")
    if not 0 < rule.rel_precision < 1:
        raise ConfigError(f"{group}.rel_precision: {rule.rel_precision} must be in (0, 1), "
                          "e.g. 0.005 for 0.5%")
    if rule.max_time_s <= 0 or rule.min_time_s < 0:
        raise ConfigError(f"{group}: max_time_s ({rule.max_time_s}) must be > 0 and min_time_s "
                          f"({rule.min_time_s}) >= 0")
    if rule.min_time_s > rule.max_time_s:
        raise ConfigError(f"{group}.min_time_s: {rule.min_time_s} is past max_time_s ({rule.max_time_s}): "
                          "every trial would stop at the cap")
    if "warmup_s" in rule and rule.warmup_s < 0:
        raise ConfigError(f"{group}.warmup_s: {rule.warmup_s} must be >= 0")
    if rule.repetitions < 1:
        raise ConfigError(f"{group}.repetitions: {rule.repetitions} must be >= 1")


def _check_export_settings(cfg: DictConfig, spec) -> None:
    """export.tolerance and the kernel's export.key, checked before the sweep rather than at its end."""
    from runners.engine.trials import ConfigError
    from runners.export import ExportError, check_key

    tolerance = cfg.export.tolerance
    if not 0 <= tolerance < 1:
        raise ConfigError(f"export.tolerance: {tolerance!r} must be a share in [0, 1), e.g. 0.03 for 3%")
    try:
        key = OmegaConf.to_container(cfg.export.key, resolve=True).get(spec.name) or {}
        check_key(key, tuple(spec.dims), spec.name, f"export.key.{spec.name}")
    except ExportError as error:
        raise ConfigError(str(error)) from error


def validate(cfg: DictConfig):
    """Everything that can be wrong with the input and that the schema does not catch at composition,
    checked before any launch. Returns (spec, trials, search, number of trial workers, compile workers)."""
    from runners.engine.search import Search
    from runners.engine.trials import TRITON_PROVIDER, ConfigError, load_spec, plan_trials

    _check_stop_rule("timing", cfg.timing, "min_samples")
    _check_stop_rule("finalists", cfg.finalists, "min_rounds")
    if cfg.finalists.top_k < 0 or cfg.finalists.tie_floor < 0:
        raise ConfigError(f"finalists: top_k ({cfg.finalists.top_k}) and tie_floor "
                          f"({cfg.finalists.tie_floor}) must be >= 0")
    if cfg.compile.timeout_s <= 0 or (cfg.compile.workers is not None and cfg.compile.workers < 0):
        raise ConfigError("compile: workers must be >= 0 (or null: one per CPU core) and timeout_s > 0")
    if cfg.search.budget_s is not None and cfg.search.budget_s <= 0:
        raise ConfigError(f"search.budget_s: {cfg.search.budget_s} must be > 0 (or null: no limit)")
    if cfg.backend == "interpret":
        os.environ["TRITON_INTERPRET"] = "1"  # before any kernel module is imported
    spec = load_spec(cfg.kernel.name, cfg.kernel.spec)
    _check_export_settings(cfg, spec)
    trials = plan_trials(spec, OmegaConf.to_container(cfg.kernel, resolve=True), cfg.backend.value)
    search = Search(cfg.search.method.value, trials, cfg.search.budget_trials, cfg.search.seed,
                    cfg.search.batch)
    available = 1
    if cfg.backend == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(NO_GPU_MESSAGE)
        available = torch.cuda.device_count()  # the GPUs CUDA_VISIBLE_DEVICES leaves visible
    workers = cfg.gpu_workers if cfg.gpu_workers is not None else available
    if workers < 1 or (cfg.backend == "cuda" and workers > available):
        raise ConfigError(f"gpu_workers: {workers} must be between 1 and the {available} visible GPU(s)")
    to_compile = sum(1 for t in trials if t.provider == TRITON_PROVIDER and not t.pruned_reason)
    compilers = 0
    if cfg.backend == "cuda":  # the interpreter has nothing to compile
        compilers = min((os.cpu_count() or 1) if cfg.compile.workers is None else cfg.compile.workers,
                        to_compile)
    return spec, trials, search, workers, compilers


def _is_throttled(result: dict, max_clock: Optional[int], ratio: float) -> Optional[bool]:
    clocks = [result.get("sm_clock_start_mhz"), result.get("sm_clock_end_mhz")]
    if max_clock is None or None in clocks:
        return None
    return min(clocks) < ratio * max_clock


def _wandb_config(trial: Trial, spec, row: dict, timing: dict) -> dict:
    """The trial's resolved config as W&B shows it: flat keys for parallel-coordinates panels."""
    return {
        "kernel": trial.kernel, "provider": trial.provider, "dtype": trial.dtype, "shape": list(trial.shape),
        **dict(zip(spec.dims, trial.shape)), **trial.config, "phase": row["phase"],
        "seed": row["seed"], "backend": row["backend"], "timing_method": row["timing_method"],
        "gpu_name": row["gpu_name"],
        "driver_version": row["driver_version"], "torch_version": row["torch_version"],
        "triton_version": row["triton_version"], "kernel_hash": row["kernel_hash"],
        "git_sha": row["git_sha"], "timing": timing,
    }


SUMMARY_KEYS = ("status", "message", "stop_reason", "p20_us", "p50_us", "p80_us", "min_us", "noise",
                "p50_precision", "n_samples", "event_p50_us", "kernels_per_call", "timers_disagree", "gbps",
                "tflops", "pct_copy_bw", "pct_matmul", "throttled", "rank", "tie", "chosen", "compile_s",
                "first_call_s", "measure_s", "repetitions", "rep_noise")
ENV_COLUMNS = ("backend", "timing_method", "gpu_name", "driver_version", "cuda_version", "torch_version",
               "triton_version", "python_version", "sm_count", "l2_bytes", "host", "sm_clock_max_mhz")


def start_early(cfg: DictConfig, timing: dict) -> tuple[Optional[WorkerProcess], Optional[ForkServer]]:
    """The first trial worker (GPU 0, or the interpreter) and the compile pool's fork server, started
    before this process validates the input: validation imports torch and the kernel's module, as each
    of them does first, so the three import at once instead of one after another (a kernel library's
    module may take seconds). Starting a worker launches nothing; a ConfigError stops both at once,
    unready (run_job). None for what is not needed or cannot be named yet (an unknown kernel)."""
    from runners.engine.compile_pool import fork_server, kernel_module
    from runners.engine.worker import trial_worker

    if kernel_module(cfg.kernel.name, cfg.kernel.spec) is None:
        return None, None
    gpu = trial_worker(cfg.backend.value, cfg.kernel.name, cfg.kernel.spec, timing, cfg.seed, 0)
    gpu.start()
    server = None
    if cfg.backend == "cuda" and cfg.compile.workers != 0:  # the interpreter has nothing to compile
        server = fork_server(cfg.kernel.name, cfg.kernel.spec)
        server.start()
    return gpu, server


def _start_workers(cfg: DictConfig, workers: int, compilers: int, timing: dict, first_batch: list[Trial],
                   early: tuple[Optional[WorkerProcess], Optional[ForkServer]]) -> Scheduler:
    """Start the trial workers start_early did not (each imports torch and triton) and return once all
    are ready; the pool compiles the first batch meanwhile, its workers forked from the fork server as
    soon as it has imported the kernel's module. Keeps the trial workers of the first GPU's model."""
    from runners.engine import compile_pool
    from runners.engine.scheduler import Scheduler, WorkerStartError
    from runners.engine.worker import trial_worker
    from runners.measure.device import nvml_compile_target

    first, server = early
    gpu = [first] if first is not None else []
    gpu += [trial_worker(cfg.backend.value, cfg.kernel.name, cfg.kernel.spec, timing, cfg.seed, i)
            for i in range(len(gpu), workers)]
    if not compilers and server is not None:
        server.stop()  # nothing of this job to compile
        server = None
    pool = []
    if compilers:
        pool = compile_pool.compile_workers(compilers, cfg.kernel.name, cfg.kernel.spec, server)
    target = nvml_compile_target() if cfg.backend == "cuda" else None
    scheduler = Scheduler(gpu, pool, cfg.trial_timeout_s, cfg.compile.timeout_s, target)
    try:
        scheduler.start(first_batch)
    except WorkerStartError:
        stop_all(gpu + pool)
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
    parts = info.get("start_seconds")
    if not parts:
        return ""
    return " (" + ", ".join(f"{name.replace('_', ' ')} {value:.1f}" for name, value in parts.items()) + ")"


def _server_note(server: Optional[ForkServer]) -> str:
    if server is None or not server.ready:
        return "the fork server is still importing"
    modules = ", ".join(server.info["preload"][-1:])  # the kernel's module; torch and triton before it
    failed = f"; could not import {', '.join(server.info['failed'])}" if server.info["failed"] else ""
    return (f"fork server {server.ready_s:.1f} s ({server.info['seconds']:.1f} importing torch, triton, "
            f"{modules}{failed})")


def run_job(cfg: DictConfig, sweep_id: str, output_dir: Path, finish: bool) -> dict:
    """Measure every trial of one job; returns the job summary (also written to output_dir/summary.json)."""
    from runners.results.store import DamagedStore, damage_of

    began = time.perf_counter()
    before_job_s = process_age_s() if HydraConfig.get().mode != RunMode.MULTIRUN else None
    timing = OmegaConf.to_container(cfg.timing, resolve=True)
    logger_conf = OmegaConf.to_container(cfg.logger, resolve=True, enum_to_str=True)
    store_path, prior = job_store_paths(cfg)
    damage = damage_of(store_path)
    if damage:  # before any worker starts; the file is left as it is
        raise DamagedStore(store_path, damage)
    early = start_early(cfg, timing)
    finisher = None

    def start_finisher() -> None:
        """Plots and the summary run: their process imports what they need while the job goes on."""
        nonlocal finisher
        from runners.results.finisher import Finisher
        from runners.results.wandb_logger import known_problem

        wandb_on = logger_conf["mode"] != "disabled" and not known_problem(logger_conf)
        finisher = Finisher.start(warm_wandb=wandb_on)

    # With the workers where every process importing at once has a core of its own (this one, the
    # trial worker, the fork server, the finisher); else once the workers are ready, not to slow their
    # start (2-core host, interpreter: start 1.5 s, 2.5 s with the finisher's imports beside it).
    importers = 3 + (early[1] is not None)
    if finish and (os.cpu_count() or 1) >= importers:
        start_finisher()
    try:
        spec, trials, search, workers, compilers = validate(cfg)
    except BaseException:
        for worker in early:  # unready: killed, not asked (a start takes seconds, a kill none)
            if worker is not None:
                worker.stop()
        if finisher is not None:
            finisher.abandon()
        raise

    from tqdm import tqdm

    from runners.engine.trials import TRITON_PROVIDER, kernel_source_hash
    from runners.results.store import ResultStore
    from runners.results.wandb_logger import TrialLogger

    store = logger = progress = scheduler = None
    statuses: dict[str, int] = {}
    measured_groups: set = set()  # (shape, dtype) where this job measured a config of the kernel
    reused_ids: list[int] = []
    phases: dict[str, float] = {}  # seconds: workers started, ceilings, trials, finalists, finish

    def lap(name: str) -> None:
        phases[name] = time.perf_counter() - began - sum(phases.values())

    try:
        store = ResultStore(store_path)
        print(f"sweep {sweep_id}: {spec.name}, {len(trials)} trials planned "
              f"({cfg.search.method.value} search); "
              f"starting {workers} {cfg.backend.value} worker(s) and {compilers} compile worker(s)")
        batch = search.next_batch()
        scheduler = _start_workers(cfg, workers, compilers, timing, batch, early)
        early = (None, None)  # the scheduler's now
        lap("start")
        if finish and finisher is None:
            start_finisher()
        env = dict(scheduler.gpu_workers[0].info, kernel_hash=kernel_source_hash(spec))
        if prior is not None:  # this GPU's ceilings, and the rows of this job's trials (none with force=true)
            keys = set() if cfg.force else {t.key for t in trials}
            copied = store.merge_from(prior, env=env, trial_keys=keys, immutable=True)
            print(f"{copied.kept} rows of these trials on this GPU and versions copied from {prior} (the "
                  f"store of record when the multirun started) into this job's store {store_path}")
        peaks = {}
        if cfg.backend == "cuda":
            peaks = store.peaks(env)
            if peaks is None:
                print(f"measuring the ceilings of {env['gpu_name']} (copy bandwidth, cuBLAS matmul); "
                      f"cached in {store_path}")
                peaks = scheduler.gpu_workers[0].request(("peaks",), cfg.trial_timeout_s, "measuring peaks")
                store.save_peaks(env, peaks, _now())
        lap("peaks")
        done = {} if cfg.force else store.measured(env)
        logger = TrialLogger(logger_conf, sweep_id)
        common = {"sweep_id": sweep_id, "seed": cfg.seed, "git_sha": git_sha(),
                  "kernel_hash": env["kernel_hash"]}
        progress = tqdm(total=0, unit="trial", desc=spec.name, dynamic_ncols=True, mininterval=1.0)

        def record(worker, trial: Trial, result: dict, phase: str = "screen") -> None:
            info = (worker.info if worker is not None and worker.info else None) or env
            row = {**common, **{k: info[k] for k in ENV_COLUMNS}, "trial_key": trial.key,
                   "kernel": trial.kernel, "provider": trial.provider, "shape": trial.shape,
                   "dtype": trial.dtype, "config": trial.config, "phase": phase, **result,
                   "throttled": _is_throttled(result, info["sm_clock_max_mhz"], cfg.timing.throttle_ratio),
                   "timestamp": _now()}
            store.append(row)
            statuses[row["status"]] = statuses.get(row["status"], 0) + 1
            if row["status"] != "pruned":
                label = trial.label + (" (finalist)" if phase == "final" else "")
                logger.log(trial.kernel, label, _wandb_config(trial, spec, row, timing),
                           {k: row.get(k) for k in SUMMARY_KEYS})
            if phase == "screen":
                search.tell(trial, result)
                if row["status"] == "ok" and trial.provider == TRITON_PROVIDER:
                    measured_groups.add((trial.shape, trial.dtype))
                progress.update()
                progress.set_postfix_str(f"{row['status']} {row.get('p50_us') or 0:.1f}us", refresh=False)

        scheduler.set_device(env["compile_target"], env["max_shared_bytes"], peaks)
        budget_s = cfg.search.budget_s
        deadline = time.monotonic() + budget_s if budget_s else float("inf")
        while batch and time.monotonic() < deadline:
            reused = [t for t in batch if t.key in done]
            outcomes = store.outcomes(done[t.key] for t in reused)
            for trial in reused:
                search.tell(trial, outcomes[done[trial.key]])
            reused_ids += [done[t.key] for t in reused]
            todo = [t for t in batch if t.key not in done]
            progress.total += len(todo)
            progress.refresh()
            scheduler.run(todo, record, deadline)
            batch = search.next_batch() if time.monotonic() < deadline else []
        compile_note = _compile_note(scheduler)
        scheduler.stop_compilers()  # the finalists need no compile
        progress.close()
        store.adopt(reused_ids, sweep_id)
        lap("trials")
        budget_note = (f"; search budget of {budget_s:g} s reached, {scheduler.not_run} trials not run"
                       if scheduler.not_run else "")
        print(f"{len(reused_ids)} trials reused from the store for this GPU and versions "
              "(force=true re-measures)"
              + budget_note + compile_note)
        finalist_groups = _run_finalists(cfg, store, sweep_id, scheduler, record, trials, measured_groups)
        lap("finalists")
    except BaseException:
        if finisher is not None:
            finisher.abandon()
        if progress is not None:
            progress.close()
        for worker in early:
            if worker is not None:
                worker.stop()
        if scheduler is not None:
            stop_all(scheduler.gpu_workers + scheduler.compilers)
        if logger is not None:
            logger.close()
        if store is not None:
            store.close()
        raise
    store.close()
    # Told to stop now, reaped at the end: a GPU worker takes up to a second to exit with CUDA loaded,
    # and the finish does not need it.
    ask_to_stop(scheduler.gpu_workers)
    summary = {"sweep_id": sweep_id, "kernel": spec.name, "planned": len(trials), "reused": len(reused_ids),
               "statuses": statuses, "not_run": scheduler.not_run, "finalist_groups": finalist_groups,
               "gpu_workers": len(scheduler.gpu_workers), "compile_workers": compilers,
               "worker_restarts": sum(w.starts - 1 for w in scheduler.gpu_workers)}
    try:
        if finish:
            summary.update(finish_sweep(cfg, sweep_id, output_dir, finisher, logger))
    except BaseException:
        if finisher is not None:
            finisher.abandon()
        raise
    finally:
        logger.close()  # at once when finish_sweep closed it
        stop_all(scheduler.gpu_workers)
    summary.update(wandb_runs=logger.runs, wandb_seconds=logger.seconds)
    lap("finish")
    summary["wall_seconds"] = time.perf_counter() - began
    summary["phase_seconds"] = phases
    summary["before_job_seconds"] = before_job_s
    logging_seconds = summary["wandb_seconds"] + (summary.get("wandb_summary_seconds") or 0.0)
    share = 100 * logging_seconds / summary["wall_seconds"]
    print(f"wall time {summary['wall_seconds']:.1f} s ("
          + ", ".join(f"{name} {seconds:.1f}" for name, seconds in phases.items())
          + f"); W&B logging {logging_seconds:.2f} s of it ({share:.1f}%)")
    if "finish_seconds" in summary or before_job_s is not None:
        parts = summary.get("finish_seconds", {})
        print("finish " + ", ".join(f"{name.replace('_', ' ')} {value:.2f}" for name, value in parts.items())
              + (f"; before the job {before_job_s:.1f} s (Python, imports, Hydra's composition)"
                 if before_job_s is not None else ""))
    (output_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def _compile_note(scheduler: Scheduler) -> str:
    """Who compiled the job's configs: the pool (forked workers, median seconds) and the GPU workers."""
    import statistics

    forked = sum(w.starts > 0 for w in scheduler.compilers)
    if not scheduler.compilers:
        return ""
    pool, gpu = scheduler.pool_compile_s, scheduler.gpu_compile_s
    return (f"; compiled: {len(pool)} in the pool ({forked} of {len(scheduler.compilers)} compile workers "
            "forked" + (f", median {statistics.median(pool):.2f} s" if pool else "")
            + f"), {len(scheduler.gpu_compiled)} by the GPU workers themselves"
            + (f" (median first call {statistics.median(gpu):.2f} s)" if gpu else ""))


def _run_finalists(cfg, store, sweep_id: str, scheduler: Scheduler, record, trials: list[Trial],
                   measured_groups: set) -> int:
    """Re-time the top_k configs of every (shape, dtype) this job measured, round-robin with the
    baselines that passed there (so that ours and theirs see the same clocks: screened minutes apart, a
    matmul finalist ran at 1335-1815 MHz on an H200 while cuBLAS had screened at 1980); returns how
    many groups."""
    from runners.engine.finalists import decide
    from runners.engine.trials import TRITON_PROVIDER

    top_k = cfg.finalists.top_k
    if top_k < 2 or not measured_groups:
        return 0
    by_key = {t.key: t for t in trials}
    frame = store.load(sweep_id=sweep_id, kernel=trials[0].kernel)
    ok = frame[frame["status"] == "ok"].sort_values("id").groupby("trial_key").tail(1)  # a trial's newest row
    ours = ok[ok["provider"] == TRITON_PROVIDER]
    groups = []
    for (shape, dtype), rows in ours.groupby(["shape", "dtype"], sort=False):
        finalists = [by_key[k] for k in rows.nsmallest(top_k, "p50_us")["trial_key"] if k in by_key]
        if len(finalists) >= 2 and (finalists[0].shape, finalists[0].dtype) in measured_groups:
            beside = ok[(ok["provider"] != TRITON_PROVIDER) & (ok["shape"] == shape) & (ok["dtype"] == dtype)]
            groups.append(finalists + [by_key[k] for k in beside["trial_key"] if k in by_key])
    if not groups:
        return 0
    final = cfg.finalists
    rule = {"min_samples": final.min_rounds, "min_time_s": final.min_time_s,
            "rel_precision": final.rel_precision, "max_time_s": final.max_time_s,
            "repetitions": final.repetitions}
    print(f"re-timing the top {top_k} of {len(groups)} (shape, dtype) group(s) round-robin, "
          "with their baselines")

    def on_result(worker, group: list[Trial], results: list[dict]) -> None:
        where = f"{group[0].kernel} {list(group[0].shape)} {group[0].dtype}"
        if len(results) != len(group):
            print(f"warning: finalists of {where} failed ({results[0]['status']}: {results[0]['message']}); "
                  "the screening results stand")
            return
        finalists = [(t, r) for t, r in zip(group, results) if t.provider == TRITON_PROVIDER]
        decisions = decide([t.config for t, _ in finalists], [r["samples_us"] for _, r in finalists],
                           final.tie_floor)
        for (trial, result), decision in zip(finalists, decisions):
            record(worker, trial, {**result, **decision}, phase="final")
        for trial, result in zip(group, results):
            if trial.provider != TRITON_PROVIDER:
                record(worker, trial,
                       {**result, "message": "baseline re-timed round-robin with the finalists"},
                       phase="final")
        chosen = next(t for (t, _), d in zip(finalists, decisions) if d["chosen"])
        tied = sum(d["tie"] for d in decisions)
        print(f"finalists {where}: chosen {chosen.config} ({tied} of {len(finalists)} tied with the fastest)")

    scheduler.run_finalists(groups, rule, on_result)
    return len(groups)


def finish_sweep(cfg: DictConfig, sweep_id: str, output_dir: Path, finisher=None, logger=None) -> dict:
    """After the last trial of a sweep. Here, the results: parquet, table, export. Beside them, in the
    finishing process (runners/results/finisher.py; started now unless the job started it): the plots,
    drawn while this process writes the results, then the W&B summary run, once the trial runs are written
    (`logger.close()`, whose warnings decide whether there is a summary run); each waited for a bounded
    time. Returns what was written, and `finish_seconds`: where the finish's seconds went, in the order
    they were spent."""
    from runners.export import ExportError, export_kernel, settings_from_config
    from runners.results.finisher import Finisher
    from runners.results.report import best_table
    from runners.results.store import ResultStore, write_parquet
    from runners.results.wandb_logger import known_problem

    seconds: dict[str, float] = {}
    clock = [time.perf_counter()]

    def lap(name: str) -> None:
        now = time.perf_counter()
        seconds[name], clock[0] = now - clock[0], now

    logger_conf = OmegaConf.to_container(cfg.logger, resolve=True, enum_to_str=True)
    wanted = logger_conf["mode"] != "disabled"
    if finisher is None:
        finisher = Finisher.start(warm_wandb=wanted and known_problem(logger_conf) is None)
    finisher.draw(cfg.store, sweep_id, output_dir)
    store = ResultStore(cfg.store)
    frame = store.load(sweep_id=sweep_id)
    store.close()
    lap("load")
    parquet = write_parquet(frame, output_dir / "results.parquet")
    lap("parquet")
    print(best_table(frame))
    lap("table")
    exports = []
    for kernel in frame["kernel"].unique():
        try:
            exports += export_kernel(frame, kernel, cfg.export_dir, **settings_from_config(cfg, kernel))
        except ExportError as error:
            print(f"export skipped: {error}")
    lap("export")
    print(f"results: {cfg.store} (sweep {sweep_id}), {parquet}")
    for path in exports:
        print(f"exported: {path}")
    if logger is not None and logger.enabled:
        logger.close()
        lap("W&B_trial_runs")
    summary_wanted = wanted and known_problem(logger_conf) is None
    finisher.write_summary(logger_conf if summary_wanted else None, exports)
    done = finisher.wait()
    lap("plots_and_W&B_summary")
    if logger_conf["mode"] == "offline" and known_problem(logger_conf) is None:
        print(f"W&B offline runs in {logger_conf['dir']}/wandb; upload with: "
              f"wandb sync {logger_conf['dir']}/wandb/offline-run-*")
    return {"parquet": str(parquet), "exports": [str(p) for p in exports],
            "plots": [str(p) for p in done["plots"]], "wandb_summary_seconds": done["wandb_summary_seconds"],
            "finish_in_background": done["background"], "finish_seconds": seconds}


class SweepEndCallback(Callback):
    """At the end of a multirun: one table, parquet file, export and W&B summary for all its jobs; exit 1
    if a job failed. Where the launcher runs the jobs apart (runners/engine/launch.py), each with a store of
    its own: at the start, the rows that an earlier run into the same sweep directory left in its job stores
    are merged into the store of record (its end may never have come), which is then copied into the sweep
    directory for the jobs to resume from; at the end, the job stores are merged into it first."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        from runners.merge import gather, write_prior
        from runners.results.store import DamagedStore, damage_of

        damage = damage_of(config.store)
        if damage:  # every job would stop on it: none is started
            print(f"error: {DamagedStore(config.store, damage)}", file=sys.stderr)
            sys.exit(2)
        if not runs_jobs_apart(config.hydra):
            return
        sweep_dir = Path(config.hydra.sweep.dir)
        gather(sweep_dir, config.store)
        prior = write_prior(config.store, sweep_dir)
        if prior is not None:
            print(f"the jobs resume from {prior}, a copy of {config.store}")

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        from runners.merge import PRIOR_STORE, gather

        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_id = str(config.sweep_id) if config.sweep_id else sweep_dir.name
        unmerged = []
        if runs_jobs_apart(config.hydra):
            unmerged = gather(sweep_dir, config.store)
            (sweep_dir / PRIOR_STORE).unlink(missing_ok=True)  # a copy of the store of record, used up
        finish_sweep(config, sweep_id, sweep_dir)
        failed = [path.parent.name for path in sorted(sweep_dir.glob("*/summary.json"))
                  if "error" in json.loads(path.read_text())]
        if failed:
            print(f"error: {len(failed)} job(s) of the multirun failed: {', '.join(failed)} "
                  f"(messages above and in {sweep_dir}/<job>/summary.json)", file=sys.stderr)
        if unmerged:
            print(f"error: {len(unmerged)} job store(s) could not be merged into {config.store}: "
                  f"{', '.join(unmerged)}", file=sys.stderr)
        if failed or unmerged:
            sys.exit(1)


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> Optional[dict]:
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    sweep_id = sweep_id_of(cfg)
    output_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        return run_job(cfg, sweep_id, output_dir, finish=not multirun)
    except Exception as error:  # bad input; or any other failure of one job of a multirun: keep the others'
        from runners.engine.trials import ConfigError  # (imported by the job: torch and triton are in by now)
        from runners.results.store import DamagedStore

        if isinstance(error, (ConfigError, DamagedStore)):
            print(f"error: {error}", file=sys.stderr)
            if not multirun:
                sys.exit(2)
        elif not multirun:
            raise
        else:
            traceback.print_exc()
        failure = (str(error) if isinstance(error, (ConfigError, DamagedStore))
                   else f"{type(error).__name__}: {error}")
    # The other jobs go on; the end-of-sweep callback still writes the sweep's results, reports this
    # job and exits 1.
    (output_dir / "summary.json").write_text(json.dumps({"sweep_id": sweep_id, "error": failure}))
    return None


def exit_now() -> None:
    """End the process as Python would, less its teardown of the modules (torch, Triton and pandas take
    0.47 s to tear down on this CPU-only host, measured: a process that imports them exits in 0.47 s,
    0.02 s through os._exit), which does nothing for a sweep that has returned: its store and files
    are closed, its workers stopped, the plots' and summary run's process lives on its own. What is
    registered to run at exit still runs: multiprocessing's clean-up (without it Python's resource
    tracker reports the W&B queues' semaphores as leaked), the flush of Hydra's job log."""
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    from runners.engine.schema import register_configs

    register_configs()
    main()  # an error or a failed multirun leaves through SystemExit, with its status, never reaching this
    exit_now()

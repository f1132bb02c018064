"""One job of a sweep, in phases: start -> ceilings -> trials -> finalists -> finish, each timed.

- start: the trial workers and the compile pool start while the config is validated (runners/engine/
  plan.py: a bad input stops them before any launch, naming the field).
- ceilings: this GPU's measured copy bandwidth and matmul rate, from the store or measured once.
- trials: the search's configs and the baselines, reused from the store or compiled, checked, timed and
  recorded (runners/engine/scheduler.py). finalists: the top configs re-timed round-robin.
- finish: the outputs (runners/outputs/); with verbose=true, where the time went.
One ExitStack closes what the job opened, whatever ends it. The engine imports nothing of runners/outputs/
(tests/project/test_layout.py): the command hands the job its store (`open_store`) and outputs
(runners/sweep.py).
"""
from __future__ import annotations

import contextlib
import datetime
import functools
import os
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, Optional

from omegaconf import DictConfig

from triton_sweep.engine import job_report
from triton_sweep.engine.process import ask_to_stop, stop_all
from triton_sweep.model.columns import DEVICE_COLUMNS
from triton_sweep.model.trial import TRITON_PROVIDER, Trial
from triton_sweep.measure import check
from triton_sweep.measure.neighbours import watch_gpus
from triton_sweep.measure.stop_rule import StopRule

SPENT = ("measure_s", "first_call_s", "compile_s")  # a row's seconds that time_spent() sums by phase


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


def git_sha() -> Optional[str]:
    """HEAD of the repository the runner lives in, '+dirty' when it has uncommitted changes."""
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None  # not a git checkout (e.g. a copied tree)
    return sha + ("+dirty" if dirty else "")


def _is_throttled(result: dict, max_clock: Optional[int], ratio: float) -> Optional[bool]:
    clocks = [result.get("sm_clock_start_mhz"), result.get("sm_clock_end_mhz")]
    if max_clock is None or None in clocks:
        return None
    return min(clocks) < ratio * max_clock


class Job:
    """One job (the module docstring). `run()` measures every trial and returns the job's summary, also
    written to output_dir/summary.json."""

    def __init__(self, cfg: DictConfig, sweep_id: str, output_dir: Path, store_path: str,
                 prior: Optional[Path], open_store: Callable, outputs, before_job_s: Optional[float] = None,
                 trials: Optional[list] = None):
        self.cfg, self.sweep_id, self.output_dir = cfg, sweep_id, Path(output_dir)
        self.given_trials = trials  # these exact trials instead of the config's grid (revalidation)
        self.store_path, self.prior, self.open_store = store_path, prior, open_store
        self.outputs, self.before_job_s = outputs, before_job_s
        self.began = time.perf_counter()
        self.phases: dict[str, float] = {}  # seconds: start, peaks, trials, finalists, finish
        self.single = True  # a job of its own; run(finish=False): one job of a multirun
        self.statuses: dict[str, int] = {}
        # phase -> seconds its rows report: in the timer's loops (kernels, L2 flushes, holds), in first
        # calls (load, or compile where the pool did not), in the compile pool (summed over processes)
        self.spent: dict[str, dict[str, float]] = {}
        self.final_loops: dict[tuple, float] = {}  # (shape, dtype) -> seconds of its finalists' loop
        self.measured_groups: set = set()  # (shape, dtype) where this job measured a config of the kernel
        self.reused_ids: list[int] = []
        self.kept = 0  # the planned trials the store held at the start of the trials phase
        # the first trial worker, the fork server and the side worker, until the scheduler takes them
        self.early: list = [None, None, None]
        # the locks of the GPUs with a side worker, by index (runners/engine/worker.py: GpuLock)
        self.lock_files: list[str] = []
        self.plan = self.store = self.scheduler = self.progress = self.env = None
        self.peaks: dict = {}
        self.batch: list = []
        self.common: dict = {}  # what every row of the job carries (sweep, seed, git sha, kernel hash)
        self.watch = None  # the other processes on the job's GPUs (runners/measure/neighbours.py)

    def lap(self, name: str) -> None:
        self.phases[name] = time.perf_counter() - self.began - sum(self.phases.values())

    def run(self, finish: bool) -> dict:
        self.single = finish  # a multirun's jobs are finished together, at its end
        with ExitStack() as cleanup:
            cleanup.callback(self._stop_workers)
            cleanup.callback(self.outputs.close)  # the trial-time work (W&B trial runs); once only
            self.start(cleanup)
            self.lap("start")
            self.ceilings()
            self.lap("peaks")
            self.trials()
            self.lap("trials")
            finalist_groups = self.finalists()
            self.lap("finalists")
            self._stop_watch()  # nothing is measured after the finalists
            self.store.close()
            # Told to stop now, reaped at the end: a GPU worker takes up to a second to exit with CUDA
            # loaded, and the finish does not need it.
            ask_to_stop(self.scheduler.on_gpu)
            summary = job_report.summary(self, finalist_groups)
            if finish:
                summary.update(self.outputs.finish(self.cfg, self.sweep_id, self.output_dir))
        summary.update(job_report.outputs_seconds(self.outputs, summary))
        self.lap("finish")
        return job_report.report(self, summary)

    def _stop_watch(self) -> None:
        if self.watch is not None:
            self.watch.stop()

    def _stop_workers(self) -> None:
        for worker in self.early:  # unready ones are killed, not asked (a start takes seconds, a kill none)
            if worker is not None:
                worker.stop()
        if self.scheduler is not None:
            stop_all(self.scheduler.on_gpu + self.scheduler.placement.compilers)
        for lock_file in self.lock_files:
            with contextlib.suppress(FileNotFoundError):  # a cleaned temp dir: nothing left to remove
                os.unlink(lock_file)
        self.lock_files = []

    # --- start ---------------------------------------------------------------------------------------

    def start(self, cleanup: ExitStack) -> None:
        from triton_sweep.model.plan import stop_rules, validate
        from triton_sweep.engine.side import side_workers
        from triton_sweep.engine.startup import gpu_lock_file, plan_line, start_early, start_workers
        from triton_sweep.engine.trial_run import compiles

        cfg = self.cfg
        self.outputs.begin(cfg)
        screening, _ = stop_rules(cfg)  # a wrong field stops the job before any worker starts
        rule = StopRule.of(screening)
        first_lock = gpu_lock_file(cfg)
        self.lock_files = [first_lock] if first_lock is not None else []
        self.early = start_early(cfg, rule, first_lock)
        self.plan = validate(cfg, self.given_trials)
        self.outputs.check(cfg, self.plan.spec)  # their settings (the export's), before any launch too
        compiling = functools.partial(compiles, self.plan.spec)
        sides = side_workers(self.early[2], self.plan.trials, compiling, self.plan.workers)
        self.early[2] = self.early[2] if sides else None
        self.lock_files += [gpu_lock_file(cfg, index) for index in range(1, sides)]
        # A damaged or unwritable store stops the job here, before the trial workers' work begins.
        self.store = self.open_store(self.store_path)
        cleanup.callback(self.store.close)
        plan = self.plan
        print(plan_line(cfg, self.sweep_id, plan, sides))
        self.batch = plan.search.ask()
        self.scheduler = start_workers(cfg, plan.workers, plan.compilers, rule, self.batch, self.early,
                                       compiling, self.lock_files)
        self.early = [None, None, None]  # the scheduler's now
        if cfg.backend == "cuda":
            self.watch = watch_gpus([worker.info["gpu_uuid"] for worker in self.scheduler.gpu_workers],
                                    lambda: {w.process.pid for w in self.scheduler.on_gpu if w.process})
            cleanup.callback(self._stop_watch)

    # --- ceilings ------------------------------------------------------------------------------------

    def ceilings(self) -> None:
        """The environment every row carries, the prior store's rows (jobs run apart), and the device's
        measured ceilings (from the store, else measured now and kept)."""
        from triton_sweep.model.spec_sources import kernel_source_hash

        cfg, store = self.cfg, self.store
        info = self.scheduler.gpu_workers[0].info
        self.env = env = dict(info, kernel_hash=kernel_source_hash(self.plan.spec))
        if self.prior is not None:  # this GPU's ceilings, and the rows of this job's trials (none with force)
            keys = set() if cfg.force else {t.key for t in self.plan.trials}
            copied = store.merge_from(self.prior, env=env, trial_keys=keys, immutable=True)
            print(f"{copied.kept} rows of these trials on this GPU and versions copied from {self.prior} "
                  f"(the store of record when the multirun started) into this job's store {self.store_path}")
        if cfg.backend == "cuda":
            self.peaks = store.peaks(env)
            if self.peaks is None:
                print(f"measuring the ceilings of {env['gpu_name']} (copy bandwidth, cuBLAS matmul); "
                      f"cached in {self.store_path}")
                began = time.monotonic()
                self.peaks = self.scheduler.measure_peaks(cfg.trial_timeout_s)
                beside = self.watch.busy(env["gpu_uuid"], began, time.monotonic()) if self.watch else None
                if beside:
                    print(f"note: the ceilings were measured while {', '.join(map(str, beside))} ran kernels "
                          "on the GPU: this job's rows use them, the store does not keep them")
                else:
                    store.save_peaks(env, self.peaks, now())

    # --- trials --------------------------------------------------------------------------------------

    def record(self, worker, trial: Trial, result: dict, phase: str = "screen") -> None:
        """A trial's outcome as a row: into the store, to the outputs, and told to the search."""
        row = self._row(worker, trial, result, phase)
        self.store.append(row)
        self._recorded(trial, row, result, phase)

    def record_pruned(self, trials: list[Trial]) -> None:
        """The trials the kernel's constraints rule out, recorded with their reasons in one transaction
        before the others are handed out: committed one at a time, softmax_export's 4648 held every GPU
        idle for the first 1.5-1.7 s of its trials phase on an H200 host (BENCHMARKS.md)."""
        results = [{"status": check.STATUS_PRUNED, "message": trial.pruned_reason} for trial in trials]
        rows = [self._row(None, trial, result, "screen") for trial, result in zip(trials, results)]
        self.store.append_many(rows)
        for trial, row, result in zip(trials, rows, results):
            self._recorded(trial, row, result, "screen")

    def _row(self, worker, trial: Trial, result: dict, phase: str) -> dict:
        # a row no GPU measured (pruned, not compiled) has the model's description and names no GPU
        info = (worker.info if worker is not None and worker.info else None) or {**self.env, "gpu_uuid": None}
        shared = (self.watch.row_shared(info["gpu_uuid"], result.get("measure_s") or 0.0, worker.name)
                  if self.watch is not None and worker is not None else None)
        return {**self.common, **{k: info[k] for k in DEVICE_COLUMNS}, "trial_key": trial.key,
                "kernel": trial.kernel, "provider": trial.provider, "shape": trial.shape,
                "dtype": trial.dtype, "config": trial.config, "phase": phase,
                "planned_configs": self.plan.search.planned(trial), **result,
                "throttled": _is_throttled(result, info["sm_clock_max_mhz"], self.cfg.timing.throttle_ratio),
                "gpu_shared": shared, "timestamp": now()}

    def _recorded(self, trial: Trial, row: dict, result: dict, phase: str) -> None:
        """What follows a row's commit: the job's counts, the outputs, the search, the progress bar."""
        self.statuses[row["status"]] = self.statuses.get(row["status"], 0) + 1
        spent = self.spent.setdefault(phase, dict.fromkeys(SPENT, 0.0))
        for name in SPENT:
            spent[name] += result.get(name) or 0.0
        if phase == "final":  # a group's finalists are timed in one loop: each row reports all of it
            group = (trial.shape, trial.dtype)
            self.final_loops[group] = max(self.final_loops.get(group, 0.0), result.get("measure_s") or 0.0)
        self.outputs.row(trial, row, trial.label + (" (finalist)" if phase == "final" else ""))
        if phase == "screen":
            self.plan.search.tell(trial, result)
            if row["status"] == "ok" and trial.provider == TRITON_PROVIDER:
                self.measured_groups.add((trial.shape, trial.dtype))
            self.progress.update()
            self.progress.set_postfix_str(f"{row['status']} {row.get('p50_us') or 0:.1f}us", refresh=False)

    def trials(self) -> None:
        """Every trial the search hands out, batch by batch, until none is left or the budget is spent;
        trials the store holds for this GPU and versions are reused (force=true re-measures)."""
        from tqdm import tqdm

        from triton_sweep.engine.startup import compile_note

        cfg, store, scheduler, search = self.cfg, self.store, self.scheduler, self.plan.search
        done = {} if cfg.force else store.measured(self.env)
        planned, self.kept, resuming = job_report.to_measure(self, done)
        if resuming:
            print(resuming)
        self.outputs.start(cfg, self.sweep_id, tuple(self.plan.spec.dims), planned, not self.single)
        self.common = {"sweep_id": self.sweep_id, "seed": cfg.seed, "git_sha": git_sha(),
                       "kernel_hash": self.env["kernel_hash"]}
        self.progress = tqdm(total=0, unit="trial", desc=self.plan.spec.name, dynamic_ncols=True,
                             mininterval=1.0)
        scheduler.set_device(self.env["compile_target"], self.env["max_shared_bytes"], self.peaks)
        budget_s = cfg.search.budget_s
        deadline = time.monotonic() + budget_s if budget_s else float("inf")

        def more() -> list[Trial]:  # a pipelined search is asked as its results come
            return _to_run(self, search.ask(), done) if time.monotonic() < deadline else []

        batch = self.batch
        try:
            while batch and time.monotonic() < deadline:
                scheduler.run(_to_run(self, batch, done), self.record, deadline,
                              more if search.pipelined else None)
                batch = search.ask() if time.monotonic() < deadline else []
        finally:
            self.progress.close()
        note = compile_note(scheduler)
        scheduler.stop_compilers()  # the finalists need no compile
        store.adopt(self.reused_ids, self.sweep_id)
        said = job_report.trials_said(self, budget_s, note)
        if said:
            print(said)

    # --- finalists -----------------------------------------------------------------------------------

    def finalists(self) -> int:
        """Re-time the top_k configs of every (shape, dtype) this job measured, round-robin with the
        baselines that passed there (so that ours and theirs see the same clocks: screened minutes apart,
        a matmul finalist ran at 1335-1815 MHz on an H200 while cuBLAS had screened at 1980); returns how
        many groups."""
        from triton_sweep.model.finalists import finalist_groups, group_rule, on_finalists

        final = self.cfg.finalists
        groups = finalist_groups(self.store.load(sweep_id=self.sweep_id, kernel=self.plan.trials[0].kernel),
                                 self.plan.trials, self.measured_groups, final.top_k, final.screen_margin)
        if not groups:
            return 0
        uncut = StopRule.of(final)
        rules = [group_rule(uncut, g.screening_s, final.of_screening) for g in groups]
        print(job_report.finalists_said(final, groups, rules, self.cfg.get("verbose")))
        self.scheduler.run_finalists([g.trials for g in groups], rules, final.tie_floor,
                                     on_finalists(self.record, final.tie_floor))
        return len(groups)


def _to_run(job: Job, batch: list[Trial], done: dict) -> list[Trial]:
    """Of a batch the search handed out: those the store holds (`done`: trial key -> row id) told to
    it and reused, the pruned recorded; the rest, to run."""
    reused = [t for t in batch if t.key in done]
    outcomes = job.store.outcomes(done[t.key] for t in reused)
    for trial in reused:
        job.plan.search.tell(trial, outcomes[done[trial.key]])
    job.reused_ids += [done[t.key] for t in reused]
    todo = [t for t in batch if t.key not in done]
    job.progress.total += len(todo)
    job.progress.refresh()
    job.record_pruned([t for t in todo if t.pruned_reason])
    return [t for t in todo if not t.pruned_reason]

"""Weights & Biases: the sweep's run at its end (every trial in a table, charts, the best config of every
shape as summary keys), written once the export and the plots exist, and, where `logger.runs` says so, a
run per trial while the sweep runs, a finalist's re-timing in its trial's run (trial_runs.py). Every run is
written by a process of its own (processes.py; logger.py says how W&B is kept from ever costing a result),
with wandb's folders in the runs' folder, <logger.dir>/wandb. Its settings are the config's `logger` group
(`logger.mode=offline|online|disabled`, `logger.runs=trial|sweep|auto`)."""
from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Optional

from omegaconf import OmegaConf

from triton_sweep.model.columns import WANDB_CONFIG, WANDB_SUMMARY
from triton_sweep.outputs.output import Finished, Output


class Wandb(Output):
    background = True  # the sweep's run, which carries the exported files and the plots

    def __init__(self, logger: dict):
        super().__init__(logger=logger)
        self.conf = logger
        self.trials = None  # the trial runs' logger, on the sweep's side
        self.trial_runs = None  # which rows make each trial's run, and when it is sent (TrialRuns)
        self.summary_process = None  # the sweep's run's logging process, started with the job (start)
        self._checking: Optional[threading.Thread] = None  # begin's check of W&B, which start waits for
        self.runs = None  # "trial" or "sweep", decided at the job's start (logger.runs)
        self.closed = False
        self.dims: tuple = ()
        self.timing: dict = {}

    @property
    def wanted(self) -> bool:
        return self.conf["mode"] != "disabled"

    def begin(self, cfg) -> None:
        """Begin `start`'s check of W&B (wandb's import in an interpreter of its own: 0.5-0.8 s) on a
        thread, which runs while the job validates its input and its workers start: made in `start`, it
        held the GPU idle before the first trial for as long; begun after the validation (the kernel's
        import), it still did, 0.5-0.57 s on an H100 host (BENCHMARKS.md)."""
        from triton_sweep.outputs.wandb.logger import wandb_problem

        if self.wanted:
            self._checking = threading.Thread(target=wandb_problem, args=(self.conf,), name="wandb check",
                                              daemon=True)
            self._checking.start()

    def start(self, cfg, sweep_id: str, dims: tuple) -> None:
        from triton_sweep.outputs.wandb.logger import TrialLogger, known_problem, runs_of, warn_if_unusable
        from triton_sweep.outputs.wandb.summary import start_process
        from triton_sweep.outputs.wandb.trial_runs import TrialRuns

        self.dims, self.timing = dims, OmegaConf.to_container(cfg.timing, resolve=True)
        if not self.wanted:
            return
        if self._checking is not None:
            self._checking.join()  # its finding is remembered (wandb_problem), and said below
        self.runs = runs_of(self.conf, self.planned, self.multirun)
        if self.runs == "trial":
            self.trials = TrialLogger(self.conf, sweep_id)
            self.trial_runs = TrialRuns(OmegaConf.select(cfg, "finalists.top_k", default=0), self.trials.log)
        else:
            warn_if_unusable(self.conf)  # before the first trial, as the trial runs' logger does
        # The job writes the sweep's run itself (not a multirun's job, nor a background finish): its
        # process starts now, so that its interpreter and wandb's import cost the finish nothing.
        if not self.multirun and not cfg.get("finish_in_background") and known_problem(self.conf) is None:
            self.summary_process = start_process(self.conf)

    def row(self, trial, row: dict, label: str) -> None:
        if row["status"] == "pruned" or self.trial_runs is None:
            return
        # The trial's resolved config as W&B shows it: flat keys for parallel-coordinates panels.
        config = {**{name: row[name] for name in WANDB_CONFIG}, "shape": list(trial.shape),
                  **dict(zip(self.dims, trial.shape)), **trial.config, "timing": self.timing}
        summary = {name: row.get(name) for name in WANDB_SUMMARY}
        self.trial_runs.add(trial, label, config, summary, row["phase"])

    def close(self) -> None:
        from triton_sweep.outputs.wandb.logger import known_problem

        if self.runs is None or self.closed:
            return
        self.closed = True
        if self.trials is not None:
            self.trial_runs.close()  # the runs held for a re-timing that did not come
            self.trials.close()
        if self.trials is not None and self.trials.enabled and known_problem(self.conf) is None:
            self._sync_hint()

    def _sync_hint(self) -> None:
        if self.conf["mode"] == "offline":
            print(f"W&B offline runs in {self.conf['dir']}/wandb; upload with: "
                  f"wandb sync {self.conf['dir']}/wandb/offline-run-*")

    def handover(self) -> dict:
        """Whether the sweep's run is to be made (not when logging is off or known to fail here), and
        offline (why: the trial runs found the server out of reach), how the job logged, and its dims (the
        background finish never starts a job)."""
        from triton_sweep.outputs.wandb.logger import known_problem, unreachable

        return {"summary": self.wanted and known_problem(self.conf) is None, "runs": self.runs,
                "dims": list(self.dims), "timing": self.timing, "offline": unreachable(self.conf)}

    def write(self, done: Finished, handover: Optional[dict] = None) -> list[Path]:
        from triton_sweep.outputs.wandb.summary import log_sweep_summary

        process, self.summary_process = self.summary_process, None
        if not (handover or {}).get("summary", self.wanted):
            if process is not None:
                process.stop()
            return []
        from triton_sweep.export.settings import kernel_dims

        handover = handover or {}
        exports = done.files.get("export", [])
        images = done.files.get("plots", [])
        # Each kernel's dims: the job's (an external kernel's names too), else a built-in kernel's own.
        dims = {kernel: kernel_dims(kernel, len(json.loads(shape)))
                for kernel, shape in done.frame.groupby("kernel")["shape"].first().items()}
        if handover.get("dims") and len(dims) == 1:
            dims = {kernel: tuple(handover["dims"]) for kernel in dims}
        configured = str(self.conf.get("runs", "trial"))
        # No job started here: the end of a multirun, whose jobs logged as a multirun's (runs_of).
        runs = handover.get("runs") or ("sweep" if configured == "auto" else configured)
        timing = handover.get("timing") or (None if done.cfg is None  # the background finish: no config
                                            else OmegaConf.to_container(done.cfg.timing, resolve=True))
        written = log_sweep_summary(self.conf, done.sweep_id, done.frame, exports, images, dims, runs, timing,
                                    handover.get("offline"), process)
        if written and runs == "sweep":  # with trial runs the hint came at the job's end
            self._sync_hint()
        return []

    def seconds(self) -> dict:
        if self.trials is None:
            return {}
        return {"wandb_runs": self.trials.runs, "wandb_seconds": self.trials.seconds}

"""Weights & Biases: a run per trial while the sweep runs, and the sweep's summary run at its end, written
by the finishing process once the export and the plots exist (runners/results/wandb_logger.py does the
writing, and says how W&B is kept from ever costing a result). Its settings are the config's `logger`
group (`logger.mode=offline|online|disabled`)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from runners.engine.row import WANDB_CONFIG, WANDB_SUMMARY
from runners.results.outputs import Finished, Output


class Wandb(Output):
    background = True  # the summary run
    needs_foreground = True  # it carries the exported files and the plots

    def __init__(self, logger: dict):
        super().__init__(logger=logger)
        self.conf = logger
        self.trials = None  # the trial runs' logger, on the sweep's side
        self.dims: tuple = ()
        self.timing: dict = {}

    @property
    def wanted(self) -> bool:
        return self.conf["mode"] != "disabled"

    def start(self, cfg, sweep_id: str, dims: tuple) -> None:
        from omegaconf import OmegaConf

        from runners.results.wandb_logger import TrialLogger

        self.dims, self.timing = dims, OmegaConf.to_container(cfg.timing, resolve=True)
        self.trials = TrialLogger(self.conf, sweep_id)

    def row(self, trial, row: dict, label: str) -> None:
        if row["status"] == "pruned" or self.trials is None:
            return
        # The trial's resolved config as W&B shows it: flat keys for parallel-coordinates panels.
        config = {**{name: row[name] for name in WANDB_CONFIG}, "shape": list(trial.shape),
                  **dict(zip(self.dims, trial.shape)), **trial.config, "timing": self.timing}
        self.trials.log(trial.kernel, label, config, {name: row.get(name) for name in WANDB_SUMMARY})

    def close(self) -> None:
        from runners.results.wandb_logger import known_problem

        if self.trials is None or self.trials.closed:
            return
        self.trials.close()
        if self.conf["mode"] == "offline" and self.trials.enabled and known_problem(self.conf) is None:
            print(f"W&B offline runs in {self.conf['dir']}/wandb; upload with: "
                  f"wandb sync {self.conf['dir']}/wandb/offline-run-*")

    def handover(self) -> dict:
        """Whether the summary run is to be made: not when logging is off or known to fail here."""
        from runners.results.wandb_logger import known_problem

        return {"summary": self.wanted and known_problem(self.conf) is None}

    def warm(self) -> None:
        from runners.results.wandb_logger import known_problem

        if not self.wanted or known_problem(self.conf) is not None:
            return
        try:
            import wandb

            wandb.setup()  # starts wandb's service now: 0.25 s less on the summary run on a CPU-only host
        except Exception:  # a broken install fails anywhere: the summary run's own check names the cause
            pass

    def write(self, done: Finished, handover: Optional[dict] = None) -> list[Path]:
        from runners.results.wandb_logger import log_sweep_summary

        if not (handover or {}).get("summary", self.wanted):
            return []
        exports = done.files.get("export", [])
        images = done.files.get("plots", [])
        log_sweep_summary(self.conf, done.sweep_id, done.frame, exports, images)
        return []

    def seconds(self) -> dict:
        if self.trials is None:
            return {}
        return {"wandb_runs": self.trials.runs, "wandb_seconds": self.trials.seconds}

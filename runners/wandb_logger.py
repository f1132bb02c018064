"""Weights & Biases: one run per trial (group = sweep id, job_type = kernel), one summary run per sweep.

Per-trial runs are created in child processes fed through one queue: wandb's serialization and its
service process never share the interpreter (or its GIL) with the timing loop, so a slow log call cannot
delay a kernel launch inside a timed window. The sweep only pays for a queue put per trial and for
draining the queue at the end; both are measured and reported as the logging share of the wall time.
Several processes, because one makes about 5 runs a second: trials that fail the gate in a tenth of a
second outran it (seen on an H200: 80 incorrect matmul trials left a 10 s drain, 23% of the sweep).

mode=offline (the default) needs no account and no network: runs land in <dir>/wandb/offline-run-*,
to be uploaded later with `wandb sync`.
"""
from __future__ import annotations

import multiprocessing
import os
import re
import time
from typing import Optional

import pandas as pd

from runners.store import SAMPLE_COLUMNS

CLOSE_TIMEOUT_S = 600  # a sweep's last runs may still be uploading in online mode
LOGGING_PROCESSES = 4


def _init_run(conf: dict, sweep_id: str, job_type: str, name: str, config: Optional[dict] = None):
    import wandb

    return wandb.init(
        project=conf["project"], entity=conf["entity"], dir=conf["dir"], mode=conf["mode"],
        group=sweep_id, job_type=job_type, name=name, config=config,
        reinit="create_new",
        # Rows carry git_sha already; wandb's own git probe only warns when dir is outside a checkout.
        settings=wandb.Settings(silent=True, disable_git=True),
    )


def _log_trials(queue, conf: dict, sweep_id: str) -> None:
    while (item := queue.get()) is not None:
        job_type, name, config, summary = item
        try:
            run = _init_run(conf, sweep_id, job_type, name, config)
            run.summary.update(summary)
            run.finish()
        except Exception as error:  # one run lost to W&B; the row is in the store, the others go on
            print(f"warning: W&B run {name!r} not written: {type(error).__name__}: {error}")


class TrialLogger:
    def __init__(self, conf: dict, sweep_id: str):
        self.enabled = conf["mode"] != "disabled"
        self.seconds = 0.0  # time the sweep process spent on logging
        self.runs = 0
        if not self.enabled:
            return
        context = multiprocessing.get_context("spawn")
        self._queue = context.Queue()
        count = max(1, min(LOGGING_PROCESSES, (os.cpu_count() or 2) // 2))  # leave cores to the sweep
        self._processes = [context.Process(target=_log_trials, args=(self._queue, conf, sweep_id), daemon=True)
                           for _ in range(count)]
        for process in self._processes:
            process.start()

    def log(self, job_type: str, name: str, config: dict, summary: dict) -> None:
        if not self.enabled:
            return
        began = time.perf_counter()
        self._queue.put((job_type, name, config, summary))
        self.runs += 1
        self.seconds += time.perf_counter() - began

    def close(self) -> None:
        """Wait for every queued run to be written."""
        if not self.enabled:
            return
        began = time.perf_counter()
        for _ in self._processes:
            self._queue.put(None)  # one stop sign each
        deadline = began + CLOSE_TIMEOUT_S
        for process in self._processes:
            process.join(max(0.0, deadline - time.perf_counter()))
            if process.is_alive():  # e.g. online mode with an unreachable server
                process.kill()
                process.join()
                print(f"warning: W&B logging did not finish within {CLOSE_TIMEOUT_S} s and was stopped; "
                      "results are safe in the store")
            elif process.exitcode != 0:
                print(f"warning: a W&B logging process exited with code {process.exitcode}; "
                      "results are safe in the store")
        if any(process.exitcode != 0 for process in self._processes):
            # Items no process will read: without this the queue's feeder thread blocks our exit.
            self._queue.cancel_join_thread()
        self.seconds += time.perf_counter() - began


def log_sweep_summary(conf: dict, sweep_id: str, frame: pd.DataFrame, files: list) -> float:
    """The sweep's summary run: a wandb.Table of all trials and the exported files as an Artifact.

    Returns the seconds it took.
    """
    if conf["mode"] == "disabled":
        return 0.0
    import wandb

    began = time.perf_counter()
    run = _init_run(conf, sweep_id, "sweep_summary", f"{sweep_id} summary")
    table = frame.drop(columns=list(SAMPLE_COLUMNS))  # per-sample arrays stay in the store
    table = table.astype(object).where(table.notna(), None)  # wandb.Table wants None, not NaN
    run.log({"trials": wandb.Table(dataframe=table)})
    run.summary.update({"n_trials": len(frame), "n_ok": int((frame["status"] == "ok").sum())})
    if files:
        artifact = wandb.Artifact(re.sub(r"[^A-Za-z0-9_.-]", "_", f"triton-configs-{sweep_id}"), type="triton-configs")
        for path in files:
            artifact.add_file(str(path))
        run.log_artifact(artifact)
    run.finish()
    return time.perf_counter() - began

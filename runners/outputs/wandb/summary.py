"""The sweep's W&B run (group = sweep id, job_type = sweep_summary): every trial in a table, charts built
from it, the best config of every shape as summary keys, the plots as images and the exported files as an
Artifact (runners/outputs/wandb/tables.py says what each holds). It is written by a logging process of its
own (runners/outputs/wandb/processes.py), as the trial runs are: the sweep's process never imports wandb,
and wandb's folders and temporary files are the runs' folder's. A failure is one warning line, never an
error (runners/outputs/wandb/logger.py)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, Optional

import pandas as pd

from triton_sweep.model.columns import SAMPLE_COLUMNS
from triton_sweep.outputs.wandb.logger import (
    CLOSE_TIMEOUT_S, SWEEP_FINISH_TIMEOUT_S, UNAFFECTED, cause_of, close_run_files, go_offline, init_run,
    offline_words, timed_out, unreachable, warn_if_unusable, warn_once)
from triton_sweep.outputs.wandb.processes import LoggingProcess


def start_process(conf: dict) -> LoggingProcess:
    """A logging process for the sweep's run, started (and wandb imported there) before the run is
    asked for: started with the job, its interpreter and wandb's import cost the sweep's finish
    nothing."""
    process = LoggingProcess("W&B summary process", _summary_main, (conf,), Path(conf["dir"]) / "wandb")
    process.start()
    return process


def log_sweep_summary(conf: dict, sweep_id: str, frame: pd.DataFrame, files: list,
                      images: Iterable[Path] = (), dims: Optional[dict] = None, runs: str = "trial",
                      timing: Optional[dict] = None, offline: Optional[str] = None,
                      process: Optional[LoggingProcess] = None) -> bool:
    """The sweep's run, written by `process` (start_process; one is started where none is given), which
    is stopped here; returns whether it was written. A failure is one warning line, never an error.
    `offline`: why it is written offline where another process found the server out of reach (the
    background finish: unreachable's answer there)."""
    if conf["mode"] == "disabled" or warn_if_unusable(conf):
        if process is not None:
            process.stop()
        return False
    # The samples stay in the store: the run holds none, and they are most of what a pipe would carry.
    frame = frame.drop(columns=list(SAMPLE_COLUMNS), errors="ignore")
    try:
        process = process or start_process(conf)
        process.pending.put((sweep_id, frame, list(files), list(images), dims, runs, timing,
                             offline or unreachable(conf)))
        process.pending.put(None)
        said, failure, why = _answer(process)
    finally:
        if process is not None:
            process.stop()
    if failure:
        warn_once(failure, f"W&B: the run of sweep {sweep_id} was not written ({failure}); {UNAFFECTED}")
        return False
    if why:  # this command's later online runs (a multirun's next job) start offline
        go_offline(conf, why)
    if said:
        warn_once(said, f"W&B: {said}; {UNAFFECTED}")
    return True


def _answer(process: LoggingProcess) -> tuple:
    """The summary process's answer (what to say, why it failed, why it went offline), or a failure
    where it died or did not answer within CLOSE_TIMEOUT_S."""
    try:
        if process.conn.poll(CLOSE_TIMEOUT_S):
            return process.conn.recv()
    except (EOFError, OSError):
        process.process.join(5)
        return None, f"its logging process exited with code {process.process.exitcode}", None
    return None, f"it was not written within {CLOSE_TIMEOUT_S} s and was stopped", None


def _summary_main(conn, conf: dict) -> None:
    """The summary process: wandb imported at once, then the sweep's run that comes through the pipe
    written; then its answer (what to say, why it failed, why it went offline)."""
    answer, failed = (None, "no run was sent to its logging process", None), None
    try:
        import wandb  # noqa: F401  (ahead of the run)
    except Exception as error:  # an incomplete install fails anywhere inside its imports
        failed = cause_of(error)
    while (item := conn.recv()) is not None:
        *arguments, offline = item
        if offline:
            go_offline(conf, offline)
        answer = (None, failed, None)
        if not failed:
            try:
                answer = (write_summary_run(conf, *arguments), None, unreachable(conf))
            except Exception as error:  # anything inside wandb: its install, its service, the upload
                answer = (None, cause_of(error), None)
    conn.send(answer)


def write_summary_run(conf: dict, sweep_id: str, frame: pd.DataFrame, files: list, images: list,
                      dims: Optional[dict], runs: str, timing: Optional[dict]) -> Optional[str]:
    """Write the sweep's run in this process; what the warning line is to say where the server was out of
    reach."""
    import wandb

    from triton_sweep.outputs.wandb.tables import best_keys, chart_tables, summary_table, sweep_config

    table = summary_table(frame, dims)
    known = unreachable(conf)
    run = init_run(conf, sweep_id, "sweep_summary", f"{sweep_id} summary",
                   sweep_config(frame, sweep_id, runs, timing))
    said, unsynced = None, None
    if unreachable(conf) and not known:  # found out by this run's init (logger.runs=sweep)
        said = offline_words(conf, unreachable(conf), "the sweep's run is")
    try:
        whole = _table(wandb, table)
        # A logged table keeps wandb.Table.MAX_ROWS rows (10,000); an artifact's holds 20 times more.
        in_artifact = len(table) > wandb.Table.MAX_ROWS
        if not in_artifact:
            run.log({"trials": whole})
        left_out = {}
        for name, (kind, data, fields, title) in chart_tables(table).items():
            if len(data) > wandb.Table.MAX_ROWS:  # W&B would cut it silently: say how much is left out
                left_out[f"charts/{name}/rows_left_out"] = len(data) - wandb.Table.MAX_ROWS
                data = data.head(wandb.Table.MAX_ROWS)
            chart = getattr(wandb.plot, kind)(_table(wandb, data), *fields.values(), title=title)
            run.log({f"charts/{name}": chart})
        run.summary.update({"n_trials": len(frame), "n_ok": int((frame["status"] == "ok").sum()),
                            "trials_in_artifact": in_artifact, **left_out, **best_keys(frame)})
        if images:
            run.log({f"plots/{Path(path).stem}": wandb.Image(str(path)) for path in images})
        if files or in_artifact:
            artifact = wandb.Artifact(re.sub(r"[^A-Za-z0-9_.-]", "_", f"triton-configs-{sweep_id}"),
                                      type="triton-configs")
            for path in files:
                artifact.add_file(str(path))
            if in_artifact:
                artifact.add(whole, "trials")
            run.log_artifact(artifact)
    finally:
        try:
            run.finish()
        except TimeoutError:
            unsynced = timed_out(run, conf, SWEEP_FINISH_TIMEOUT_S)
        close_run_files()  # written means on disk, whole, when this returns
    if unsynced:
        said = (f"{unreachable(conf)}; the sweep's run is kept whole on disk: upload the rest later with: "
                f"wandb sync {unsynced}")
    return said


def _table(wandb, frame: pd.DataFrame):
    """`frame` as a wandb.Table built from plain rows (None where missing): the same table as
    Table(dataframe=), which reads each cell through pandas, in a third of the time."""
    plain = frame.astype(object).where(frame.notna(), None)
    return wandb.Table(columns=list(frame.columns), data=plain.values.tolist())

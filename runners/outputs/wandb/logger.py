"""Weights & Biases: the trial runs (group = sweep id, job_type = kernel), and what every run shares: how
it starts and finishes (init_run), and how W&B is kept from ever costing or holding a result.

logger.runs: `trial` a run per trial and the sweep's run (summary.py); `sweep` the sweep's run alone, which
holds every trial in its table (one run where thousands would crowd W&B's workspace and `wandb sync`);
`auto` (the default) trial runs for a job of its own of at most logger.auto_trials trials (runs_of). Trial
runs are written by TrialLogger's processes (processes.py), so that a slow log call never delays a timed
launch; mode=offline (the default) needs no account and no network. Each trial run's config has flat keys
per meta-parameter and shape dimension, so W&B's panels work without setup. A failing import, an
unwritable logger.dir, runs that cannot start or upload end in ONE warning line naming the cause, the
results as without W&B (wandb_problem); online, init_timeout and finish_timeout bound what a server out of
reach costs (init_run)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterable, Optional

from triton_sweep.outputs.wandb.processes import LoggingProcess

CLOSE_TIMEOUT_S = 600  # a sweep's last runs may still be uploading in online mode
# Online, what one run may wait for the server (wandb's defaults: 90 s to start, no bound to finish): a
# server out of reach costs a logging process, or the sweep's run, at most these once (see init_run). The
# sweep's run may upload a large table: its finish is given longer.
INIT_TIMEOUT_S = 10.0
FINISH_TIMEOUT_S = 5.0
SWEEP_FINISH_TIMEOUT_S = 60.0
LOGGING_PROCESSES = 4
# A logging process stops trying when wandb.init fails (what fails it, an install, credentials, does not
# pass within a sweep; a server out of reach sends the runs offline instead), or after this many runs in a
# row that started but could not be written.
GIVE_UP_AFTER = 3
MINIMIZED = ("p20_us", "p50_us", "p80_us", "min_us", "noise")
MAXIMIZED = ("gbps", "tflops", "pct_copy_bw", "pct_matmul")
UNAFFECTED = "the results, parquet file and export are not affected"

# In this process: (mode, dir) -> why W&B is off, or None when it works; causes already warned about.
_problems: dict[tuple, Optional[str]] = {}
_warned: set[str] = set()
# (mode, dir) -> why its online runs are written offline from now on (the server out of reach).
_offline: dict[tuple, str] = {}


def cause_of(error: BaseException) -> str:
    """'Type: first line of the message', short enough for one warning line."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:200] if lines else ''}".rstrip(": ")


def warn_once(cause: str, text: str) -> None:
    """Print one warning line, once per cause in this process (a multirun's jobs share the process)."""
    if cause not in _warned:
        _warned.add(cause)
        print(f"warning: {text}", flush=True)


def wandb_problem(conf: dict) -> Optional[str]:
    """Why W&B cannot log with this logger config, found before any trial (remembered in this
    process): wandb fails to import, or <dir>/wandb cannot be written (wandb would fall back to a
    temporary directory and the runs would be lost to the user). None when neither.

    Both are checked before any trial, and turn logging off: W&B failing (an incomplete install raises
    anywhere inside its imports; runs that cannot be started or uploaded) ends in ONE warning line
    naming the cause, and the store, the parquet file, the export and the exit status are the same as
    without W&B. Online, a process that meets wandb's init_timeout or finish_timeout writes its later
    runs offline, named with their `wandb sync` command in that one line."""
    key = (conf["mode"], conf["dir"])
    if key not in _problems:
        problem = None
        cause = _import_problem()
        if cause:
            problem = f"wandb cannot be imported ({cause})"
        else:
            directory = Path(conf["dir"]) / "wandb"
            try:
                directory.mkdir(parents=True, exist_ok=True)
                with tempfile.TemporaryFile(dir=directory):
                    pass
            except OSError as error:
                problem = f"logger.dir: {directory} is not writable ({cause_of(error)})"
        _problems[key] = problem
    return _problems[key]


SPAWN_ATTEMPTS = 3  # tries to start the interpreter that imports wandb (_import_problem)


def _import_problem() -> Optional[str]:
    """Why wandb fails to import ('Type: message'), tried in an interpreter of its own unless this one
    has it: the sweep's process writes no run before its finish (its logging processes do), and wandb's
    import (0.5-0.8 s of this process's GIL) held its first trial back. None when it
    imports. A broken install fails anywhere in wandb's imports, not only with an ImportError."""
    if "wandb" in sys.modules:
        return None
    for attempt in range(SPAWN_ATTEMPTS):
        try:
            tried = subprocess.run([sys.executable, "-c", "import wandb"], capture_output=True, text=True)
            break
        except OSError:
            # The interpreter did not start, which says nothing of wandb: this check runs on a thread
            # while the sweep forks its workers, and subprocess's vfork then failed now and then with
            # "[Errno 14] Bad address" (once in a CI run, once in ~30 sweeps on a loaded 2-core host).
            # Again; after the last try nothing is known against wandb, and the logging processes find
            # out for themselves.
            if attempt == SPAWN_ATTEMPTS - 1:
                return None
    if tried.returncode == 0:
        return None
    said = [line.strip() for line in tried.stderr.splitlines() if line.strip()]
    return said[-1][:200] if said else f"exit status {tried.returncode}"  # the traceback's last line


def known_problem(conf: dict) -> Optional[str]:
    """Why W&B cannot log with this logger config, as far as this process has found out (wandb_problem
    or a TrialLogger that gave up): None when nothing is known against it. Imports nothing."""
    return _problems.get((conf["mode"], conf["dir"]))


# What a trial run leaves out: it lasts milliseconds, and its config names the GPU, the versions and the
# host already. wandb's system metrics, its probes of the machine (GPUs through NVML) and environment (the
# installed packages' list) and its console capture took four fifths of each offline run's time on this
# project's CPU host (0.052-0.055 -> 0.011-0.014 s a run: `python -m triton_sweep.benchmarks.bench_wandb
# --runs 32`); the sweep's run keeps them. Only the settings this wandb has.
TRIAL_RUN_SETTINGS = {"x_disable_stats": True, "x_disable_machine_info": True, "x_disable_meta": True,
                      "console": "off", "x_save_requirements": False}


def init_run(conf: dict, sweep_id: str, job_type: str, name: str, config: Optional[dict] = None,
             trial: bool = False):
    """A run, offline where the online server was found out of reach (_offline): the online init that
    finds it so (its init_timeout spent retrying, or the connection refused) is the last one tried, and
    this run starts offline in its place. A run that is refused (no API key, a bad one) is not."""
    import wandb

    key = (conf["mode"], conf["dir"])
    if conf["mode"] == "online" and key not in _offline:
        try:
            return _start_run(conf, sweep_id, job_type, name, config, trial, "online")
        except wandb.errors.AuthenticationError:
            raise
        except wandb.errors.CommError as error:
            _offline[key] = f"the server was unreachable ({cause_of(error)})"
    return _start_run(conf, sweep_id, job_type, name, config, trial,
                      "offline" if key in _offline else conf["mode"])


def _start_run(conf: dict, sweep_id: str, job_type: str, name: str, config: Optional[dict], trial: bool,
               mode: str):
    import wandb

    # wandb's error reporting sends to WANDB_BASE_URL from an exit hook, waiting up to 10 s: a silent server
    # held every process that had tried it online 10 s at its exit. Off, unless the user's shell sets it.
    os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
    known = getattr(wandb.Settings, "model_fields", {})
    lean = {key: value for key, value in TRIAL_RUN_SETTINGS.items() if key in known} if trial else {}
    if mode == "online":  # past its bound, finish raises TimeoutError: the upload hangs (timed_out)
        bounds = {"init_timeout": INIT_TIMEOUT_S, "finish_timeout_raises": True,
                  "finish_timeout": FINISH_TIMEOUT_S if trial else SWEEP_FINISH_TIMEOUT_S}
        lean.update({key: value for key, value in bounds.items() if key in known})
    return wandb.init(
        project=conf["project"], entity=conf["entity"], dir=conf["dir"], mode=mode,
        group=sweep_id, job_type=job_type, name=name, config=config,
        reinit="create_new",
        # Rows carry git_sha already; wandb's own git probe only warns when dir is outside a checkout.
        settings=wandb.Settings(silent=True, disable_git=True, **lean),
    )


def timed_out(run, conf: dict, seconds: float = FINISH_TIMEOUT_S) -> str:
    """A run whose finish raised TimeoutError: its upload did not end within `seconds` (wandb keeps
    the rest on disk). The runs after it are written offline; returns its directory, to `wandb sync`."""
    why = f"an upload did not finish within {seconds:g} s"
    _offline.setdefault((conf["mode"], conf["dir"]), why)
    return str(run.settings.sync_dir)


def offline_words(conf: dict, why: str, runs: str, unsynced: Iterable[str] = ()) -> str:
    """What the warning line says of runs written offline because the server was out of reach."""
    where = " ".join([f"{conf['dir']}/wandb/offline-run-*", *unsynced])
    return f"{why}; {runs} written offline instead; upload later with: wandb sync {where}"


def _fill_trial_run(run, summary: dict) -> None:
    try:
        # The direction of each metric, as W&B records it (wandb 0.31 has no goal= any more): the best
        # latency is the lowest, the best throughput the highest.
        for metric in MINIMIZED:
            run.define_metric(metric, summary="min")
        for metric in MAXIMIZED:
            run.define_metric(metric, summary="max")
        run.summary.update(summary)
    finally:
        run.finish()


def _log_trials(conn, conf: dict, sweep_id: str, unreached: Optional[str] = None) -> None:
    """A logging process: write the runs that come through its pipe until the stop sign (None), then
    answer (failed, first cause, gave up, why it went offline, runs written offline, runs to sync).
    `unreached`: why an earlier job of this command found the server out of reach (offline from the
    start)."""
    failed, cause, in_a_row, stopped, offline, unsynced = 0, None, 0, False, 0, []
    key = (conf["mode"], conf["dir"])
    if unreached:
        _offline.setdefault(key, unreached)
    while (item := conn.recv()) is not None:
        if stopped:
            failed += 1  # drained, not tried: see GIVE_UP_AFTER
            continue
        job_type, name, config, summary = item
        try:  # anything inside wandb can fail here; the row is in the store whatever happens
            run = init_run(conf, sweep_id, job_type, name, config, trial=True)
        except Exception as error:
            failed, cause, stopped = failed + 1, cause or cause_of(error), True
            continue
        offline += conf["mode"] == "online" and key in _offline
        try:
            _fill_trial_run(run, summary)
            in_a_row = 0
        except TimeoutError:  # its finish, online: written but for its upload (timed_out)
            unsynced.append(timed_out(run, conf))
        except Exception as error:
            failed, cause, in_a_row = failed + 1, cause or cause_of(error), in_a_row + 1
            stopped = in_a_row >= GIVE_UP_AFTER
    close_run_files()
    conn.send((failed, cause, stopped, _offline.get(key), offline, unsynced))


def close_run_files() -> None:
    """Wait for wandb's service to close this process's run files. It writes and closes a run's file
    after run.finish() has returned: read at once, a finished run's file held no record, or 4096 of its
    21,749 bytes (a CPU-only host); `wandb sync` right after the command would find it so. Teardown
    waits for that (0.02 s); a later run starts the service again. A wandb without it (a broken
    install) has written no file."""
    teardown = getattr(sys.modules.get("wandb"), "teardown", None)
    if teardown is not None:
        teardown()


class TrialLogger:
    """The trial runs: LOGGING_PROCESSES processes (runners/outputs/wandb/processes.py), each fed
    through its pipe by a thread of its own, so that log() never waits for W&B; runs go to the
    processes in turn. wandb's serialization and its service process never share the interpreter (or
    its GIL) with the timing loop, so a slow log call cannot delay a kernel launch inside a timed window;
    the sweep pays a queue put per trial and the processes' last runs at the end, both measured and
    reported as the logging share of the wall time. Runs land offline in <dir>/wandb/offline-run-*, to
    be uploaded later with `wandb sync`, unless mode=online."""

    def __init__(self, conf: dict, sweep_id: str):
        self.enabled = conf["mode"] != "disabled"
        self.seconds = 0.0  # time the sweep process spent on logging
        self.runs = 0
        self._conf, self._sweep_id = conf, sweep_id
        self.closed = False
        if not self.enabled:
            return
        began = time.perf_counter()
        unusable = warn_if_unusable(conf)
        self.seconds += time.perf_counter() - began
        if unusable:
            self.enabled = False
            return
        count = max(1, min(LOGGING_PROCESSES, (os.cpu_count() or 2) // 2))  # leave cores to the sweep
        args = (conf, sweep_id, unreachable(conf))
        self._processes = [LoggingProcess(f"W&B logging process {i}", _log_trials, args,
                                          Path(conf["dir"]) / "wandb") for i in range(count)]
        for process in self._processes:
            process.start()

    def log(self, job_type: str, name: str, config: dict, summary: dict) -> None:
        if not self.enabled:
            return
        began = time.perf_counter()
        shape = config.get("shape")
        # For grouping and filtering in the W&B UI: a list-valued config key groups poorly there.
        labels = {"sweep_id": self._sweep_id, "shape_label": "x".join(map(str, shape)) if shape else None}
        process = self._processes[self.runs % len(self._processes)]
        process.pending.put((job_type, name, {**config, **labels}, summary))
        self.runs += 1
        self.seconds += time.perf_counter() - began

    def close(self) -> None:
        """Wait for every queued run to be written; one warning line for whatever went wrong. Once: the
        sweep closes it before its summary run, and again (doing nothing) on its way out."""
        if not self.enabled or self.closed:
            return
        self.closed = True
        began = time.perf_counter()
        for process in self._processes:
            process.pending.put(None)  # one stop sign each, after its runs
        deadline = began + CLOSE_TIMEOUT_S
        problems, failed, causes, gave_up, offline, unsynced = [], 0, [], False, 0, []
        for process in self._processes:
            process.feeder.join(max(0.0, deadline - time.perf_counter()))
            count, cause, stopped = 0, None, False
            try:
                answered = process.conn.poll(max(0.0, deadline - time.perf_counter()))
                if answered:
                    count, cause, stopped, why, written, left = process.conn.recv()
                    if why:  # its server out of reach: the sweep's run goes offline too (init_run)
                        _offline.setdefault((self._conf["mode"], self._conf["dir"]), why)
                        offline, unsynced = offline + written, unsynced + left
            except (EOFError, OSError):
                answered = None  # it died before answering
            child = process.process
            if answered is False:  # e.g. online mode with an unreachable server
                problems.append(f"logging did not finish within {CLOSE_TIMEOUT_S} s and was stopped")
            else:
                child.join(5)  # it exits once it has answered, or has died
                if child.exitcode not in (0, None):
                    problems.append(f"a logging process exited with code {child.exitcode}")
            process.stop()  # kills what is still alive
            failed += count + len(process.unsent)
            gave_up |= stopped
            causes += [c for c in [cause, *map(cause_of, process.unsent[:1])] if c and c not in causes]
        if failed:
            problems.insert(0, f"{failed} of {self.runs} trial runs not written ({'; '.join(causes)})")
        why = unreachable(self._conf)
        if why:
            runs = f"{offline} of {self.runs} trial runs" + ("" if gave_up else " and the sweep's run")
            problems.insert(0, offline_words(self._conf, why, f"{runs} are", unsynced))
        if gave_up:  # the summary run would only fail the same way, and online wait for a timeout first
            _problems[(self._conf["mode"], self._conf["dir"])] = causes[0]
            problems.append("the summary run is skipped")
        if problems:
            problems = list(dict.fromkeys(problems))  # four processes stopped alike make one phrase
            warn_once(why or (causes[0] if causes else problems[0]),
                      f"W&B: {'; '.join(problems)}; {UNAFFECTED}")
        self.seconds += time.perf_counter() - began


def runs_of(conf: dict, planned: int, multirun: bool) -> str:
    """"trial" (a run per trial and the sweep's run) or "sweep" (the sweep's run alone) for a job:
    logger.runs, where auto is trial runs for a job of its own that plans at most logger.auto_trials
    trials (a multirun's jobs add up to more than any one of them knows), said in one line."""
    runs = str(conf.get("runs", "trial"))
    if runs != "auto":
        return runs
    limit = conf["auto_trials"]
    chosen = "trial" if not multirun and planned <= limit else "sweep"
    bound = "at most" if chosen == "trial" else "more than"
    why = ("one job of a multirun" if multirun
           else f"{planned} trials to measure, {bound} logger.auto_trials={limit}")
    what = ("a run per trial and the sweep's run" if chosen == "trial"
            else "the sweep's run alone, every trial in it")
    print(f"W&B (logger.runs=auto): {why}: {what}", flush=True)
    return chosen


def warn_if_unusable(conf: dict) -> bool:
    """Whether W&B cannot be used here (wandb_problem), said once in one warning line: made before the
    first trial (by TrialLogger, or by the sweep's side where it logs no trial runs) and before the
    sweep's run."""
    problem = wandb_problem(conf)
    if problem:
        warn_once(problem, f"W&B logging is off for this sweep: {problem}; {UNAFFECTED}")
    return problem is not None


def unreachable(conf: dict) -> Optional[str]:
    """Why this process writes the online runs of this logger config offline (the server out of reach),
    or None."""
    return _offline.get((conf["mode"], conf["dir"]))


def go_offline(conf: dict, why: str) -> None:
    """Write this process's later online runs of this logger config offline: the server was found out of
    reach (`why`), here or by another process."""
    _offline.setdefault((conf["mode"], conf["dir"]), why)

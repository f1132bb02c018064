"""The end of a sweep that its results need not wait for: the plots and the W&B summary run, made in a
process of their own, `python -m runners.results.finisher`.

The sweep (runners/sweep.py) starts it with its workers, before it validates its input (a bad input
closes its stdin, and it exits), or once they are ready on a host with fewer cores than processes
importing at the start; in a session of its own. It imports what the plots and the summary
run need (pandas, matplotlib, runners.results.plots and with it torch and Triton; wandb, whose service it
starts) while the workers start and the trials run, instead of after them (1.7 s on this CPU-only
host; the service's start makes the summary run 0.25 s shorter). At the end the sweep hands it the
plots at once (`draw`: the store, the sweep id, the directory), writes the parquet file, prints the
table and exports, which are its results and never wait for this process, then hands it the summary
run (`write_summary`: the exported files, the logger config) and waits (`wait`).

This process loads the sweep's rows from the store, draws the plots into the directory
(runners/results/plots.py), writes the summary run with them (runners/results/wandb_logger.py), and
reports on the pipe given as its argument, one JSON line each: {"plots": [...]} once the plots are drawn,
{"done": {...}} at the end. What it prints goes to finish.log in the directory, which the sweep relays to
its own output. The sweep waits for the plots at most PLOTS_WAIT_S and for the summary run at most
SUMMARY_WAIT_S more, then says where the rest will land and goes on: this process finishes on its own (in
online mode an upload may take a while). The sweep's exit status and printed results never depend on it.
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

# Drawn locally from a few hundred rows, the plots take a second or two (0.7 s for three on this CPU-only
# host, matplotlib imported): a minute means something is wrong.
PLOTS_WAIT_S = 60.0
# The summary run, wandb warm: 0.35 s offline here. Online mode uploads the table, plots and exports
# as well: past this bound the sweep leaves it to this process.
SUMMARY_WAIT_S = 30.0
LOG_NAME = "finish.log"
REPO = Path(__file__).resolve().parents[2]


class Finisher:
    """Parent-side handle of one finishing process."""

    def __init__(self, process: subprocess.Popen, status_fd: int):
        self.process, self._status_fd = process, status_fd
        self._buffer = b""
        self._log: Optional[Path] = None
        self._relayed = 0  # bytes of finish.log already relayed

    @classmethod
    def start(cls, warm_wandb: bool) -> "Finisher":
        """Start the process; it imports meanwhile (and starts wandb's service if warm_wandb)."""
        status_r, status_w = os.pipe()
        python_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        process = subprocess.Popen(
            [sys.executable, "-m", "runners.results.finisher", str(status_w), "wandb" if warm_wandb else "-"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(status_w,),
            start_new_session=True,  # outlives the sweep, out of reach of a Ctrl-C meant for it
            env={**os.environ, "PYTHONPATH": python_path}, text=True)
        os.close(status_w)
        return cls(process, status_r)

    def _send(self, message: dict) -> bool:
        try:
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()
            return True
        except (BrokenPipeError, OSError):  # it died: wait() says so
            return False

    def draw(self, store: str, sweep_id: str, out_dir: Path) -> None:
        """Start the plots of the sweep's rows in `store` (all of them committed by now)."""
        self._log = Path(out_dir) / LOG_NAME
        self._send({"store": str(store), "sweep_id": sweep_id, "out_dir": str(out_dir),
                    "log": str(self._log)})

    def write_summary(self, logger_conf: Optional[dict], exports: list) -> None:
        """Then the W&B summary run with the plots and `exports` (None: no summary run)."""
        self._send({"logger": logger_conf, "exports": [str(p) for p in exports]})
        try:
            self.process.stdin.close()
        except (BrokenPipeError, OSError):
            pass

    def abandon(self) -> None:
        """The sweep ends without a finish (or its finish failed): the process reads the end of its
        stdin and exits."""
        try:
            self.process.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        self._close_status()

    def _close_status(self) -> None:
        if self._status_fd is not None:
            os.close(self._status_fd)
            self._status_fd = None

    def _next_status(self, deadline: float) -> Optional[dict]:
        """The next JSON line on the status pipe, None at its end (the process exited) or at the deadline."""
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._status_fd], [], [], remaining)[0]:
                return None
            chunk = os.read(self._status_fd, 65536)
            if not chunk:
                try:
                    self.process.wait(timeout=10)  # the pipe ends when the process does
                except subprocess.TimeoutExpired:
                    pass  # it closed the pipe and lives on: wait() says it is still running
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def _relay(self, say: Callable[[str], None]) -> None:
        """Print the whole lines finish.log has gained since the last relay."""
        try:
            text = self._log.read_bytes()[self._relayed:]
        except (OSError, AttributeError):
            return
        whole = text[:text.rfind(b"\n") + 1]
        self._relayed += len(whole)
        for line in whole.decode(errors="replace").splitlines():
            say(line)

    def wait(self, say: Callable[[str], None] = print, plots_wait_s: float = PLOTS_WAIT_S,
             summary_wait_s: float = SUMMARY_WAIT_S) -> dict:
        """Wait for the plots, then for the summary run, each at most its bound; relay finish.log.
        Returns {"plots": paths, "wandb_summary_seconds": s or None, "background": bool}; "background"
        is True when the process was left to finish on its own."""
        outcome = {"plots": [], "wandb_summary_seconds": None, "background": False}
        status = self._next_status(time.monotonic() + plots_wait_s)
        if status is not None and "plots" in status:
            outcome["plots"] = [Path(p) for p in status["plots"]]
            status = self._next_status(time.monotonic() + summary_wait_s)
        self._relay(say)
        if status is not None and "done" in status:
            outcome["wandb_summary_seconds"] = status["done"]["wandb_summary_seconds"]
        elif self.process.poll() is None:
            what = ("the W&B summary run is" if outcome["plots"] or status
                    else "the plots and the W&B summary run are")
            say(f"note: {what} still being made by process {self.process.pid}, in the background; it says "
                f"what it did in {self._log}")
            outcome["background"] = True
        else:
            say(f"warning: the plots and the W&B summary run were not made: the process making them "
                f"exited with code {self.process.returncode} (its output: {self._log}); the results are "
                "not affected")
        self._close_status()
        return outcome


def _warm(wandb_too: bool) -> None:
    """Import what the end will need, while the sweep's trials run."""
    import pandas  # noqa: F401

    from runners.results import plots  # noqa: F401  (pandas, numpy, torch and triton, through its report)

    try:
        from matplotlib import colormaps  # noqa: F401
        from matplotlib.backends import backend_agg  # noqa: F401
        from matplotlib.figure import Figure  # noqa: F401
        from matplotlib.patches import Rectangle  # noqa: F401
    except Exception:  # a missing or broken install: plots_for_sweep says which, in one line
        pass
    if wandb_too:
        try:
            import wandb

            wandb.setup()  # starts wandb's service now: 0.25 s less on the summary run here
        except Exception:  # a broken install fails anywhere: the summary run's own check names the cause
            pass


def _report(status, message: dict) -> None:
    try:
        status.write(json.dumps(message) + "\n")
        status.flush()
    except (BrokenPipeError, OSError):
        pass  # the sweep stopped waiting (or is gone): finish.log holds what happened


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    status = os.fdopen(int(argv[0]), "w", buffering=1)
    _warm(argv[1] == "wandb")
    line = sys.stdin.readline()
    if not line:
        return 0  # the sweep ended before its finish
    job = json.loads(line)
    log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)

    from runners.results.plots import plots_for_sweep
    from runners.results.store import ResultStore

    store = ResultStore(job["store"])
    frame = store.load(sweep_id=job["sweep_id"])
    store.close()
    plots = plots_for_sweep(job["store"], frame, job["out_dir"])
    _report(status, {"plots": [str(p) for p in plots]})
    line = sys.stdin.readline()
    seconds = 0.0
    if line:
        summary = json.loads(line)
        if summary["logger"] is not None:
            from runners.results.wandb_logger import log_sweep_summary

            seconds = log_sweep_summary(summary["logger"], job["sweep_id"], frame, summary["exports"], plots)
    _report(status, {"done": {"wandb_summary_seconds": seconds}})
    return 0


if __name__ == "__main__":
    sys.exit(main())

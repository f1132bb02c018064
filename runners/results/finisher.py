"""The outputs of a sweep that its results need not wait for (the background outputs of
runners/results/outputs: the plots, the W&B summary run), written by a process of their own,
`python -m runners.results.finisher`.

The sweep (runners/engine/job.py) starts it with its workers, before it validates its input (a bad input
closes its stdin, and it exits), or once they are ready on a host with fewer cores than processes
importing at the start; in a session of its own. It makes the background outputs from their targets and
settings (its argument) and has each import what it will need (`warm`: pandas, matplotlib, and with the
plots torch and Triton; wandb, whose service it starts) while the workers start and the trials run,
instead of after them (1.7 s on a CPU-only host; the service's start makes the summary run 0.25 s
shorter). At the end the sweep hands it the sweep (`begin`: the store, the sweep id, the directory), and
it writes at once the outputs that need nothing of the foreground ones (the plots) while the sweep
writes its results (parquet file, table, export), which never wait for this process; then the sweep
hands it their files (`then`) and it writes the rest (the summary run, with the export and the plots).

This process reports on the pipe given as its argument, one JSON line each: {"written": ...} once the
first outputs are written, {"done": ...} at the end. What it prints goes to finish.log in the directory.
By default (wait_for_background=false) the sweep does not wait for it: it says which outputs this
process writes and where it reports, and exits once its own results are written (the README sweep's
finish went from 7.5 s to 2.0 s on an H100: BENCHMARKS.md, 2026-11-25). With wait_for_background=true
it relays finish.log to its own output, waits for the first outputs at most FIRST_WAIT_S and for the
rest at most THEN_WAIT_S more, then says where they will land and goes on: this process finishes on its
own (in online mode an upload may take a while). The sweep's exit status and printed results never
depend on it.
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

# Drawn locally from a few hundred rows, the plots take a second or two (0.7 s for three on a CPU-only
# host, matplotlib imported): a minute means something is wrong.
FIRST_WAIT_S = 60.0
# The summary run, wandb warm: 0.35 s offline on a CPU-only host. Online mode uploads the table, plots
# and exports as well: past this bound the sweep leaves it to this process.
THEN_WAIT_S = 30.0
LOG_NAME = "finish.log"
REPO = Path(__file__).resolve().parents[2]


class Finisher:
    """Parent-side handle of one finishing process."""

    def __init__(self, process: subprocess.Popen, status_fd: int, names: list[str]):
        self.process, self._status_fd = process, status_fd
        self._names = names  # the outputs it writes, in order
        self._buffer = b""
        self._log: Optional[Path] = None
        self._relayed = 0  # bytes of finish.log already relayed

    @classmethod
    def start(cls, outputs: list[dict]) -> "Finisher":
        """Start the process for these outputs ({"name", "target", "settings"} each); it imports what
        they need meanwhile."""
        status_r, status_w = os.pipe()
        python_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        process = subprocess.Popen(
            [sys.executable, "-m", "runners.results.finisher", str(status_w), json.dumps(outputs)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(status_w,),
            start_new_session=True,  # outlives the sweep, out of reach of a Ctrl-C meant for it
            env={**os.environ, "PYTHONPATH": python_path}, text=True)
        os.close(status_w)
        return cls(process, status_r, [o["name"] for o in outputs])

    def _send(self, message: dict) -> bool:
        try:
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()
            return True
        except (BrokenPipeError, OSError):  # it died: wait() says so
            return False

    def begin(self, store: str, sweep_id: str, out_dir: Path, outputs: list[dict]) -> None:
        """Write `outputs` (those that need no foreground file) from the sweep's rows in `store`, all
        committed by now."""
        self._log = Path(out_dir) / LOG_NAME
        self._send({"store": str(store), "sweep_id": sweep_id, "out_dir": str(out_dir), "log": str(self._log),
                    "outputs": outputs})

    def then(self, files: dict, outputs: list[dict]) -> None:
        """Then write `outputs` with the foreground outputs' `files`."""
        self._send({"files": {name: [str(p) for p in paths] for name, paths in files.items()},
                    "outputs": outputs})
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

    def leave(self, say: Callable[[str], None] = print) -> dict:
        """Leave the process to write the rest on its own (wait_for_background=false): say where, and
        return as wait() does when it leaves it."""
        say(f"{', '.join(self._names)}: written in the background by process {self.process.pid}, which says "
            f"what it did in {self._log} (wait_for_background=true waits for it)")
        self._close_status()
        return {"files": {}, "seconds": {}, "background": True}

    def wait(self, say: Callable[[str], None] = print, first_wait_s: float = FIRST_WAIT_S,
             then_wait_s: float = THEN_WAIT_S) -> dict:
        """Wait for the first outputs, then for the rest, each at most its bound; relay finish.log.
        Returns {"files": {name: paths}, "seconds": {name: s}, "background": bool}; "background" is True
        when the process was left to finish on its own."""
        outcome = {"files": {}, "seconds": {}, "background": False}
        status = self._next_status(time.monotonic() + first_wait_s)
        if status is not None and "written" in status:
            outcome["files"].update(status["written"])
            status = self._next_status(time.monotonic() + then_wait_s)
        self._relay(say)
        if status is not None and "done" in status:
            outcome["files"].update(status["done"]["written"])
            outcome["seconds"] = status["done"]["seconds"]
        elif self.process.poll() is None:
            pending = [name for name in self._names if name not in outcome["files"]]
            say(f"note: output(s) {', '.join(pending)} not written yet: process {self.process.pid} goes on "
                f"in the background and says what it did in {self._log}")
            outcome["background"] = True
        else:
            say(f"warning: output(s) {', '.join(self._names)} not written: the process writing them "
                f"exited with code {self.process.returncode} (its output: {self._log}); the results are "
                "not affected")
        outcome["files"] = {name: [Path(p) for p in paths] for name, paths in outcome["files"].items()}
        self._close_status()
        return outcome


def _report(status, message: dict) -> None:
    try:
        status.write(json.dumps(message) + "\n")
        status.flush()
    except (BrokenPipeError, OSError):
        pass  # the sweep stopped waiting (or is gone): finish.log holds what happened


def _write(outputs: dict, wanted: list[dict], done, seconds: dict) -> dict:
    """Each wanted output written in order, with its handover; what each wrote."""
    written = {}
    for item in wanted:
        began = time.perf_counter()
        paths = outputs[item["name"]].write(done, item["handover"])
        written[item["name"]] = [str(p) for p in paths]
        done.files[item["name"]] = paths
        seconds[item["name"]] = time.perf_counter() - began
    return written


def main(argv=None) -> int:
    from runners.results.outputs.output import Finished, made

    argv = sys.argv[1:] if argv is None else argv
    status = os.fdopen(int(argv[0]), "w", buffering=1)
    outputs = {o["name"]: made(o["target"], o["name"], o["settings"]) for o in json.loads(argv[1])}
    for output in outputs.values():
        output.warm()
    line = sys.stdin.readline()
    if not line:
        return 0  # the sweep ended before its finish
    job = json.loads(line)
    log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)

    from runners.results.store import ResultStore

    store = ResultStore(job["store"])
    rows = store.load(sweep_id=job["sweep_id"])
    done = Finished(None, job["sweep_id"], Path(job["out_dir"]), job["store"], rows)
    store.close()
    seconds: dict[str, float] = {}
    _report(status, {"written": _write(outputs, job["outputs"], done, seconds)})
    line = sys.stdin.readline()
    written = {}
    if line:
        then = json.loads(line)
        done.files.update({name: [Path(p) for p in paths] for name, paths in then["files"].items()})
        written = _write(outputs, then["outputs"], done, seconds)
    _report(status, {"done": {"written": written, "seconds": seconds}})
    return 0


if __name__ == "__main__":
    sys.exit(main())

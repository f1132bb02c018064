"""The W&B processes (TrialLogger and the sweep's run, runners/outputs/wandb/logger.py and summary.py): each
a spawned interpreter of its own with a pipe, fed its runs by a thread of its own, so that the sweep never
waits for W&B, and the only processes that import wandb. Each runs with wandb's folders under the runs'
folder (<logger.dir>/wandb) through wandb's own variables, where the user's shell sets none of them
(wandb_folders), and its TMPDIR a folder there that goes with it: a sweep writes nothing of W&B's in the
home folder or TMPDIR. Standard library only: outputs never use the engine's worker processes
(runners/README.md)."""
from __future__ import annotations

import multiprocessing
import os
import queue
import shutil
import sys
import tempfile
import threading
import traceback
import weakref
from pathlib import Path
from typing import Callable, Optional

# wandb's folders outside the runs' folder, each a variable of wandb's (its defaults: the home folder's
# ~/.cache/wandb, ~/.local/share/wandb, ./artifacts), and the subfolder of <logger.dir>/wandb each takes
# where the user's shell does not set it. WANDB_CONFIG_DIR (the user's settings, credentials) stays as is.
WANDB_FOLDERS = {"WANDB_CACHE_DIR": "cache",  # its logs, the artifact cache
                 "WANDB_DATA_DIR": "data",  # artifacts staged until `wandb sync` uploads them
                 "WANDB_ARTIFACT_DIR": "artifacts"}  # artifacts downloaded (none by this tool)


def wandb_folders(runs_folder: Path) -> dict[str, str]:
    """The variables of WANDB_FOLDERS the user's shell does not set, with their folders under
    `runs_folder` (<logger.dir>/wandb)."""
    return {name: str(Path(runs_folder, sub).absolute()) for name, sub in WANDB_FOLDERS.items()
            if name not in os.environ}


def remove_empty_folders(runs_folder: Path) -> None:
    """Remove the empty folders wandb leaves in the folders of wandb_folders (online, the staging folder
    once its files are uploaded), deepest first; a folder written meanwhile stays."""
    for folder in wandb_folders(runs_folder).values():
        for path, _, _ in sorted(os.walk(folder), key=lambda entry: -len(entry[0])):
            try:
                os.rmdir(path)
            except OSError:
                pass  # not empty


class LoggingProcess:
    """One logging process: `main(conn, *args)` runs in the child, takes the runs from its pipe until the
    stop sign (None) and answers once. What is put in `pending` (runs, then None) the feeder thread sends
    as it comes; a run that cannot be sent (a value that does not pickle) is kept in `unsent`, its error.
    `runs_folder`: <logger.dir>/wandb, where its wandb folders and its temporary folder are."""

    def __init__(self, name: str, main: Callable, args: tuple, runs_folder: Path):
        self.name, self._main, self._args, self.runs_folder = name, main, args, Path(runs_folder)
        self.process: Optional[multiprocessing.Process] = None
        self.conn = None  # the parent's end of the pipe
        self.pending: queue.SimpleQueue = queue.SimpleQueue()
        self.unsent: list[Exception] = []
        self.feeder: Optional[threading.Thread] = None
        self.scratch: Optional[str] = None  # its TMPDIR, removed by stop() or, at the latest, at exit
        self._remove_scratch: Optional[weakref.finalize] = None

    def start(self) -> None:
        self.scratch = tempfile.mkdtemp(prefix="tmp-", dir=self.runs_folder)
        self._remove_scratch = weakref.finalize(self, shutil.rmtree, self.scratch, ignore_errors=True)
        environment = {**wandb_folders(self.runs_folder), "TMPDIR": self.scratch}
        context = multiprocessing.get_context("spawn")  # a fresh interpreter, never a fork of the sweep
        self.conn, child_end = context.Pipe()
        self.process = context.Process(target=_entry, args=(child_end, self._main, self._args, environment),
                                       daemon=True)
        self.process.start()
        child_end.close()  # the child's alone: its death ends the pipe here
        self.feeder = threading.Thread(target=_feed, args=(self.conn, self.pending, self.unsent),
                                       daemon=True)
        self.feeder.start()

    def stop(self) -> None:
        """Kill the child if it is still alive, reap it, close the pipe, and remove its temporary folder
        (its exit leaves wandb's temporary folders in it: _entry) and the empty folders of wandb's."""
        if self.process is not None:
            if self.process.is_alive():
                self.process.kill()
            self.process.join()
            self.conn.close()
        if self.scratch is not None:
            self._remove_scratch()
            remove_empty_folders(self.runs_folder)
        self.process, self.conn, self.scratch = None, None, None


def _entry(conn, main: Callable, args: tuple, environment: dict) -> None:
    """The child: wandb's folders and its TMPDIR set (before wandb is imported: it makes temporary
    folders at its import, and its service takes this environment), `main`, then out at once (os._exit),
    as a forked child would: the runs' files are closed before it answers, and the interpreter's teardown
    (wandb's among it) would only hold the sweep's close() back."""
    os.environ.update(environment)
    tempfile.tempdir = environment["TMPDIR"]  # Python's temporary files: tempfile's own setting
    code = 0
    try:
        main(conn, *args)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        code = 1  # the sweep stopped listening (it stopped this process, or it is gone)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code)


def _feed(conn, pending: queue.SimpleQueue, unsent: list) -> None:
    """A feeder thread: send a logging process its runs, and the stop sign, as they come. A run that
    cannot be sent (a value that does not pickle) is kept in `unsent` with its error, and the next
    goes on."""
    while True:
        item = pending.get()
        try:
            conn.send(item)
        except (BrokenPipeError, OSError):
            return  # the process is gone: TrialLogger.close() says so
        except Exception as error:
            unsent.append(error)
        if item is None:
            return

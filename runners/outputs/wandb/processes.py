"""The W&B trial runs' logging processes (TrialLogger, runners/outputs/wandb/logger.py): each a spawned
interpreter of its own with a pipe, fed its runs by a thread of its own, so that the sweep never waits for
W&B. Standard library only: outputs never use the engine's worker processes (runners/README.md)."""
from __future__ import annotations

import multiprocessing
import os
import queue
import sys
import threading
import traceback
from typing import Callable, Optional


class LoggingProcess:
    """One logging process: `main(conn, *args)` runs in the child, takes the runs from its pipe until the
    stop sign (None) and answers once. What is put in `pending` (runs, then None) the feeder thread sends
    as it comes; a run that cannot be sent (a value that does not pickle) is kept in `unsent`, its error."""

    def __init__(self, name: str, main: Callable, args: tuple):
        self.name, self._main, self._args = name, main, args
        self.process: Optional[multiprocessing.Process] = None
        self.conn = None  # the parent's end of the pipe
        self.pending: queue.SimpleQueue = queue.SimpleQueue()
        self.unsent: list[Exception] = []
        self.feeder: Optional[threading.Thread] = None

    def start(self) -> None:
        context = multiprocessing.get_context("spawn")  # a fresh interpreter, never a fork of the sweep
        self.conn, child_end = context.Pipe()
        self.process = context.Process(target=_entry, args=(child_end, self._main, self._args),
                                       daemon=True)
        self.process.start()
        child_end.close()  # the child's alone: its death ends the pipe here
        self.feeder = threading.Thread(target=_feed, args=(self.conn, self.pending, self.unsent),
                                       daemon=True)
        self.feeder.start()

    def stop(self) -> None:
        """Kill the child if it is still alive, reap it and close the pipe."""
        if self.process is not None:
            if self.process.is_alive():
                self.process.kill()
            self.process.join()
            self.conn.close()
        self.process, self.conn = None, None


def _entry(conn, main: Callable, args: tuple) -> None:
    """The child: `main`, then out at once (os._exit), as a forked child would: the runs' files are closed
    before it answers, and the interpreter's teardown (wandb's among it) would only hold the sweep's
    close() back."""
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

"""A spawned worker process with a pipe, a deadline on every request, and replacement on death.

Both the GPU trial workers (runners/worker.py) and the compile workers (runners/compile_pool.py) are
these. The parent never blocks on one worker: the scheduler waits on all their pipes at once and on the
nearest deadline, so a hang or a crash costs one task, never the sweep.
"""
from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import time
import traceback
from typing import Any, Callable, Optional

from runners import check

READY_TIMEOUT_S = 600  # imports, CUDA context and the L2 flush buffer; generous for a cold file cache


class WorkerLost(Exception):
    """The worker hung past its deadline (timeout) or died (crashed); it has been killed."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status


def _entry(conn, new_session: bool, environment: dict, main: Callable, args: tuple) -> None:
    # A child forked from the fork server has the server's environment, fixed when it started: take the
    # parent's as it is now (TRITON_CACHE_DIR, say, may have changed since).
    os.environ.clear()
    os.environ.update(environment)
    if new_session:
        os.setsid()  # its own process group: a timeout kills it with every child it started (ptxas)
    try:
        main(conn, *args)
    except BaseException:
        traceback.print_exc()
        raise


class WorkerProcess:
    """Parent-side handle of one worker. `main(conn, *args)` runs in the child: it sends ("ready", info)
    once, then answers each request with one message, and returns when it receives None."""

    def __init__(self, name: str, main: Callable, args: tuple, new_session: bool = False, interpret: bool = False,
                 preload: tuple[str, ...] = ()):
        """`preload`: for a worker that never touches CUDA, modules a fork server imports once; each
        such worker is forked from it, in milliseconds, instead of importing them itself (32 compile
        workers importing torch and triton at once took 6 s on a 32-core H200 host, and slowed the
        GPU worker's start from 4 s to 6 s). Without it the worker is spawned: a fresh interpreter,
        never a fork of a process that may hold CUDA."""
        self.name = name
        self._interpret = interpret
        self._main = main
        self._args = args
        self._new_session = new_session
        if preload:
            self._context = multiprocessing.get_context("forkserver")
            self._context.set_forkserver_preload(list(preload))  # read when the fork server starts
        else:
            self._context = multiprocessing.get_context("spawn")
        self.process = None
        self.conn = None
        self.info: Optional[dict] = None  # what the child sent with "ready"
        self.task: Any = None  # the request in flight, None when idle
        self.doing = ""
        self.timeout_s = 0.0
        self.deadline = float("inf")
        self.starts = 0
        self.started = 0.0  # time.monotonic() of the latest start
        self.ready_s: Optional[float] = None  # seconds from that start to its ready message

    @property
    def ready(self) -> bool:
        return self.info is not None

    @property
    def idle(self) -> bool:
        return self.ready and self.task is None

    def start(self) -> None:
        """Spawn (or replace) the child; it is ready once `take()` returns its ready message."""
        self.stop()
        parent_end, child_end = self._context.Pipe()
        environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        if self._interpret:
            environment["TRITON_INTERPRET"] = "1"
        self.process = self._context.Process(target=_entry, daemon=True, args=(
            child_end, self._new_session, environment, self._main, self._args))
        # TRITON_INTERPRET is read when triton is imported, which a spawned child may do before `main`
        # runs (while re-importing the parent's main module), and which the fork server does when the
        # first of its workers starts it: it must be in the environment they inherit, not only in
        # `environment`.
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(environment)
        try:
            self.process.start()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        child_end.close()
        self.conn = parent_end
        self.info = None
        self.task, self.doing, self.timeout_s = "start", f"starting {self.name}", READY_TIMEOUT_S
        self.started = time.monotonic()
        self.deadline = self.started + READY_TIMEOUT_S
        self.starts += 1

    def wait_ready(self) -> dict:
        """Block until the child is ready; raises WorkerLost if it dies or never answers."""
        if self.process is None:
            self.start()
        while not self.ready:
            self._answer()
        return self.info

    def request(self, message: tuple, timeout_s: float, doing: str) -> Any:
        """Send a request and block for its answer (outside the scheduler, e.g. measuring the peaks)."""
        self.submit(message, "request", timeout_s, doing)
        return self._answer()[1]

    def _answer(self) -> tuple[Any, Any]:
        """Block until the answer to the task in flight, or its deadline (then WorkerLost)."""
        if not self.conn.poll(max(self.deadline - time.monotonic(), 0)):
            self.expire()
        return self.take()

    def submit(self, message: tuple, task: Any, timeout_s: float, doing: str) -> None:
        """Send a request; its answer comes back through `take()`, or `expire()` after timeout_s."""
        assert self.idle, f"{self.name} is busy with {self.doing}"
        self.task, self.doing, self.timeout_s = task, doing, timeout_s
        self.deadline = time.monotonic() + timeout_s
        try:
            self.conn.send(message)
        except (BrokenPipeError, OSError) as error:
            self._lose(check.STATUS_CRASHED, f"{self.name} gone ({error}) before {doing}")

    def take(self) -> tuple[Any, Any]:
        """(task, answer) once the pipe is readable. The ready message sets `info` and returns
        ("start", info). Raises WorkerLost when the child died."""
        try:
            kind, payload = self.conn.recv()
        except (EOFError, ConnectionError):
            self.process.join(5)
            self._lose(check.STATUS_CRASHED, f"{self.name} died (exit code {self.process.exitcode}) while {self.doing}")
        task, self.task, self.deadline = self.task, None, float("inf")
        if kind == "ready":
            self.info, self.ready_s = payload, time.monotonic() - self.started
        return task, payload

    def expire(self) -> None:
        """Called when the deadline has passed: kill the child and raise WorkerLost(timeout)."""
        self._lose(check.STATUS_TIMEOUT, f"no answer within {self.timeout_s:g} s while {self.doing}; {self.name} killed")

    def _lose(self, status: str, message: str):
        self.stop()
        raise WorkerLost(status, message)

    def stop(self) -> None:
        """Kill the child (with its process group) if it is alive and forget it; `stop_all` stops
        workers gracefully."""
        if self.process is not None:
            if self.process.is_alive():
                if self._new_session:
                    try:
                        os.killpg(self.process.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                self.process.kill()
            self.process.join()
            self.conn.close()
        self.process = None
        self.conn = None
        self.info = None
        self.task = None
        self.deadline = float("inf")


def drive(workers: list[WorkerProcess], assign: Callable, deliver: Callable, pending: Callable,
          until: Callable[[], bool] = lambda: False) -> None:
    """Keep every worker busy until no work is left and nothing is in flight, or until `until()`
    (then the tasks in flight stay with their workers, for the next call to collect).

    assign(worker) -> (message, task, timeout_s, doing) for an idle worker, or None.
    deliver(worker, task, answer, lost): an answer, or lost (WorkerLost) when the worker hung or died
      while on `task` ("start" for its start-up); a lost worker is started again when work remains.
    pending(worker) -> whether work is left for that worker (only then is it started, or waited for
      while it starts).
    """
    while True:
        for worker in workers:
            if worker.process is None and pending(worker):
                worker.start()
            if worker.idle:
                job = assign(worker)
                if job is not None:
                    message, task, timeout_s, doing = job
                    try:
                        worker.submit(message, task, timeout_s, doing)
                    except WorkerLost as lost:
                        deliver(worker, task, None, lost)
        if until():
            return
        waiting = [w for w in workers if w.task is not None and (w.task != "start" or pending(w))]
        if not waiting:
            return
        timeout = max(min(w.deadline for w in waiting) - time.monotonic(), 0)
        readable = multiprocessing.connection.wait([w.conn for w in waiting], timeout)
        for worker in waiting:
            task = worker.task
            try:
                if worker.conn in readable:
                    task, answer = worker.take()
                elif time.monotonic() >= worker.deadline:
                    worker.expire()
                else:
                    continue
            except WorkerLost as lost:
                deliver(worker, task, None, lost)
                continue
            deliver(worker, task, answer, None)


def stop_all(workers: list[WorkerProcess], grace_s: float = 5.0) -> None:
    """Stop every worker at once: each gets its stop sign, then all share one grace period (a worker
    can take a second to exit with torch and CUDA loaded; one after another, 32 took 20 s)."""
    for worker in workers:
        if worker.process is not None and worker.process.is_alive():
            try:
                worker.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
    deadline = time.monotonic() + grace_s
    for worker in workers:
        if worker.process is not None:
            worker.process.join(max(deadline - time.monotonic(), 0))
        worker.stop()  # kills what is still alive, closes the pipe

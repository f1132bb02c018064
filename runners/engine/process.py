"""A worker process with a pipe, a deadline on every request, and replacement on death; the loop that
drives many at once (drive), and their stop (ask_to_stop, stop_all).

Both the GPU trial workers (runners/engine/worker.py) and the compile workers (runners/engine/compile_pool.py)
are these. The parent never blocks on one worker: the scheduler waits on all their pipes at once and on the
nearest deadline, so a hang or a crash costs one task, never the sweep. A GPU worker is spawned (a fresh
interpreter, never a fork of a process that may hold CUDA), or forked from the command's home server; a
compile worker is forked from a fork server (runners/engine/fork_server.py), which imported torch, Triton
and the kernel's module once, before any fork.
"""
from __future__ import annotations

import importlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
import traceback
from typing import Any, Callable, Optional, Union

from triton_sweep.measure import check

READY_TIMEOUT_S = 600  # imports, CUDA context and the L2 flush buffer; generous for a cold file cache


class WorkerLost(Exception):
    """The worker hung past its deadline (timeout) or died (crashed); it has been killed."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status


def _resolve(main: Union[Callable, str]) -> Callable:
    """A worker's main function, or "module:function" imported here, in the child: the parent then
    needs not import the worker's module (and torch with it) to start it."""
    if callable(main):
        return main
    module, _, name = main.partition(":")
    return getattr(importlib.import_module(module), name)


def child_main(conn, new_session: bool, environment: dict, main: Union[Callable, str], args: tuple,
               parents_end=None) -> None:
    # A child this process forked itself holds the parent's end of its pipe too: closed, so that the
    # parent's exit ends the pipe here (an orphaned home server would wait on it for ever).
    if parents_end is not None:
        parents_end.close()
    # A child forked from the fork server has the server's environment, fixed when it started: take the
    # parent's as it is now (TRITON_CACHE_DIR, say, may have changed since).
    os.environ.clear()
    os.environ.update(environment)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the command's: it stops its workers
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the command's handler (hydra_jobs.stop_on_signals)
    if new_session:
        os.setsid()  # its own process group: a timeout kills it with every child it started (ptxas)
    try:
        _resolve(main)(conn, *args)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        raise SystemExit(1)  # the parent stopped listening (it stopped this worker, or it is gone)
    except BaseException:
        traceback.print_exc()
        raise


def flush_stdio() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed or broken stream: nothing more can be said through it


class WorkerProcess:
    """Parent-side handle of one worker. `main(conn, *args)` runs in the child: it sends ("ready", info)
    once (or ("failed", why) and returns), then answers each request with one message, and returns when
    it receives None. `main` may be "module:function", imported in the child only."""

    def __init__(self, name: str, main: Union[Callable, str], args: tuple, new_session: bool = False,
                 interpret: bool = False, server: Optional[WorkerProcess] = None,
                 fork_here: bool = False):
        """`server`: the ForkServer the worker is forked from, in milliseconds, with what it imported
        (the compile pool's: torch, Triton and the kernel's module). Without one, from this command's home
        server where it has one (start_home_server), else spawned: a fresh interpreter, never a fork of a
        process that may hold CUDA. A worker is forked from the home server only where it imported Triton
        as the worker needs it: Triton reads TRITON_INTERPRET when it is imported.
        `fork_here`: this process forks the child itself (the home server)."""
        self.name = name
        self._interpret = bool(interpret)
        self._main = main
        self._args = args
        self._new_session = new_session
        home = _home if _home is not None and interpret == _home.interprets else None
        self.server = server if server is not None else home
        self._fork_here = fork_here
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
        """Spawn (or replace) the child, or ask the fork server for it; it is ready once `take()`
        returns its ready message. Never waits for the fork server."""
        self.stop()
        if _home is not None and self.server is _home and not _home.running:
            self.server = None  # the home server is gone: spawned from now on
        environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        if self._interpret:
            environment["TRITON_INTERPRET"] = "1"
        if self.server is not None:
            parent_end, child_end = multiprocessing.Pipe()
            request = self.server.fork(child_end, self._new_session, environment, self._main, self._args)
            child_end.close()  # the server holds it until the fork; then the child alone
            self.process = _ForkedChild(self.server, request)
        else:
            context = multiprocessing.get_context("fork" if self._fork_here else "spawn")
            parent_end, child_end = context.Pipe()
            self.process = context.Process(target=child_main, daemon=True, args=(
                child_end, self._new_session, environment, self._main, self._args,
                parent_end if self._fork_here else None))
            # TRITON_INTERPRET is read when triton is imported, which a spawned child may do before
            # `main` runs (while re-importing the parent's main module), and which the fork server
            # does before its first fork: it must be in the environment they inherit, not only in
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
        """Send a request and block for its answer, outside the scheduler's loop (runners/engine/scheduler.py
        serves its workers while it waits: Scheduler.measure_peaks)."""
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
            self._lose(check.STATUS_CRASHED,
                       f"{self.name} died (exit code {self.process.exitcode}) while {self.doing}")
        task, self.task, self.deadline = self.task, None, float("inf")
        if kind == "ready":
            self.info, self.ready_s = payload, time.monotonic() - self.started
        elif kind == "failed":  # its start-up went wrong; the child says why and exits
            self.process.join(5)
            self._lose(check.STATUS_CRASHED, payload)
        return task, payload

    def expire(self) -> None:
        """Called when the deadline has passed: kill the child and raise WorkerLost(timeout)."""
        self._lose(check.STATUS_TIMEOUT,
                   f"no answer within {self.timeout_s:g} s while {self.doing}; {self.name} killed")

    def _lose(self, status: str, message: str):
        self.stop()
        raise WorkerLost(status, message)

    def kill(self) -> None:
        """Kill the child (with its process group) without waiting for it; `stop()` then reaps it."""
        if self.process is None or not self.process.is_alive():
            return
        if isinstance(self.process, _ForkedChild):
            self.process.kill(group=self._new_session)
            return
        if self._new_session:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # it has not called setsid yet: killing it alone is enough
        self.process.kill()

    def stop(self) -> None:
        """Kill the child (with its process group) if it is alive and forget it; `stop_all` stops
        workers gracefully."""
        if self.process is not None:
            self.kill()
            self.process.join()
            self.conn.close()
        self.process = None
        self.conn = None
        self.info = None
        self.task = None
        self.deadline = float("inf")


class _ForkedChild:
    """Parent-side handle of a process a ForkServer forked, with what WorkerProcess uses of a
    multiprocessing.Process: pid, is_alive, kill, join, exitcode. The server reports the pid of each
    fork and the exit code of each child it reaps; until the fork, the child is alive-to-be."""

    def __init__(self, server: WorkerProcess, request: int):
        self._server, self._request = server, request
        self._killed = False

    @property
    def pid(self) -> Optional[int]:
        self._server.poll()
        return self._server.pids.get(self._request)

    @property
    def exitcode(self) -> Optional[int]:
        pid = self.pid
        return None if pid is None else self._server.exits.get(pid)

    def is_alive(self) -> bool:
        pid = self.pid
        if pid is None:  # not forked yet: it will be, unless killed first or the server is gone
            return not self._killed and self._server.running
        if pid in self._server.exits:
            return False
        return self._server.running or _pid_alive(pid)  # a running server reports every exit

    def kill(self, group: bool) -> None:
        self._killed = True
        self._server.kill_child(self._request, group)

    def join(self, timeout: Optional[float] = None) -> None:
        deadline = float("inf") if timeout is None else time.monotonic() + timeout
        while self.is_alive():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            if self._server.running:
                self._server.poll(min(remaining, 1.0))  # wakes at the server's exit report
            else:
                time.sleep(min(remaining, 0.01))


def _pid_alive(pid: int) -> bool:
    """Whether a process that is not our child still runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc: alive as far as can be told




_home: Optional[WorkerProcess] = None  # this command's home server (fork_server.start_home_server)


def home_server() -> Optional[WorkerProcess]:
    return _home


def set_home_server(server: WorkerProcess) -> None:
    """Fork the workers started from now on from `server` (runners/engine/fork_server.py: ForkServer)."""
    global _home
    _home = server


def drive(workers: list[WorkerProcess], assign: Callable, deliver: Callable, pending: Callable,
          until: Callable[[], bool] = lambda: False,
          early: Callable[[WorkerProcess, Any, Any], bool] = lambda worker, task, answer: False) -> None:
    """Keep every worker busy until no work is left and nothing is in flight, or until `until()`
    (then the tasks in flight stay with their workers, for the next call to collect).

    assign(worker) -> (message, task, timeout_s, doing) for an idle worker, or None.
    deliver(worker, task, answer, lost): an answer, or lost (WorkerLost) when the worker hung or died
      while on `task` ("start" for its start-up); a lost worker is started again when work remains.
    pending(worker) -> whether work is left for that worker (only then is it started, or waited for
      while it starts).
    early(worker, task, answer) -> whether the worker gets its next task before `answer` is delivered:
      the worker works while the caller records (a row's commit to disk: ~4 ms).
    """
    while True:
        for worker in workers:
            if worker.process is None and pending(worker):
                worker.start()
            if worker.idle:
                _give(worker, assign, deliver)
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
            if early(worker, task, answer):
                _give(worker, assign, deliver)
            deliver(worker, task, answer, None)


def _give(worker: WorkerProcess, assign: Callable, deliver: Callable) -> None:
    """The idle worker's next task, if assign() has one."""
    job = assign(worker)
    if job is not None:
        message, task, timeout_s, doing = job
        try:
            worker.submit(message, task, timeout_s, doing)
        except WorkerLost as lost:
            deliver(worker, task, None, lost)


def ask_to_stop(workers: list[WorkerProcess]) -> None:
    """Give every live worker its stop sign, without waiting: it exits while the caller goes on, and
    `stop_all` reaps it later."""
    for worker in workers:
        if worker.process is not None and worker.process.is_alive():
            try:
                worker.conn.send(None)
            except (BrokenPipeError, OSError):
                pass


def stop_all(workers: list[WorkerProcess], grace_s: float = 5.0) -> None:
    """Stop every worker at once: each gets its stop sign, then all share one grace period (a worker
    can take a second to exit with torch and CUDA loaded; one after another, 32 took 20 s). Then the
    fork servers they came from."""
    ask_to_stop(workers)
    deadline = time.monotonic() + grace_s
    for worker in workers:
        if worker.process is not None:
            worker.process.join(max(deadline - time.monotonic(), 0))
        worker.stop()  # kills what is still alive, closes the pipe
    for server in {id(w.server): w.server for w in workers if w.server not in (None, _home)}.values():
        server.stop()  # the home server serves the command's later jobs too; it ends with the command

"""A worker process with a pipe, a deadline on every request, and replacement on death; and the fork
server the compile workers are forked from.

Both the GPU trial workers (runners/engine/worker.py) and the compile workers (runners/engine/compile_pool.py)
are these. The parent never blocks on one worker: the scheduler waits on all their pipes at once and on the
nearest deadline, so a hang or a crash costs one task, never the sweep. A GPU worker is spawned (a fresh
interpreter, never a fork of a process that may hold CUDA); a compile worker is forked from a
ForkServer, which imported torch, Triton and the kernel's module once, before any fork.
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
from multiprocessing import reduction
from typing import Any, Callable, Optional, Union

from runners.measure import check

READY_TIMEOUT_S = 600  # imports, CUDA context and the L2 flush buffer; generous for a cold file cache


def import_ahead(names) -> dict[str, str]:
    """Import `names` ahead of the work that needs them; {name: why} for each that failed in any way (an
    import of a broken package can raise anything): the work that needs it imports it again, and reports
    the failure there."""
    failed = {}
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as error:
            failed[name] = f"{type(error).__name__}: {error}"[:500]
    return failed


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


def _entry(conn, new_session: bool, environment: dict, main: Union[Callable, str], args: tuple,
           parents_end=None) -> None:
    # A child this process forked itself holds the parent's end of its pipe too: closed, so that the
    # parent's exit ends the pipe here (an orphaned home server would wait on it for ever).
    if parents_end is not None:
        parents_end.close()
    # A child forked from the fork server has the server's environment, fixed when it started: take the
    # parent's as it is now (TRITON_CACHE_DIR, say, may have changed since).
    os.environ.clear()
    os.environ.update(environment)
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
                 interpret: Optional[bool] = False, server: Optional["ForkServer"] = None,
                 fork_here: bool = False):
        """`server`: the ForkServer the worker is forked from, in milliseconds, with what it imported
        (the compile pool's: torch, Triton and the kernel's module). Without one, from this command's home
        server where it has one (start_home_server), else spawned: a fresh interpreter, never a fork of a
        process that may hold CUDA. A worker is forked from the home server only where it imported Triton
        as the worker needs it: Triton reads TRITON_INTERPRET when it is imported (`interpret` None: a
        worker that runs no kernel, forked from the home server either way).
        `fork_here`: this process forks the child itself (the home server)."""
        self.name = name
        self._interpret = bool(interpret)
        self._main = main
        self._args = args
        self._new_session = new_session
        home = _home if _home is not None and interpret in (None, _home.interprets) else None
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
            self.process = context.Process(target=_entry, daemon=True, args=(
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

    def __init__(self, server: "ForkServer", request: int):
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


class ForkServer(WorkerProcess):
    """A spawned process that imports `preload` once (torch, Triton, the kernel's module: seconds
    each, a kernel library's module maybe many), then forks a worker per request, in milliseconds, with
    all of it already imported; it never touches CUDA.

    Started at once and never waited for: `start()` returns while it imports, and workers asked of it
    meanwhile are forked when it is ready (their ready message says so). Its own ready message arrives
    through `take()`, as a worker's does (it takes part in `drive` until then), with the seconds its
    imports took. After that it answers no request: `fork()` and `kill_child()` talk to it, and
    `poll()` reads the pids of the forks and the exit codes of the children it reaps."""

    def __init__(self, preload: tuple[str, ...], fork_here: bool = False, interpret: bool = False):
        super().__init__("fork server", _fork_server_main, (tuple(preload),), interpret=interpret,
                         fork_here=fork_here)
        self.preload = tuple(preload)
        self.pids: dict[int, int] = {}  # request -> pid of the child forked for it
        self.exits: dict[int, int] = {}  # pid -> exit code (negative: the signal that ended it)
        self._requests = 0
        self._gone = False

    @property
    def interprets(self) -> bool:
        """Whether its Triton runs kernels in the interpreter (TRITON_INTERPRET)."""
        return self._interpret

    @property
    def running(self) -> bool:
        return self.conn is not None and not self._gone

    def start(self) -> None:
        super().start()
        self.pids, self.exits, self._gone = {}, {}, False

    def fork(self, child_end, new_session: bool, environment: dict, main: Union[Callable, str],
             args: tuple) -> int:
        """Ask for a worker running `main(conn, *args)` on the other end of child_end's pipe; returns
        the request's number. The request waits in the pipe while the server imports. A server gone
        leaves the request unanswered: the worker's pipe then ends, and it counts as died."""
        self._requests += 1
        if self.running:
            try:
                self.conn.send(("fork", self._requests, new_session, environment, main, args))
                reduction.send_handle(self.conn, child_end.fileno(), self.process.pid)
            except (BrokenPipeError, ConnectionError, OSError):
                self._gone = True
        return self._requests

    def kill_child(self, request: int, group: bool) -> None:
        """SIGKILL the child of `request` (and its process group when it leads one); a child not forked
        yet is killed by the server as soon as it is forked (requests are served in order)."""
        pid = self.pids.get(request)
        if pid is None:
            if self.running:
                try:
                    self.conn.send(("kill", request, group))
                except (BrokenPipeError, ConnectionError, OSError):
                    self._gone = True
            return
        _kill(pid, group)

    def poll(self, timeout: float = 0.0) -> None:
        """Read every message the server has sent, waiting up to `timeout` for the first."""
        if not self.running:
            return
        try:
            while self.conn.poll(timeout):
                timeout = 0.0
                kind, *payload = self.conn.recv()
                if kind == "ready":
                    self.info, self.ready_s = payload[0], time.monotonic() - self.started
                    self.task, self.deadline = None, float("inf")
                elif kind == "forked":
                    self.pids[payload[0]] = payload[1]
                elif kind == "exited":
                    self.exits[payload[0]] = payload[1]
        except (EOFError, ConnectionError, OSError):
            self._gone = True

    def take(self) -> tuple[Any, Any]:
        """("start", info) once the server has imported; raises WorkerLost when it died first."""
        self.poll()
        if self.info is None:
            self.process.join(5)
            self._lose(check.STATUS_CRASHED, f"{self.name} died (exit code {self.process.exitcode}) while "
                                             f"importing {', '.join(self.preload)}")
        return "start", self.info

    def stop(self) -> None:
        super().stop()
        self._gone = True


_home: Optional[ForkServer] = None  # this command's home server (start_home_server)


def start_home_server(preload: tuple[str, ...]) -> None:
    """Fork this command's home server, which imports `preload` (torch and Triton) while the command
    composes its config: every worker the command starts later (not the compile pool's, forked from a
    fork server of their own; those that need Triton in the other mode of TRITON_INTERPRET than this
    environment's) is forked from it with those imported, instead of spawned into an interpreter that
    imports them again (seconds: BENCHMARKS.md, O6).
    Called first, while this process holds no CUDA and runs one thread; the server never touches CUDA,
    and ends with this process (its pipe ends)."""
    global _home
    if _home is not None:  # one a command
        return
    # how it imports Triton (the values Triton takes for true)
    interprets = os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")
    _home = ForkServer(tuple(preload), fork_here=True, interpret=interprets)
    _home.start()


def _kill(pid: int, group: bool) -> None:
    if group:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # it has not called setsid yet (or is gone): killing it alone is enough
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _fork_server_main(conn, preload: tuple[str, ...]) -> None:
    began = time.perf_counter()
    # Its children may use CUDA (the home server's trial workers): an import that asks torch whether CUDA
    # is there would otherwise ask the driver, and torch then refuses CUDA in every fork.
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    failed = import_ahead(preload)  # a worker imports what failed again after the fork, and says why
    seconds = time.perf_counter() - began
    # Ctrl-C is the sweep's to handle (it stops every worker); each exit of a child wakes the loop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    conn.send(("ready", {"pid": os.getpid(), "seconds": seconds, "preload": list(preload), "failed": failed}))
    children: dict[int, int] = {}  # pid -> request
    forked: dict[int, int] = {}  # request -> pid
    while True:
        readable = multiprocessing.connection.wait([conn, wake_r])
        if wake_r in readable:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if children.pop(pid, None) is not None:
                conn.send(("exited", pid, os.waitstatus_to_exitcode(status)))
        if conn not in readable:
            continue
        try:
            message = conn.recv()
        except (EOFError, ConnectionError):
            return  # the sweep is gone; each worker sees its own pipe end
        if message is None:
            return
        if message[0] == "kill":
            _, request, group = message
            if request in forked:
                _kill(forked[request], group)
            continue
        _, request, new_session, environment, main, args = message
        fd = reduction.recv_handle(conn)
        pid = os.fork()
        if pid == 0:
            _run_forked(conn, (wake_r, wake_w), fd, new_session, environment, main, args)
        os.close(fd)
        children[pid], forked[request] = request, pid
        conn.send(("forked", request, pid))


def _run_forked(server_conn, wake_fds: tuple, fd: int, new_session: bool, environment: dict,
                main: Union[Callable, str], args: tuple) -> None:
    """The forked child: the server's signal set-up undone, its pipes closed, then `main`; never
    returns into the server's loop."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        server_conn.close()
        for wake_fd in wake_fds:
            os.close(wake_fd)
        _entry(multiprocessing.connection.Connection(fd), new_session, environment, main, args)
        code = 0
    except SystemExit as error:
        code = error.code if isinstance(error.code, int) else 1
    except BaseException:  # already printed by _entry
        code = 1
    finally:
        flush_stdio()
        os._exit(code)


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

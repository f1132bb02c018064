"""The fork server: a process that imports torch, Triton and the kernel's module once, then forks a worker
per request in milliseconds, with all of it imported; and the command's home server, one of them.

The compile workers (runners/engine/compile_pool.py) are forked from a fork server of their own; the
trial workers of a command are forked from its home server where it has one (start_home_server). The
parent-side handle of a forked child is runners/engine/process.py's (_ForkedChild).
"""
from __future__ import annotations

import importlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from multiprocessing import reduction
from typing import Any, Callable, Union

from triton_sweep.engine import process
from triton_sweep.engine.process import WorkerProcess, child_main, flush_stdio
from triton_sweep.measure import check


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


HOME_PRELOAD = ("torch", "triton", "scipy.stats")  # what a command's trial workers import
_wanted: tuple[str, ...] = ()  # the preload of the home server this command wants (want_home_server)


def want_home_server(preload: tuple[str, ...] = HOME_PRELOAD) -> None:
    """Called by a command's entry (not by a launcher's job process, which imports this module afresh).
    With cores to spare, the home server starts now and imports `preload` while the command goes on; on
    2 cores or fewer, once the command has checked its input (start_wanted_home_server), from this
    process with `preload` imported here first: imported once, not twice at once (1.5-2 s of CPU)."""
    global _wanted
    _wanted = tuple(preload)
    if (os.cpu_count() or 1) > 2:
        start_home_server(_wanted)


def start_wanted_home_server() -> None:
    """The home server this command wants, where it has not started yet (want_home_server)."""
    if _wanted and process.home_server() is None:
        import_ahead(_wanted)
        start_home_server(_wanted)


def start_home_server(preload: tuple[str, ...]) -> None:
    """Fork this command's home server, which imports `preload` (torch and Triton, unless this process
    has: want_home_server): every worker the command starts later (not the compile pool's,
    forked from a fork server of their own; those that need Triton in the other mode of TRITON_INTERPRET
    than this environment's) is forked from it with those imported, instead of spawned into an
    interpreter that imports them again (seconds: BENCHMARKS.md, O6).
    Called while this process holds no CUDA and runs one thread; the server never touches CUDA, and ends
    with this process (its pipe ends)."""
    if process.home_server() is not None:  # one a command
        return
    # how it imports Triton (the values Triton takes for true)
    interprets = os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")
    server = ForkServer(tuple(preload), fork_here=True, interpret=interprets)
    process.set_home_server(server)
    server.start()


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
        server_conn.close()
        for wake_fd in wake_fds:
            os.close(wake_fd)
        child_main(multiprocessing.connection.Connection(fd), new_session, environment, main, args)
        code = 0
    except SystemExit as error:
        code = error.code if isinstance(error.code, int) else 1
    except BaseException:  # already printed by child_main
        code = 1
    finally:
        flush_stdio()
        os._exit(code)

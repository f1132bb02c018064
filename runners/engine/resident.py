"""The resident: a process that outlives a sweep command and starts the next one in milliseconds.

A sweep's start is mostly imports: torch, Triton, Hydra and pandas in the command's process, torch and
Triton again in each trial worker, dynamo and inductor in the worker of the torch.compile baselines
(13-15 s before its first compile on an H100 host, 10.5-13.8 s on H200 hosts), wandb in the processes of
the W&B trial runs. After a command ends, it leaves a resident behind
(unless SWEEP_RESIDENT_S=0): a process that imports all of that once, never touches CUDA, and waits
SWEEP_RESIDENT_S seconds (default 900) for the next command. The next `python -m runners.sweep ...`
(or `runners.revalidate ...`: start_command, end_command) with the same Python, import path,
environment and installed versions connects to it over a Unix socket and is run in a child the resident
forks: the child takes the command's arguments, working directory, environment and terminal (its file
descriptors 0-2, passed over the socket), imports the project's own modules afresh from disk (an edit to
kernels/ or runners/ is seen), and forks its workers from a home server of its own
(runners/engine/process.py: start_home_server) instead of spawning fresh interpreters. The client
forwards Ctrl-C and exits with the command's status; a command the resident cannot serve runs as
before, in the client's own process.

What keys a resident (RESIDENT_ENV_PREFIXES, PRELOAD's installed files, the import path, the
interpreter's flags): anything that changes what an import would do. A resident that imported Triton
with TRITON_INTERPRET set gives no home server: its workers are spawned as before (Triton reads that
variable when it is imported). In this user's folder, per key: `<key>.lock`, taken by the command that
starts the resident and held by the resident until it exits (one resident a key; a command that finds
it held and no socket yet waits for the import), `<key>.sock`, `<key>.log`, and `<key>.failed` where a
start failed (none is started again for that key).

    python -m runners.engine.resident status     # the residents of this user: pid, age, idle time, key
    python -m runners.engine.resident stop       # ask them all to exit now
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import importlib.util
import io
import json
import os
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Optional

IDLE_VARIABLE = "SWEEP_RESIDENT_S"  # seconds a resident waits for the next command; 0: none started or used
DEFAULT_IDLE_S = 900
CHILD_VARIABLE = "SWEEP_RESIDENT_CHILD"  # set in a command the resident runs: it is not a client again
# What every command imports (the command, its trial workers, its compile pool, the torch.compile
# baselines' worker), third-party only: the project's own modules are imported afresh by each command.
PRELOAD = ("torch", "triton", "torch._dynamo", "torch._inductor.compile_fx", "torch.profiler", "hydra",
           "omegaconf", "pandas", "numpy", "tqdm", "scipy.special", "wandb")
# Environment variables read when those modules are imported, or by the interpreter itself.
RESIDENT_ENV_PREFIXES = ("TRITON", "TORCH", "PYTORCH", "CUDA", "NVIDIA", "LD_", "PYTHON", "OMP_", "MKL_",
                         "OPENBLAS", "HYDRA", "VIRTUAL_ENV", "WANDB", "LANG", "LC_")
REPO = Path(__file__).resolve().parents[2]
WAIT_FOR_STARTING_S = 120  # a client waits this long at most for a resident that is still importing


def idle_seconds(environ=os.environ) -> float:
    value = environ.get(IDLE_VARIABLE, str(DEFAULT_IDLE_S))
    try:
        seconds = float(value)
    except ValueError:
        raise SystemExit(f"error: {IDLE_VARIABLE}={value!r}: seconds a resident waits for the next command "
                         "(a number; 0: none)")
    return max(seconds, 0.0)


class ResidentUnavailable(Exception):
    """No resident can be used or left here: the reason."""


def folder() -> Path:
    """This user's folder of residents' sockets and logs, readable by this user alone. A folder of that
    name that another user owns, or others may write, is refused: a socket placed there by someone else
    would be sent this user's environment and terminal."""
    base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    path = Path(base) / f"triton-sweep-resident-{os.getuid()}"
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        state = os.lstat(path)
    except OSError as error:
        raise ResidentUnavailable(f"{path}: {error}")
    if not stat.S_ISDIR(state.st_mode) or state.st_uid != os.getuid() or state.st_mode & 0o077:
        raise ResidentUnavailable(f"{path} is not a folder of this user's alone (mode "
                                  f"{stat.filemode(state.st_mode)}, owner {state.st_uid})")
    return path


def key(environ, path: list[str]) -> str:
    """What a resident must share with a command to run it: the Python, the import path, the variables
    read at import, the installed files of PRELOAD's packages (a reinstall changes them) and this file."""
    packages = {}
    for name in sorted({module.split(".")[0] for module in PRELOAD}):
        spec = importlib.util.find_spec(name)  # a top-level name: found, not imported
        if spec is not None and spec.origin:
            installed = os.stat(spec.origin)
            packages[name] = [spec.origin, installed.st_mtime_ns, installed.st_size]
    this = os.stat(__file__)
    described = {"python": sys.executable, "version": sys.version, "flags": list(sys.flags),
                 "path": list(path), "packages": packages,
                 "resident": [this.st_mtime_ns, this.st_size],
                 "environment": sorted((name, value) for name, value in environ.items()
                                       if name.startswith(RESIDENT_ENV_PREFIXES))}
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:20]


# --- the client: a command that a resident may run ---------------------------------------------------

def start_command(module: str) -> None:
    """The first step of a command that starts workers (`python -m runners.sweep`, `runners.revalidate`),
    before its heavy imports: bytecode where Python writes none (runners/engine/bytecode.py), then the
    command run by a resident where one serves it (this process exits there with its status), else
    here, its workers forked from a home server that imports torch and Triton while this process goes on
    (runners/engine/process.py: start_home_server). Not for the interpreter: Triton reads TRITON_INTERPRET
    at its import. A command the resident runs has its home server already (_run_command)."""
    from runners.engine.bytecode import keep_bytecode, precompile_in_background
    from runners.engine.process import start_home_server

    bytecode = keep_bytecode()  # first: the resident's key reads the environment it sets
    run_in_resident(module)
    if os.environ.get(CHILD_VARIABLE):
        return
    if bytecode is not None:
        precompile_in_background(bytecode)
    if "TRITON_INTERPRET" not in os.environ:
        start_home_server(("torch", "triton"))


def end_command(code: int) -> None:
    """The last step of such a command, once it has returned: its store and files are closed, its
    workers stopped (what a background process writes lives on its own). Leaves a resident for the next
    command unless one runs (leave_resident), and exits with `code` without the modules' teardown
    (runners/engine/process.py: exit_without_teardown)."""
    from runners.engine.process import exit_without_teardown

    leave_resident()
    exit_without_teardown(code)


# The command's environment, import path and directory as it started: the resident it leaves behind
# starts from them (the first two are its key).
_started_with: Optional[tuple[dict, list[str], str]] = None


def run_in_resident(module: str) -> None:
    """Run `python -m <module> ...` in this user's resident for this Python, path and environment, and
    exit with its status; return where none serves it (none running or allowed, or this is already a
    command the resident runs), the command then running here as before. A resident still importing is
    waited for: it is ahead of an import this process would start from nothing."""
    global _started_with
    _started_with = (dict(os.environ), list(sys.path), os.getcwd())
    if os.environ.get(CHILD_VARIABLE) or not idle_seconds():
        return
    try:
        address = folder() / f"{key(os.environ, sys.path)}.sock"
    except ResidentUnavailable as why:
        print(f"note: no resident: {why}", file=sys.stderr)
        return
    connection = _connect(address, wait=True)
    if connection is None:
        return
    request = {"module": module, "argv": sys.argv, "cwd": os.getcwd(), "path": sys.path,
               "environ": dict(os.environ)}
    try:
        _send_request(connection, request, [0, 1, 2])
        reader = connection.makefile("r")
        child = int(reader.readline().split()[1])  # "pid N"
    except (OSError, ValueError, IndexError):
        connection.close()
        return  # the resident went away before taking the command: run it here
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, lambda number, frame: _forward(child, number))
    line = reader.readline()  # "exit N", once the command has ended
    status = int(line.split()[1]) if line.startswith("exit ") else None
    if status is None:
        print(f"error: the resident's command (pid {child}) ended without a status", file=sys.stderr)
        status = 1
    sys.stdout.flush()
    if status < 0:  # the command died of signal -status (Ctrl-C: SIGINT): so does this process, as a
        signal.signal(-status, signal.SIG_DFL)  # shell's loop that stops on Ctrl-C expects
        os.kill(os.getpid(), -status)
    os._exit(status if status >= 0 else 128 - status)


def _forward(child: int, number: int) -> None:
    try:
        os.kill(child, number)
    except ProcessLookupError:
        pass  # it has ended: its status is on its way


def _connect(address: Path, wait: bool) -> Optional[socket.socket]:
    """A connection to the resident at `address`; with `wait`, to one that is still importing too (its
    lock held, its socket not there yet), for WAIT_FOR_STARTING_S at most. None if there is none."""
    deadline = time.monotonic() + WAIT_FOR_STARTING_S
    while True:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(str(address))
            return connection
        except OSError:
            connection.close()
        if not (wait and _held(address.with_suffix(".lock")) and time.monotonic() < deadline):
            return None
        time.sleep(0.05)


def _held(lock: Path) -> bool:
    """Whether a resident holds `lock`: it does from its start to its exit (serve), and the kernel lets
    go of it when the process ends however it ends, so no stale marker outlives a killed resident."""
    try:
        descriptor = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(descriptor)  # releases it where this process took it
    return False


def starting() -> list[Path]:
    """The sockets of this user's residents that are still importing."""
    return [lock.with_suffix(".sock") for lock in folder().glob("*.lock")
            if _held(lock) and not lock.with_suffix(".sock").exists()]


def leave_resident() -> None:
    """At a command's end: start a resident for the next command, in the background, unless one runs
    or is starting for this Python, path and environment (its lock is held), one failed to start for
    them before, or SWEEP_RESIDENT_S=0. Says where it is, on stderr (stdout may be a config that
    Hydra's --cfg printed)."""
    environ, path, directory = _started_with or (dict(os.environ), list(sys.path), os.getcwd())
    if environ.get(CHILD_VARIABLE) or not idle_seconds(environ):
        return
    try:
        address = folder() / f"{key(environ, path)}.sock"
    except ResidentUnavailable:
        return  # said when this command started
    if address.with_suffix(".failed").exists():
        return
    # The key's lock, taken here and handed to the resident (the same open file, so the same lock): held
    # from before its start, a command that comes next finds it starting and waits, and a second
    # command ending now does not start another.
    lock = os.open(address.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        return  # a resident runs, or is starting, for this key
    log = open(address.with_suffix(".log"), "ab")
    # The interpreter's own flags (-u, -X, -W ...) as this process has them: they are part of the key.
    flags = subprocess._args_from_interpreter_flags()
    command = [sys.executable, *flags, "-m", "runners.engine.resident", "serve", str(address), str(lock)]
    try:
        process = subprocess.Popen(command, env=environ, cwd=directory, stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                   pass_fds=(lock,))
    finally:
        os.close(lock)  # the resident holds it now
        log.close()
    print(f"a resident (pid {process.pid}) keeps torch, Triton, dynamo and inductor imported for the next "
          f"command, for {idle_seconds(environ):g} s ({IDLE_VARIABLE}=0: none); log {log.name}",
          file=sys.stderr)


# --- the resident ------------------------------------------------------------------------------------

def serve(address: Path, lock: int) -> None:
    """With the key's lock (descriptor `lock`, taken by the command that started this process and held
    until this process ends), import PRELOAD, then listen at `address` and fork a child for each command,
    until none came for SWEEP_RESIDENT_S seconds (or `stop`). Never touches CUDA; one thread. A start
    that fails leaves `.failed` with the reason: none is started again for this key (a new install,
    environment or version of this file makes another)."""
    from runners.engine.process import import_ahead

    os.set_inheritable(lock, False)  # nothing it starts holds it (the commands it forks close it)
    os.ftruncate(lock, 0)
    os.write(lock, str(os.getpid()).encode())  # for `stop`, which ends a resident still importing
    began = time.time()
    # As each trial worker does before its imports (runners/engine/worker.py): inductor's compile
    # processes would compete with our pool; read by inductor when it is imported.
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    try:
        # An import that asks torch whether CUDA is there (torch.cuda.is_available) would otherwise ask the
        # driver, and torch then refuses CUDA in every process forked from here ("Cannot re-initialize
        # CUDA in forked subprocess", seen on an H200 host with torch 2.11): NVML answers instead.
        os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
        # What is not installed, or broken (wandb's can fail anywhere in its imports), each command
        # imports as before, and says so; each command's compiles find the source keys computed.
        failed = import_ahead(PRELOAD)
        _check_forks_may_use_cuda()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        pending = address.with_suffix(f".{os.getpid()}")
        pending.unlink(missing_ok=True)
        listener.bind(str(pending))
        listener.listen(16)
        os.replace(pending, address)  # ready: a client connects from now on
        inode = os.stat(address).st_ino
    except Exception as error:
        address.with_suffix(".failed").write_text(f"{type(error).__name__}: {error}\n")
        raise
    imported_s = time.time() - began
    print(f"resident {os.getpid()}: imported {', '.join(n for n in PRELOAD if n not in failed)} in "
          f"{imported_s:.1f} s" + (f" (not: {failed})" if failed else "") + f"; serving {address}",
          flush=True)
    _serve_commands(listener, address, inode, began, imported_s, lock)


@contextlib.contextmanager
def _forking():
    """Python warns at a fork of a process with threads other than its own; the resident's (on an H200
    host: jemalloc's background thread, loaded with pandas, and one the CUDA driver starts when torch
    loads it) hold no lock a forked command takes, and _check_forks_may_use_cuda proves the one that
    matters. The warning is silenced for these forks alone."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*use of fork\(\) may lead to deadlocks",
                                category=DeprecationWarning)
        yield


def _check_forks_may_use_cuda() -> None:
    """Raise unless a process forked from here may start CUDA: torch has not (is_initialized), nor marked
    forks as unable to (its bad-fork flag, read in a forked probe), and no other Python thread runs."""
    import torch

    with _forking():
        probe = os.fork()
    if probe == 0:
        os._exit(1 if torch.cuda._is_in_bad_fork() else 0)
    bad_fork = os.waitstatus_to_exitcode(os.waitpid(probe, 0)[1]) != 0
    if torch.cuda.is_initialized() or bad_fork or threading.active_count() > 1:
        raise RuntimeError(f"after importing {', '.join(PRELOAD)}: CUDA initialized "
                           f"{torch.cuda.is_initialized()}, forks refused CUDA {bad_fork}, Python threads "
                           f"{threading.active_count()}: commands cannot be forked from here")


def _serve_commands(listener: socket.socket, address: Path, inode: int, began: float,
                    imported_s: float, lock: int) -> None:
    """Fork a child for each command; tell each client its command's pid, then its exit status. Stops
    taking commands after SWEEP_RESIDENT_S idle, on `stop`, or once its socket is removed or taken by a
    newer resident: the socket goes at once (a client then runs its command itself), and the resident
    exits once the commands it runs have ended."""
    idle_s = idle_seconds()
    clients: dict[int, socket.socket] = {}  # pid of a command -> its client's connection
    last = time.monotonic()
    listener.settimeout(0.2)
    while listener is not None or clients:
        for pid in list(clients):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                _send_line(clients.pop(pid), f"exit {os.waitstatus_to_exitcode(status)}", close=True)
                last = time.monotonic()
        if listener is None:
            time.sleep(0.05)
            continue
        if not ((clients or time.monotonic() - last <= idle_s) and _owns(address, inode)):
            listener = _close(listener, address, inode)
            continue
        try:
            connection, _ = listener.accept()
        except socket.timeout:
            continue
        connection.settimeout(5)  # for the request; the command's child waits on it without a limit
        try:
            message, descriptors = _receive(connection)
        except (OSError, ValueError) as error:
            print(f"resident: a request could not be read ({error})", flush=True)
            connection.close()
            continue
        if message.get("stop"):
            listener = _close(listener, address, inode)  # before the answer: `stop` ends with it removed
            connection.close()
        elif message.get("status"):
            _send_line(connection, json.dumps({"pid": os.getpid(), "address": str(address),
                                               "age_s": time.time() - began, "imported_s": imported_s,
                                               "idle_s": time.monotonic() - last, "commands": len(clients)}),
                       close=True)
        else:
            last = time.monotonic()
            with _forking():
                pid = os.fork()
            if pid == 0:
                listener.close()
                os.close(lock)  # the key's lock is the resident's: a command outliving it must not hold it
                for other in clients.values():
                    other.close()
                _run_command(connection, descriptors, message, time.time() - began)  # never returns
            for descriptor in descriptors:
                os.close(descriptor)
            clients[pid] = connection
            _send_line(connection, f"pid {pid}")
    print(f"resident {os.getpid()}: exits", flush=True)


def _close(listener: socket.socket, address: Path, inode: int) -> None:
    """Take no more commands: the socket removed (where it is still this resident's) and closed."""
    if _owns(address, inode):
        address.unlink(missing_ok=True)
    listener.close()
    return None


def _owns(address: Path, inode: int) -> bool:
    """Whether `address` is still this resident's socket (not removed by `stop`, nor taken by another)."""
    try:
        return os.stat(address).st_ino == inode
    except OSError:
        return False


def _send_line(connection: socket.socket, line: str, close: bool = False) -> None:
    try:
        connection.sendall((line + "\n").encode())
    except OSError:
        pass  # the client is gone (killed): nothing more to tell it
    if close:
        connection.close()


def _send_request(connection: socket.socket, request: dict, descriptors: list[int]) -> None:
    """A request as _receive reads it: its length, its JSON, and `descriptors` passed alongside."""
    body = json.dumps(request).encode()
    socket.send_fds(connection, [struct.pack("!Q", len(body)) + body], descriptors)


def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
    """A request: its length, its JSON, and the client's descriptors (closed here if the rest fails:
    held, the client's stdout would stay open for as long as this resident lives)."""
    data, descriptors, _, _ = socket.recv_fds(connection, 1 << 20, 3)
    try:
        if len(data) < 8:
            raise ValueError("a request shorter than its length")
        size, data = struct.unpack("!Q", data[:8])[0], data[8:]
        while len(data) < size:
            more = connection.recv(size - len(data))
            if not more:
                raise ValueError("a request cut short")
            data += more
        return json.loads(data), descriptors
    except (OSError, ValueError):
        for descriptor in descriptors:
            os.close(descriptor)
        raise


def _run_command(connection: socket.socket, descriptors: list[int], message: dict, age_s: float) -> None:
    """In the forked child: become the client's command (its terminal, directory, environment, argv and
    import path), import the project's modules afresh, fork the home server, run the module as
    `python -m` would, and exit with its status (the resident reports it to the client)."""
    # The resident's own copy, imported before the fork: the exit below never depends on the project's
    # modules imported afresh (they may fail to import), and this child never returns into the
    # resident's loop.
    from runners.engine.process import exit_without_teardown

    code, killed_by = 1, None
    try:
        os.setsid()  # the resident's Ctrl-C is not the command's, nor the other way round
        for target, descriptor in enumerate(descriptors):
            os.dup2(descriptor, target)
            os.close(descriptor)
        os.chdir(message["cwd"])
        os.environ.clear()
        os.environ.update(message["environ"])
        os.environ[CHILD_VARIABLE] = "1"
        sys.path[:] = message["path"]
        sys.argv[:] = message["argv"]
        _reopen_standard_streams()
        for name in [name for name, module in sys.modules.items() if _is_project_module(module)]:
            del sys.modules[name]  # imported again from disk: an edit since the resident started is seen
        importlib.invalidate_caches()
        from runners.engine import process

        if "TRITON_INTERPRET" not in os.environ:  # as when the resident imported Triton (the key holds it)
            process.start_home_server()
        connection.settimeout(None)
        threading.Thread(target=_stop_when_client_leaves, args=(connection,), daemon=True).start()
        print(f"run by the resident {os.getppid()} (torch, Triton, dynamo and inductor imported there "
              f"{age_s:.0f} s ago; {IDLE_VARIABLE}=0: none)", file=sys.stderr)
        import runpy

        runpy.run_module(message["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as error:
        code = error.code if isinstance(error.code, int) else (0 if error.code is None else 1)
        if not isinstance(error.code, (int, type(None))):
            print(error.code, file=sys.stderr)
    except BaseException as error:
        import traceback

        traceback.print_exc()
        if isinstance(error, KeyboardInterrupt):
            killed_by = signal.SIGINT  # Python ends so after an uncaught Ctrl-C; the client does likewise
    finally:
        exit_without_teardown(code, killed_by)


def _is_project_module(module) -> bool:
    """A module of this checkout's own (runners, kernels, hydra_plugins), not an installed package (a
    virtual environment may sit inside the checkout)."""
    path = getattr(module, "__file__", None)
    if not path:
        return False
    parts = Path(path).resolve().parts
    return parts[:len(REPO.parts)] == REPO.parts and "site-packages" not in parts


def _reopen_standard_streams() -> None:
    """sys.stdout and sys.stderr over the client's descriptors, buffered as the client's would be: line by
    line on a terminal (stderr always), not at all with PYTHONUNBUFFERED or -u (the resident's own were a
    log file); the encoding and error handlers are the resident's, whose locale and PYTHONIOENCODING
    the key holds."""
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED")) or sys.flags.unbuffered
    for number, name in ((1, "stdout"), (2, "stderr")):
        raw = io.FileIO(number, "w", closefd=False)
        old = getattr(sys, name)
        stream = io.TextIOWrapper(raw if unbuffered else io.BufferedWriter(raw), encoding=old.encoding,
                                  errors=old.errors, line_buffering=os.isatty(number) or name == "stderr",
                                  write_through=unbuffered)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))


def _stop_when_client_leaves(connection: socket.socket) -> None:
    """The client killed (its connection ends): stop the command as Ctrl-C would."""
    try:
        while connection.recv(4096):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGINT)


# --- status and stop -----------------------------------------------------------------------------------

def _ask(address: Path, request: dict) -> Optional[str]:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(str(address))
        _send_request(connection, request, [])
        connection.settimeout(5)
        return connection.makefile("r").readline().strip()
    except OSError:
        return None
    finally:
        connection.close()


def main(argv=None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    verb = args[0] if args else "status"
    if verb == "serve":
        serve(Path(args[1]), int(args[2]))
        return
    if verb not in ("status", "stop"):
        raise SystemExit("usage: python -m runners.engine.resident [status | stop]")
    try:
        where = folder()
    except ResidentUnavailable as why:
        raise SystemExit(f"error: {why}")
    addresses = sorted(where.glob("*.sock"))
    importing = starting()
    if not addresses and not importing:
        print(f"no resident running ({where})")
    for address in importing:
        lock = address.with_suffix(".lock")
        if verb == "stop":  # no socket to ask yet: ended by its pid, which its lock file holds
            with contextlib.suppress(ValueError, ProcessLookupError):
                os.kill(int(lock.read_text()), signal.SIGTERM)
        print(f"{address.name}: " + ("still importing, ended" if verb == "stop" else "still importing"))
    for address in addresses:
        answer = _ask(address, {verb: True})
        if verb == "stop":
            print(f"{address.name}: " + ("asked to stop" if answer is not None else "not answering"))
        elif answer:
            state = json.loads(answer)
            print(f"resident {state['pid']} ({address.name}): up {state['age_s']:.0f} s, imported in "
                  f"{state['imported_s']:.1f} s, idle {state['idle_s']:.0f} s, "
                  f"{state['commands']} command(s) running")
        else:
            print(f"{address.name}: not answering (a resident that has exited left it)")


if __name__ == "__main__":
    main()

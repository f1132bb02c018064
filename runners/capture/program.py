"""Running the program under the capture: with the launch hook (runners/capture/launch_hook/) on its
PYTHONPATH, in a session of its own (a signal sent to the capture goes on to its process group; it dies
with the capture), and reading back what the hook wrote from each of its processes."""
from __future__ import annotations

import contextlib
import ctypes
import glob
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

HOOK_DIR = Path(__file__).resolve().parent / "launch_hook"
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # sent to the capture: on to the program's group
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_capture():
    """A preexec_fn giving the program SIGKILL when the capture dies, even by SIGKILL (Linux's parent-death
    signal, as bwrap's --die-with-parent); None where there is no prctl."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    capture = os.getpid()

    def in_child():
        prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL))
        if os.getppid() != capture:  # the capture died before: no signal will come
            os._exit(128 + signal.SIGKILL)

    return in_child


def run_program(command: list[str], folder: str, replay: bool = False) -> tuple[int, float, Optional[int]]:
    """Run the program with the hook on its PYTHONPATH, in a session of its own; (its exit status as a shell
    gives it: 128 + N when a signal N ended it, its wall seconds, the first of STOPS the capture got, else
    None). Each of STOPS the capture gets goes to the program's process group (the program and what it
    started there) once; the capture waits for the program to end. replay: the hook records what a
    replay needs."""
    # On the main thread (signal.signal refuses any other): the parent-death signal fires when the thread
    # that started the program ends.
    python_path = os.pathsep.join(filter(None, [str(HOOK_DIR), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": python_path, "TRITON_CAPTURE_DIR": folder}
    if replay:
        env["TRITON_CAPTURE_REPLAY"] = "1"
    began = time.perf_counter()
    # Its own session: a terminal's Ctrl-C reaches the capture's group alone, so the program gets it once.
    process = subprocess.Popen(command, env=env, start_new_session=True, preexec_fn=die_with_capture())
    stops = []

    def stop(signum, _frame):
        stops.append(signum)
        with contextlib.suppress(ProcessLookupError):  # the group has ended
            os.killpg(process.pid, signum)

    # A signal ignored on entry (nohup, a script's `cmd &`) stays ignored: the program inherited it so.
    # One before these handlers ends the capture as it would have, and the parent-death signal the program.
    previous = {number: signal.signal(number, stop) for number in STOPS
                if signal.getsignal(number) is not signal.SIG_IGN}
    try:
        status = process.wait()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    return (128 - status if status < 0 else status), time.perf_counter() - began, (stops or [None])[0]


def read_launches(folder: str) -> tuple[dict, float]:
    """function -> {args as JSON: {"args", "calls", "tuning_calls"}} over every process of the program,
    and the seconds spent in the hook."""
    functions: dict[str, dict] = {}
    hook_seconds = 0.0
    for path in sorted(glob.glob(os.path.join(folder, "launches-*.json"))):
        record = json.loads(Path(path).read_text())
        hook_seconds += record["hook_seconds"]
        for function in record["functions"]:
            merged = functions.setdefault(function["function"], {})
            for launch in function["launches"]:
                key = json.dumps(launch["args"], sort_keys=True)
                slot = merged.setdefault(key, {"args": launch["args"], "calls": 0, "tuning_calls": 0})
                slot["calls"] += launch["calls"]
                slot["tuning_calls"] += launch["tuning_calls"]
                if "replay" in launch:  # the first process that launched it recorded it
                    slot.setdefault("replay", launch["replay"])
    return functions, hook_seconds

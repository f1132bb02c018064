"""The console scripts (pyproject.toml's project.scripts): each runs the entry of its `python -m
triton_sweep.<name>` form, with the working directory first on the import path as `python -m` puts it there,
so that a kernel of the user's repository is found by its import path (kernel.spec=mykernels:SPEC)."""
from __future__ import annotations

import functools
import importlib
import os
import sys


def _run(name: str):
    sys.stdout.reconfigure(line_buffering=True)  # each line as it is printed, also into a pipe
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    # a command that is a room of its own (runners/export/) keeps its entry in the room's command.py
    room = name in ("export", "compare", "capture")
    module = importlib.import_module(f"triton_sweep.{name}.command" if room else f"triton_sweep.{name}")
    try:
        return module.cli() if hasattr(module, "cli") else module.main()
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback; 130 as a shell reports it
        from triton_sweep.engine.hydra_jobs import stopped_status

        print(f"triton-sweep-{name}: interrupted", file=sys.stderr)
        sys.exit(stopped_status())  # 143 for SIGTERM, where the command stops on it


sweep = functools.partial(_run, "sweep")
export = functools.partial(_run, "export")
compare = functools.partial(_run, "compare")
capture = functools.partial(_run, "capture")
plot = functools.partial(_run, "plot")
merge = functools.partial(_run, "merge")
revalidate = functools.partial(_run, "revalidate")

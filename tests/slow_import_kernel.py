"""A kernel whose module takes seconds to import, as a large kernel library's does (issue 14: an external
kernel package whose import took several seconds made a small sweep slower than @triton.autotune).

    python -m runners.sweep kernel=external kernel.spec=tests.slow_import_kernel:SPEC ...

It is kernels/softmax.py's softmax under another name. Importing this module does work on purpose, which
nothing else in the project does, because that is what it simulates:
- SLOW_IMPORT_S (default 5): seconds it sleeps. A sleep holds no CPU: where more processes import at
  once than there are cores, a real import would also compete for them, which this does not show.
- SLOW_IMPORT_MARKER: a file it appends this process's pid to, so a test can tell which processes
  imported the module, and how many times.
- SLOW_IMPORT_UNTIL: a file it waits for before going on, so a test can hold a process inside this
  import for as long as it needs to (runners/benchmarks/bench_speed.py uses none of these but the sleep).
"""
import dataclasses
import os
import time
from pathlib import Path

if os.environ.get("SLOW_IMPORT_MARKER"):
    with open(os.environ["SLOW_IMPORT_MARKER"], "a") as marker:
        marker.write(f"{os.getpid()}\n")
time.sleep(float(os.environ.get("SLOW_IMPORT_S", "5")))
while os.environ.get("SLOW_IMPORT_UNTIL") and not Path(os.environ["SLOW_IMPORT_UNTIL"]).exists():
    time.sleep(0.05)

from kernels.softmax import SPEC as _SOFTMAX  # noqa: E402  (after the simulated import time)

SPEC = dataclasses.replace(_SOFTMAX, name="slow_import_softmax")

"""Compiled bytecode kept where Python is told to write none.

Container images often set PYTHONDONTWRITEBYTECODE=1 and install their packages without bytecode (the
H200 hosts of BENCHMARKS.md: no __pycache__ in torch's tree). Then each process compiles the source of
every module it imports, every time: `import torch, torch._dynamo, torch._inductor.compile_fx` took
9.6 s there, 3.3 s from bytecode kept under a PYTHONPYCACHEPREFIX; a sweep starts four processes that
import torch at once, and its torch.compile worker's imports were the longest path of the README sweep.

There, the sweep's process (`keep_bytecode`, its first step) points Python at a cache folder of its own
(PYTHONPYCACHEPREFIX where set, else $SWEEP_PYCACHE, else ~/.cache/triton-sweep/pycache) for itself
and every process it starts, and lets itself write there. Once for each installed set of the packages
below, a background process (`precompile_in_background`) compiles their sources into it at low
priority on every core, ahead of the imports that read them: the first command gains too. The source
trees are never written; Python checks each cached file against its source (mtime and size), as it
always does, so an upgrade or an edit is compiled again, never stale. SWEEP_PYCACHE=off leaves Python
as it was told.
"""
from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Optional

# What the sweep's processes import, largest first (torch is imported by all four at the start).
PACKAGES = ("torch", "triton", "sympy", "mpmath", "numpy", "networkx", "jinja2", "pandas", "scipy",
            "matplotlib", "wandb", "pydantic", "hydra", "omegaconf", "antlr4", "yaml", "tqdm", "optuna")
TESTS = re.compile(r"[/\\](tests?|testing)[/\\]")  # never imported by a sweep
# The installed packages inside a standard library's folder (a pyenv or conda Python) too: not all of them.
STDLIB_SKIPPED = re.compile(r"[/\\](tests?|testing|site-packages|dist-packages)[/\\]")
# As the compile pool's (runners/engine/compile_pool.py): below the processes that import and measure.
NICENESS = 10
VARIABLE = "SWEEP_PYCACHE"


def keep_bytecode() -> Optional[Path]:
    """Where Python writes no bytecode (PYTHONDONTWRITEBYTECODE, -B) and SWEEP_PYCACHE is not "off": the
    cache folder (module docstring), now Python's here and, through the environment, in every process
    this one starts; None otherwise (Python caches as it always does), or where no folder can be made."""
    if not sys.dont_write_bytecode or os.environ.get(VARIABLE) == "off":
        return None
    folder = Path(os.environ.get("PYTHONPYCACHEPREFIX") or os.environ.get(VARIABLE)
                  or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "triton-sweep"
                  / "pycache").absolute()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    os.environ["PYTHONPYCACHEPREFIX"] = str(folder)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # a process started with -B still reads the cache
    sys.pycache_prefix = str(folder)
    sys.dont_write_bytecode = False
    return folder


def _source_folders() -> list[Path]:
    """The standard library's folder (a cache folder hides its own __pycache__ from Python), then those
    of PACKAGES that are installed (found without importing them)."""
    folders = [Path(sysconfig.get_path("stdlib"))]
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            folders.append(Path(next(iter(spec.submodule_search_locations))))
    return folders


def _stamp(folder: Path) -> Path:
    """The file that says the installed packages' sources were compiled into `folder`: named by this
    Python and each package's folder and install time (a reinstall or upgrade gives another name)."""
    digest = hashlib.sha256(sys.version.encode())
    for package in _source_folders():
        digest.update(f"{package}:{package.stat().st_mtime_ns}".encode())
    return folder / f"triton-sweep-{digest.hexdigest()[:20]}.compiled"


def precompile_in_background(folder: Path) -> Optional[int]:
    """Start the background compile of PACKAGES into `folder` unless it was done for what is installed,
    and say so (on stderr: stdout may be a config that Hydra's --cfg prints); its pid, or None. It
    outlives this command where it has to (a session of its own)."""
    if _stamp(folder).exists():
        return None
    process = subprocess.Popen([sys.executable, "-m", __name__, str(folder)], start_new_session=True,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    print(f"note: Python writes no bytecode here (PYTHONDONTWRITEBYTECODE or -B): the installed packages' "
          f"is compiled into {folder} in the background (process {process.pid}; once for what is "
          f"installed; {VARIABLE}=off: not)", file=sys.stderr)
    return process.pid


def precompile(folder: Path) -> None:
    """Compile every installed package of PACKAGES into `folder` on every core, then leave the stamp. One
    at a time: a second command that starts one meanwhile leaves at once."""
    import compileall

    os.nice(NICENESS)
    sys.pycache_prefix = str(folder)
    with open(folder / ".compiling.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        stamp = _stamp(folder)
        if stamp.exists():
            return
        for number, source in enumerate(_source_folders()):
            compileall.compile_dir(source, quiet=2, workers=os.cpu_count() or 1,
                                   rx=STDLIB_SKIPPED if number == 0 else TESTS)
        stamp.touch()


if __name__ == "__main__":
    precompile(Path(sys.argv[1]))

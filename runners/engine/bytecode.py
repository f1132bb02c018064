"""Compiled bytecode kept where Python is told to write none.

Container images often set PYTHONDONTWRITEBYTECODE=1 and install their packages without bytecode (the
H200 hosts of BENCHMARKS.md: no __pycache__ in torch's tree). Then each process compiles the source of
every module it imports, every time: `import torch, torch._dynamo, torch._inductor.compile_fx` took
9.6 s there, 3.3 s from bytecode kept under a PYTHONPYCACHEPREFIX; a sweep starts four processes that
import torch at once, and its torch.compile worker's imports were the longest path of the README sweep.

There, the sweep's process (`keep_bytecode`, its first step) points Python at a cache folder of its own
(-X pycache_prefix or PYTHONPYCACHEPREFIX where set, else $SWEEP_PYCACHE, else
~/.cache/triton-sweep/pycache) for itself and every process it starts, and lets itself write there.
Once for each installed set of the packages below, a background process (`precompile_in_background`)
compiles their sources into it at the lowest priority on the cores it may use, ahead of the imports
that read them: the first command gains too. The source trees are never written; Python checks each
cached file against its source (mtime and size), as it always does, so an upgrade or an edit is
compiled again, never stale. SWEEP_PYCACHE=off leaves Python as it was told.
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
import time
from pathlib import Path
from typing import Optional

# What the sweep's processes import, largest first (torch is imported by all four at the start).
PACKAGES = ("torch", "triton", "sympy", "mpmath", "numpy", "networkx", "jinja2", "pandas", "scipy",
            "matplotlib", "wandb", "pydantic", "hydra", "omegaconf", "antlr4", "yaml", "tqdm", "optuna")
# The lowest, below the compile pool's 10: it fills the cores the sweep leaves idle.
NICENESS = 19
VARIABLE = "SWEEP_PYCACHE"


def cache_folder() -> Optional[Path]:
    """The folder keep_bytecode uses here; None where Python writes its own bytecode or SWEEP_PYCACHE is
    "off". Raises RuntimeError where a home folder is needed and cannot be found."""
    if not sys.dont_write_bytecode or os.environ.get(VARIABLE) == "off":
        return None
    return Path(sys.pycache_prefix or os.environ.get("PYTHONPYCACHEPREFIX") or os.environ.get(VARIABLE)
                or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "triton-sweep"
                / "pycache").absolute()


def keep_bytecode() -> Optional[Path]:
    """Where Python writes no bytecode (PYTHONDONTWRITEBYTECODE, -B) and SWEEP_PYCACHE is not "off": the
    cache folder (module docstring), now Python's here and, through the environment, in every process
    this one starts; None otherwise (Python caches as it always does), or where no folder can be
    written (said on stderr)."""
    try:
        folder = cache_folder()
        if folder is None:
            return None
        folder.mkdir(parents=True, exist_ok=True)
    except (OSError, RuntimeError) as error:  # RuntimeError: no home folder to be found
        print(f"note: Python writes no bytecode here and no cache folder for it can be made ({error}): "
              f"each process compiles what it imports ({VARIABLE}=DIR: one)", file=sys.stderr)
        return None
    if not os.access(folder, os.W_OK):
        print(f"note: Python writes no bytecode here and {folder} cannot be written: each process "
              f"compiles what it imports ({VARIABLE}=DIR: another folder)", file=sys.stderr)
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


def _skipped(source: Path, stdlib: bool) -> re.Pattern:
    """What a sweep never imports below `source`: tests (not `testing`: torch imports torch.testing),
    and in a standard library's folder the installed packages (a pyenv or conda Python keeps them
    there)."""
    names = "tests?" + ("|site-packages|dist-packages" if stdlib else "")
    return re.compile(re.escape(str(source)) + rf"[/\\](.*[/\\])?({names})[/\\]")


def _stamp(folder: Path) -> Path:
    """The file that says the installed packages' sources were compiled into `folder`: named by this
    Python and each package's folder and install time (a reinstall or upgrade gives another name). A
    compile that failed leaves the same name with `.failed` (what went wrong is in precompile.log)."""
    digest = hashlib.sha256(sys.version.encode())
    for package in _source_folders():
        digest.update(f"{package}:{package.stat().st_mtime_ns}".encode())
    return folder / f"triton-sweep-{digest.hexdigest()[:20]}.compiled"


def precompile_in_background(folder: Path) -> Optional[int]:
    """Start the background compile of the sources into `folder` unless it was done, or failed, for
    what is installed, and say so on stderr (stdout may be a config that Hydra's --cfg prints); its pid,
    or None. It outlives this command where it has to (a session of its own)."""
    try:
        stamp = _stamp(folder)
        if stamp.exists():
            return None
        if stamp.with_suffix(".failed").exists():
            print(f"note: the background compile of the bytecode cache failed ({folder / 'precompile.log'}; "
                  f"remove {stamp.with_suffix('.failed')} to try again, {VARIABLE}=off: no cache)",
                  file=sys.stderr)
            return None
        with open(folder / "precompile.log", "ab") as log:
            process = subprocess.Popen([sys.executable, "-m", __name__, str(folder)], start_new_session=True,
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    except OSError as error:
        print(f"note: the bytecode cache {folder} cannot be filled ({error})", file=sys.stderr)
        return None
    print(f"note: Python writes no bytecode here (PYTHONDONTWRITEBYTECODE or -B): the bytecode of the "
          f"installed packages (~150 MB) is compiled into {folder} in the background (process "
          f"{process.pid}), once for what is installed ({VARIABLE}=off: not; remove the folder to free it)",
          file=sys.stderr)
    return process.pid


def precompile(folder: Path) -> None:
    """Compile the standard library and the installed PACKAGES into `folder` on the cores this process
    may use, then leave the stamp; on an error, the stamp's `.failed` with it (the traceback goes to
    stderr, the log). One at a time: a second command that starts one meanwhile leaves at once."""
    import compileall

    os.nice(NICENESS)
    # Python 3.12's compileall compiles in processes of a forkserver, which read the environment only.
    os.environ["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix = str(folder)
    with open(folder / ".compiling.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        stamp = _stamp(folder)
        if stamp.exists():
            return
        try:
            for number, source in enumerate(_source_folders()):
                compileall.compile_dir(source, quiet=2, workers=len(os.sched_getaffinity(0)),
                                       rx=_skipped(source, stdlib=number == 0))
        except Exception as error:  # a full disk, say: recorded, so that it is said once and not tried
            stamp.with_suffix(".failed").write_text(f"{type(error).__name__}: {error}\n")  # again
            raise
        stamp.touch()


def wait_for_precompile(folder: Path) -> float:
    """Seconds until no compile into `folder` runs (its lock is free): a benchmark measures nothing
    beside one."""
    began = time.perf_counter()
    try:
        lock = open(folder / ".compiling.lock", "a")
    except OSError:
        return 0.0
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_UN)
    return time.perf_counter() - began


if __name__ == "__main__":
    precompile(Path(sys.argv[1]))

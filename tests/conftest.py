"""CPU tests run kernels through the Triton interpreter; GPU tests are marked `gpu` and skipped
without CUDA."""
import hashlib
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel module is imported

REPO = Path(__file__).resolve().parent.parent
# Small and fast: the interpreter runs every program in Python.
# Finalists are off unless a test turns them on (finalists.top_k=N): they add rows to every group.
FAST_TIMING = ["timing=quick", "timing.min_samples=6", "timing.min_time_s=0", "timing.max_time_s=0.05",
               "timing.warmup_s=0", "finalists.top_k=0"]


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)


def tests_import_root() -> Path:
    """A folder holding only a link to tests/: on the import path, the tests' kernels import by their path
    (tests.fixtures.*) while the tool imports as installed, never from the checkout's root (its
    hydra_plugins/ there once hid what an editable install's user met)."""
    checkout = hashlib.sha1(str(REPO).encode()).hexdigest()[:10]
    root = Path(tempfile.gettempdir()) / f"triton-sweep-tests-{os.getuid()}-{checkout}"
    root.mkdir(exist_ok=True)
    try:
        (root / "tests").symlink_to(REPO / "tests", target_is_directory=True)
    except FileExistsError:
        pass
    return root


def user_env(**extra: str) -> dict:
    """The environment of a user's shell for a command the tests start: this one's, less what the
    developers' machines set and users' shells do not (PYTHONUNBUFFERED, PYTHONDONTWRITEBYTECODE), with the
    tests on the import path (a user's kernels by import path: tests.*) and W&B quiet."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE")}
    python_path = os.pathsep.join(filter(None, [str(tests_import_root()), env.get("PYTHONPATH")]))
    return {**env, "WANDB_SILENT": "true", "PYTHONPATH": python_path, **extra}


def run_command(args: list, cwd=None, env: dict = None, timeout: float = 600, background: bool = False,
                preexec_fn=None):
    """`python -m <args>` as a user runs it: the environment of user_env (or `env`), a strict umask, and
    a working directory other than the checkout (a new one, unless given); preexec_fn: run in the child
    before the command (a resource limit)."""
    cwd = cwd if cwd is not None else tempfile.mkdtemp(prefix="cwd-")
    command = [sys.executable, "-m", *map(str, args)]
    env = env if env is not None else user_env()
    if background:
        return subprocess.Popen(command, cwd=cwd, env=env, umask=0o077, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True,
                                preexec_fn=preexec_fn)
    return subprocess.run(command, cwd=cwd, env=env, umask=0o077, capture_output=True, text=True,
                          timeout=timeout, preexec_fn=preexec_fn)


# The outputs of a test's sweep: the default ones but the plots (their own tests draw them:
# tests/outputs/test_plot.py, and the sweeps that ask for them with plots=True), a second or two a sweep.
NO_PLOTS = "output=[parquet,table,export,wandb]"


def run_sweep(tmp_path: Path, *overrides: str, multirun: bool = False, check: bool = True,
              background: bool = False, backend: str = "interpret", env: dict = None, plots: bool = False,
              preexec_fn=None):
    """Run `python -m triton_sweep.sweep` (on the interpreter unless told) with its store, runs, exports and
    W&B files under tmp_path, as run_command runs a command."""
    outputs = [] if plots or any(o.startswith("output=") for o in overrides) else [NO_PLOTS]
    args = ["triton_sweep.sweep"] + (["-m"] if multirun else []) + [
        f"backend={backend}", f"store={tmp_path}/results.sqlite", f"export_dir={tmp_path}/exports",
        f"hydra.run.dir={tmp_path}/run", f"hydra.sweep.dir={tmp_path}/multirun",
        "logger.mode=disabled", f"logger.dir={tmp_path}", *FAST_TIMING, *outputs, *overrides,
    ]
    env = env if env is not None else user_env()
    if backend == "interpret":
        env["TRITON_INTERPRET"] = "1"
    cwd = tmp_path / "cwd"
    cwd.mkdir(parents=True, exist_ok=True)
    result = run_command(args, cwd=cwd, env=env, background=background, preexec_fn=preexec_fn)
    if background:
        return result
    if check and result.returncode != 0:
        raise AssertionError(f"sweep failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def sweep_rows(tmp_path: Path, sweep_id: str):
    """The rows a sweep run by run_sweep(tmp_path, ...) stored under sweep_id."""
    from triton_sweep.store.result_store import ResultStore

    store = ResultStore(tmp_path / "results.sqlite")
    try:
        return store.load(sweep_id=sweep_id)
    finally:
        store.close()


def modules_after(code: str, package: str) -> list[str]:
    """The modules of `package` (a top-level name or a dotted one) that a fresh interpreter has imported
    after running `code` in this checkout."""
    prefix = package + "."
    listing = f"; import sys; print(*sorted(m for m in sys.modules if (m + '.').startswith({prefix!r})))"
    result = subprocess.run([sys.executable, "-c", code + listing], capture_output=True, text=True,
                            check=True, cwd=REPO, timeout=120)
    return result.stdout.split()


def overwrite_a_leaf_page(path):
    """Random bytes over one leaf page of the trials table, in the middle of the file (SQLite's dbstat
    table names the pages where this build has it)."""
    db = sqlite3.connect(path)
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    try:
        pages = [p for (p,) in db.execute("SELECT pageno FROM dbstat WHERE name = 'trials' AND "
                                          "pagetype = 'leaf' ORDER BY pageno")]
    except sqlite3.OperationalError:
        pages = [path.stat().st_size // page_size // 2 + 1]
    db.close()
    with path.open("r+b") as file:
        file.seek((pages[len(pages) // 2] - 1) * page_size)
        file.write(random.Random(7).randbytes(page_size))

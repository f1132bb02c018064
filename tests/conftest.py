"""CPU tests run kernels through the Triton interpreter; GPU tests are marked `gpu` and skipped
without CUDA."""
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from runners.engine import resident

HAS_CUDA = torch.cuda.is_available()
# The sweeps tests run neither leave a resident behind nor use one (runners/engine/resident.py), unless a
# test asks: each would keep torch imported for 15 minutes.
os.environ.setdefault("SWEEP_RESIDENT_S", "0")
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


def run_sweep(tmp_path: Path, *overrides: str, multirun: bool = False, check: bool = True,
              background: bool = False, backend: str = "interpret"):
    """Run `python -m runners.sweep` (on the interpreter unless told) with its store, runs, exports and
    W&B files under tmp_path."""
    args = [sys.executable, "-m", "runners.sweep"] + (["-m"] if multirun else []) + [
        f"backend={backend}", f"store={tmp_path}/results.sqlite", f"export_dir={tmp_path}/exports",
        f"hydra.run.dir={tmp_path}/run", f"hydra.sweep.dir={tmp_path}/multirun",
        "logger.mode=disabled", f"logger.dir={tmp_path}", "wait_for_background=true", *FAST_TIMING,
        *overrides,
    ]
    python_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "WANDB_SILENT": "true", "PYTHONPATH": python_path}
    if backend == "interpret":
        env["TRITON_INTERPRET"] = "1"
    if background:
        return subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
    result = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    if check and result.returncode != 0:
        raise AssertionError(f"sweep failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def sweep_rows(tmp_path: Path, sweep_id: str):
    """The rows a sweep run by run_sweep(tmp_path, ...) stored under sweep_id."""
    from runners.results.store import ResultStore

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
                            check=True, cwd=REPO)
    return result.stdout.split()


@pytest.fixture
def residents(monkeypatch):
    """Residents allowed for this test (runners/engine/resident.py), in a folder of its own (short: a
    Unix socket's path holds 107 bytes at most); stopped at its end."""
    runtime = tempfile.mkdtemp(prefix="resident-", dir="/tmp")
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
    monkeypatch.setenv(resident.IDLE_VARIABLE, "120")
    where = resident.folder()
    yield where
    subprocess.run([sys.executable, "-m", "runners.engine.resident", "stop"], cwd=REPO, env=dict(os.environ))
    deadline = time.monotonic() + 30
    while list(where.glob("*.sock")) and time.monotonic() < deadline:
        time.sleep(0.1)
    shutil.rmtree(runtime, ignore_errors=True)


def wait_for_resident(folder, timeout_s: float = 120) -> None:
    """Until the resident a command left in `folder` (the residents fixture's) has imported and listens."""
    deadline = time.monotonic() + timeout_s
    while resident.starting() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(list(folder.glob("*.sock"))) == 1, list(folder.iterdir())

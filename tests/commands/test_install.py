"""The tool installed the way users install it: a wheel built from a copy of the checkout, installed
into a folder of its own (ahead of everything on the import path, the checkout not on it), its console
scripts run from a user's repository with packages of its own named kernels, runners, conf and tests:
a built-in kernel's sweep, a sweep file of that directory's sweeps/ sweeping its kernels.mine by import
path, an export of a GPU store and a compare, each from the installed copy; and the user's own config group
(conf/kernel/) found there."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from triton_sweep.store.result_store import ResultStore
from tests.conftest import FAST_TIMING, REPO, user_env
from tests.fixtures.synthetic_store import softmax_sweep

TOP_LEFT_OUT = {".git", ".venv", ".ci-venv", "outputs", "build", ".whl", ".old_tree", ".gpu_out",
                ".pytest_cache"}


def _left_out(folder, names):
    """What a clean clone lacks: the checkout's own environments and outputs, caches, build leftovers."""
    top = Path(folder) == REPO
    return [n for n in names if (top and n in TOP_LEFT_OUT) or n == "__pycache__" or n.endswith(".egg-info")]
# The user's own config group option (conf/kernel/), and a sweep file of theirs (sweeps/) that picks it.
MY_KERNEL = "name: external\nspec: kernels.mine:SPEC\nshapes: [[33, 70]]\ndtypes: [float32]\n"
MY_SWEEP = """\
# @package _global_
defaults:
  - override /kernel: mykernel
kernel:
  space:
    BLOCK_COLS: [64]
    num_warps: [2]
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the folder the wheel went into, an environment that imports from it alone, a run function)."""
    work = tmp_path_factory.mktemp("install")
    shutil.copytree(REPO, work / "src", symlinks=True, ignore=_left_out)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", work / "wheel", work / "src"], check=True, capture_output=True, timeout=300)
    wheel = next((work / "wheel").glob("triton_sweep-*.whl"))
    target = work / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                    target, wheel], check=True, capture_output=True, timeout=300)
    env = user_env(PYTHONPATH=str(target), TRITON_INTERPRET="1", HOME=str(work / "home"))  # not the checkout
    home = work / "home-dir"  # the user's repository: empty but for what the steps put there
    home.mkdir()

    def run(script, *args):
        result = subprocess.run([target / "bin" / script, *map(str, args)], cwd=home, env=env, umask=0o077,
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"{script} {args}: {result.stdout}\n{result.stderr}"
        return result.stdout + result.stderr

    return target, env, home, run


def test_the_installed_copy_is_the_one_that_runs(installed):
    target, env, home, _ = installed
    probe = ("import triton_sweep, triton_sweep.kernels, hydra_plugins.triton_sweep_home as home; "
             "print(triton_sweep.__file__, triton_sweep.kernels.__file__, home.__file__)")
    found = subprocess.run([sys.executable, "-c", probe], cwd=home, env=env, capture_output=True, text=True,
                           check=True, timeout=120).stdout.split()
    assert all(Path(path).is_relative_to(target) for path in found), found
    assert (target / "triton_sweep" / "conf" / "config.yaml").is_file() and not (target / "conf").exists()
    assert not (target / "tests").exists() and not (target / "triton_sweep" / "benchmarks").exists()
    assert not (target / "runners").exists() and not (target / "kernels").exists()


def test_console_scripts_give_help_and_version(installed):
    _, _, _, run = installed
    for script in ("triton-sweep-export", "triton-sweep-compare", "triton-sweep-capture", "triton-sweep-plot",
                   "triton-sweep-merge", "triton-sweep-revalidate"):
        assert "usage:" in run(script, "--help")
        assert run(script, "--version").startswith("triton-sweep 0.1.0")
    assert run("triton-sweep", "--version").startswith("triton-sweep 0.1.0 (Hydra")


def test_sweeps_exports_and_compares_from_the_user_s_own_directory(installed):
    target, _, home, run = installed
    common = ["backend=interpret", "logger.mode=disabled", "output=[parquet,table]", *FAST_TIMING]
    # The user's repository has packages of the names the tool's folders have; their kernel is kernels.mine.
    for package in ("kernels", "runners", "conf", "tests"):
        (home / package).mkdir()
        (home / package / "__init__.py").write_text("builtin = None  # not the tool's\n")
    out = run("triton-sweep", *common, "kernel=vector_add", "kernel.shapes=[[1000]]",
              "kernel.space.BLOCK_SIZE=[256]", "kernel.space.num_warps=[2]", "sweep_id=builtin")
    assert "sweep builtin: vector_add" in out
    shutil.copy(REPO / "tests" / "fixtures" / "external_kernel.py", home / "kernels" / "mine.py")
    (home / "sweeps").mkdir()
    (home / "sweeps" / "mine.yaml").write_text(MY_SWEEP)
    (home / "conf" / "kernel").mkdir()
    (home / "conf" / "kernel" / "mykernel.yaml").write_text(MY_KERNEL)
    out = run("triton-sweep", *common, "+sweep=mine", "sweep_id=mine")
    assert f"+sweep=mine: {home / 'sweeps' / 'mine.yaml'}" in out and "sweep mine: scale_rows" in out
    rows = ResultStore(home / "outputs" / "results.sqlite").load()
    assert set(rows["sweep_id"]) == {"builtin", "mine"} and (rows["status"] == "ok").any()

    gpu_store = ResultStore(home / "gpu.sqlite")
    for sweep_id, seed in (("base", 0), ("new", 1)):
        softmax_sweep(gpu_store, sweep_id, seed=seed)
    gpu_store.close()
    out = run("triton-sweep-export", "--store", "gpu.sqlite", "--kernel", "softmax")
    assert (home / "outputs" / "exports" / "softmax_configs.py").is_file(), out
    out = run("triton-sweep-compare", "gpu.sqlite:base", "gpu.sqlite:new")
    assert "summary: 26 trials on both sides" in out, out
    assert not list(target.rglob("results.sqlite"))  # every output in the user's directory

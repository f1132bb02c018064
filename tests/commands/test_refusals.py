"""A newcomer's mistakes end in one line naming the field, exit 2, before torch is imported, leaving no run
folder: Hydra's composition errors, a kernel's fields read from its module's literals, nesting past the
bound; Ctrl-C ends in one line, exit 130, rows kept; `--help` is the tool's own; sweep.log holds what the
sweep printed, and a link planted at it is refused (at summary.json or results.parquet: replaced); a
second sweep into a sweep id or a run folder being written is refused."""
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from tests.conftest import run_sweep, user_env

# sweep.cli() in a fresh interpreter, then whether it imported torch (the home server is not started here)
PROBE = ("import sys\nfrom triton_sweep.sweep import cli\nsys.argv[0] = 'triton-sweep'\ntry:\n    cli()\n"
         "finally:\n    print('torch imported:', 'torch' in sys.modules, file=sys.stderr)\n")
DEEP = "[" * 3000 + "1" + "]" * 3000


@pytest.mark.parametrize("args, words", [
    (["kernel.shapez=[[4096]]"], ["kernel.shapez: not a field", "did you mean kernel.shapes?"]),
    (["kernel=vectoradd"], ["kernel=vectoradd: no such option", "kernel=vector_add?", "softmax"]),
    (["bogus=1"], ["bogus: not a field of the sweep's config"]),
    (["seed=abc"], ["seed:", "'abc'"]),
    (["backend=foo"], ["backend:", "cuda, interpret"]),
    (["kernel.shapes=[[4096"], ["kernel.shapes=[[4096: Hydra cannot parse it"]),
    (["kernel=vector_add", "kernel.grid.m={lin:[1,2,2]}"],
     ["kernel.grid.m: not a field", "kernel.grid has: n"]),
    (["kernel=external", "kernel.spec=tests.fixtures.external_kernel:SPEC",
      "kernel.space.BLOCK_COLS=[64]"],
     ["kernel.space.BLOCK_COLS: not a field", "has none yet: +kernel.space.BLOCK_COLS=... adds"]),
    ([f"kernel.shapes={DEEP}"], ["kernel.shapes: nested 3000 deep"]),
    (["+sweep=deep"], ["+sweep=deep:", "deep.yaml: nested past"]),
    (["kernel=vector_add", "kernel.shapes=[[1,2]]"], ["kernel.shapes[0]: [1, 2] must be 1 integer(s)"]),
    (["kernel=vector_add", "kernel.space.BLOCK_SIZE=[100]"], ["kernel.space.BLOCK_SIZE: 100 is not a power"]),
    (["kernel=matmul", "kernel.dtypes=[float8]"], ["kernel.dtypes: 'float8' is not supported"]),
    (["kernel=vector_add", "kernel.baselines=[nope]"], ["kernel.baselines: 'nope' is not a baseline"]),
    (["kernel=attention", "kernel.shapes=[[1,2]]"], ["kernel.shapes[0]: [1, 2] must be 4 integer(s)"]),
    (["kernel=vector_add", "timing.max_time_s=-1"], ["timing.max_time_s"]),
    (["kernel=vector_add", "kernel.grid.n={range:[1,2000000,1]}"],
     ["max_trials: kernel.grid crosses 2,000,000 shapes, over max_trials=250,000", "raise max_trials"]),
    (["kernel=softmax", "kernel.shapes=[[8,1024],[8,2048]]", "max_trials=20"],
     ["max_trials: the job plans", "(2 shape(s) x 3 dtype(s) x", "over max_trials=20", "raise max_trials"]),
])
def test_a_refusal_is_one_line_before_torch_and_leaves_no_run_folder(tmp_path, args, words):
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "deep.yaml").write_text(f"# @package _global_\nkernel:\n  shapes: {DEEP}\n")
    result = subprocess.run([sys.executable, "-c", PROBE, "backend=interpret", *args], cwd=tmp_path,
                            env=user_env(), capture_output=True, text=True, timeout=120)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert all(word in errors[0] for word in words), errors[0]
    assert "torch imported: False" in result.stderr
    assert not (tmp_path / "outputs").exists()  # no run folder, nor the folders above it


def test_the_outline_of_each_builtin_kernel_agrees_with_its_spec():
    """The fields the early checks read from a kernel module's literals never refuse what the spec takes."""
    from triton_sweep.kernels import builtin, outline
    from triton_sweep.model.spec_sources import load_spec

    for name in builtin():
        light, spec = outline(name), load_spec(name, None)
        if light is None:
            continue
        assert light.dims == spec.dims and set(spec.dtypes) <= set(light.dtypes), name
        assert all(set(values) <= set(light.space[key]) for key, values in spec.space.items()), name
        assert light.baselines is None or set(spec.baselines) <= set(light.baselines), name
        assert light.default_shapes in (None, spec.default_shapes), name


def test_help_is_the_tools_own(tmp_path):
    result = subprocess.run([sys.executable, "-m", "triton_sweep.sweep", "--help"], cwd=tmp_path,
                            env=user_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "usage: triton-sweep" in result.stdout
    assert "kernel: " in result.stdout and "powered by Hydra" not in result.stdout


def stored_trials(store):
    """Rows in a store that may not exist yet, or exist before its table does."""
    try:
        return sqlite3.connect(store).execute("select count(*) from trials").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def test_ctrl_c_is_one_line_exit_130_and_keeps_the_rows(tmp_path):
    store = tmp_path / "results.sqlite"
    process = run_sweep(tmp_path, "kernel=vector_add", "kernel.shapes=[[1000],[2000],[3000]]",
                        "kernel.space.num_warps=[1,2,4]", background=True,
                        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 240
    while time.time() < deadline and process.poll() is None:
        if store.exists() and stored_trials(store):
            break
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGINT)  # what a terminal sends its foreground group
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 130, out
    assert "Traceback" not in out and out.rstrip().splitlines()[-1].startswith("error: interrupted"), out
    assert stored_trials(store) >= 1


def test_one_writer_a_sweep_id_and_a_run_folder(tmp_path):
    first = run_sweep(tmp_path, "kernel=vector_add", "kernel.shapes=[[1000],[2000],[3000]]", "sweep_id=same",
                      "timing.min_time_s=0.5", "timing.max_time_s=0.5", background=True)  # killed below
    try:
        lock = tmp_path / ".locks" / "results.sqlite.same"
        deadline = time.time() + 120
        while not (lock.exists() and lock.read_text()) and time.time() < deadline and first.poll() is None:
            time.sleep(0.1)
        same_id = f"sweep_id=same: another sweep (pid {first.pid}) is writing it into "
        cases = ((False, ["sweep_id=same", f"hydra.run.dir={tmp_path}/other"], same_id),
                 (True, ["sweep_id=same"], same_id),
                 (False, ["sweep_id=another"], f"is being written by another sweep (pid {first.pid})"))
        for multirun, args, said in cases:
            second = run_sweep(tmp_path, "kernel=vector_add", "kernel.shapes=[[1000]]", *args, check=False,
                               multirun=multirun)
            assert second.returncode == 2 and first.poll() is None, second.stderr
            assert said in second.stderr and len(second.stderr.splitlines()) == 1, second.stderr
        assert not (tmp_path / "other").exists() and not (tmp_path / "multirun").exists()
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.communicate()
    # the first has ended: its sweep id is free
    assert run_sweep(tmp_path, "kernel=vector_add", "kernel.shapes=[[1000]]", "sweep_id=same",
                     "kernel.space.num_warps=[4]", "kernel.baselines=[]").returncode == 0


def test_sweep_log_holds_what_the_sweep_printed(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "outside").write_text("precious")
    for name in ("summary.json", "results.parquet"):  # links at the run's files: replaced, never followed
        (tmp_path / "run" / name).symlink_to(tmp_path / "outside")
    result = run_sweep(tmp_path, "kernel=vector_add", "kernel.shapes=[[1000]]",
                       "kernel.space.BLOCK_SIZE=[256,512]", "kernel.baselines=[torch]")
    log = (tmp_path / "run" / "sweep.log").read_text()
    table = [line for line in result.stdout.splitlines() if line.startswith("vector_add ")]
    assert table and all(line in log for line in table)  # the end table
    assert "trials planned" in log and "results:" in log
    assert (tmp_path / "outside").read_text() == "precious"
    assert not any((tmp_path / "run" / name).is_symlink() for name in ("summary.json", "results.parquet"))


def test_a_link_at_sweep_log_is_refused_in_one_line_never_written_through(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "outside.log").write_text("precious")
    (tmp_path / "run" / "sweep.log").symlink_to(tmp_path / "outside.log")
    result = run_sweep(tmp_path, "kernel=vector_add", "kernel.shapes=[[1000]]", check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    link = tmp_path / "run" / "sweep.log"
    error = f"error: {link} is a link: the sweep's log is never written through one"
    assert result.stderr.strip().splitlines() == [error]
    assert (tmp_path / "outside.log").read_text() == "precious"

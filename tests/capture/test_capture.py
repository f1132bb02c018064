"""python -m triton_sweep.capture on the interpreter: the example program's launches counted and mapped to
the built-in kernels (checked against the workload the program draws), an external kernel mapped by its
import path, launches of no spec listed, an autotuner's own benchmark launches kept apart, the exit
status passed through; a stop (SIGTERM, Ctrl-C, SIGHUP) ends the program and its child and writes nothing,
a SIGKILL of the capture ends the program; the sweep file it writes runs, its space widened down where the
kernel's default one has no config for the captured shapes (every shape of the README's demo has one);
kernel.calls weighs the export's covering set; a link at a file it writes is replaced, never followed."""
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from triton_sweep.kernels.examples.transformer_steps import SMALL, workload
from triton_sweep.capture.launches import bucketed, launch_shape, unrunnable, widened_space
from triton_sweep.capture.sweep_files import sweep_file
from triton_sweep.model.trial import ConfigError
from triton_sweep.model.spec_sources import load_spec
from triton_sweep.model.space import parse_calls, plan_trials
from triton_sweep.export import export_kernel
from triton_sweep.export.cover import Measured, weighted_loss
from triton_sweep.export.fileformat import read_export
from triton_sweep.store.result_store import ResultStore
from tests.conftest import REPO, run_command, run_sweep, user_env

STEPS = 12


def capture(tmp_path: Path, *args: str, program: list[str]) -> subprocess.CompletedProcess:
    return run_command(["triton_sweep.capture", "--out", tmp_path / "app", *args, "--", *program],
                       cwd=tmp_path, env=user_env(TRITON_INTERPRET="1"))


def _sweep_calls(path: Path) -> Counter:
    kernel = OmegaConf.to_container(OmegaConf.load(path))["kernel"]
    return Counter({tuple(shape): calls for shape, calls in zip(kernel["shapes"], kernel["calls"])})


def test_the_example_program_captured_and_mapped(tmp_path):
    (tmp_path / "outside").write_text("precious")
    for name in ("app_softmax.yaml", "app_launches.json"):  # links at its targets: replaced, not followed
        (tmp_path / name).symlink_to(tmp_path / "outside")
    result = capture(tmp_path, program=[sys.executable, "-m",
                                        "triton_sweep.kernels.examples.transformer_steps", "--small",
                                        "--steps", str(STEPS), "--dtype", "float32"])
    assert result.returncode == 0, result.stdout + result.stderr
    # What the program launches, from the workload it draws: per step 2 layernorms, 3 matmuls, 1 softmax.
    d = SMALL["d_model"]
    expected = {"layernorm": Counter(), "matmul": Counter(), "softmax": Counter()}
    for tokens, rows, context in workload(STEPS, SMALL, seed=0):
        expected["layernorm"][(tokens, d)] += 2
        for n, k in ((3 * d, d), (4 * d, d), (d, 4 * d)):
            expected["matmul"][(tokens, n, k)] += 1
        expected["softmax"][(rows, context)] += 1
    for kernel, counts in expected.items():
        assert _sweep_calls(tmp_path / f"app_{kernel}.yaml") == counts, kernel
        conf = OmegaConf.load(tmp_path / f"app_{kernel}.yaml")
        assert list(conf.kernel.dtypes) == ["float32"] and conf.defaults[0] == {"override /kernel": kernel}
    for kernel in expected:  # each shape with a config to run, the space widened where it needs
        assert _runnable_shapes(tmp_path / f"app_{kernel}.yaml") == set(expected[kernel]), kernel
    assert f"captured {6 * STEPS} Triton launches of 3 function(s)" in result.stdout
    assert "not mapped" not in result.stdout
    launches = json.loads((tmp_path / "app_launches.json").read_text())
    assert (tmp_path / "outside").read_text() == "precious"
    assert not any((tmp_path / name).is_symlink() for name in ("app_softmax.yaml", "app_launches.json"))
    assert set(launches["functions"]) == {"triton_sweep.kernels.layernorm._layernorm_kernel",
                                          "triton_sweep.kernels.matmul._matmul_kernel",
                                          "triton_sweep.kernels.softmax._softmax_kernel"}
    # the workload table: every shape with its share of the kernel's calls
    line = next(line for line in result.stdout.splitlines() if line.startswith("softmax "))
    assert line.split()[3].isdigit() and line.split()[4].endswith("%")


def test_bucketing_rounds_the_dims_that_vary_per_call():
    entries = {((rows, 96), "float16"): {"calls": 1, "configs": {}} for rows in (3, 5, 6, 7, 9, 17)}
    entries[((4, 32), "float16")] = {"calls": 10, "configs": {}}
    merged = bucketed(entries, "pow2", ("rows", "cols"))
    # rows take 7 sizes (more than 4): rounded up, the lowest bucket (2, 4] to the smallest, 3; cols take 2
    assert {shape: e["calls"] for (shape, _), e in merged.items()} == {
        (3, 96): 1, (8, 96): 3, (16, 96): 1, (32, 96): 1, (3, 32): 10}
    named = bucketed(entries, "pow2", ("rows", "cols"), ["cols"])
    assert {shape for shape, _ in named} == {(rows, 128) for rows in (3, 5, 6, 7, 9, 17)} | {(4, 32)}


def _runnable_shapes(path: Path) -> set:
    """The shapes of a sweep file where some config of its space passes the kernel's constraints."""
    conf = OmegaConf.to_container(OmegaConf.load(path))
    spec = load_spec(conf["defaults"][0]["override /kernel"], None)
    return {t.shape for t in plan_trials(spec, conf["kernel"], "interpret")
            if t.provider == "triton" and not t.pruned_reason}


def test_shapes_no_config_of_the_default_space_can_run_widen_its_blocks():
    softmax = load_spec("softmax", None)  # BLOCK_SIZE from 128, which must be < 4x the row
    entries = {((8, 16), "float16"): {}, ((8, 64), "float16"): {}, ((8, 100000), "float16"): {}}
    assert unrunnable(softmax, entries) == [((8, 16), "float16"), ((8, 100000), "float16")]
    # 16 columns: a block of 32 (< 4x the row, one warp's threads); 100000 columns: no block holds them
    space, left = widened_space(softmax, entries)
    assert space == {"BLOCK_SIZE": [32, 64, *softmax.space["BLOCK_SIZE"]]}
    assert left == [((8, 100000), "float16")]
    # matmul at a decode batch of 4 and 32 columns: each tile dim widened, one step at a time
    matmul = load_spec("matmul", None)
    space, left = widened_space(matmul, {((4, 32, 128), "float16"): {}, ((4, 96, 32), "float16"): {}})
    assert space == {"BLOCK_M": [32, 64, 128], "BLOCK_N": [64, 128, 256]} and left == []
    assert widened_space(matmul, {((4096, 4096, 4096), "float16"): {}}) == ({}, [])


def test_the_readme_capture_demo_writes_sweep_files_with_a_config_at_every_shape(tmp_path):
    """The README's demo (--small, its 200 steps, --bucket pow2) as the capture maps it: every shape of
    every sweep file has a config the interpreter can run, the space widened where the kernel's default
    one has none (the program's launches are drawn by workload(), run in
    test_the_example_program_captured_and_mapped)."""
    d, calls = SMALL["d_model"], {"layernorm": Counter(), "matmul": Counter(), "softmax": Counter()}
    for tokens, rows, context in workload(200, SMALL, seed=0):
        calls["layernorm"][(tokens, d)] += 2
        for n, k in ((3 * d, d), (4 * d, d), (d, 4 * d)):
            calls["matmul"][(tokens, n, k)] += 1
        calls["softmax"][(rows, context)] += 1
    for kernel, counts in calls.items():
        spec = load_spec(kernel, None)
        entries = bucketed({(shape, "float16"): {"calls": n, "configs": {}} for shape, n in counts.items()},
                           "pow2", spec.dims)
        space, left = widened_space(spec, entries)
        assert left == [], kernel
        path = tmp_path / f"example_{kernel}.yaml"
        path.write_text(sweep_file(spec, None, entries, ["app"], "pow2", path.stem, space=space))
        assert _runnable_shapes(path) == {shape for shape, _ in entries}, kernel


def test_launch_shapes_from_the_export_key_and_the_spec():
    vector_add = load_spec("vector_add", None)  # no launch_shape: n_elements -> n by its export key
    assert launch_shape(vector_add, {"x_ptr": ["float16", [4096]], "n_elements": 4096, "BLOCK_SIZE": 1024}) \
        == (4096,)
    matmul, relu = load_spec("matmul", None), load_spec("matmul_bias_relu", None)
    args = {"M": 64, "N": 128, "K": 32, "HAS_BIAS": True, "ACTIVATION": 1}
    assert launch_shape(relu, args) == (64, 128, 32) and launch_shape(matmul, args) is None


EXTERNAL_PROGRAM = textwrap.dedent("""
    import sys
    import torch
    from tests.fixtures.external_kernel import scale_rows
    for rows, cols in [(3, 40), (3, 40), (5, 70)]:
        scale_rows(torch.randn(rows, cols), torch.randn(rows))
    sys.exit(3)
""")


def test_an_external_kernel_by_import_path_and_the_exit_status(tmp_path):
    (tmp_path / "app.py").write_text(EXTERNAL_PROGRAM)
    program = [sys.executable, str(tmp_path / "app.py")]
    result = capture(tmp_path, program=program)
    assert result.returncode == 3  # the program's own status
    assert ("not mapped: tests.fixtures.external_kernel._scale_rows_kernel: 3 calls at 2 argument set(s): "
            "no spec names this function (a kernel of another package: --spec pkg.module:SPEC, or --replay "
            "to sweep it with no spec)") in result.stdout
    assert result.stdout.splitlines()[-1] == ("no sweep file written: no launch of a known kernel (--replay "
                                              "sweeps one with no spec)")
    assert not (tmp_path / "app_scale_rows.yaml").exists()
    result = capture(tmp_path, "--spec", "tests.fixtures.external_kernel:SPEC", program=program)
    assert result.returncode == 3 and "not mapped" not in result.stdout
    assert _sweep_calls(tmp_path / "app_scale_rows.yaml") == Counter({(3, 40): 2, (5, 70): 1})
    conf = OmegaConf.load(tmp_path / "app_scale_rows.yaml")
    assert conf.kernel.spec == "tests.fixtures.external_kernel:SPEC"
    assert conf.defaults[0] == {"override /kernel": "external"}


# The interpreter has no GPU driver for autotune's do_bench: the program times its configs by wall clock.
AUTOTUNED_PROGRAM = textwrap.dedent("""
    import time
    import torch, triton
    from tests.fixtures.external_kernel import _scale_rows_kernel

    def wall_clock(kernel_call, quantiles=None):
        began = time.perf_counter()
        kernel_call()
        kernel_call()
        return [(time.perf_counter() - began) / 2] * 3

    tuned = triton.autotune([triton.Config({"BLOCK_COLS": 32}), triton.Config({"BLOCK_COLS": 64})],
                            key=["n_cols"], do_bench=wall_clock)(_scale_rows_kernel)
    x, scale = torch.randn(4, 50), torch.randn(4)
    for _ in range(5):
        out = torch.empty_like(x)
        tuned[lambda meta: (4, triton.cdiv(50, meta["BLOCK_COLS"]))](out, x, scale, 50, 50, 50)
""")


def test_an_autotuners_benchmark_launches_are_kept_apart(tmp_path):
    (tmp_path / "app.py").write_text(AUTOTUNED_PROGRAM)
    result = capture(tmp_path, "--spec", "tests.fixtures.external_kernel:SPEC",
                     program=[sys.executable, "app.py"])
    assert result.returncode == 0, result.stdout + result.stderr
    (launches,) = json.loads((tmp_path / "app_launches.json").read_text())["functions"].values()
    assert sum(launch["calls"] for launch in launches.values()) == 5
    assert sum(launch["tuning_calls"] for launch in launches.values()) >= 2  # each config at least once
    assert _sweep_calls(tmp_path / "app_scale_rows.yaml") == Counter({(4, 50): 5})


def test_a_captured_sweep_file_runs_from_the_user_s_directory(tmp_path):
    """README's flow in the user's repository: capture into its sweeps/, then +sweep=NAME_<kernel> finds
    the file there with no hydra.searchpath (run_sweep runs in tmp_path/run/cwd)."""
    home = tmp_path / "run" / "cwd"
    home.mkdir(parents=True)
    program = [sys.executable, "-m", "triton_sweep.kernels.examples.transformer_steps", "--small",
               "--steps", "3",
               "--dtype", "float32"]
    result = run_command(["triton_sweep.capture", "--out", "sweeps/app", "--", *program], cwd=home,
                         env=user_env(TRITON_INTERPRET="1"))
    assert result.returncode == 0, result.stdout + result.stderr
    swept = run_sweep(tmp_path / "run", "+sweep=app_layernorm", "kernel.space.num_warps=[2]",
                      "kernel.baselines=[]")  # the file's own space, BLOCK_SIZE widened down to 32
    assert f"+sweep=app_layernorm: {home / 'sweeps' / 'app_layernorm.yaml'}" in swept.stdout
    store = ResultStore(tmp_path / "run" / "results.sqlite")
    frame = store.load()
    store.close()
    planned = _sweep_calls(home / "sweeps" / "app_layernorm.yaml")
    assert {tuple(json.loads(s)) for s in frame["shape"]} == set(planned), swept.stdout
    ok = frame[frame["status"] == "ok"]  # BLOCK_SIZE 64 is pruned at 32 columns
    assert set(frame["status"]) <= {"ok", "pruned"} and set(ok["shape"]) == set(frame["shape"])


PROCESSES_PROGRAM = textwrap.dedent("""
    import multiprocessing, os, sys
    import torch
    from tests.fixtures.external_kernel import scale_rows

    def launch(cols):
        scale_rows(torch.randn(2, cols), torch.randn(2))

    if __name__ == "__main__":
        launch(10)  # before the fork: the parent's, once
        child = os.fork()
        if child == 0:
            launch(20)
            sys.exit(0)
        os.waitpid(child, 0)
        pool = multiprocessing.get_context("fork").Pool(2)
        pool.map(launch, [30, 30, 30])
        pool.close()  # the workers end on their own (a `with` block would kill them: their counts lost)
        pool.join()
        launch(0)  # an empty tensor: listed, not swept
        sys.exit(5)
""")


def test_children_and_empty_launches(tmp_path):
    (tmp_path / "app.py").write_text(PROCESSES_PROGRAM)
    result = capture(tmp_path, "--spec", "tests.fixtures.external_kernel:SPEC",
                     program=[sys.executable, "app.py"])
    assert result.returncode == 5, result.stdout + result.stderr
    # the forked child's launch once (not the parent's again), the Pool workers' three
    assert _sweep_calls(tmp_path / "app_scale_rows.yaml") == Counter({(2, 10): 1, (2, 20): 1, (2, 30): 3})
    assert "not mapped: tests.fixtures.external_kernel._scale_rows_kernel: 1 calls at 1 argument set(s): " \
           "a dim of [2, 0] is 0 (a launch on an empty tensor)" in result.stdout


# Writes its pid and its child's, then sleeps; a SIGINT it writes down before it ends (it comes once).
SLEEPER_PROGRAM = textwrap.dedent("""
    import os, signal, subprocess, sys, time

    def interrupted(signum, frame):
        with open("interrupts", "a") as handle:
            handle.write(f"{signum}\\n")
        time.sleep(0.5)  # a second SIGINT sent with the first would be written too
        sys.exit(0)

    signal.signal(signal.SIGINT, interrupted)
    child = subprocess.Popen(["sleep", "600"])
    with open("pids.tmp", "w") as handle:
        handle.write(f"{os.getpid()} {child.pid}")
    os.replace("pids.tmp", "pids")
    time.sleep(600)
""")
DEADLINE_S = 30  # generous: each ends in well under a second
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc; Linux's parent-death signal")


def _alive(pid: int) -> bool:
    """Whether the process runs: not ended, nor a zombie (ended, not yet waited for)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _within(condition) -> bool:
    end = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def sleeper(tmp_path):
    """The capture of SLEEPER_PROGRAM as a user's shell starts it (TMPDIR tmp_path/tmp), and the program's
    pid and its child's once it wrote them; whatever is left is killed after the test."""
    (tmp_path / "app.py").write_text(SLEEPER_PROGRAM)
    (tmp_path / "tmp").mkdir()
    capture = run_command(["triton_sweep.capture", "--out", tmp_path / "app", "--", sys.executable, "app.py"],
                          cwd=tmp_path, env=user_env(TRITON_INTERPRET="1", TMPDIR=str(tmp_path / "tmp")),
                          background=True,  # Ctrl-C as a shell leaves it, whatever this test process ignores
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    pids = []
    try:
        _within(lambda: (tmp_path / "pids").exists() or capture.poll() is not None)
        if not (tmp_path / "pids").exists():
            pytest.fail(f"no pids from the program; the capture: {capture.poll()} {capture.communicate()[0]}")
        pids = [int(pid) for pid in (tmp_path / "pids").read_text().split()]
        yield capture, pids
    finally:
        for pid in filter(_alive, pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        capture.kill()
        capture.wait()
        capture.stdout.close()


@linux
@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT", "SIGHUP"])  # kill or a scheduler; Ctrl-C; hangup
def test_a_stop_ends_the_program_and_its_child(sleeper, tmp_path, name):
    capture, (program, child) = sleeper
    assert len(list((tmp_path / "tmp").glob("capture_*"))) == 1
    # Ctrl-C: a terminal sends it to its foreground process group, the capture's (the program has its own)
    (os.killpg if name == "SIGINT" else os.kill)(capture.pid, signal.Signals[name])
    assert capture.wait(timeout=DEADLINE_S) == 128 + signal.Signals[name]
    assert _within(lambda: not _alive(program) and not _alive(child))
    output = capture.stdout.read()
    assert f"stopped: the capture got {name} after " in output, output
    assert "sent it to the program's process group; no file written (a partial capture)" in output
    assert not list((tmp_path / "tmp").glob("capture_*")) and not list(tmp_path.glob("app_*"))
    if name == "SIGINT":  # once: not from the terminal and again from the capture
        assert (tmp_path / "interrupts").read_text() == f"{int(signal.SIGINT)}\n"


@linux
def test_the_program_dies_with_the_capture(sleeper, tmp_path):
    capture, (program, child) = sleeper
    capture.kill()
    assert capture.wait(timeout=DEADLINE_S) == -signal.SIGKILL
    assert _within(lambda: not _alive(program))
    # Not covered: the program's child runs on (nothing signals its group once the capture is gone), and
    # the temp folder stays.
    assert _alive(child) and len(list((tmp_path / "tmp").glob("capture_*"))) == 1


def test_a_warmup_is_no_launch():
    sys.path.insert(0, str(REPO / "runners" / "capture" / "launch_hook"))
    import triton_launch_hook
    from triton.runtime.jit import MockTensor

    from tests.fixtures.external_kernel import _scale_rows_kernel

    hook = triton_launch_hook._hook_for(_scale_rows_kernel)
    hook(MockTensor(torch.float16), MockTensor(torch.float16), MockTensor(torch.float16), 64, 64, 64,
         BLOCK_COLS=32)
    hook(torch.empty(3, 64), torch.empty(3, 64), torch.empty(3), 64, 64, 64, BLOCK_COLS=32)
    _, counts = triton_launch_hook._counts["tests.fixtures.external_kernel._scale_rows_kernel"]
    assert [calls for calls, _ in counts.values()] == [1]


def test_calls_must_match_the_shapes():
    assert parse_calls([3, 1, 2], [[8, 100], [8, 200], [8, 100]], 2) == {(8, 100): 5, (8, 200): 1}
    with pytest.raises(ConfigError, match=r"kernel.calls: 1 counts for the 2 shapes of kernel.shapes"):
        parse_calls([3], [[8, 100], [8, 200]], 2)
    with pytest.raises(ConfigError, match=r"kernel.calls\[1\]: -1 must be an integer >= 0"):
        parse_calls([3, -1], [[8, 100], [8, 200]], 2)
    with pytest.raises(ConfigError, match="kernel.calls: weights the shapes of kernel.shapes, which is not"):
        parse_calls([3], None, 2)
    with pytest.raises(ConfigError, match="kernel.calls: weights the shapes of kernel.shapes"):
        plan_trials(load_spec("softmax", None), {"calls": [1, 2, 3]}, "interpret")  # the default shapes


GPU_ENV = {"backend": "cuda", "gpu_name": "NVIDIA H200", "driver_version": "580.159.04",
           "cuda_version": "13.0", "torch_version": "2.11.0", "triton_version": "3.6.0",
           "kernel_hash": "feedbeef0001"}
# p50 (µs) of three configs (BLOCK_SIZE) at three shapes: X (1024) covers all three within 3% but loses
# 2.5% at (8, 200); Y (2048) is the best there and within 3% at (8, 100); X is the best at (8, 400).
TABLE = {(8, 100): {1024: 1.00, 2048: 1.02, 4096: 1.10},
         (8, 200): {1024: 1.025, 2048: 1.00, 4096: 1.20},
         (8, 400): {1024: 1.00, 2048: 1.10, 4096: 1.05}}
CALLS = {(8, 100): 1, (8, 200): 1000, (8, 400): 1}


@pytest.fixture
def weighted_store(tmp_path):
    store = ResultStore(tmp_path / "results.sqlite")
    for index, (shape, p50s) in enumerate((s, p) for s, p in TABLE.items()):
        for block, p50 in p50s.items():
            store.append({**GPU_ENV, "trial_key": f"k{index}-{block}", "sweep_id": "s1", "kernel": "softmax",
                          "provider": "triton", "shape": shape, "dtype": "float16",
                          "config": {"BLOCK_SIZE": block, "num_warps": 4, "num_stages": 1}, "status": "ok",
                          "phase": "screen", "p50_us": p50, "gbps": 1.0, "tflops": 0.1, "seed": 0,
                          "timestamp": "2026-11-24T00:00:00"})
    frame = store.load()
    store.close()
    return frame  # in tmp_path / "results.sqlite"


def _section(out_dir: Path) -> dict:
    data = read_export(out_dir / "softmax_configs.json")
    return data["gpus"]["NVIDIA H200"]["3.6.0"]["dtypes"]["float16"]


def test_calls_weigh_the_covering_set(weighted_store, tmp_path, capsys):
    """Unweighted, X covers all three shapes and is the covering set; the list adds the alternates (every
    other config within 3% of the best at a shape): Y (within it at (8, 100) and (8, 200)); Z (4096) is
    within it nowhere. Weighted, Y comes first (the most call-weighted speed), then X for (8, 400): the
    covering set is Y, X, and no config is left to be an alternate."""
    export_kernel(weighted_store, "softmax", tmp_path / "plain", tolerance=0.03)
    plain = _section(tmp_path / "plain")
    assert [c["config"]["BLOCK_SIZE"] for c in plain["configs"]] == [1024, 2048]
    assert "weighted_loss" not in plain
    export_kernel(weighted_store, "softmax", tmp_path / "weighted", tolerance=0.03, calls=CALLS)
    weighted = _section(tmp_path / "weighted")
    # Y first: the most call-weighted speed (1000 calls at its best); then X for (8, 400)
    assert [c["config"]["BLOCK_SIZE"] for c in weighted["configs"]] == [2048, 1024]
    assert weighted["weighted_loss"] == pytest.approx(0.0)
    assert "softmax on NVIDIA H200, float16: weighted by 1002 calls, the list loses 0.00% of the best p50" \
        in capsys.readouterr().out
    # The covering sets themselves: X alone unweighted, Y then X weighted.
    measured = Measured(weighted_store)
    blocks = lambda keys: [json.loads(key)["BLOCK_SIZE"] for key in keys]  # noqa: E731
    assert blocks(measured.cover(measured.shapes, 0.03)) == [1024]
    assert blocks(measured.cover(measured.shapes, 0.03, CALLS)) == [2048, 1024]
    # The plain covering set (X alone), weighed by the same calls: the 1000 calls at (8, 200) lose 2.5%
    # there; the plain list, whose alternate Y serves (8, 200), loses nothing.
    best = {tuple(e["shape"]): e["fastest_p50_us"] for e in plain["best_by_shape"]}
    x_alone = {shape: p50s[1024] for shape, p50s in TABLE.items()}
    assert weighted_loss(x_alone, best, CALLS) == pytest.approx(1000 * 0.025 / 1002)
    listed = {tuple(e["shape"]): e["list_p50_us"] for e in plain["best_by_shape"]}
    assert listed == {(8, 100): 1.0, (8, 200): 1.0, (8, 400): 1.0}
    assert weighted_loss(listed, best, CALLS) == pytest.approx(0.0)


def test_export_takes_the_calls_of_a_sweep_file(weighted_store, tmp_path):
    shapes = list(CALLS)
    (tmp_path / "captured.yaml").write_text(
        f"kernel:\n  shapes: {json.dumps([list(s) for s in shapes])}\n"
        f"  calls: {[CALLS[s] for s in shapes]}\n")
    result = run_command(["triton_sweep.export", "--store", tmp_path / "results.sqlite", "--kernel",
                          "softmax",
                          "--out-dir", tmp_path / "out", "--calls", tmp_path / "captured.yaml"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert [c["config"]["BLOCK_SIZE"] for c in _section(tmp_path / "out")["configs"]] == [2048, 1024]

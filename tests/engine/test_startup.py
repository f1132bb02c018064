"""Start-up and finish of a sweep on the CPU: the kernel's module imported once by the fork server, the
GPU worker compiling a small list itself while the fork server still imports, workers started before
validation stopped by a bad input, the results written whatever the plots do, and commands that leave
nothing running behind them (runners/engine/process.py, runners/engine/scheduler.py, runners/sweep.py,
runners/outputs/, runners/outputs/finisher.py)."""
import json
import os
import time
from pathlib import Path

import pandas as pd

from triton_sweep.engine import compile_pool
from triton_sweep.engine.process import WorkerProcess, stop_all
from triton_sweep.engine.scheduler import Scheduler
from triton_sweep.model.trial import Trial
from tests.conftest import FAST_TIMING, run_command, run_sweep, user_env

H100_TARGET = ("cuda", 90, 32)
SLOW = "tests.fixtures.slow_import_kernel:SPEC"


def _softmax_trials(warps=(1, 2, 4, 8)) -> list[Trial]:
    return [Trial("slow_import_softmax", "triton", (4, 1000), "float16",
                  {"BLOCK_SIZE": 1024, "num_warps": w, "num_stages": 1}) for w in warps]


def _imports(marker) -> list[int]:
    """The pids of the processes that imported tests/fixtures/slow_import_kernel.py, once per import."""
    return [int(line) for line in marker.read_text().split()] if marker.exists() else []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _gone(pid: int, timeout_s: float = 30.0) -> bool:
    """Whether process `pid` has ended, waiting up to timeout_s for it to."""
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def test_the_fork_server_imports_the_kernel_module_once_for_every_compile_worker(tmp_path, monkeypatch):
    marker = tmp_path / "imported"
    monkeypatch.setenv("SLOW_IMPORT_S", "0")
    monkeypatch.setenv("SLOW_IMPORT_MARKER", str(marker))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    trials = _softmax_trials()
    pool = compile_pool.compile_workers(3, "external", SLOW)
    scheduler = Scheduler([], pool, trial_timeout_s=60, compile_timeout_s=60, target=H100_TARGET)
    recorded = []
    try:
        scheduler.start(ahead=[])
        scheduler.set_device(H100_TARGET, 232448, peaks={})
        scheduler.run(trials, lambda worker, trial, result: recorded.append(result))
        workers = [w.process.pid for w in pool if w.process is not None]
        server = scheduler.placement.server.info
    finally:
        stop_all(pool)
    assert recorded == [] and len(scheduler.ready) == len(trials)  # all built, none failed
    assert len(scheduler.placement.pool_compile_s) == len(trials)
    assert len(workers) == 3  # one per config waiting, up to the pool's size
    assert "tests.fixtures.slow_import_kernel" in server["preload"] and not server["failed"]
    # Imported once, by the fork server; none of the workers forked from it imported it again.
    assert _imports(marker) == [server["pid"]]
    assert server["pid"] not in workers


def _gpu_stand_in(conn) -> None:
    """Stands in for a GPU worker: ready at once; each trial 'compiled and run' at once."""
    conn.send(("ready", {"gpu_name": "none"}))
    while (message := conn.recv()) is not None:
        conn.send(("result", {"status": "ok", "first_call_s": 0.01}))


def test_a_small_list_is_compiled_by_the_gpu_worker_while_the_fork_server_imports(tmp_path, monkeypatch):
    """Until the fork server has imported the kernel's module, no compile worker can exist; a GPU worker
    with nothing else to run compiles the configs itself meanwhile. Here the import ends only when the
    test says so, after the list is done: the pool is skipped altogether."""
    release = tmp_path / "release"
    monkeypatch.setenv("SLOW_IMPORT_S", "0")
    monkeypatch.setenv("SLOW_IMPORT_UNTIL", str(release))
    trials = _softmax_trials()
    gpu = WorkerProcess("GPU stand-in", _gpu_stand_in, ())
    pool = compile_pool.compile_workers(4, "external", SLOW)
    scheduler = Scheduler([gpu], pool, trial_timeout_s=60, compile_timeout_s=60, target=H100_TARGET)
    recorded = {}
    try:
        scheduler.start(ahead=trials)  # queued for the pool: nothing is compiled ahead, it is not ready
        scheduler.set_device(H100_TARGET, 232448, peaks={})
        scheduler.run(trials, lambda worker, trial, result: recorded.update({trial.key: (worker, result)}))
        server_ready = scheduler.placement.server.ready
    finally:
        release.touch()
        stop_all([gpu] + pool)
    assert not server_ready
    assert sorted(recorded) == sorted(t.key for t in trials)
    assert all(worker is gpu and result["status"] == "ok" for worker, result in recorded.values())
    assert scheduler.placement.gpu_compiled == {t.key for t in trials}
    assert scheduler.placement.gpu_compile_s == [0.01] * len(trials)
    assert all(w.starts == 0 for w in pool)  # no compile worker was ever forked


def test_a_triton_without_the_compile_only_parts_gets_no_pool_and_the_same_rows(tmp_path, monkeypatch,
                                                                               capsys):
    """Without triton.runtime.driver.set_active (runners/engine/internals.py) there is no compile pool:
    compile_workers says so and gives none, and the trial worker compiles each config itself, with the
    same outcome for every trial as beside a pool."""
    import triton.runtime

    from triton_sweep.engine.worker import trial_worker
    from triton_sweep.measure.stop_rule import StopRule

    monkeypatch.setenv("SLOW_IMPORT_S", "0")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    trials = _softmax_trials(warps=(1, 4))
    rule = StopRule(min_samples=6, min_time_s=0.0, rel_precision=0.5, max_time_s=0.05)

    def outcomes() -> tuple[dict, list]:
        gpu = trial_worker("interpret", "external", SLOW, rule, 0.0, 0)
        pool = compile_pool.compile_workers(2, "external", SLOW)
        scheduler = Scheduler([gpu], pool, trial_timeout_s=120, compile_timeout_s=120, target=H100_TARGET)
        recorded = {}
        try:
            scheduler.start(ahead=trials)
            scheduler.set_device(H100_TARGET, 232448, peaks={})
            scheduler.run(trials, lambda _, trial, result: recorded.update({trial.key: result["status"]}))
        finally:
            stop_all([gpu] + pool)
        return recorded, pool

    beside_pool, pool = outcomes()
    monkeypatch.delattr(type(triton.runtime.driver), "set_active")
    alone, no_pool = outcomes()
    assert pool and no_pool == []
    assert "no compile pool (this Triton has no triton.runtime.driver.set_active)" in capsys.readouterr().out
    assert alone == beside_pool and sorted(alone) == sorted(t.key for t in trials)
    assert set(alone.values()) == {"ok"}


def test_bad_input_stops_the_workers_started_before_validation(tmp_path, monkeypatch):
    """The trial worker and the fork server start before the input is validated. A bad input must
    neither wait for them (here their import of the kernel's module never ends) nor let them print
    anything: the error names the field, and no process that imported the module outlives the sweep."""
    marker = tmp_path / "imported"
    monkeypatch.setenv("SLOW_IMPORT_S", "0")
    monkeypatch.setenv("SLOW_IMPORT_MARKER", str(marker))
    monkeypatch.setenv("SLOW_IMPORT_UNTIL", str(tmp_path / "never"))  # run_sweep passes the environment on
    result = run_sweep(tmp_path, "kernel=external", f"kernel.spec={SLOW}", "kernel.shapes=[[4,64]]",
                       "kernel.dtypes=[float16]", "timing.min_samples=1", backend="cuda", check=False)
    assert result.returncode == 2
    assert "timing.min_samples: 1 must be >= " in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert "worker(s)" not in result.stdout and not (tmp_path / "results.sqlite").exists()
    assert not any(_alive(pid) for pid in _imports(marker))


FAKE_MATPLOTLIB = "raise RuntimeError('fake: matplotlib is broken on this host')\n"


def test_results_and_the_finish_breakdown_do_not_depend_on_the_plots(tmp_path, monkeypatch):
    fake = tmp_path / "fake" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(FAKE_MATPLOTLIB)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))  # run_sweep puts the tests before it
    result = run_sweep(tmp_path, "kernel=vector_add", "kernel.shapes=[1000]",
                       "kernel.space.BLOCK_SIZE=[256,512]", "kernel.space.num_warps=[1]",
                       "kernel.baselines=[torch]", "sweep_id=noplots", "verbose=true", check=False,
                       plots=True)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    warnings = [line for line in output.splitlines() if "warning" in line.lower()]
    assert len(warnings) == 1 and "plots skipped: RuntimeError: fake: matplotlib is broken" in warnings[0]
    assert len(pd.read_parquet(tmp_path / "run" / "results.parquet")) == 3
    assert not list((tmp_path / "run").glob("*.png"))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    # the outputs in their order, the trial-time work closed before the plots and the W&B summary run
    finish = ["load", "parquet", "table", "export", "closing", "plots", "wandb"]
    assert list(summary["finish_seconds"]) == finish
    assert summary["before_job_seconds"] > 0 and summary["written"]["plots"] == []
    assert "finish load " in result.stdout and "before the job " in result.stdout


def _processes_with(marker: str) -> list[str]:
    """The command lines of the processes whose environment holds `marker` (this one's aside)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if marker.encode() in (proc / "environ").read_bytes():
                found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:  # gone meanwhile, or not ours to read
            pass
    return found


def test_two_commands_in_a_row_in_a_plain_shell_leave_no_process_and_no_cache_of_their_own(tmp_path):
    """The README's CPU command twice, as a user's shell runs it (no PYTHONUNBUFFERED, umask 077, another
    directory, a home of its own, W&B offline and the plots on): both succeed, each writes all its
    outputs before it returns and leaves no process behind, its files are the user's alone, and the
    user's cache holds nothing but the libraries' own caches."""
    home = tmp_path / "home"
    home.mkdir()
    marker = f"SWEEP_TEST_MARKER={tmp_path.name}"
    env = user_env(HOME=str(home), TRITON_INTERPRET="1", SWEEP_TEST_MARKER=tmp_path.name)
    for key in ("XDG_CACHE_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "WANDB_DIR"):
        env.pop(key, None)
    readme = ["triton_sweep.sweep", "backend=interpret", "kernel.shapes=[[4,1000]]",
              "kernel.space.BLOCK_SIZE=[1024]", "kernel.space.num_warps=[4]", "kernel.baselines=[torch]",
              *FAST_TIMING]
    for run in ("first", "second"):
        result = run_command(readme + [f"sweep_id={run}", f"hydra.run.dir=outputs/{run}"], cwd=tmp_path,
                             env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        assert _processes_with(marker) == []
        out = tmp_path / "outputs" / run
        assert sorted(p.name for p in out.glob("*.png")) == ["roofline.png", "speedup_softmax.png"]
        assert list((tmp_path / "outputs" / "wandb").glob("offline-run-*"))
        assert (out / "results.parquet").stat().st_mode & 0o077 == 0, "the user's umask 077"
    cached = {path.name for path in (home / ".cache").iterdir()} if (home / ".cache").exists() else set()
    assert cached <= {"triton", "torch", "torchinductor", "matplotlib"}, cached


def test_finish_in_background_leaves_the_plots_to_a_process_that_writes_them_after_the_command(tmp_path):
    """finish_in_background=true: the command returns once its own results are written; a process in a
    session of its own writes the plots after it, and says so in finish.log (a link planted there is
    replaced)."""
    (tmp_path / "run").mkdir()
    (tmp_path / "outside").write_text("precious")
    (tmp_path / "run" / "finish.log").symlink_to(tmp_path / "outside")
    result = run_sweep(tmp_path, "kernel=vector_add", "kernel.shapes=[1000]",
                       "kernel.space.BLOCK_SIZE=[256,512]", "kernel.space.num_warps=[1]",
                       "kernel.baselines=[torch]", "sweep_id=left", "finish_in_background=true",
                       plots=True)
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    pid = summary["finish_in_background"]
    assert len(pd.read_parquet(run / "results.parquet")) == 3  # its own results are there at its exit
    line = next(line for line in result.stdout.splitlines() if "written in the background by process" in line)
    assert line.startswith(f"plots, wandb: written in the background by process {pid}")
    assert str(run / "finish.log") in line
    assert _gone(pid, 120)
    # (one meta-parameter varies: no heatmap)
    assert sorted(p.name for p in run.glob("*.png")) == ["roofline.png", "speedup_vector_add.png"]
    assert "plots: " in (run / "finish.log").read_text()
    assert not (run / "finish.log").is_symlink() and (tmp_path / "outside").read_text() == "precious"


def test_the_benchmark_small_list_is_what_our_sweep_plans_at_four_shapes():
    """Both sides of bench_speed's slow_import row try, at each shape, the configs our sweep plans there
    (those the kernel's constraints keep), from a list of at most 50."""
    from triton_sweep.benchmarks import bench_speed
    from triton_sweep.model.spec_sources import load_spec
    from triton_sweep.model.space import plan_trials

    case = bench_speed.CASES["slow_import"]
    tried = bench_speed.tried_configs(case)
    trials = plan_trials(load_spec("softmax", None), {"shapes": case["shapes"], "dtypes": ["float16"],
                                                       "space": case["space"], "baselines": []}, "cuda")
    planned = [[t.config for t in trials if list(t.shape) == shape and not t.pruned_reason]
               for shape in case["shapes"]]
    assert len(case["shapes"]) == 4 and len(bench_speed._configs(case["space"])) <= 50
    assert tried == planned and all(planned)


def test_the_module_to_preload_is_named_from_the_config_alone():
    assert compile_pool.kernel_module("softmax", None) == "triton_sweep.kernels.softmax"
    assert compile_pool.kernel_module("matmul_bias_gelu", None) == "triton_sweep.kernels.matmul"
    assert compile_pool.kernel_module("external", "my_pkg.kernels.fused:SPEC") == "my_pkg.kernels.fused"
    # Nothing to name: the sweep's validation rejects these, naming the field.
    assert compile_pool.kernel_module("external", "my_pkg.fused") is None
    assert compile_pool.kernel_module("external", None) is None
    assert compile_pool.kernel_module("no_such_kernel", None) is None


def test_the_start_line_names_each_part_and_brackets_the_nested_ones():
    from triton_sweep.engine.startup import _start_parts

    info = {"start_seconds": {"imports": 1.04, "gpu": {"lock": 0.0, "cuda_context": 0.26},
                              "gpu_after_imports": 0.31}}
    assert _start_parts(info) == " (imports 1.0, gpu (lock 0.0, cuda context 0.3), gpu after imports 0.3)"
    assert _start_parts({}) == ""


HOME_SCRIPT = r'''
import json, os, sys
from triton_sweep.engine import process
from triton_sweep.engine.fork_server import start_home_server
from triton_sweep.engine.process import WorkerProcess, stop_all


def report(conn):
    imported = "tests.fixtures.slow_import_kernel" in sys.modules
    conn.send(("ready", {"parent": os.getppid(), "imported": imported}))
    conn.recv()


if __name__ == "__main__":
    start_home_server(("tests.fixtures.slow_import_kernel",))
    server = process._home
    workers = [WorkerProcess(f"worker {i}", "__main__:report", ()) for i in range(2)]
    for worker in workers:
        worker.start()  # asked for while the server imports: forked once it is ready
    print(json.dumps({"server": server.wait_ready()["pid"], "workers": [w.wait_ready() for w in workers]}))
    stop_all(workers)
'''


def test_a_command_s_workers_are_forked_from_a_home_server_that_imported_its_preload_once(tmp_path):
    """A command starts its home server first (runners/sweep.py): the server imports its preload while
    the command composes its config, and every worker asked of it, even before it is ready, is its child
    with that preload imported, not imported again; the server ends with the command."""
    import subprocess
    import sys

    script, marker = tmp_path / "home.py", tmp_path / "imported"
    script.write_text(HOME_SCRIPT)
    env = user_env(SLOW_IMPORT_S="1", SLOW_IMPORT_MARKER=str(marker))
    env.pop("TRITON_INTERPRET", None)  # the workers' and the server's Triton alike (compiled kernels)
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    started = json.loads(result.stdout.splitlines()[-1])
    assert _imports(marker) == [started["server"]]
    assert [w["parent"] for w in started["workers"]] == [started["server"]] * 2
    assert all(w["imported"] for w in started["workers"])
    assert _gone(started["server"])

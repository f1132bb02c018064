"""Start-up and finish of a sweep on the CPU: the kernel's module imported once by the fork server, the
GPU worker compiling a small list itself while the fork server still imports, workers started before
validation stopped by a bad input, and the results written whatever the plots and the W&B summary
run do (runners/engine/process.py, runners/engine/scheduler.py, runners/sweep.py,
runners/results/finisher.py)."""
import json
import time

import pandas as pd
import pytest

from runners.engine import compile_pool
from runners.engine.process import WorkerProcess, stop_all
from runners.engine.scheduler import Scheduler
from runners.engine.trial import Trial
from runners.results.finisher import Finisher
from runners.results.store import ResultStore
from tests.conftest import run_sweep
from tests.synthetic_store import softmax_sweep

H100_TARGET = ("cuda", 90, 32)
SLOW = "tests.slow_import_kernel:SPEC"


def _softmax_trials(warps=(1, 2, 4, 8)) -> list[Trial]:
    return [Trial("slow_import_softmax", "triton", (4, 1000), "float16",
                  {"BLOCK_SIZE": 1024, "num_warps": w, "num_stages": 1}) for w in warps]


def _imports(marker) -> list[int]:
    """The pids of the processes that imported tests/slow_import_kernel.py, once per import."""
    return [int(line) for line in marker.read_text().split()] if marker.exists() else []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


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
        server = scheduler.server.info
    finally:
        stop_all(pool)
    assert recorded == [] and len(scheduler.ready) == len(trials)  # all built, none failed
    assert len(scheduler.pool_compile_s) == len(trials)
    assert len(workers) == 3  # one per config waiting, up to the pool's size
    assert "tests.slow_import_kernel" in server["preload"] and not server["failed"]
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
        server_ready = scheduler.server.ready
    finally:
        release.touch()
        stop_all([gpu] + pool)
    assert not server_ready
    assert sorted(recorded) == sorted(t.key for t in trials)
    assert all(worker is gpu and result["status"] == "ok" for worker, result in recorded.values())
    assert scheduler.gpu_compiled == {t.key for t in trials}
    assert scheduler.gpu_compile_s == [0.01] * len(trials)
    assert all(w.starts == 0 for w in pool)  # no compile worker was ever forked


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
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))  # run_sweep puts the repository before it
    result = run_sweep(tmp_path, "kernel=vector_add", "kernel.shapes=[1000]",
                       "kernel.space.BLOCK_SIZE=[256,512]", "kernel.space.num_warps=[1]",
                       "kernel.baselines=[torch]", "sweep_id=noplots", check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    warnings = [line for line in output.splitlines() if "warning" in line.lower()]
    assert len(warnings) == 1 and "plots skipped: RuntimeError: fake: matplotlib is broken" in warnings[0]
    assert len(pd.read_parquet(tmp_path / "run" / "results.parquet")) == 3
    assert not list((tmp_path / "run").glob("*.png"))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    # the outputs in their order, their trial-time work closed, then the background ones waited for
    assert list(summary["finish_seconds"]) == ["load", "parquet", "table", "export", "closing", "background"]
    assert summary["before_job_seconds"] > 0 and summary["written"]["plots"] == []
    assert "finish load " in result.stdout and "before the job " in result.stdout


# A wandb whose runs start only once the test creates a file, and then fail.
SLOW_WANDB = """import os, time
class Settings(dict):
    def __init__(self, **kwargs):
        super().__init__(kwargs)
def init(**kwargs):
    while not os.path.exists(os.environ["FAKE_WANDB_RELEASE"]):
        time.sleep(0.05)
    raise RuntimeError("fake: the summary run could not be made")
"""


def test_a_summary_run_that_hangs_is_left_to_finish_on_its_own(tmp_path, monkeypatch):
    store = ResultStore(tmp_path / "r.sqlite")
    softmax_sweep(store, "s")
    store.close()
    fake = tmp_path / "fake" / "wandb"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(SLOW_WANDB)
    release = tmp_path / "release"
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))
    monkeypatch.setenv("FAKE_WANDB_RELEASE", str(release))
    out = tmp_path / "run"
    out.mkdir()
    said = []
    logger = {"mode": "offline", "project": "p", "entity": None, "dir": str(tmp_path)}
    plots = {"name": "plots", "target": "runners.results.outputs.plots:Plots", "settings": {}}
    wandb = {"name": "wandb", "target": "runners.results.outputs.wandb:Wandb", "settings": {"logger": logger}}
    finisher = Finisher.start([plots, wandb])
    try:
        finisher.begin(str(tmp_path / "r.sqlite"), "s", out, [{**plots, "handover": {}}])
        finisher.then({"export": []}, [{**wandb, "handover": {"summary": True}}])
        outcome = finisher.wait(say=said.append, then_wait_s=0.5)
        left_running = finisher.process.poll() is None
    finally:
        release.touch()
    assert left_running and outcome["background"] and "wandb" not in outcome["seconds"]
    names = ["heatmap_softmax.png", "roofline.png", "speedup_softmax.png"]
    assert sorted(p.name for p in outcome["files"]["plots"]) == names
    assert all(p.stat().st_size > 0 for p in outcome["files"]["plots"])
    note = f"note: output(s) wandb not written yet: process {finisher.process.pid} goes on in the background"
    assert said[0].startswith("plots: ") and said[-1].startswith(note)
    assert finisher.process.wait(timeout=60) == 0  # it goes on once released, and says what happened
    log = (out / "finish.log").read_text()
    assert "the run of sweep s was not written (RuntimeError: fake: the summary run could not" in log


def test_by_default_the_command_exits_before_the_plots_which_land_after_it(tmp_path):
    """wait_for_background=false (the default): the command returns once its own results are written;
    the finishing process, started in a session of its own, writes the plots after it and says so."""
    result = run_sweep(tmp_path, "kernel=vector_add", "kernel.shapes=[1000]",
                       "kernel.space.BLOCK_SIZE=[256,512]", "kernel.space.num_warps=[1]",
                       "kernel.baselines=[torch]", "sweep_id=left", "wait_for_background=false")
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["finish_in_background"] and summary["background_seconds"] == {}
    assert len(pd.read_parquet(run / "results.parquet")) == 3  # its own results are there at its exit
    line = next(line for line in result.stdout.splitlines() if "written in the background by process" in line)
    assert line.startswith("plots, wandb: ") and str(run / "finish.log") in line
    pid = int(line.split("by process ")[1].split(",")[0])
    deadline = time.monotonic() + 120
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)
    # (one meta-parameter varies: no heatmap)
    assert sorted(p.name for p in run.glob("*.png")) == ["roofline.png", "speedup_vector_add.png"]
    assert "plots: roofline.png, speedup_vector_add.png in " in (run / "finish.log").read_text()


def test_the_benchmark_small_list_is_what_our_sweep_plans_at_four_shapes():
    """Both sides of bench_speed's slow_import row try, at each shape, the configs our sweep plans there
    (those the kernel's constraints keep), from a list of at most 50."""
    from runners.benchmarks import bench_speed
    from runners.engine.specs import load_spec
    from runners.engine.trials import plan_trials

    case = bench_speed.CASES["slow_import"]
    tried = bench_speed.tried_configs(case)
    trials = plan_trials(load_spec("softmax", None), {"shapes": case["shapes"], "dtypes": ["float16"],
                                                       "space": case["space"], "baselines": []}, "cuda")
    planned = [[t.config for t in trials if list(t.shape) == shape and not t.pruned_reason]
               for shape in case["shapes"]]
    assert len(case["shapes"]) == 4 and len(bench_speed._configs(case["space"])) <= 50
    assert tried == planned and all(planned)


def test_the_module_to_preload_is_named_from_the_config_alone():
    assert compile_pool.kernel_module("softmax", None) == "kernels.softmax"
    assert compile_pool.kernel_module("matmul_bias_gelu", None) == "kernels.matmul"
    assert compile_pool.kernel_module("external", "my_pkg.kernels.fused:SPEC") == "my_pkg.kernels.fused"
    # Nothing to name: the sweep's validation rejects these, naming the field.
    assert compile_pool.kernel_module("external", "my_pkg.fused") is None
    assert compile_pool.kernel_module("external", None) is None
    assert compile_pool.kernel_module("no_such_kernel", None) is None


def test_triton_s_key_of_its_sources_is_computed_once_before_any_fork():
    """compute_source_keys leaves Triton's key in its cache, for the processes forked after it (the fork
    server's compile workers, the resident's commands)."""
    import triton.runtime.cache

    from runners.engine.process import compute_source_keys

    key = triton.runtime.cache.triton_key
    if not hasattr(key, "cache_info"):
        pytest.skip("this Triton does not cache its key")
    key.cache_clear()
    compute_source_keys()
    assert key.cache_info().currsize == 1
    key()
    assert key.cache_info().hits >= 1


FROZEN_SCRIPT = """
import atexit, gc, json, os, sys
# Registered before the module is imported, so run after its unfreeze at exit (atexit runs in reverse).
atexit.register(lambda: sys.stderr.write(f"frozen at exit: {gc.get_freeze_count()}\\n"))
from runners.engine.process import importing
with importing():
    import triton
frozen = gc.get_freeze_count()
reading, writing = os.pipe()
child = os.fork()
if child == 0:
    os.write(writing, str(gc.get_freeze_count()).encode())
    os._exit(0)
os.waitpid(child, 0)
print(json.dumps({"frozen": frozen, "in_fork": int(os.read(reading, 64)), "collector_on": gc.isenabled()}))
"""


def test_what_the_imports_made_is_frozen_here_and_in_forks_and_unfrozen_at_exit():
    """importing() freezes what the imports made (no later collection walks it, in this process or in
    its forks) and turns the collector back on; the process still exits as Python does, nothing frozen
    at its last collection: with them left frozen, Triton's bindings print their leaks."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, "-c", FROZEN_SCRIPT], cwd=REPO, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": path}, timeout=120)
    assert result.returncode == 0, result.stderr
    state = json.loads(result.stdout.splitlines()[-1])
    assert state["frozen"] > 10_000  # Triton's modules and all they import
    assert state["in_fork"] > 0.9 * state["frozen"]  # less the few freed by their count since
    assert state["collector_on"]
    assert "frozen at exit: 0\n" in result.stderr, result.stderr[:2000]
    assert "leaked" not in result.stderr, result.stderr[:2000]


def test_the_start_line_names_each_part_and_brackets_the_nested_ones():
    from runners.engine.startup import _start_parts

    info = {"start_seconds": {"imports": 1.04, "gpu": {"lock": 0.0, "cuda_context": 0.26},
                              "gpu_after_imports": 0.31}}
    assert _start_parts(info) == " (imports 1.0, gpu (lock 0.0, cuda context 0.3), gpu after imports 0.3)"
    assert _start_parts({}) == ""


HOME_SCRIPT = r'''
import json, os, sys
from runners.engine.process import WorkerProcess, start_home_server, stop_all


def report(conn):
    conn.send(("ready", {"parent": os.getppid(), "imported": "tests.slow_import_kernel" in sys.modules}))
    conn.recv()


if __name__ == "__main__":
    server = start_home_server(("tests.slow_import_kernel",))
    workers = [WorkerProcess(f"worker {i}", "__main__:report", ()) for i in range(2)]
    for worker in workers:
        worker.start()  # asked for while the server imports: forked once it is ready
    print(json.dumps({"server": server.wait_ready()["pid"], "workers": [w.wait_ready() for w in workers]}))
    stop_all(workers)
'''


def test_a_command_s_workers_are_forked_from_a_home_server_that_imported_its_preload_once(tmp_path):
    """A command run in its own process starts its home server first (runners/sweep.py): the server
    imports its preload while the command composes its config, and every worker asked of it, even
    before it is ready, is its child with that preload imported, not imported again."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    script, marker = tmp_path / "home.py", tmp_path / "imported"
    script.write_text(HOME_SCRIPT)
    env = {**os.environ, "SLOW_IMPORT_S": "1", "SLOW_IMPORT_MARKER": str(marker),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, str(script)], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    started = json.loads(result.stdout.splitlines()[-1])
    assert _imports(marker) == [started["server"]]
    assert [w["parent"] for w in started["workers"]] == [started["server"]] * 2
    assert all(w["imported"] for w in started["workers"])

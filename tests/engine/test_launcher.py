"""Multiruns whose jobs run apart (hydra/launcher=local, slurm; runners/engine/hydra_jobs.py): the presets
compose with their fields checked, the README's recipe is the preset's, and on the interpreter a 3-job
submitit multirun ends with one merged store holding the rows one job would give, also after one of
its jobs was killed mid-way; SIGTERM to the command stops every job and worker, and the same command run
again measures only what is missing.

What the CPU cannot show: the export of these rows (interpreter timings are refused, and the tests check
that refusal after the merge; tests/store/test_merge.py exports GPU-like rows of two GPU models from a merged
store), GPUs per job (`bash .ci/gpu launcher`), and SLURM itself (the preset is composed and checked here,
never submitted).
"""
import importlib.util
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import hydra.utils
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException, InstantiationException
from omegaconf import OmegaConf

from triton_sweep.engine.hydra_jobs import LauncherConfigError, take_gpus
from triton_sweep.model.schema import register_configs
from triton_sweep.model.spec_sources import load_spec
from triton_sweep.model.space import plan_trials
from triton_sweep.store.result_store import ResultStore
from tests.conftest import REPO, run_sweep

CONF = REPO / "conf"
SLURM = "hydra_plugins.triton_sweep_launcher.launchers.SlurmLauncher"
# 3 jobs, one shape each; each job: 3 blocks x 2 warps of ours and the torch baseline.
SPACE = ["kernel=vector_add", "kernel.baselines=[torch]", "kernel.space.BLOCK_SIZE=[128,256,512]",
         "kernel.space.num_warps=[1,2]"]
SHARDED = ["hydra/launcher=local", "kernel.shapes=300,700,1000", *SPACE]
PER_JOB = 3 * 2 + 1


def _compose(*overrides: str):
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=True)


def test_slurm_preset_composes_with_its_fields_checked():
    cfg = _compose("hydra/launcher=slurm", "hydra.launcher.partition=gpu", "hydra.launcher.gpus_per_task=2",
                   "hydra.launcher.cpus_per_task=8", "hydra.launcher.mem_gb=128",
                   "hydra.launcher.timeout_min=30")
    launcher = cfg.hydra.launcher
    assert launcher._target_ == SLURM
    assert (launcher.partition, launcher.gpus_per_task, launcher.cpus_per_task, launcher.mem_gb,
            launcher.timeout_min) == ("gpu", 2, 8, 128, 30)
    env = OmegaConf.to_container(cfg.hydra.job.env_set, resolve=False)
    assert env["TRITON_CACHE_DIR"] == "${hydra.runtime.output_dir}/triton_cache"  # a cache per job
    # The plugin's schema checks names and types at composition...
    for override, field in (("hydra.launcher.partiton=gpu", "partiton"), ("hydra.launcher.gpus_per_task=two",
                                                                             "gpus_per_task")):
        with pytest.raises(ConfigCompositionException, match=field):
            _compose("hydra/launcher=slurm", override)
    # ...and the launcher what submitit would find out only at submission, or never.
    for override, field in (("hydra.launcher.timeout_min=0", "hydra.launcher.timeout_min"),
                            ("hydra.launcher.nodes=2", "hydra.launcher.nodes"),
                            ("hydra.launcher.tasks_per_node=4", "hydra.launcher.tasks_per_node"),
                            ("hydra.launcher.mem_gb=-1", "hydra.launcher.mem_gb")):
        cfg = _compose("hydra/launcher=slurm", override, "hydra.sweep.dir=unused")
        with pytest.raises(InstantiationException, match=re.escape(field)) as error:
            hydra.utils.instantiate(cfg.hydra.launcher)
        assert isinstance(error.value.__cause__, LauncherConfigError)


def test_local_preset_composes():
    launcher = _compose("hydra/launcher=local").hydra.launcher
    assert launcher._target_.endswith("launchers.LocalLauncher")
    assert launcher.gpus_per_node == 1 and launcher.timeout_min == 1440


def test_ray_preset_composes():
    pytest.importorskip("hydra_plugins.hydra_ray_launcher",
                        reason="hydra-ray-launcher: pip install -e .[ray]")
    cfg = _compose("hydra/launcher=ray_gpus", "hydra.launcher.ray.remote.num_gpus=2")
    assert cfg.hydra.launcher._target_ == "hydra_plugins.triton_sweep_launcher.launchers.RayLauncher"
    assert cfg.hydra.launcher.ray.remote.num_gpus == 2 and cfg.hydra.launcher.ray.init.address is None
    assert "TRITON_CACHE_DIR" in cfg.hydra.job.env_set
    with pytest.raises(ConfigCompositionException, match="ray.initt"):
        _compose("hydra/launcher=ray_gpus", "hydra.launcher.ray.initt.address=auto")


def test_readme_recipe_is_the_slurm_preset():
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Run on a SLURM cluster", 1)[1].split("\n## ", 1)[0]
    command = re.search(r"```bash\n(.*?)```", section, re.S).group(1).replace("\\\n", " ")
    words = shlex.split(command)
    assert words[:4] == ["python", "-m", "triton_sweep.sweep", "-m"]
    # Compose the recipe's first job: each sweep override at its first value.
    parsed = OverridesParser.create().parse_overrides(words[4:])
    overrides = [f"{o.get_key_element()}={next(o.sweep_string_iterator())}" if o.is_sweep_override()
                 else o.input_line for o in parsed]
    assert sum(len(list(o.sweep_string_iterator())) if o.is_sweep_override() else 0 for o in parsed) == 4
    cfg = _compose(*overrides)
    assert cfg.hydra.launcher._target_ == SLURM and cfg.hydra.launcher.partition == "gpu"
    assert cfg.hydra.sweep.dir == "outputs/multirun/llm" and "outputs/multirun/llm/<n>/" in section
    for field in ("partition", "gpus_per_task", "cpus_per_task", "mem_gb", "timeout_min", "max_num_timeout"):
        default = _compose("hydra/launcher=slurm").hydra.launcher[field]
        said = "null" if default is None else str(default)
        assert f"`{field}` {said}" in section or f"`{field}` (null" in section  # the README's default


@pytest.mark.timeout(120)  # reads its children's lines: a line never flushed fails here, not the run
def test_two_holders_never_share_a_gpu_and_a_third_waits(tmp_path):
    held = take_gpus(["0", "1"], 1, tmp_path)  # this process holds GPU 0 until the test ends
    code = ("import sys; from pathlib import Path; from triton_sweep.engine.hydra_jobs import take_gpus; "
            f"print(take_gpus(['0', '1'], 1, Path({str(tmp_path)!r})), flush=True); sys.stdin.read()")

    def holder():  # a process that takes a GPU and keeps it until its stdin closes
        return subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)

    other = holder()
    assert other.stdout.readline().strip() == "['1']" and held == ["0"]  # the free one
    third = holder()
    line = third.stdout.readline()
    assert line.startswith("waiting for 1 free GPU(s)")  # both are held: it waits...
    other.communicate("")  # ...until a holder ends
    assert third.stdout.readline().startswith("took GPU(s) ['1']")
    third.communicate("")


def _trials(path) -> pd.DataFrame:
    store = ResultStore(path)
    try:
        return store.load()
    finally:
        store.close()


def _planned_keys(shapes: str = "300,700,1000") -> set:
    """The trial keys one job sweeping the shapes plans."""
    cfg = _compose(f"kernel.shapes=[{shapes}]", *SPACE)
    kernel = OmegaConf.to_container(cfg.kernel, resolve=True)
    return {t.key for t in plan_trials(load_spec("vector_add", None), kernel, "interpret")}


def test_three_jobs_apart_give_one_store_with_the_rows_of_one_job(tmp_path, monkeypatch):
    # The launcher hands out two "GPUs" (the interpreter ignores them), one to each job at a time.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    result = run_sweep(tmp_path, *SHARDED, multirun=True)
    sweep_dir = tmp_path / "multirun"
    logs = "".join(path.read_text() for path in sweep_dir.glob(".submitit/*/*_log.out"))
    taken = dict(re.findall(r"job #(\d): GPU\(s\) (\S+) of this host", logs))
    assert sorted(taken) == ["0", "1", "2"] and set(taken.values()) <= {"0", "1"}  # one GPU each
    for job in range(3):  # each job wrote a store of its own in its directory
        assert len(_trials(sweep_dir / str(job) / "results.sqlite")) == PER_JOB
    assert result.stdout.count(f"kept {PER_JOB} rows (vector_add {PER_JOB}), skipped 0") == 3
    trials = _trials(tmp_path / "results.sqlite")
    assert set(trials["trial_key"]) == _planned_keys() and trials["trial_key"].is_unique
    assert set(trials["status"]) == {"ok"}
    store = ResultStore(tmp_path / "results.sqlite")
    assert len(store.load(sweep_id="multirun")) == 3 * PER_JOB
    store.close()
    # After the merge, the end runs over every job's rows: table, parquet, export (refused: interpreter).
    assert len(pd.read_parquet(sweep_dir / "results.parquet")) == 3 * PER_JOB
    assert "refusing to export 'vector_add'" in result.stdout
    assert not (sweep_dir / "prior.sqlite").exists()


def _descendants(pid: int) -> list[int]:
    children = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def _process_writing(path: Path) -> int:
    """The pid that holds `path` open: the job writing that store."""
    target = str(path.resolve())
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if any(os.readlink(fd) == target for fd in (entry / "fd").iterdir()):
                    return int(entry.name)
            except OSError:
                continue
    raise AssertionError(f"no process holds {path} open")


def _count(path: Path) -> int:
    try:
        db = sqlite3.connect(path, timeout=30)
        try:
            return db.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error:  # not created yet
        return 0


def test_a_job_killed_mid_way_loses_nothing(tmp_path):
    # each trial samples for 0.3 s: after job 1's second row, its five others (1.5 s) are the time to kill it
    slow = ["timing.min_time_s=0.3", "timing.max_time_s=0.3"]
    two = ["hydra/launcher=local", "kernel.shapes=300,700", *SPACE]  # job 1 is killed
    process = run_sweep(tmp_path, *two, *slow, multirun=True, background=True)
    job_store = tmp_path / "multirun" / "1" / "results.sqlite"
    deadline = time.time() + 240
    while _count(job_store) < 2 and time.time() < deadline and process.poll() is None:
        time.sleep(0.05)
    job = _process_writing(job_store)
    workers = _descendants(job)
    os.kill(job, signal.SIGKILL)  # the node is lost: no clean-up, its trial worker goes too
    for pid in workers:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 1
    assert re.search(r"error: job #1 .*the job died before it finished", output)
    assert "1 job(s) of the multirun failed: 1" in output
    before = _trials(tmp_path / "results.sqlite")
    partial = before[before["shape"] == "[700]"]
    assert 2 <= len(partial) < PER_JOB, "job 1 was to be killed mid-way"
    assert len(before) == PER_JOB + len(partial)  # the other job's rows and the dead job's, merged
    # (the same command run again resumes from them: the SIGTERM test below)


def _within(condition, seconds: float) -> bool:
    deadline = time.time() + seconds
    while not condition() and time.time() < deadline:
        time.sleep(0.1)
    return condition()


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


LAUNCHERS = {"local": ["hydra/launcher=local"],
             "ray": ["hydra/launcher=ray_gpus", "hydra.launcher.ray.remote.num_gpus=0"]}
RAY = importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") is not None


@pytest.mark.parametrize("launcher", ["local", pytest.param("ray", marks=pytest.mark.skipif(
    not RAY, reason="the [ray] extra (hydra-ray-launcher) is not installed"))])
def test_sigterm_to_the_command_stops_every_job_and_worker_and_keeps_the_rows(tmp_path, launcher):
    slow = ["timing.min_time_s=0.3", "timing.max_time_s=0.3"]
    two = [*LAUNCHERS[launcher], "kernel.shapes=300,700", *SPACE]
    process = run_sweep(tmp_path, *two, *slow, multirun=True, background=True)
    stores = [tmp_path / "multirun" / str(job) / "results.sqlite" for job in (0, 1)]
    deadline = time.time() + 240
    while min(map(_count, stores)) < 2 and time.time() < deadline and process.poll() is None:
        time.sleep(0.05)
    below = _descendants(process.pid)  # the launcher's processes, the jobs, their workers and fork servers
    assert len(below) >= 4
    os.kill(process.pid, signal.SIGTERM)  # to the command alone, not to its process group
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 143, output
    assert "Traceback" not in output, output
    lines = output.rstrip().splitlines()
    said = [line for line in lines if line.startswith("error: interrupted")]
    # (Ray forwards its jobs' lines when it gets to them: after the command's own, at times)
    assert len(said) == 1 and (launcher == "ray" or lines[-1] == said[0]), output
    if launcher == "ray":  # Ray's own helpers (its dashboard's, a resource tracker) end after the driver
        _within(lambda: not [pid for pid in below if _alive(pid)], 10)
    assert not [pid for pid in below if _alive(pid)]  # nothing outlives the command
    before = _trials(tmp_path / "results.sqlite")  # every job's rows, merged into the store of record
    assert len(before) == sum(map(_count, stores)) and 4 <= len(before) < 2 * PER_JOB

    # The same command again (a new sweep directory, as a timestamped one would be): it resumes.
    result = run_sweep(tmp_path, *two, *slow, f"hydra.sweep.dir={tmp_path}/again", multirun=True)
    after = _trials(tmp_path / "results.sqlite")
    assert set(after["trial_key"]) == _planned_keys("300,700")
    assert after["trial_key"].is_unique and len(after) == 2 * PER_JOB  # every trial once: no duplicate row
    kept = after.set_index("id").loc[before["id"]]
    assert list(kept["p50_us"]) == list(before["p50_us"])  # rows measured before are untouched
    measured = re.search(r"merged into \S+: kept (\d+) rows", result.stdout)
    assert int(measured.group(1)) == 2 * PER_JOB - len(before)  # the rerun measured only what was missing
    store = ResultStore(tmp_path / "results.sqlite")
    assert len(store.load(sweep_id="again")) == 2 * PER_JOB  # the rerun's sweep covers the reused rows
    store.close()

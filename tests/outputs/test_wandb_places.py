"""Where W&B writes: a real sweep (interpreter, wandb offline) with its own HOME and TMPDIR leaves nothing of
W&B's in either: wandb's cache, staged artifacts and temporary files go under outputs/wandb with the runs,
no empty folder of ours stays there, and a finalist's re-timing goes into its trial's run (one run per
trial, and the sweep's run)."""
import glob
import os
from pathlib import Path

from triton_sweep.outputs.wandb.processes import WANDB_FOLDERS, wandb_folders
from triton_sweep.store.result_store import ResultStore
from tests.conftest import FAST_TIMING, NO_PLOTS, run_command, user_env
from tests.fixtures.wandb_records import read_run

# Three configs at one shape, all re-timed (top_k=3, whatever the margin), and a baseline beside them.
SWEEP = ["backend=interpret", "kernel=vector_add", "kernel.shapes=[[4096]]", "kernel.dtypes=[float16]",
         "kernel.space.BLOCK_SIZE=[1024,2048,4096]", "kernel.space.num_warps=[4]", "kernel.baselines=[torch]",
         *FAST_TIMING, "finalists.top_k=3", "finalists.screen_margin=100", "finalists.min_samples=6",
         "finalists.min_time_s=0", "finalists.max_time_s=0.05", "finalists.repetitions=1",
         "logger.mode=offline", "sweep_id=places", NO_PLOTS]
# wandb's own run format: `wandb sync` writes the run's files into files/ without making it.
RUN_FORMAT = ("files", os.path.join("tmp", "code"), "tmp")


def _named_wandb(folder: Path) -> list[str]:
    return [os.path.join(path, name) for path, folders, files in os.walk(folder)
            for name in folders + files if "wandb" in name.lower()]


def test_a_sweep_writes_w_and_b_under_outputs_alone(tmp_path):
    home, scratch, cwd = (tmp_path / name for name in ("home", "tmp", "cwd"))
    for folder in (home, scratch, cwd):
        folder.mkdir()
    env = user_env(HOME=str(home), TMPDIR=str(scratch), TRITON_INTERPRET="1")
    for name in (*WANDB_FOLDERS, "WANDB_DIR"):
        env.pop(name, None)
    result = run_command(["triton_sweep.sweep", *SWEEP], cwd=cwd, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "finalists: 3 configs and 1 baseline re-timed in 1 (shape, dtype) group" in result.stdout
    assert not _named_wandb(home) and not _named_wandb(scratch)

    runs_folder = cwd / "outputs" / "wandb"
    runs = [read_run(path) for path in glob.glob(f"{runs_folder}/offline-run-*/run-*.wandb")]
    trial_runs = [run for run in runs if run["job_type"] == "vector_add"]
    store = ResultStore(cwd / "outputs" / "results.sqlite")
    rows = store.load(sweep_id="places")
    store.close()
    trials = rows["trial_key"].nunique()
    assert len(rows) == 2 * trials  # each trial screened and re-timed: two rows, one run
    assert len(trial_runs) == trials == 4 and len(runs) == trials + 1  # and the sweep's run
    assert len({run["config"]["sweep_id"] for run in trial_runs}) == 1
    assert len({(run["config"]["provider"], run["config"].get("BLOCK_SIZE")) for run in trial_runs}) == 4
    for run in trial_runs:  # each re-timed: the re-timed row, its screening under screen/
        assert run["config"]["phase"] == "final" and run["name"].endswith(" (finalist)")
        assert run["summary"]["status"] == run["summary"]["screen/status"] == "ok"
        assert run["summary"]["p50_us"] > 0 and run["summary"]["screen/p50_us"] > 0
    assert sorted(run["summary"].get("rank") for run in trial_runs if run["config"]["provider"] == "triton") \
        == [1, 2, 3]

    # wandb's folders are the runs' folder's: its logs, and the sweep's run's tables staged for `wandb sync`
    assert list((runs_folder / "cache").rglob("core-debug-*.log"))
    assert list((runs_folder / "data" / "artifacts" / "staging").iterdir())
    assert not list(runs_folder.glob("tmp-*"))  # the W&B processes' temporary folders
    empty = [path for path, folders, files in os.walk(runs_folder) if not folders and not files]
    assert not [path for path in empty if not path.endswith(RUN_FORMAT)], empty


def test_the_user_s_wandb_folders_are_kept(tmp_path, monkeypatch):
    """A folder the user's shell names (WANDB_CACHE_DIR, ...) is wandb's; the others go under the runs'
    folder. WANDB_CONFIG_DIR (the user's settings) is never set."""
    for name in WANDB_FOLDERS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "mine"))
    folders = wandb_folders(Path("outputs/wandb"))
    assert folders == {"WANDB_DATA_DIR": str(Path("outputs/wandb/data").absolute()),
                       "WANDB_ARTIFACT_DIR": str(Path("outputs/wandb/artifacts").absolute())}
    assert "WANDB_CONFIG_DIR" not in WANDB_FOLDERS

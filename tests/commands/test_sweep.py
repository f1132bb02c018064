"""The sweep CLI end to end on the interpreter: bad input, in-job vs multirun, failing jobs, resume,
plugins."""
import contextlib
import json
import os
import re
import signal
import sqlite3
import time

import pandas as pd
import pytest

from triton_sweep.store.result_store import ResultStore
from tests.conftest import HAS_CUDA, run_sweep

SMALL_ADD = ["kernel=vector_add", "kernel.shapes=[300,1000]", "kernel.space.BLOCK_SIZE=[256,512]",
             "kernel.baselines=[torch]"]
TRIAL_COLUMNS = ["trial_key", "kernel", "provider", "shape", "dtype", "config", "status"]


def _trials(store_path) -> pd.DataFrame:
    store = ResultStore(store_path)
    frame = store.load()
    store.close()
    return frame


@pytest.mark.parametrize("override, field", [
    ("kernel=no_such_kernel", "kernel=no_such_kernel: no such option"),
    ("kernel.shapez=[4]", "kernel.shapez"),
    ("kernel.space.BLOCK_SIZE=[1000]", "kernel.space.BLOCK_SIZE"),
    ("kernel.shapes=[[-4,64]]", "kernel.shapes[0]"),
    ("kernel.dtypes=[float64]", "kernel.dtypes"),
    ("kernel.space.num_warps=[3]", "kernel.space.num_warps"),
])
def test_bad_input_is_rejected_before_any_launch(tmp_path, override, field):
    result = run_sweep(tmp_path, "kernel.shapes=[[4,64]]", override, check=False)
    assert result.returncode != 0
    assert field in result.stdout + result.stderr
    assert "worker(s)" not in result.stdout  # no worker was started, so nothing was launched
    assert not (tmp_path / "results.sqlite").exists()


@pytest.mark.parametrize("override, field", [("backend=tpu", "error: backend: Invalid value"),
                                             ("logger.mode=ofline", "error: logger.mode: Invalid value")])
def test_unknown_backend_or_logger_mode_fails_at_composition(tmp_path, override, field):
    result = run_sweep(tmp_path, override, check=False)
    assert result.returncode == 2
    assert result.stderr.strip() == result.stderr.strip().splitlines()[0] and field in result.stderr
    assert not (tmp_path / "results.sqlite").exists()


@pytest.mark.skipif(HAS_CUDA, reason="checks the message given on a machine with no GPU")
def test_no_gpu_points_to_the_interpreter(tmp_path):
    result = run_sweep(tmp_path, backend="cuda", check=False)
    assert result.returncode == 2
    assert "no CUDA GPU" in result.stderr and "backend=interpret" in result.stderr


def test_in_job_lists_and_multirun_give_the_same_trials(tmp_path):
    in_job, across_jobs = tmp_path / "in_job", tmp_path / "across"
    run_sweep(in_job, *SMALL_ADD, "kernel.space.num_warps=[1,2]")
    run_sweep(across_jobs, *SMALL_ADD, "kernel.space.num_warps=1,2", multirun=True)
    a = _trials(in_job / "results.sqlite")[TRIAL_COLUMNS].sort_values("trial_key").reset_index(drop=True)
    b = _trials(across_jobs / "results.sqlite")[TRIAL_COLUMNS].sort_values("trial_key").reset_index(drop=True)
    # 2 shapes x 2 blocks x 2 warps, and the torch baseline once per shape (the second job reuses it).
    assert len(a) == 2 * 2 * 2 + 2 and set(a["status"]) == {"ok"}
    pd.testing.assert_frame_equal(a, b)
    # The multirun ends with one parquet file and one table over both jobs.
    assert len(pd.read_parquet(across_jobs / "multirun" / "results.parquet")) == len(b)


def test_a_failing_job_does_not_abort_the_multirun(tmp_path):
    result = run_sweep(tmp_path, *SMALL_ADD, "kernel.space.num_warps=[1]", "kernel.space.BLOCK_SIZE=1000,256",
                       multirun=True, check=False)
    assert result.returncode == 1
    assert "kernel.space.BLOCK_SIZE: 1000 is not a power of 2" in result.stderr
    trials = _trials(tmp_path / "results.sqlite")
    ours = trials[trials["provider"] == "triton"]
    assert len(ours) == 2 and set(ours["config"].map(lambda c: json.loads(c)["BLOCK_SIZE"])) == {256}
    assert (tmp_path / "multirun" / "results.parquet").exists()


def test_resume_after_kill_loses_nothing_and_measures_nothing_twice(tmp_path):
    overrides = ["kernel=vector_add", "kernel.baselines=[torch]", "kernel.shapes=[500,700,900]",
                 "kernel.space.BLOCK_SIZE=[128,256,512]",
                 "kernel.space.num_warps=[1,2]", "timing.max_time_s=0.2", "sweep_id=resumable"]
    process = run_sweep(tmp_path, *overrides, background=True)
    store_path = tmp_path / "results.sqlite"
    deadline = time.time() + 300
    while time.time() < deadline:
        if store_path.exists() and _count(store_path) >= 4:
            break
        time.sleep(0.2)
    # kill -9 of the sweep mid-trial, no clean-up; then of its orphaned worker. (Killing both at once
    # could let the sweep see its worker die first and record the trial in flight as crashed.)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    os.killpg(process.pid, signal.SIGKILL)
    before = _trials(store_path)
    assert 4 <= len(before) < 3 * 3 * 2 + 3

    result = run_sweep(tmp_path, *overrides)
    assert (f"resuming: {len(before)} of the 21 trials planned kept from the store (measured on Triton "
            f"interpreter (CPU) with these versions; force=true measures them again), {21 - len(before)} "
            "left to measure") in result.stdout
    after = _trials(store_path)
    assert len(after) == 3 * 3 * 2 + 3  # every trial exactly once
    assert after["trial_key"].is_unique
    kept = after[after["id"].isin(before["id"])]
    pd.testing.assert_frame_equal(kept[TRIAL_COLUMNS + ["p50_us"]].reset_index(drop=True),
                                  before[TRIAL_COLUMNS + ["p50_us"]].reset_index(drop=True))
    store = ResultStore(store_path)
    assert len(store.load(sweep_id="resumable")) == len(after)  # the sweep covers reused rows too
    store.close()

    forced = run_sweep(tmp_path, *overrides, "kernel.shapes=[500]", "force=true")  # 7 of the 21 trials
    assert "resuming" not in forced.stdout  # said only where some were kept
    assert len(_trials(store_path)) == len(after) + 7  # force measures again; nothing is overwritten


def _count(store_path) -> int:
    """Rows in the store; 0 while the sweep has created the file but not yet its tables."""
    with contextlib.closing(sqlite3.connect(store_path, timeout=30)) as db:  # `with db` alone: not closed
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'trials'").fetchone():
            return 0
        return db.execute("SELECT COUNT(*) FROM trials").fetchone()[0]


def test_an_external_kernel_plugs_in_by_import_path(tmp_path):
    result = run_sweep(tmp_path, "kernel=external", "kernel.spec=tests.fixtures.external_kernel:SPEC",
                       "kernel.shapes=[[33,70]]", "kernel.dtypes=[float32,float16]")
    trials = _trials(tmp_path / "results.sqlite")
    assert set(trials["kernel"]) == {"scale_rows"}
    assert set(trials["status"]) == {"ok"}
    assert len(trials) == 2 * (2 * 2 + 1)  # 2 dtypes x (2 BLOCK_COLS x 2 num_warps + torch baseline)
    assert "scale_rows" in result.stdout  # the end table
    assert (tmp_path / "run" / "results.parquet").exists()


def test_a_new_output_is_a_module_and_a_config_node(tmp_path):
    """tests/fixtures/rows_output.py is an output the project does not know: named on the command line (as a
    conf/output/<name>.yaml would name it), it is made, sees every row and writes its file beside the
    built-in ones; `output=[...]` leaves the others out."""
    result = run_sweep(tmp_path, *SMALL_ADD, "sweep_id=with_csv",
                       "+output.rows_csv._target_=tests.fixtures.rows_output.RowsCsv")
    lines = (tmp_path / "run" / "rows.csv").read_text().splitlines()
    assert lines[0] == "kernel,provider,shape,config,p50_us"
    assert len(lines) == 1 + len(_trials(tmp_path / "results.sqlite"))
    assert f"({len(lines) - 1} recorded while the sweep ran)" in result.stdout
    assert (tmp_path / "run" / "results.parquet").exists()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["written"]["rows_csv"] == [str(tmp_path / "run" / "rows.csv")]
    result = run_sweep(tmp_path, *SMALL_ADD, "sweep_id=only_table", "force=true", "output=[table]",
                       f"hydra.run.dir={tmp_path}/run2")
    assert not (tmp_path / "run2" / "results.parquet").exists()
    assert "14 trials: 12 configs (12 ok), 2 baselines (2 ok)" in result.stdout  # each trial once


def test_the_configs_the_constraints_rule_out_are_committed_together_before_any_other(tmp_path):
    """Committed one at a time, the pruned configs of softmax_export (4648) held every GPU idle for the
    first 1.5-1.7 s of its trials phase on an H200 host (BENCHMARKS.md, 2026-11-28 (fourth)). They are
    committed in one transaction before the first trial is handed out: the first row to reach an output
    finds all of them in the store, and each keeps its reason."""
    result = run_sweep(tmp_path, "kernel=softmax", "kernel.shapes=[[4,300]]", "kernel.dtypes=[float32]",
                       "kernel.space.BLOCK_SIZE=[64,128,256,512]", "kernel.space.num_warps=[1,2]",
                       "kernel.baselines=[]", "+output.rows_csv._target_=tests.fixtures.rows_output.RowsCsv")
    trials = _trials(tmp_path / "results.sqlite")
    pruned = trials[trials["status"] == "pruned"]
    assert len(pruned) == 6 and set(trials["status"]) == {"pruned", "ok"}  # BLOCK_SIZE 64-256 < 300
    assert pruned["message"].str.contains("< row length 300").all()
    assert "rows committed to the store when the first reached this output: 6" in result.stdout


def test_each_group_s_finalists_take_no_longer_than_its_screening(tmp_path):
    """finalists.of_screening (issue 33): the job cuts each group's max_time_s to the seconds its screening
    took (its ok trials' rows), within finalists.max_time_s, and says so before they run. (That each group
    reaches its worker with its own rule is test_scale.py's side-worker test; that a measurement stops at
    its rule's max_time_s, test_timing.py's.)"""
    result = run_sweep(tmp_path, *SMALL_ADD, "finalists.top_k=2", "finalists.max_time_s=30",
                       "finalists.min_time_s=0", "finalists.repetitions=1", "verbose=true")
    rows = _trials(tmp_path / "results.sqlite")
    screen = rows[rows["phase"] == "screen"]
    screening = screen[screen["status"] == "ok"].groupby(screen["shape"].map(str))["measure_s"].sum()
    assert (screening < 30).all() and len(screening) == 2 and screening.min() != screening.max()
    said = (f"for up to {screening.min():.3f}-{screening.max():.3f} s a group (1x the seconds its screening "
            "took")
    assert said in result.stdout


@pytest.mark.parametrize("workers", [1, 2])
def test_the_time_spent_adds_up_the_rows_of_the_job(tmp_path, workers):
    """summary.json's time_spent (issue 33): the seconds the rows report, by phase (a group's finalists are
    timed in one loop that each of its rows reports: counted once), and the limit of this host from them;
    on several trial workers the busy share and the measuring are of all their time."""
    result = run_sweep(tmp_path, *SMALL_ADD, "finalists.top_k=2", f"gpu_workers={workers}", "verbose=true")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    spent, rows = summary["time_spent"], _trials(tmp_path / "results.sqlite")
    screen, final = rows[rows["phase"] == "screen"], rows[rows["phase"] == "final"]
    assert spent["phases"]["screen"]["measure_s"] == pytest.approx(screen["measure_s"].fillna(0).sum())
    assert spent["phases"]["screen"]["first_call_s"] == pytest.approx(screen["first_call_s"].fillna(0).sum())
    loops = final.groupby(final["shape"].map(str))["measure_s"].max().sum()
    assert len(final) > final["shape"].map(str).nunique() and spent["phases"]["final"]["measure_s"] == \
        pytest.approx(loops)
    phases = summary["phase_seconds"]
    assert spent["gpus"] == workers and spent["phases"]["screen"]["busy_share"] == pytest.approx(
        spent["phases"]["screen"]["measure_s"] / (phases["trials"] * workers))
    assert spent["limit"] == pytest.approx({"start_s": phases["start"], "compile_s": 0.0,
                                            "measure_s": (screen["measure_s"].sum() + loops) / workers})
    assert f"against {phases['start'] + phases['trials'] + phases['finalists']:.1f} s" in result.stdout
    assert re.search(r"^wall time [\d.]+ s \(start [\d.]+, ceilings [\d.]+, trials ", result.stdout, re.M)
    assert "finish load " in result.stdout


# The README's CPU command (the torch baseline alone: torch.compile's on the CPU takes seconds), with the
# default outputs (plots, W&B offline) and finalists.
README_CPU = ["kernel.shapes=[[4,1000]]", "kernel.space.BLOCK_SIZE=[1024]", "kernel.baselines=[torch]",
              "logger.mode=offline", "finalists.top_k=8"]
PROGRESS = ("sweep ", "ready after", "resuming: ", "W&B (logger.runs", "finalists")  # the phases' lines


def end_of_sweep(stdout: str) -> list[str]:
    """What a sweep prints once its phases' progress is over (the lines after the last progress line)."""
    lines = stdout.splitlines()
    progress = [i for i, line in enumerate(lines) if line.startswith(PROGRESS)]
    return lines[progress[-1] + 1:] if progress else lines


def test_the_end_of_a_default_cpu_sweep_is_a_short_read(tmp_path):
    """The end of a default sweep on the CPU: at most 12 lines (the counts, the table, where the results
    went, what to run next), counts that add up to what was planned, the timings said to be the
    interpreter's, with no GB/s or ceilings; no time accounting (verbose=true adds it: the test above)."""
    result = run_sweep(tmp_path, *README_CPU, "sweep_id=readme", plots=True)
    end = end_of_sweep(result.stdout)
    assert 0 < len(end) <= 12, "\n".join(end)
    planned = re.search(r"(\d+) trials planned \((\d+) configs, (\d+) baselines?;", result.stdout)
    counts = re.search(r"^(\d+) trials: (\d+) configs \(\2 ok\), (\d+) baselines? \(\3 ok\); "
                       r"finalists: (\d+) configs and 1 baseline re-timed in 1 \(shape, dtype\) group$",
                       result.stdout, re.M)
    assert planned and counts and planned.groups() == counts.groups()[:3], result.stdout
    assert int(counts[1]) == int(counts[2]) + int(counts[3]) and 2 <= int(counts[4]) <= int(counts[2])
    said = "\n".join(end)
    assert "interpreter timings (backend=interpret" in said and "GB/s" not in said and "%copy" not in said
    assert "results: " in said and "W&B offline runs in" in said and "plots: " in said
    assert end[-1].startswith("next: the same sweep on a GPU (without backend=interpret)")
    for hidden in ("this GPU", "peaks", "time spent", "wall time", "finish load", "resuming", "for up to"):
        assert hidden not in result.stdout, hidden


def test_a_sweep_in_a_repository_names_its_paths_from_there_and_its_commands_by_their_scripts(tmp_path):
    """With the default relative paths (outputs/ under the working directory): every path the end names is
    relative, as the config gave it; a heatmap that cannot be drawn says how the plot command draws it (the
    sweep takes no --x/--y); what to run next names the console scripts. Run again with more configs, it
    says how many trials it keeps and how many are left, and W&B counts those left."""
    add = ["kernel=vector_add", "kernel.shapes=[[1000]]", "kernel.space.num_warps=[4]", "kernel.baselines=[]",
           "store=outputs/results.sqlite", "export_dir=outputs/exports", "hydra.run.dir=outputs/runs/here"]
    out = run_sweep(tmp_path, *add, "kernel.space.BLOCK_SIZE=[256,512]", "sweep_id=here", plots=True).stdout
    assert "results: outputs/results.sqlite (sweep here), outputs/runs/here/results.parquet" in out
    assert ("plot skipped: heatmap of vector_add: vector_add varies only BLOCK_SIZE in this sweep; a heatmap "
            "needs two (triton-sweep-plot --sweep-id here --x BLOCK_SIZE --y num_warps draws it)") in out
    assert "plots: roofline.png in outputs/runs/here" in out
    assert out.splitlines()[-1] == ("next: the same sweep on a GPU (without backend=interpret) measures "
                                    "configs to export; triton-sweep-compare here NEW_SWEEP_ID compares two "
                                    "sweeps")
    assert str(tmp_path) not in out and "python -m" not in out and "resuming" not in out
    again = run_sweep(tmp_path, *add, "kernel.space.BLOCK_SIZE=[256,512,1024,2048]", "sweep_id=again",
                      "logger.mode=offline", "logger.runs=auto", plots=True).stdout
    assert ("resuming: 2 of the 4 trials planned kept from the store (measured on Triton interpreter (CPU) "
            "with these versions; force=true measures them again), 2 left to measure") in again
    assert "W&B (logger.runs=auto): 2 trials to measure, at most logger.auto_trials=" in again
    assert "triton-sweep-plot --sweep-id again --x BLOCK_SIZE" in again  # the kept rows' sweep not named

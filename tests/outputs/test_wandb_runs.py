"""logger.runs: the sweep's run alone (`sweep`), with a run per trial (`trial`), or chosen by the job's
size (`auto`). Real sweeps on the interpreter, their offline run files read back: the sweep's run holds
every trial with the keys a trial run has, charts whose specs name columns of their tables, and the best
config of every shape under stable summary keys, in both modes."""

import glob
import json
import math
from pathlib import Path

import pytest

from triton_sweep.outputs.wandb import logger as wandb_logger
from triton_sweep.outputs.wandb.processes import WANDB_FOLDERS, wandb_folders
from triton_sweep.outputs.wandb.summary import write_summary_run
from triton_sweep.outputs.wandb.trial_runs import TrialRuns
from triton_sweep.model.trial import Trial
from triton_sweep.store.result_store import ResultStore
from triton_sweep.outputs.wandb.tables import best_keys, chart_tables, summary_table
from tests.conftest import run_sweep
from tests.fixtures.synthetic_store import softmax_sweep
from tests.fixtures.wandb_records import read_records, read_run

SWEEP = ["kernel=softmax", "kernel.shapes=[[5,100],[5,200]]", "kernel.dtypes=[float16]",
         "kernel.space.BLOCK_SIZE=[128,256,512]", "kernel.space.num_warps=[2,4]",
         "kernel.space.num_stages=[1]",
         "kernel.baselines=[torch]", "logger.mode=offline", "sweep_id=runs"]
PLANNED = 10  # 2 shapes x 2 fitting blocks x 2 warps, and the torch baseline at each (4 pruned)


def _sweep(tmp_path: Path, *overrides: str):
    """The sweep, its runs (path -> read run) and its rows."""
    result = run_sweep(tmp_path, *SWEEP, *overrides)
    runs = {path: read_run(path) for path in sorted(glob.glob(f"{tmp_path}/wandb/offline-run-*/run-*.wandb"))}
    store = ResultStore(tmp_path / "results.sqlite")
    frame = store.load(sweep_id="runs")
    store.close()
    return result, runs, frame


def _table(run_path: str, summary: dict, key: str) -> list[dict]:
    path = Path(run_path).parent / "files" / summary[f"{key}/path"]
    table = json.loads(path.read_text())
    return [dict(zip(table["columns"], values)) for values in table["data"]]


def _expected_best(frame) -> dict:
    """By hand: the lowest p50 of ours at each shape (no finalists here), and torch's p50 over it."""
    ok = frame[frame["status"] == "ok"]
    expected = {}
    for shape, group in ok.groupby("shape"):
        ours = group[group["provider"] == "triton"]
        best = ours.loc[ours["p50_us"].idxmin()]
        label = "x".join(map(str, json.loads(shape)))
        config = json.loads(best["config"])
        expected[label] = (best["p50_us"], " ".join(f"{k}={config[k]}" for k in sorted(config)),
                           group[group["provider"] == "torch"]["p50_us"].iloc[0] / best["p50_us"])
    return expected


def _assert_best_keys(summary: dict, frame) -> None:
    for label, (p50, config, speedup) in _expected_best(frame).items():
        prefix = f"best/softmax/float16/{label}"
        assert summary[f"{prefix}/p50_us"] == pytest.approx(p50)
        assert summary[f"{prefix}/config"] == config
        assert summary[f"{prefix}/speedup_vs_torch"] == pytest.approx(speedup)
        assert summary[f"{prefix}/gbps"] > 0 and f"{prefix}/tflops" in summary


def test_both_modes_and_auto(tmp_path):
    """auto below logger.auto_trials: trial runs and the sweep's run; above it: the sweep's run alone,
    holding what the trial runs held."""
    result, trial_mode, frame = _sweep(tmp_path / "trial", "logger.auto_trials=100")
    assert f"W&B (logger.runs=auto): {PLANNED} trials to measure, at most logger.auto_trials=100: a run " \
           "per trial and the sweep's run" in result.stdout
    trial_runs = [run for run in trial_mode.values() if run["job_type"] == "softmax"]
    assert len(trial_runs) == PLANNED
    (trial_summary,) = [run for run in trial_mode.values() if run["job_type"] == "sweep_summary"]
    assert trial_summary["config"]["runs"] == "trial"
    # A trial run is lean (wandb_logger.TRIAL_RUN_SETTINGS): no list of installed packages, no console
    # log; the sweep's run has the list.
    files = {path: {f.name for f in (Path(path).parent / "files").glob("*")} for path in trial_mode}
    kinds = {path: run["job_type"] for path, run in trial_mode.items()}
    environment = {"requirements.txt", "output.log"}
    assert all(not files[path] & environment for path in files if kinds[path] == "softmax")
    assert all("requirements.txt" in files[path] for path in files if kinds[path] == "sweep_summary")
    _assert_best_keys(trial_summary["summary"], frame)

    result, sweep_mode, frame = _sweep(tmp_path / "sweep", "logger.auto_trials=9")
    assert f"W&B (logger.runs=auto): {PLANNED} trials to measure, more than logger.auto_trials=9: the " \
           "sweep's run alone, every trial in it" in result.stdout
    assert "wandb sync" in result.stdout
    ((path, run),) = sweep_mode.items()
    assert run["job_type"] == "sweep_summary" and run["group"] == "runs"
    config = run["config"]
    assert (config["runs"], config["kernels"], config["dtypes"]) == ("sweep", ["softmax"], ["float16"])
    assert config["gpu_name"] == "Triton interpreter (CPU)" and config["timing"]["min_samples"] == 6
    summary = run["summary"]
    _assert_best_keys(summary, frame)
    assert (summary["n_trials"], summary["n_ok"]) == (len(frame), PLANNED)
    assert summary["trials_in_artifact"] is False

    rows = _table(path, summary, "trials")
    assert len(rows) == len(frame)  # every trial, pruned ones too
    # The keys of a trial run's config and summary are columns of the table (the timing preset, the
    # same for every trial, is in the run's config).
    for trial_run in trial_runs:
        keys = set(trial_run["config"]) | set(trial_run["summary"])
        missing = {k for k in keys if not k.startswith("_")} - set(rows[0]) - {"timing"}
        assert not missing
    ours = {(r["shape_label"], r["BLOCK_SIZE"], r["num_warps"]) for r in rows if r["status"] == "ok"
            and r["provider"] == "triton"}
    assert len(ours) == 8 and {(r["rows"], r["cols"]) for r in rows} == {(5, 100), (5, 200)}


def test_chart_specs_name_columns_of_their_tables(tmp_path):
    _, runs, frame = _sweep(tmp_path, "logger.runs=sweep")
    ((path, run),) = runs.items()
    charts = {key.rsplit("/", 1)[1]: value["panel_config"] for key, value in run["config"].items()
              if key.startswith("_wandb/visualize/charts/")}
    assert set(charts) == {"pct_of_best_vs_BLOCK_SIZE", "pct_of_best_vs_num_warps", "speedup_vs_baselines",
                           "configs_by_pct_of_best", "outcomes"}
    for name, panel in charts.items():
        rows = _table(path, run["summary"], f"charts/{name}_table")
        assert panel["panelDefId"] in ("wandb/scatter/v0", "wandb/bar/v0") and rows
        assert set(panel["fieldSettings"].values()) <= set(rows[0])
        key = panel["userQuery"]["queryFields"][0]["fields"][3]["args"][0]["value"]
        assert key == f"charts/{name}_table"  # the panel reads the table logged beside it
    by_block = _table(path, run["summary"], "charts/pct_of_best_vs_BLOCK_SIZE_table")
    # A point per (shape, block that fits it): 128 and 256 hold 100 columns, 256 and 512 hold 200.
    assert sorted((r["shape_label"], r["BLOCK_SIZE"]) for r in by_block) == [
        ("5x100", 128), ("5x100", 256), ("5x200", 256), ("5x200", 512)]
    for label in ("5x100", "5x200"):  # 100 = our fastest at that shape
        assert max(r["pct_of_our_best"] for r in by_block if r["shape_label"] == label) == 100
    outcomes = {r["reason"]: r["trials"] for r in _table(path, run["summary"], "charts/outcomes_table")}
    assert outcomes["ok"] == PLANNED and sum(outcomes.values()) == len(frame)
    assert any(reason.startswith("pruned: BLOCK_SIZE # < row length #") for reason in outcomes)
    speedups = _table(path, run["summary"], "charts/speedup_vs_baselines_table")
    assert sorted(r["label"] for r in speedups) == ["softmax float16 5x100 vs torch",
                                                    "softmax float16 5x200 vs torch"]


def test_the_winner_is_the_finalists_choice(tmp_path):
    """Synthetic rows with finalists at the first shape: the summary keys take the chosen finalist, the
    charts each trial's newest (re-timed) row."""
    store = ResultStore(tmp_path / "s.sqlite")
    rows = softmax_sweep(store, "syn")
    frame = store.load(sweep_id="syn")
    store.close()
    chosen = [r for r in rows if r.get("chosen")]
    keys = best_keys(frame)
    config = chosen[0]["config"]
    expected = " ".join(f"{k}={config[k]}" for k in sorted(config))
    assert keys["best/softmax/float16/4096x1024/config"] == expected
    assert keys["best/softmax/float16/4096x1024/p50_us"] == pytest.approx(chosen[0]["p50_us"])
    table = summary_table(frame, {"softmax": ("rows", "cols")})
    charts = chart_tables(table)
    trials = frame["trial_key"].nunique()
    (_, counts, _, _) = charts["outcomes"]
    assert counts["trials"].sum() == trials
    assert set(counts["reason"]) >= {"ok", "incorrect: synthetic incorrect"}
    (_, ranked, _, _) = charts["configs_by_pct_of_best"]
    assert len(ranked) <= 25 and ranked["pct_of_our_best"].max() <= 100
    assert all(math.isfinite(v) for v in ranked["pct_of_our_best"])


def test_runs_of_explicit_auto_and_multirun(capsys):
    conf = {"runs": "auto", "auto_trials": 5}
    assert wandb_logger.runs_of(conf, 5, multirun=False) == "trial"
    assert wandb_logger.runs_of(conf, 6, multirun=False) == "sweep"
    assert wandb_logger.runs_of(conf, 1, multirun=True) == "sweep"  # a multirun adds up past any one job
    assert "one job of a multirun: the sweep's run alone" in capsys.readouterr().out
    assert wandb_logger.runs_of({"runs": "trial", "auto_trials": 0}, 10**6, multirun=True) == "trial"
    assert wandb_logger.runs_of({"runs": "sweep", "auto_trials": 10**6}, 1, multirun=False) == "sweep"
    assert capsys.readouterr().out == ""  # said only where auto chose


def test_a_table_past_the_row_limit_goes_to_the_artifact(tmp_path, monkeypatch):
    """wandb.Table keeps MAX_ROWS rows when logged; past it the whole table goes into the artifact. The
    run written in this process (what the summary process runs), with wandb's folders as it sets them."""
    import wandb

    store = ResultStore(tmp_path / "s.sqlite")
    softmax_sweep(store, "big")
    frame = store.load(sweep_id="big")
    store.close()
    monkeypatch.setattr(wandb.Table, "MAX_ROWS", 5)
    for name in WANDB_FOLDERS:
        monkeypatch.delenv(name, raising=False)
    for name, folder in wandb_folders(tmp_path / "wandb").items():
        monkeypatch.setenv(name, folder)
    conf = {"mode": "offline", "project": "p", "entity": None, "dir": str(tmp_path), "runs": "sweep"}
    dims = {"softmax": ("rows", "cols")}
    assert write_summary_run(conf, "big", frame, [], [], dims, "sweep", None) is None
    # read at once: written means whole on disk (read_run refuses a file without its exit record)
    (path,) = glob.glob(f"{tmp_path}/wandb/offline-run-*/run-*.wandb")
    summary = read_run(path)["summary"]
    assert summary["trials_in_artifact"] is True and "trials/_type" not in summary
    (entry,) = [entry for record in read_records(path) if record.WhichOneof("record_type") == "artifact"
                and record.artifact.type == "triton-configs" for entry in record.artifact.manifest.contents]
    assert entry.path == "trials.table.json"  # staged by wandb until `wandb sync` uploads it
    assert Path(entry.local_path).parent == tmp_path / "wandb" / "data" / "artifacts" / "staging"
    table = json.loads(Path(entry.local_path).read_text())
    assert len(table["data"]) == len(frame) > 5


def _trial(block: int, provider: str = "triton", shape: tuple = (4096,)) -> Trial:
    config = {"BLOCK_SIZE": block} if provider == "triton" else {}
    return Trial("vector_add", provider, shape, "float16", config)


def test_a_trial_makes_one_run_with_its_re_timing_in_it():
    """TrialRuns: a row that may be re-timed is held (an ok baseline, a config among the top_k screened so
    far), one pushed out of the top_k goes at once, a re-timing goes with its screening; the rows a group's
    re-timing left held go when the next group's comes, the rest at the job's end."""
    sent = []
    runs = TrialRuns(3, lambda kernel, name, config, summary: sent.append((name, summary)))

    def row(trial: Trial, p50, phase: str = "screen", status: str = "ok") -> None:
        label = trial.label + (" (finalist)" if phase == "final" else "")
        runs.add(trial, label, {"phase": phase}, {"status": status, "p50_us": p50}, phase)

    a, b, c, d, failed, baseline = _trial(1), _trial(2), _trial(3), _trial(4), _trial(5), _trial(0, "torch")
    elsewhere = _trial(1, shape=(8,))
    for trial, p50 in ((a, 4.0), (baseline, 9.0), (b, 2.0), (c, 3.0), (elsewhere, 1.0)):
        row(trial, p50)
    assert sent == []  # each may be re-timed
    row(failed, None, status="incorrect")
    row(d, 1.0)  # d, b, c the fastest three: a is never a finalist
    assert [name for name, _ in sent] == [failed.label, a.label]
    for trial, p50 in ((d, 1.5), (b, 2.5), (baseline, 9.5)):  # c, held, is not re-timed
        row(trial, p50, "final")
    assert [name for name, _ in sent[2:]] == [f"{t.label} (finalist)" for t in (d, b, baseline)]
    assert sent[2][1] == {"status": "ok", "p50_us": 1.5, "screen/status": "ok", "screen/p50_us": 1.0}
    row(elsewhere, 1.1, "final")  # the next group's re-timing: c's run goes, as screened, before it
    assert [name for name, _ in sent[5:]] == [c.label, f"{elsewhere.label} (finalist)"]
    assert sent[5][1] == {"status": "ok", "p50_us": 3.0}
    runs.close()
    assert len(sent) == 7 == len({name.removesuffix(" (finalist)") for name, _ in sent})  # one run a trial


def test_no_finalists_nothing_held():
    sent = []
    runs = TrialRuns(1, lambda kernel, name, config, summary: sent.append(name))
    runs.add(_trial(1), "a", {}, {"status": "ok", "p50_us": 1.0}, "screen")
    assert sent == ["a"]

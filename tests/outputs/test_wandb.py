"""W&B offline: the run files hold each trial's resolved config and metrics, plus one summary run."""
import glob
import json

from tests.conftest import run_sweep
from tests.fixtures.wandb_records import read_run


def test_offline_runs_hold_config_and_metrics(tmp_path):
    result = run_sweep(tmp_path, "kernel=softmax", "kernel.shapes=[[5,100]]", "kernel.dtypes=[float16]",
                       "kernel.space.BLOCK_SIZE=[128]", "kernel.space.num_warps=[2,4]",
                       "kernel.space.num_stages=[1]", "kernel.baselines=[torch]",
                       "logger.mode=offline", "sweep_id=wandb_test", "verbose=true")
    runs = [read_run(path) for path in sorted(glob.glob(f"{tmp_path}/wandb/offline-run-*/run-*.wandb"))]
    trial_runs = [r for r in runs if r["job_type"] == "softmax"]
    assert len(trial_runs) == 3  # 2 configs and the torch baseline
    assert {r["group"] for r in runs} == {"wandb_test"}
    ours = sorted((r for r in trial_runs if r["config"]["provider"] == "triton"),
                  key=lambda r: r["config"]["num_warps"])
    config = ours[0]["config"]
    assert config["kernel"] == "softmax" and config["dtype"] == "float16" and config["shape"] == [5, 100]
    assert (config["rows"], config["cols"]) == (5, 100)
    assert (config["BLOCK_SIZE"], config["num_warps"], config["num_stages"]) == (128, 2, 1)
    assert config["backend"] == "interpret" and config["timing"]["min_samples"] == 6
    assert "${" not in json.dumps(config)  # resolved
    summary = ours[0]["summary"]
    assert summary["status"] == "ok" and summary["p50_us"] > 0 and summary["gbps"] > 0
    assert summary["n_samples"] >= 3 and summary["p20_us"] <= summary["p50_us"] <= summary["p80_us"]

    (summary_run,) = [r for r in runs if r["job_type"] == "sweep_summary"]
    assert summary_run["summary"]["n_trials"] == 3 and summary_run["summary"]["n_ok"] == 3
    assert summary_run["summary"]["trials/_type"] == "table-file"
    (table_file,) = glob.glob(f"{tmp_path}/wandb/offline-run-*/files/media/table/trials_*.table.json")
    table = json.loads(open(table_file).read())
    assert {"status", "p50_us", "gbps", "config", "gpu_name"} <= set(table["columns"])
    assert len(table["data"]) == 3
    assert "W&B logging" in result.stdout

"""The W&B dashboard keys of a real offline sweep: what the standard panels need is there without setup
(flat meta-parameters, sweep, kernel, GPU, dtype, a shape label; latency minimized, throughput maximized),
and the summary run holds the sweep's plots as images and a trials table with pct_of_best."""

import glob
import json

from matplotlib.image import imread

from tests.conftest import run_sweep
from tests.fixtures.wandb_records import read_records, read_run


def test_dashboard_keys_metrics_plots_and_pct_of_best(tmp_path):
    run_sweep(
        tmp_path,
        "kernel=softmax",
        "kernel.shapes=[[5,100]]",
        "kernel.dtypes=[float16]",
        "kernel.space.BLOCK_SIZE=[128,256]",
        "kernel.space.num_warps=[2,4]",
        "kernel.space.num_stages=[1]",
        "kernel.baselines=[torch]",
        "logger.mode=offline",
        "sweep_id=dash",
        plots=True,
    )
    paths = sorted(glob.glob(f"{tmp_path}/wandb/offline-run-*/run-*.wandb"))
    runs = {path: read_run(path) for path in paths}
    trial_runs = [path for path, run in runs.items() if run["job_type"] == "softmax"]
    assert len(trial_runs) == 5  # 4 configs and the baseline
    for path in trial_runs:
        config = runs[path]["config"]
        assert config["sweep_id"] == "dash" and config["shape_label"] == "5x100"
        assert {"kernel", "dtype", "gpu_name", "provider", "rows", "cols"} <= set(config)
        metrics = {
            r.metric.name: r.metric.summary
            for r in read_records(path)
            if r.WhichOneof("record_type") == "metric"
        }
        assert metrics["p50_us"].min and not metrics["p50_us"].max
        assert metrics["gbps"].max and metrics["tflops"].max and not metrics["gbps"].min
    ours = [runs[p]["config"] for p in trial_runs if runs[p]["config"]["provider"] == "triton"]
    assert sorted((c["BLOCK_SIZE"], c["num_warps"]) for c in ours) == [(128, 2), (128, 4), (256, 2), (256, 4)]

    (summary_path,) = [path for path, run in runs.items() if run["job_type"] == "sweep_summary"]
    summary = runs[summary_path]["summary"]
    for name in ("roofline", "heatmap_softmax", "speedup_softmax"):
        assert summary[f"plots/{name}/_type"] == "image-file"
        image = imread(f"{summary_path.rsplit('/', 1)[0]}/files/{summary[f'plots/{name}/path']}")
        assert image.shape[:2] == (summary[f"plots/{name}/height"], summary[f"plots/{name}/width"])
        assert (tmp_path / "run" / f"{name}.png").exists()  # and in the run directory
    (table_file,) = glob.glob(f"{tmp_path}/wandb/offline-run-*/files/media/table/trials_*.table.json")
    table = json.loads(open(table_file).read())
    rows = [dict(zip(table["columns"], values)) for values in table["data"]]
    assert {"pct_of_best", "BLOCK_SIZE", "num_warps"} <= set(table["columns"])
    fastest = min(rows, key=lambda r: r["p50_us"])
    assert fastest["pct_of_best"] == 100
    for r in rows:
        assert 0 < r["pct_of_best"] <= 100
        assert abs(r["pct_of_best"] - 100 * fastest["p50_us"] / r["p50_us"]) < 1e-9
    assert {r["BLOCK_SIZE"] for r in rows if r["provider"] == "triton"} == {128, 256}

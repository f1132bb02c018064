"""Benchmark: what W&B costs a sweep of about 1,000 trials with a run per trial (`logger.runs=trial`) and
with the sweep's run alone (`logger.runs=sweep`), against the same sweep with W&B off.

    python -m triton_sweep.benchmarks.bench_wandb [--work DIR] [--backend interpret|cuda] [--repeats N]
    python -m triton_sweep.benchmarks.bench_wandb --runs N   # what one offline run costs, trial run or not

The sweep: vector_add at 5 sizes, 8 BLOCK_SIZEs x 5 num_warps x 5 num_stages and the torch baseline
(1,005 trials), timed briefly; on the interpreter (the default) it needs no GPU. Each mode runs offline in
a directory of its own: the sweep's wall time, the seconds it counts as W&B's (summary.json), the wall
time added over W&B off, and what `wandb sync` would upload. Prints each sweep's last lines, then a table."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SWEEP = ["kernel=vector_add", "kernel.shapes=[[2100],[2500],[3000],[3500],[4096]]", "kernel.dtypes=[float32]",
         "kernel.space.BLOCK_SIZE=[128,256,512,1024,2048,4096,8192,16384]",
         "kernel.space.num_warps=[1,2,4,8,16]", "kernel.space.num_stages=[1,2,3,4,5]",
         "kernel.baselines=[torch]", "timing=quick", "timing.min_samples=6", "timing.min_time_s=0",
         "timing.max_time_s=0.05", "timing.warmup_s=0", "finalists.top_k=0", "sweep_id=bench_wandb"]
MODES = {"off": ["logger.mode=disabled"], "trial": ["logger.mode=offline", "logger.runs=trial"],
         "sweep": ["logger.mode=offline", "logger.runs=sweep"]}


def sweep(work: Path, backend: str, overrides: list[str]) -> dict:
    """One sweep in `work`; its wall time, its summary.json and its offline W&B output."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    args = [sys.executable, "-m", "triton_sweep.sweep", f"backend={backend}", f"store={work}/results.sqlite",
            f"export_dir={work}/exports", f"hydra.run.dir={work}/run", f"logger.dir={work}", *SWEEP,
            *overrides]
    env = {**os.environ, "WANDB_SILENT": "true"}
    if backend == "interpret":
        env["TRITON_INTERPRET"] = "1"
    began = time.perf_counter()
    result = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - began
    print("\n".join(result.stdout.splitlines()[-6:]), result.stderr[-1500:] if result.returncode else "",
          flush=True)
    if result.returncode != 0:
        raise SystemExit(f"the sweep failed ({result.returncode}): {' '.join(overrides)}")
    summary = json.loads((work / "run" / "summary.json").read_text())
    runs = sorted((work / "wandb").glob("offline-run-*"))
    files = [path for run in runs for path in run.rglob("*") if path.is_file()]
    return {"wall": wall, "job_wall": summary["wall_seconds"],
            "wandb": ((summary.get("wandb_seconds") or 0.0)
                      + (summary.get("finish_seconds", {}).get("wandb") or 0.0)),
            "runs": len(runs), "files": len(files), "mb": sum(path.stat().st_size for path in files) / 1e6}


def one_run_each(count: int) -> None:
    """Seconds a run of `count` offline runs written one after another in this process, as a trial run
    (runners/outputs/wandb/logger.py: TRIAL_RUN_SETTINGS) and with the sweep's run's settings, in turn."""
    from triton_sweep.outputs.wandb.logger import _fill_trial_run, init_run
    from triton_sweep.outputs.wandb.processes import wandb_folders

    seconds = {True: [], False: []}
    with tempfile.TemporaryDirectory() as work:
        os.environ.update(wandb_folders(Path(work) / "wandb"))  # as the logging processes set them
        conf = {"project": "bench", "entity": None, "dir": work, "mode": "offline"}
        for i in range(2 * count):
            trial = i % 2 == 0
            began = time.perf_counter()
            run = init_run(conf, "bench", "kernel", f"run {i}", {"BLOCK_SIZE": i}, trial=trial)
            _fill_trial_run(run, {"p50_us": float(i)})
            seconds[trial].append(time.perf_counter() - began)
    for trial, label in ((True, "trial run (lean)"), (False, "with the sweep's run's settings")):
        print(f"{label:<32} median {statistics.median(seconds[trial]):.3f} s a run ({count} runs)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=None, help="where the sweeps write (default: temp)")
    parser.add_argument("--backend", default="interpret", choices=["interpret", "cuda"])
    parser.add_argument("--repeats", type=int, default=1, help="sweeps per mode, in turn; medians shown")
    parser.add_argument("--runs", type=int, default=None,
                        help="only N offline runs each way: a trial run's settings, the sweep's run's")
    args = parser.parse_args(argv)
    if args.runs:
        one_run_each(args.runs)
        return 0
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_wandb_"))
    measured: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for repeat in range(args.repeats):
        for mode, overrides in MODES.items():  # in turn: a drift of the host falls on every mode alike
            print(f"--- {mode} (repeat {repeat + 1})", flush=True)
            measured[mode].append(sweep(work / mode, args.backend, overrides))
    median = {mode: {key: statistics.median(one[key] for one in runs) for key in runs[0]}
              for mode, runs in measured.items()}
    table = [f"{'logger.runs':<12} {'W&B runs':>8} {'wall s':>8} {'added s':>8} {'W&B s (sweep counts)':>21} "
             f"{'offline files':>13} {'MB':>7}"]
    for mode, row in median.items():
        added = row["wall"] - median["off"]["wall"]
        label = mode if mode != "off" else "off (disabled)"
        table.append(f"{label:<12} {row['runs']:>8.0f} {row['wall']:>8.1f} "
                     f"{added:>8.1f} {row['wandb']:>21.1f} {row['files']:>13.0f} {row['mb']:>7.1f}")
    print("\n".join(["", f"{args.backend}, {args.repeats} sweep(s) per mode, medians:", *table]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

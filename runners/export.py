"""Export the winners as `triton.Config` lists: `<kernel>_<gpu>.py` (imports only triton) and `.json`.

    python -m runners.export --kernel softmax [--sweep-id ID] [--store outputs/results.sqlite]

Only ok trials of the kernel itself (not baselines) timed with CUDA events on a GPU are exported;
interpreter timings are refused. Rows of different GPU models are never mixed: one file pair per GPU,
from the rows measured with the newest kernel source and versions on that GPU.

CONFIGS holds the configs that were ok at every measured (dtype, shape), so @triton.autotune over them
never picks one that was not verified at a measured shape (softmax's BLOCK_SIZE must hold the row: a
smaller block is faster and wrong). They rank best first by the geometric mean over those (dtype,
shape)s of best_p50 / p50: 1.0 means it won everywhere. Ties keep measurement order. BEST_BY_SHAPE maps
each measured (dtype, shape) to its winner (the chosen finalist where finalists were re-timed, see
runners/finalists.py; else the lowest p50), whether or not that config ran elsewhere.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import sys
from pathlib import Path

import pandas as pd

from runners.finalists import winner
from runners.store import ENV_KEY, ResultStore
from runners.trials import TRITON_PROVIDER

LAUNCH_OPTIONS = ("num_warps", "num_stages")  # triton.Config keywords; every other key is a meta-parameter
# Rows exported together share the resume environment; backend and GPU name are already fixed here.
EXPORT_ENV = [name for name in ENV_KEY if name not in ("backend", "gpu_name")]


class ExportError(ValueError):
    pass


def _newest_per_trial(rows: pd.DataFrame) -> pd.DataFrame:
    return rows.sort_values("id").groupby("trial_key", as_index=False).tail(1)


def select_rows(frame: pd.DataFrame, kernel: str) -> dict[str, pd.DataFrame]:
    """gpu_name -> the exportable rows measured on it."""
    rows = frame[(frame["kernel"] == kernel) & (frame["provider"] == TRITON_PROVIDER) & (frame["status"] == "ok")]
    if rows.empty:
        raise ExportError(f"no ok trials of kernel {kernel!r} to export")
    gpu_rows = rows[rows["backend"] == "cuda"]
    if gpu_rows.empty:
        raise ExportError(
            f"refusing to export {kernel!r}: its ok trials are interpreter timings (backend=interpret), "
            "which say nothing about a GPU; run the sweep on a GPU"
        )
    by_gpu = {}
    for gpu, group in gpu_rows.groupby("gpu_name"):
        # fillna: a missing value (a NULL driver version, a row from before timing_method) equals itself
        env = group[EXPORT_ENV].fillna("").astype(str)
        same_env = (env == env.loc[group["id"].idxmax()]).all(axis=1)
        by_gpu[gpu] = _newest_per_trial(group[same_env])
    return by_gpu


def _config_of(row) -> dict:
    return json.loads(row["config"])


def _shape_of(row) -> tuple:
    return tuple(json.loads(row["shape"]))


def rank_configs(rows: pd.DataFrame) -> list[tuple[dict, float]]:
    """The configs ok at every (dtype, shape) of `rows` with their score (see the module doc), best first."""
    best_p50 = rows.groupby(["dtype", "shape"])["p50_us"].transform("min")
    relative = (best_p50 / rows["p50_us"]).tolist()
    shapes_measured = rows.groupby(["dtype", "shape"]).ngroups
    scores: dict[str, list[float]] = {}
    for config_json, value in zip(rows["config"], relative):
        key = json.dumps(json.loads(config_json), sort_keys=True)
        scores.setdefault(key, []).append(value)
    ranked = [(json.loads(k), math.exp(sum(map(math.log, v)) / len(v)))
              for k, v in scores.items() if len(v) == shapes_measured]
    return sorted(ranked, key=lambda item: -item[1])


def best_by_shape(rows: pd.DataFrame) -> list[dict]:
    winners = rows.loc[[winner(group) for _, group in rows.groupby(["dtype", "shape"], sort=False)]]
    return [
        {"dtype": row["dtype"], "shape": list(_shape_of(row)), "config": _config_of(row),
         "p50_us": row["p50_us"], "gbps": row["gbps"], "tflops": row["tflops"], "pct_copy_bw": row["pct_copy_bw"]}
        for _, row in winners.iterrows()
    ]


def _config_source(config: dict) -> str:
    meta = {k: v for k, v in config.items() if k not in LAUNCH_OPTIONS}
    options = "".join(f", {k}={config[k]}" for k in LAUNCH_OPTIONS if k in config)
    return f"triton.Config({meta!r}{options})"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def write_export(kernel: str, gpu: str, rows: pd.DataFrame, out_dir: str | Path) -> list[Path]:
    """Write <kernel>_<gpu>.py and .json; returns their paths."""
    newest = rows.loc[rows["id"].idxmax()]
    ranked = rank_configs(rows)
    winners = best_by_shape(rows)
    meta = {
        "kernel": kernel,
        "gpu": gpu,
        "driver_version": newest["driver_version"],
        "cuda_version": newest["cuda_version"],
        "torch_version": newest["torch_version"],
        "triton_version": newest["triton_version"],
        "kernel_hash": newest["kernel_hash"],
        "sweep_ids": sorted(rows["sweep_id"].unique().tolist()),
        "exported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "trials": int(len(rows)),
    }
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{kernel}_{_slug(gpu)}"

    config_lines = "\n".join(f"    {_config_source(c)},  # score {score:.3f}" for c, score in ranked) or (
        "    # none: no config was ok at every measured shape; use BEST_BY_SHAPE")
    best_lines = "\n".join(
        f"    ({w['dtype']!r}, {tuple(w['shape'])!r}): {_config_source(w['config'])},"
        f"  # p50 {w['p50_us']:.2f} us, {w['gbps']:.0f} GB/s"
        for w in winners
    )
    module = f'''"""{kernel} launch configs for {gpu}, measured by the triton-sweep runner. Generated: do not edit.

GPU: {gpu} (driver {meta["driver_version"]}, CUDA {meta["cuda_version"]})
Versions: torch {meta["torch_version"]}, triton {meta["triton_version"]}
Kernel source hash: {meta["kernel_hash"]}
Sweeps: {", ".join(meta["sweep_ids"])}
Exported: {meta["exported_at"]}
From {meta["trials"]} ok trials; latency is the p50 of CUDA-event samples, L2 flushed before each.

Use: @triton.autotune(configs=CONFIGS, key=[...]) on the kernel, or BEST_BY_SHAPE[(dtype, shape)].
At shapes not measured here, prune CONFIGS with the kernel's own constraints.
"""
import triton

# Ok at every measured (dtype, shape); best first by the geometric mean of (best p50 there / its p50).
CONFIGS = [
{config_lines}
]

# The winner at each measured (dtype, shape).
BEST_BY_SHAPE = {{
{best_lines}
}}
'''
    py_path = out_dir / f"{stem}.py"
    py_path.write_text(module)
    json_path = out_dir / f"{stem}.json"
    json_path.write_text(json.dumps(
        {**meta, "configs": [{"config": c, "score": s} for c, s in ranked], "best_by_shape": winners},
        indent=2, default=str,
    ))
    return [py_path, json_path]


def export_kernel(frame: pd.DataFrame, kernel: str, out_dir: str | Path) -> list[Path]:
    paths = []
    for gpu, rows in select_rows(frame, kernel).items():
        paths += write_export(kernel, gpu, rows, out_dir)
    return paths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="outputs/results.sqlite")
    parser.add_argument("--kernel", help="kernel name; default: every kernel with ok GPU trials")
    parser.add_argument("--sweep-id", help="only this sweep's trials (measured or reused by it)")
    parser.add_argument("--out-dir", default="outputs/exports")
    args = parser.parse_args(argv)
    if not Path(args.store).exists():
        print(f"error: --store: {args.store} does not exist; run a sweep first", file=sys.stderr)
        return 2
    store = ResultStore(args.store)
    frame = store.load(sweep_id=args.sweep_id, kernel=args.kernel)
    store.close()
    kernels = [args.kernel] if args.kernel else sorted(frame["kernel"].unique())
    if not kernels:
        print("error: no trials in the store for that selection", file=sys.stderr)
        return 2
    status = 0
    for kernel in kernels:
        try:
            for path in export_kernel(frame, kernel, args.out_dir):
                print(path)
        except ExportError as error:
            print(f"error: {error}", file=sys.stderr)
            status = 2
    return status


if __name__ == "__main__":
    sys.exit(main())

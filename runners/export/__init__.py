"""The export of tuned configs: `<kernel>_configs.json` (the data of record) and `<kernel>_configs.py`
(imports only triton), written at the end of a sweep (runners/outputs/export_files.py) and by
`python -m runners.export`. One package, one module a step of the walk from a store to the files:
- settings.py: every setting resolved and checked (key, tolerance, dims, the kernel's constraints, calls);
- rows.py: what is exported (ok GPU rows of the kernel, newest environment, newest row a trial);
- cover.py: the covering set and its alternates per (GPU, dtype), and the winners;
- generalization.py: the leave-one-out estimate of how the export holds between its measured shapes,
  printed in one line a (GPU, dtype) and stored as "leave_one_out";
- fileformat.py: the JSON (format 3: gpus -> Triton version -> section), read and merged;
- render.py: the generated module, its data as literals then runtime.py's lookup code verbatim;
- runtime.py: the lookup code every generated module carries (the prune, config_for, do_bench).
This module composes them: a section per GPU (gpu_section) and the files (export_kernel)."""
from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Optional

import pandas as pd

from runners.export.cover import Measured, covering_set
from runners.export.fileformat import FORMAT, merged, sections, validated
from runners.export.generalization import Lookup, estimate, summary_line
from runners.export.render import render_module
from runners.export.rows import (baseline_rows, checked_rows, parse_shape, select_rows,
                                         trial_statuses)
from runners.export.settings import checked, checked_tolerance

PROVENANCE = ("timing_method", "driver_version", "cuda_version", "torch_version", "triton_version",
              "kernel_hash")


def gpu_section(rows: pd.DataFrame, tolerance: float, baselines: Optional[pd.DataFrame] = None,
                dims: Optional[tuple] = None, key_dims: Optional[list] = None,
                calls: Optional[dict] = None, rule=None, statuses: Optional[dict] = None) -> dict:
    """Provenance and the covering set of every dtype of one GPU's rows (with the baselines measured
    beside them, for each shape's winner); given the dims and the export key's dims, each dtype's
    leave-one-out estimate too (runners/export/generalization.py), with the kernel's constraints
    `rule` as its check and `statuses` ((dtype, canonical config, shape) -> status, every status) to score the
    picks that were not ok."""
    newest = rows.loc[rows["id"].idxmax()]
    dtypes = {}
    for dtype, group in sorted(rows.groupby("dtype")):
        measured = Measured(group)
        dtypes[dtype] = covering_set(measured, tolerance,
                                     None if baselines is None else baselines[baselines["dtype"] == dtype],
                                     calls)
        if dims is not None:
            of_dtype = {(key, shape): status for (d, key, shape), status in (statuses or {}).items()
                        if d == dtype}
            dtypes[dtype]["leave_one_out"] = estimate(measured, tolerance, dims, key_dims,
                                                      Lookup(rule, dtype, of_dtype))
    return {
        **{name: (None if pd.isna(newest[name]) else str(newest[name])) for name in PROVENANCE},
        "sweep_ids": sorted(rows["sweep_id"].unique().tolist()),
        "exported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "trials": int(len(rows)),
        "tolerance": tolerance,
        "dtypes": dtypes,
    }


def write_export(kernel: str, new: dict[str, dict], out_dir: str | Path, dims: tuple, key: dict | None,
                 merge: bool = True) -> list[Path]:
    """Write <kernel>_configs.json (the sections of this export, gpu -> section, each filed under its
    Triton version, over those kept from the existing file) and the .py generated from it; returns
    their paths."""
    out_dir = Path(out_dir)
    json_path = out_dir / f"{kernel}_configs.json"
    existing = merged(json_path, kernel, dims, merge)
    gpus: dict[str, dict] = {}
    for gpu, version, section in sections(existing) if existing else ():
        if not (gpu in new and new[gpu]["triton_version"] == version):
            print(f"note: {json_path.name} keeps the configs of {gpu!r}, Triton {version!r}, exported "
                  f"{section['exported_at']!r}")
            gpus.setdefault(gpu, {})[version] = section
    for gpu, section in new.items():
        gpus.setdefault(gpu, {})[section["triton_version"]] = section
    data = {"format": FORMAT, "kernel": kernel, "dims": list(dims),
            "key": key if key else existing.get("key", {}),
            "gpus": {gpu: dict(sorted(gpus[gpu].items())) for gpu in sorted(gpus)}}
    text = json.dumps(data, indent=1)
    validated(json.loads(text), f"{json_path} as it would be written")  # nothing written otherwise
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path.write_text(text)
    py_path = out_dir / f"{kernel}_configs.py"
    py_path.write_text(render_module(json.loads(text), json_path.name))  # from the JSON as written
    return [py_path, json_path]


def export_kernel(frame: pd.DataFrame, kernel: str, out_dir: str | Path, *, tolerance: float = 0.03,
                  key: dict | None = None, dims: tuple | None = None, merge: bool = True,
                  key_field: str = "--key", calls: Optional[dict] = None, rule=None,
                  source: str = "the store") -> list[Path]:
    """Write the kernel's export from the store's rows (module doc); `rule`: the kernel's constraints,
    (shape, dtype, config) -> reason or None, which the leave-one-out estimate plays as `check`;
    `source`: the store, as errors name it."""
    checked_tolerance(tolerance)
    checked_rows(frame[frame["kernel"] == kernel], source)
    by_gpu = select_rows(frame, kernel)
    rank = len(parse_shape(next(iter(by_gpu.values()))["shape"].iloc[0]))
    dims, key = checked(kernel, rank, key, dims, key_field)
    key_dims = [d for d in dims if d in key.values()] or list(dims)  # no key: a call gives every dim
    sections = {gpu: gpu_section(rows, tolerance, baseline_rows(frame, rows), dims, key_dims, calls, rule,
                                 trial_statuses(frame, rows))
                for gpu, rows in by_gpu.items()}
    for gpu, section in sections.items():
        for dtype, dtype_data in section["dtypes"].items():
            print(f"{kernel} on {gpu}, {dtype}: {summary_line(dtype_data['leave_one_out'], dims)}")
            if dtype_data.get("weighted_loss") is not None:
                total = sum(dtype_data["calls"].values())
                print(f"{kernel} on {gpu}, {dtype}: weighted by {total} calls, the list loses "
                      f"{100 * dtype_data['weighted_loss']:.2f}% of the best p50 on average")
    return write_export(kernel, sections, out_dir, dims, key, merge)



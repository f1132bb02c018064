"""The record of one result row: every field a trial's row may hold, declared once.

The worker fills the measured fields (runners/measure/metrics.py: each metric declares its Column there),
the job adds the trial, the device's description and the provenance (runners/engine/job.py); the store
(runners/store/result_store.py), the W&B runs, the report and compare read the lists below. Adding a
metric is one function in runners/measure/metrics.py: the store gains the column (old stores too), a W&B
run shows it where its `wandb` says. A field no Column declares is an error (`unknown_fields`), never
dropped.
"""
from __future__ import annotations

from typing import Iterable

from triton_sweep.measure.metrics import CONFIG, METRIC_COLUMNS, SUMMARY, Column


def _ran_on(name: str, sql: str = "TEXT", **flags) -> Column:
    return Column(name, sql, device=True, **flags)


COLUMNS: tuple[Column, ...] = (
    # What the trial is.
    Column("trial_key", "TEXT NOT NULL"), Column("sweep_id", "TEXT NOT NULL"),
    Column("kernel", "TEXT NOT NULL", CONFIG), Column("provider", "TEXT NOT NULL", CONFIG),
    Column("shape", "TEXT NOT NULL", CONFIG), Column("dtype", "TEXT NOT NULL", CONFIG),
    Column("config", "TEXT NOT NULL"),
    # Of ours: how many configs of the job's plan pass the constraints at the row's (shape, dtype), so that
    # a search's "measured N of M" can be said from the store (the table, the export).
    Column("planned_configs", "INTEGER", CONFIG),
    # How it ended.
    Column("status", "TEXT NOT NULL", SUMMARY), Column("message", "TEXT", SUMMARY),
    Column("stop_reason", "TEXT", SUMMARY),
    # screen: the trial's own measurement; final: re-timed among the finalists (rank, tie, chosen).
    Column("phase", "TEXT", CONFIG), Column("rank", "INTEGER", SUMMARY),
    Column("tie", "INTEGER", SUMMARY, boolean=True), Column("chosen", "INTEGER", SUMMARY, boolean=True),
    Column("compile_s", "REAL", SUMMARY), Column("first_call_s", "REAL", SUMMARY),
    # What was measured: runners/measure/metrics.py, in its order.
    *METRIC_COLUMNS,
    _ran_on("sm_clock_max_mhz", "INTEGER"), Column("throttled", "INTEGER", SUMMARY, boolean=True),
    # Another process ran kernels on the row's GPU while it was measured (runners/measure/
    # neighbours.py); empty where that could not be told.
    Column("gpu_shared", "INTEGER", SUMMARY, named=True, boolean=True),
    # Where it ran.
    _ran_on("backend", "TEXT NOT NULL", wandb=CONFIG, resume=True, named=True),
    _ran_on("timing_method", wandb=CONFIG, resume=True, named=True),
    _ran_on("gpu_name", "TEXT NOT NULL", wandb=CONFIG, resume=True, named=True),
    _ran_on("driver_version", wandb=CONFIG, resume=True, named=True),
    _ran_on("cuda_version", named=True),
    _ran_on("torch_version", "TEXT NOT NULL", wandb=CONFIG, resume=True, named=True),
    _ran_on("triton_version", "TEXT NOT NULL", wandb=CONFIG, resume=True, named=True),
    _ran_on("python_version", named=True), _ran_on("sm_count", "INTEGER"), _ran_on("l2_bytes", "INTEGER"),
    _ran_on("host", named=True),
    # Which GPU of the host: each row's own, from the trial worker that measured it (on a host of several
    # GPUs a sweep's rows come from all of them), as nvidia-smi -L names it.
    _ran_on("gpu_uuid", wandb=CONFIG, named=True),
    # What measured it.
    Column("kernel_hash", "TEXT NOT NULL", CONFIG, resume=True, named=True),
    Column("git_sha", "TEXT", CONFIG, named=True), Column("seed", "INTEGER NOT NULL", CONFIG),
    Column("timestamp", "TEXT NOT NULL"),
)

COLUMN_NAMES = tuple(c.name for c in COLUMNS)
# What makes two measurements of one trial comparable; resume matches on these and the trial key.
# timing_method is in it: rows timed another way (CUDA events after a writing flush, before it was
# recorded: NULL) are measured again, never mixed with the kernel times of record.
ENV_KEY = tuple(c.name for c in COLUMNS if c.resume)
# Named by compare where matched rows differ: the resume key first, then what else says where a row ran.
NAMED = ENV_KEY + tuple(c.name for c in COLUMNS if c.named and not c.resume)
DEVICE_COLUMNS = tuple(c.name for c in COLUMNS if c.device)
SAMPLE_COLUMNS = tuple(c.name for c in COLUMNS if c.samples)
BOOLEAN_COLUMNS = tuple(c.name for c in COLUMNS if c.boolean)
WANDB_CONFIG = tuple(c.name for c in COLUMNS if c.wandb == CONFIG)
WANDB_SUMMARY = tuple(c.name for c in COLUMNS if c.wandb == SUMMARY)


class UnknownField(ValueError):
    """A row holds a field no Column declares."""


def unknown_fields(fields: Iterable[str]) -> None:
    """Raises UnknownField naming every field of a row that no Column declares."""
    unknown = sorted(set(fields) - set(COLUMN_NAMES))
    if unknown:
        raise UnknownField(f"row fields not declared in runners/model/columns.py: {', '.join(unknown)} "
                           "(declare each as a Column there)")

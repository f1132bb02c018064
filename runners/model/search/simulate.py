"""A search strategy run against a space of record: every config of a kernel screened at some shapes and
dtypes, kept as a compact CSV (bench_search record). The strategy is asked and told as in a job;
the record answers each trial's status and p50, and its compile and GPU seconds give a simulated wall
time (a compile pool of `compilers` processes ahead of one GPU, a config compiled once per dtype, as
Triton's cache does across shapes). What a strategy costs is found without a GPU: how many configs it
measures at each (shape, dtype) until one is within 97% (99%) of the recorded best; a strategy that
stops before it gets there counts every config of the shape. The table: runners/benchmarks/bench_search.py.
"""
from __future__ import annotations

import gzip
import heapq
import json
from typing import Optional

import numpy as np
import pandas as pd

from triton_sweep.model.trial import TRITON_PROVIDER, Trial

FIELDS = ["shape", "dtype", "config", "status", "p50_us", "compile_s", "gpu_s"]
WITHIN = (0.97, 0.99)  # the shares of the recorded best a strategy is scored at reaching


class RecordedSpace:
    """One kernel's space of record: `frame` holds FIELDS, one row a trial in plan order (shape, dtype,
    config); `about` the GPU and versions it was recorded with."""

    def __init__(self, kernel: str, frame: pd.DataFrame, about: str = ""):
        missing = [name for name in FIELDS if name not in frame]
        if missing:
            raise ValueError(f"a space of record needs the columns {', '.join(missing)}")
        self.kernel, self.frame, self.about = kernel, frame.reset_index(drop=True), about
        configs = [json.loads(text) for text in frame["config"]]
        shapes = [_shape(text) for text in frame["shape"]]
        self.trials = [Trial(kernel, TRITON_PROVIDER, shape, dtype, config,
                             "pruned when the space was recorded" if status == "pruned" else None)
                       for shape, dtype, config, status
                       in zip(shapes, frame["dtype"], configs, frame["status"])]
        self.row_of = {trial.key: index for index, trial in enumerate(self.trials)}

    @classmethod
    def read(cls, path) -> "RecordedSpace":
        with (gzip.open if str(path).endswith(".gz") else open)(path, "rt") as f:
            about = json.loads(f.readline().lstrip("# "))
        frame = pd.read_csv(path, comment="#", dtype=dict.fromkeys(FIELDS[:4], str))
        return cls(about.pop("kernel"), frame, json.dumps(about))

    def write(self, path, about: dict) -> None:
        """The frame as CSV, under one comment line of JSON: the kernel, GPU and versions."""
        text = "# " + json.dumps({"kernel": self.kernel, **about}) + "\n"
        text += self.frame[FIELDS].to_csv(index=False, float_format="%.6g")
        with (gzip.open if str(path).endswith(".gz") else open)(path, "wt") as f:
            f.write(text)

    def best(self) -> pd.Series:
        """Each (shape, dtype)'s fastest recorded p50."""
        ok = self.frame[self.frame["status"] == "ok"]
        return ok.groupby(["shape", "dtype"], sort=False)["p50_us"].min()


def simulate(space: RecordedSpace, strategy, compilers: int = 16,
             until_reached: bool = False) -> pd.DataFrame:
    """`strategy` (a Strategy made on space.trials) asked and told as a job does, until it hands out
    nothing with nothing in flight (or with until_reached, until every (shape, dtype) is within the last
    share of WITHIN: for strategies that do not stop by themselves). Each trial is told when the GPU has
    timed it; a `pipelined` strategy is asked again after a result once no config waits for a compile
    process, any other once all it was handed is told. One row per (shape, dtype): configs that pass the
    constraints, measured, measured until within each share of WITHIN of the best (the configs when
    never), the strategy's stop reason; attrs["wall_s"]: the whole sweep's simulated seconds."""
    frame, best = space.frame, space.best()
    valid = frame[frame["status"] != "pruned"].groupby(["shape", "dtype"], sort=False).size()
    measured = dict.fromkeys(valid.index, 0)
    reached: dict = {}
    seen, compiled, flying = set(), {}, []  # flying: a heap of (when told, order, trial, result)
    pool, gpu, last_start, clock = [0.0] * compilers, 0.0, 0.0, 0.0
    batch = strategy.ask()
    while True:
        for trial in batch:
            if trial.provider != TRITON_PROVIDER or trial.key in seen:
                continue
            seen.add(trial.key)
            row = frame.iloc[space.row_of[trial.key]]
            told = clock
            if row["status"] != "pruned":
                compile_key = (row["config"], row["dtype"])
                if compile_key not in compiled:
                    last_start = max(clock, heapq.heappop(pool))
                    compiled[compile_key] = last_start + (_number(row["compile_s"]) or 0.0)
                    heapq.heappush(pool, compiled[compile_key])
                told = max(clock, compiled[compile_key])
                if _number(row["gpu_s"]):  # none where the compile failed
                    told = gpu = max(gpu, told) + row["gpu_s"]
            heapq.heappush(flying, (told, len(seen), trial, row))
        if not flying or (until_reached and len(reached) == len(WITHIN) * len(valid)):
            break
        clock, _, trial, row = heapq.heappop(flying)
        strategy.tell(trial, {"status": row["status"], "p50_us": _number(row["p50_us"])})
        if row["status"] != "pruned":
            group = (row["shape"], row["dtype"])
            measured[group] += 1
            for share in WITHIN:
                if row["status"] == "ok" and row["p50_us"] * share <= best.get(group, np.inf):
                    reached.setdefault((group, share), measured[group])
        pipelined = getattr(strategy, "pipelined", False) and last_start <= clock
        batch = strategy.ask() if not flying or pipelined else []
    reasons = getattr(strategy, "stop_reasons", {})
    rows = [{"shape": shape, "dtype": dtype, "configs": count, "measured": measured[shape, dtype],
             **{f"to_{round(share * 100)}": reached.get(((shape, dtype), share), count) for share in WITHIN},
             "stop": reasons.get((_shape(shape), dtype), "")}
            for (shape, dtype), count in valid.items()]
    table = pd.DataFrame(rows)
    table.attrs["wall_s"] = clock
    return table


def _number(value) -> Optional[float]:
    return None if value is None or pd.isna(value) else float(value)


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(size) for size in text.split("x"))

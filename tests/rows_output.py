"""An output that is not built in, for the test that a new output is a module and a YAML node:
rows.csv in the run directory, one line a row of the sweep (kernel, provider, shape, config, p50). It
also says how many rows the store had committed when the first row reached it.

    python -m runners.sweep '+output.rows_csv._target_=tests.rows_output.RowsCsv'
"""
from __future__ import annotations

import contextlib
import csv
import sqlite3
from pathlib import Path
from typing import Optional

from runners.outputs.output import Finished, Output


class RowsCsv(Output):
    def __init__(self, name: str = "rows.csv"):
        super().__init__(name=name)
        self.file_name = name
        self.rows_seen = 0
        self.store = ""
        self.committed_at_first: Optional[int] = None

    def start(self, cfg, sweep_id: str, dims: tuple) -> None:
        self.store = str(cfg.store)

    def row(self, trial, row: dict, label: str) -> None:
        self.rows_seen += 1  # every row the job records reaches an output as it is recorded
        if self.committed_at_first is None:  # read as another process would: what is committed
            with contextlib.closing(sqlite3.connect(self.store)) as db:
                self.committed_at_first = db.execute("SELECT COUNT(*) FROM trials").fetchone()[0]

    def write(self, done: Finished, handover: Optional[dict] = None) -> list[Path]:
        path = done.output_dir / self.file_name
        with path.open("w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["kernel", "provider", "shape", "config", "p50_us"])
            for _, row in done.frame.iterrows():
                writer.writerow([row["kernel"], row["provider"], row["shape"], row["config"], row["p50_us"]])
        print(f"rows: {path} ({self.rows_seen} recorded while the sweep ran)")
        print(f"rows committed to the store when the first reached this output: {self.committed_at_first}")
        return [path]

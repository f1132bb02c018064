"""The table printed at the end of a sweep: the best config per (kernel, dtype, shape) beside the
baselines (runners/results/report.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from runners.results.outputs.output import Finished, Output
from runners.results.report import best_table


class Table(Output):
    def write(self, done: Finished, handover: Optional[dict] = None) -> list[Path]:
        print(best_table(done.frame))
        return []

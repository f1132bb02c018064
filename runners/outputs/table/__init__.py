"""The table printed at the end of a sweep: the best config per (kernel, dtype, shape) beside the
baselines (runners/outputs/table/report.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from triton_sweep.outputs.output import Finished, Output


class Table(Output):
    def write(self, done: Finished, handover: Optional[dict] = None) -> list[Path]:
        # Imported here: pandas with it (0.28 s on a CPU-only host), which the outputs' instantiation at
        # the job's start would otherwise import before the workers are started.
        from triton_sweep.outputs.table.report import best_table

        print(best_table(done.frame))
        return []

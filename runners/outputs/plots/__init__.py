"""The sweep's plots, PNG files in its run directory (runners/outputs/plots/figures.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from triton_sweep.outputs.output import Finished, Output


class Plots(Output):
    background = True

    def write(self, done: Finished, handover: Optional[dict] = None) -> list[Path]:
        from triton_sweep.outputs.plots.figures import plots_for_sweep

        return plots_for_sweep(done.store, done.sweep_id, done.frame, done.output_dir)

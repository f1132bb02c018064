"""The sweep's plots, PNG files in its run directory (runners/results/plots.py), drawn by the finishing
process while the foreground outputs write."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from runners.results.outputs.output import Finished, Output


class Plots(Output):
    background = True

    def warm(self) -> None:
        from runners.results import plots  # noqa: F401  (pandas and numpy, through its report)

        try:
            from matplotlib import colormaps  # noqa: F401
            from matplotlib.backends import backend_agg  # noqa: F401
            from matplotlib.figure import Figure  # noqa: F401
            from matplotlib.patches import Rectangle  # noqa: F401
        except Exception:  # a missing or broken install: plots_for_sweep says which, in one line
            pass

    def write(self, done: Finished, handover: Optional[dict] = None) -> list[Path]:
        from runners.results.plots import plots_for_sweep

        return plots_for_sweep(done.store, done.frame, done.output_dir)

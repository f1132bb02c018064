"""results.parquet in the sweep's run directory: every row of the sweep, samples as lists."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from runners.results.outputs.output import Finished, Output
from runners.results.store import write_parquet


class Parquet(Output):
    def write(self, done: Finished, handover: Optional[dict] = None) -> list[Path]:
        path = write_parquet(done.frame, done.output_dir / "results.parquet")
        print(f"results: {done.store} (sweep {done.sweep_id}), {path}")
        return [path]

"""results.parquet in the sweep's run directory: every row of the sweep, samples as lists."""
from __future__ import annotations

import io
from pathlib import Path
from typing import Optional

from triton_sweep.model.columns import SAMPLE_COLUMNS
from triton_sweep.model.files import write_atomic
from triton_sweep.outputs.output import Finished, Output, shown


class Parquet(Output):
    def write(self, done: Finished, handover: Optional[dict] = None) -> list[Path]:
        path = write_parquet(done.frame, done.output_dir / "results.parquet")
        print(f"results: {shown(done.store)} (sweep {done.sweep_id}), {shown(path)}")
        return [path]


def write_parquet(frame, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = frame.copy()
    for name in SAMPLE_COLUMNS:
        table[name] = [None if s is None else s.tolist() for s in table[name]]
    buffer = io.BytesIO()
    table.to_parquet(buffer, index=False)
    return write_atomic(path, buffer.getvalue())

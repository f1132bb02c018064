"""The export of tuned configs: `<kernel>_configs.json` (the data of record) and `<kernel>_configs.py`
(imports only triton), written at the end of a sweep (runners/outputs/export_files.py) and by
`triton-sweep-export`. One package, one module a step of the walk from a store to the files:
- settings.py: every setting resolved and checked (key, tolerance, dims, the kernel's constraints, calls);
- rows.py: what is exported (ok GPU rows of the kernel, the interpreter's when asked, newest environment);
- cover.py: the covering set and its alternates per (GPU, dtype), and the winners (greedy.py: on arrays);
- generalization.py: the leave-one-out estimate between the measured shapes (heldout.py: a shape's picks);
- fileformat.py: the JSON (format 3: gpus -> Triton version -> section), read, merged and written;
- render.py: the generated module, its data as literals then the lookup code verbatim;
- runtime.py, then lookup.py: the lookup code every generated module carries (the prune, config_for).
export_kernel composes them: the rows loaded once, then each GPU's section, then the files."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import pandas as pd

from triton_sweep.export.cover import READ, WINNER_FIELDS, covered
from triton_sweep.export.fileformat import checked_rows, write_export
from triton_sweep.export.generalization import gpu_sections
from triton_sweep.export.rows import exported_rows
from triton_sweep.export.settings import checked
from triton_sweep.store.row_model import StoredRow

# The columns of a store the export reads (of them, samples: rep_p50s_us), those checked among them.
STORE_COLUMNS = tuple(dict.fromkeys((*StoredRow.model_fields, "trial_key", "chosen", "planned_configs",
                                     *WINNER_FIELDS, *READ)))


def export_kernel(frame: pd.DataFrame, kernel: str, out_dir: str | Path, *, tolerance: float = 0.03,
                  key: dict | None = None, dims: tuple | None = None, merge: bool = True,
                  key_field: str = "--key", calls: Optional[dict] = None, rule=None,
                  source: str = "the store", interpreter: bool = False) -> list[Path]:
    """Write the kernel's export from the store's rows (module doc); `rule`: the kernel's constraints,
    (shape, dtype, config) -> reason or None, which the leave-one-out estimate plays as `check`;
    `source`: the store, as errors name it; `interpreter`: export interpreter rows too, as the
    interpreter's section (refused otherwise)."""
    checked_rows(frame[frame["kernel"] == kernel], source)  # before anything reads them
    by_gpu, rank = exported_rows(frame, kernel, interpreter)
    dims, key = checked(kernel, rank, tolerance, key, dims, key_field)
    lists = {gpu: covered(of.rows, tolerance, of.baselines, calls, of.searched) for gpu, of in by_gpu.items()}
    sections = gpu_sections(kernel, by_gpu, lists, tolerance, dims, key, rule)
    return write_export(kernel, sections, out_dir, dims, key, merge)

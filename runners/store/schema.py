"""The store file's tables: trials (one row per trial, its columns declared in runners/model/columns.py),
sweep_rows (which rows each sweep used) and device_peaks (a device's measured ceilings). Shared by the
store (runners/store/result_store.py), the reading of another store file (runners/store/sources.py) and
the merge (runners/store/merging.py)."""
from triton_sweep.model.columns import COLUMN_NAMES, COLUMNS, ENV_KEY

# The row's fields are declared in runners/model/columns.py; the ceilings' key (a device's copy bandwidth and
# matmul rate) is the part of the resume key that says which device and timer measured them.
PEAK_KEY = ("gpu_name", "driver_version", "torch_version", "timing_method")
PEAK_COLUMNS = PEAK_KEY + ("peaks", "measured_at")
AT = {name: i for i, name in enumerate(COLUMN_NAMES)}  # a column's place in a row read for a merge

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS trials (id INTEGER PRIMARY KEY AUTOINCREMENT, \
{", ".join(f"{c.name} {c.sql}" for c in COLUMNS)});
CREATE INDEX IF NOT EXISTS trials_by_key ON trials (trial_key, {", ".join(ENV_KEY)});
CREATE TABLE IF NOT EXISTS sweep_rows (sweep_id TEXT NOT NULL, row_id INTEGER NOT NULL REFERENCES trials(id),
                                       PRIMARY KEY (sweep_id, row_id));
CREATE TABLE IF NOT EXISTS device_peaks ({", ".join(f"{n} TEXT" for n in PEAK_KEY)}, peaks TEXT NOT NULL,
                                         measured_at TEXT NOT NULL);
"""


"""The results store: one SQLite file in WAL mode, one row per measured (or failed, or pruned) trial.

- Crash-safe: every row is its own transaction, committed with synchronous=FULL before the next trial
  starts, so a `kill -9` loses at most the trial in flight.
- Two writers on one node: WAL lets readers run beside a writer, and busy_timeout makes a second writer
  wait for the lock instead of failing.
- Resumable: a trial already in the store for the same backend, timing method, GPU model, driver, torch,
  triton and kernel source hash is not measured again (unless force=true; the newest row then wins), except after
  a transient failure (timeout, crashed, oom). The seed and the timing preset are not part of that key.
- A sweep's membership table lists every row the sweep used, measured now or reused from before, so a
  resumed sweep's table, parquet file and export cover all its trials.
"""
from __future__ import annotations

import json
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Optional

import numpy as np
import pandas as pd

# (name, SQL type). Every row is self-describing: trial, outcome, timing, throughput, device, provenance.
COLUMNS = [
    ("trial_key", "TEXT NOT NULL"), ("sweep_id", "TEXT NOT NULL"),
    ("kernel", "TEXT NOT NULL"), ("provider", "TEXT NOT NULL"),
    ("shape", "TEXT NOT NULL"), ("dtype", "TEXT NOT NULL"), ("config", "TEXT NOT NULL"),
    ("status", "TEXT NOT NULL"), ("message", "TEXT"), ("stop_reason", "TEXT"),
    # screen: the trial's own measurement; final: re-timed among the finalists (rank, tie, chosen).
    ("phase", "TEXT"), ("rank", "INTEGER"), ("tie", "INTEGER"), ("chosen", "INTEGER"),
    ("compile_s", "REAL"), ("first_call_s", "REAL"),
    # Timing: p50_us is the figure of record (GPU time per call under timing_method "cupti/...");
    # p50_precision the half-width of its 95% interval, relative; event_* the CUDA-event cross-check.
    ("p20_us", "REAL"), ("p50_us", "REAL"), ("p80_us", "REAL"), ("min_us", "REAL"), ("mean_us", "REAL"),
    ("noise", "REAL"), ("p50_precision", "REAL"), ("n_samples", "INTEGER"), ("samples_us", "BLOB"),
    ("event_p50_us", "REAL"), ("event_samples_us", "BLOB"), ("kernels_per_call", "REAL"),
    ("timers_disagree", "INTEGER"), ("measure_s", "REAL"),
    ("gbps", "REAL"), ("tflops", "REAL"), ("pct_copy_bw", "REAL"), ("pct_matmul", "REAL"),
    ("sm_clock_start_mhz", "INTEGER"), ("sm_clock_end_mhz", "INTEGER"), ("sm_clock_max_mhz", "INTEGER"),
    ("throttled", "INTEGER"),
    ("backend", "TEXT NOT NULL"), ("timing_method", "TEXT"), ("gpu_name", "TEXT NOT NULL"), ("driver_version", "TEXT"),
    ("cuda_version", "TEXT"), ("torch_version", "TEXT NOT NULL"), ("triton_version", "TEXT NOT NULL"),
    ("python_version", "TEXT"), ("sm_count", "INTEGER"), ("l2_bytes", "INTEGER"), ("host", "TEXT"),
    ("kernel_hash", "TEXT NOT NULL"), ("git_sha", "TEXT"), ("seed", "INTEGER NOT NULL"),
    ("timestamp", "TEXT NOT NULL"),
]
COLUMN_NAMES = [name for name, _ in COLUMNS]
# What makes two measurements of one trial comparable; resume matches on these and the trial key.
# timing_method is in both keys: rows and ceilings timed another way (CUDA events after a writing
# flush, before it was added: NULL) are measured again, never mixed with the kernel times of record.
ENV_KEY = ("backend", "timing_method", "gpu_name", "driver_version", "torch_version", "triton_version", "kernel_hash")
PEAK_KEY = ("gpu_name", "driver_version", "torch_version", "timing_method")
BOOLEAN_COLUMNS = ("throttled", "tie", "chosen", "timers_disagree")
SAMPLE_COLUMNS = ("samples_us", "event_samples_us")  # float32 arrays, stored as bytes
# Outcomes that may not repeat (a hang, a dead worker, memory taken by another process): resume measures
# these trials again. Every other status is a property of the trial and is kept.
TRANSIENT_STATUSES = ("timeout", "crashed", "oom")

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS trials (id INTEGER PRIMARY KEY AUTOINCREMENT, {", ".join(f"{n} {t}" for n, t in COLUMNS)});
CREATE INDEX IF NOT EXISTS trials_by_key ON trials (trial_key, {", ".join(ENV_KEY)});
CREATE TABLE IF NOT EXISTS sweep_rows (sweep_id TEXT NOT NULL, row_id INTEGER NOT NULL REFERENCES trials(id),
                                       PRIMARY KEY (sweep_id, row_id));
CREATE TABLE IF NOT EXISTS device_peaks ({", ".join(f"{n} TEXT" for n in PEAK_KEY)}, peaks TEXT NOT NULL,
                                         measured_at TEXT NOT NULL);
"""


class ResultStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: autocommit, each statement its own transaction unless BEGIN is issued.
        self._db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # the commit is on disk before append() returns
        self._db.execute("PRAGMA busy_timeout=60000")
        self._db.executescript(_SCHEMA)
        self._add_new_columns()

    def _add_new_columns(self) -> None:
        """A store written by an older version gains the columns added since (left NULL there)."""
        for table, columns in (("trials", COLUMNS), ("device_peaks", [(name, "TEXT") for name in PEAK_KEY])):
            present = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
            for name, sql_type in columns:
                if name not in present:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {sql_type.replace(' NOT NULL', '')}")

    def close(self) -> None:
        self._db.close()

    def append(self, row: dict) -> int:
        """Insert one trial row and its membership of row["sweep_id"] in one transaction; returns the id."""
        values = [_encode(name, row.get(name)) for name in COLUMN_NAMES]
        placeholders = ", ".join("?" for _ in COLUMN_NAMES)
        with self._transaction():
            cursor = self._db.execute(f"INSERT INTO trials ({', '.join(COLUMN_NAMES)}) VALUES ({placeholders})", values)
            self._db.execute("INSERT OR IGNORE INTO sweep_rows VALUES (?, ?)", (row["sweep_id"], cursor.lastrowid))
        return cursor.lastrowid

    def adopt(self, row_ids: Iterable[int], sweep_id: str) -> None:
        """Make rows measured earlier part of this sweep (resume)."""
        with self._transaction():
            self._db.executemany("INSERT OR IGNORE INTO sweep_rows VALUES (?, ?)", [(sweep_id, i) for i in row_ids])

    def measured(self, env: dict) -> dict[str, int]:
        """trial_key -> id of the newest row measured under this environment (ENV_KEY), leaving out
        trials whose newest row has a transient status."""
        where = " AND ".join(f"{name} IS ?" for name in ENV_KEY)
        transient = ", ".join("?" for _ in TRANSIENT_STATUSES)
        rows = self._db.execute(
            f"SELECT trial_key, id FROM trials WHERE id IN (SELECT MAX(id) FROM trials WHERE {where} "
            f"GROUP BY trial_key) AND status NOT IN ({transient})",
            [env[n] for n in ENV_KEY] + list(TRANSIENT_STATUSES),
        )
        return dict(rows.fetchall())

    def outcomes(self, row_ids: Iterable[int]) -> dict[int, dict]:
        """row id -> its status and p50 (what a search learns from a trial reused from the store)."""
        ids = list(row_ids)
        found = {}
        for start in range(0, len(ids), 500):  # SQLite limits the number of parameters
            chunk = ids[start:start + 500]
            rows = self._db.execute(f"SELECT id, status, p50_us FROM trials WHERE id IN ({', '.join('?' for _ in chunk)})", chunk)
            found.update({i: {"status": status, "p50_us": p50} for i, status, p50 in rows})
        return found

    def load(self, sweep_id: Optional[str] = None, kernel: Optional[str] = None) -> pd.DataFrame:
        """All rows (or a sweep's rows) as a DataFrame; samples_us decoded to float32 arrays."""
        query = "SELECT trials.* FROM trials"
        clauses, params = [], []
        if sweep_id is not None:
            query += " JOIN sweep_rows ON sweep_rows.row_id = trials.id"
            clauses.append("sweep_rows.sweep_id = ?")
            params.append(sweep_id)
        if kernel is not None:
            clauses.append("trials.kernel = ?")
            params.append(kernel)
        if clauses:
            query += " WHERE " + " AND ".join(clauses)
        frame = pd.read_sql_query(query + " ORDER BY trials.id", self._db, params=params)
        for name in SAMPLE_COLUMNS:
            frame[name] = [None if b is None else np.frombuffer(b, dtype=np.float32) for b in frame[name]]
        for name in BOOLEAN_COLUMNS:
            frame[name] = frame[name].map(lambda v: None if pd.isna(v) else bool(v))
        return frame

    def peaks(self, env: dict) -> Optional[dict]:
        where = " AND ".join(f"{name} IS ?" for name in PEAK_KEY)
        row = self._db.execute(
            f"SELECT peaks FROM device_peaks WHERE {where} ORDER BY rowid DESC LIMIT 1", [env[n] for n in PEAK_KEY]
        ).fetchone()
        return json.loads(row[0]) if row else None

    def save_peaks(self, env: dict, peaks: dict, measured_at: str) -> None:
        with self._transaction():
            self._db.execute(
                f"INSERT INTO device_peaks ({', '.join(PEAK_KEY)}, peaks, measured_at) VALUES "
                f"({', '.join('?' for _ in PEAK_KEY)}, ?, ?)",
                [env[n] for n in PEAK_KEY] + [json.dumps(peaks), measured_at],
            )

    @contextmanager
    def _transaction(self):
        """BEGIN IMMEDIATE takes the write lock up front, so two writers queue instead of deadlocking."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")


def _encode(name: str, value):
    if value is None:
        return None
    if name in ("shape", "config"):
        return json.dumps(list(value) if name == "shape" else dict(value))
    if name in SAMPLE_COLUMNS:
        return np.asarray(value, dtype=np.float32).tobytes()
    if name in BOOLEAN_COLUMNS:
        return int(bool(value))
    return value


def write_parquet(frame: pd.DataFrame, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = frame.copy()
    for name in SAMPLE_COLUMNS:
        table[name] = [None if s is None else s.tolist() for s in table[name]]
    table.to_parquet(path, index=False)
    return path

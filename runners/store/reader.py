"""A results store read and never written: what a dry run asks of it (the trials a resume would keep,
the seconds this kernel's trials took on this device) and the list of its sweeps, each one SQL query that
reads the columns it needs. A missing file (or one without a trials table) reads as an empty store and is
not created; an existing one is opened query-only. `measured_rows` is also the resume's own query
(runners/store/result_store.py)."""
from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Optional, Sequence

from triton_sweep.measure.check import STATUS_OK, STATUS_PRUNED
from triton_sweep.model.columns import ENV_KEY
from triton_sweep.store.damage import reading
from triton_sweep.store.sources import open_source

# Outcomes that may not repeat (a hang, a dead worker, memory taken by another process): resume measures
# these trials again. Every other status is a property of the trial and is kept.
TRANSIENT_STATUSES = ("timeout", "crashed", "oom")


def measured_rows(db: sqlite3.Connection, env: dict, names: Sequence[str] = ENV_KEY) -> dict[str, int]:
    """trial_key -> id of the newest row measured under env's values of `names` (the resume key, ENV_KEY,
    or the part of it a dry run knows), leaving out trials whose newest row has a transient status."""
    where = " AND ".join(f"{name} IS ?" for name in names) or "1"
    transient = ", ".join("?" for _ in TRANSIENT_STATUSES)
    rows = db.execute(
        f"SELECT trial_key, id FROM trials WHERE id IN (SELECT MAX(id) FROM trials WHERE {where} "
        f"GROUP BY trial_key) AND status NOT IN ({transient})",
        [env[n] for n in names] + list(TRANSIENT_STATUSES),
    )
    return dict(rows.fetchall())


class StoreReader:
    """A store opened to read (module docstring). check=False skips SQLite's integrity check of every
    page at open (a damaged page still fails the query that reads it, in one line naming the file)."""

    def __init__(self, path: str | Path, check: bool = True):
        self.path = Path(path)
        self.exists = self.path.is_file() and self.path.stat().st_size > 0
        self._db = self._columns = None
        if not self.exists:
            return
        if check:
            self._db = open_source(self.path, immutable=False)
        else:
            self._db = sqlite3.connect(self.path, timeout=60)
            self._db.execute("PRAGMA query_only = ON")
        with reading(self.path):
            self._columns = {row[1] for row in self._db.execute("PRAGMA table_info(trials)")}
        if not self._columns:  # no trials table (yet): a run would make it, so it holds nothing
            self.close()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def measured(self, env: dict) -> dict[str, int]:
        """measured_rows for the names of ENV_KEY that env holds (a dry run knows some of them only);
        {} where the store lacks a column of them (written before it existed: a run would add it empty)."""
        names = [name for name in ENV_KEY if name in env]
        if self._db is None or not set(names) <= self._columns:
            return {}
        with reading(self.path):
            return measured_rows(self._db, env, names)

    def trial_seconds(self, kernel: str, backend: str, gpu_name: Optional[str]) -> Optional[dict]:
        """The mean seconds a screened, unpruned trial of `kernel` took on `gpu_name` (any, where None)
        with `backend`: {"rows", "compile_s" (in the compile pool), "first_call_s" (load, or compile, and
        first call), "measure_s"}; None without such rows. The mean: the time of many trials is its sum."""
        if self._db is None:
            return None
        where = "kernel = ? AND backend = ? AND status != ? AND (phase IS NULL OR phase = 'screen')"
        params = [kernel, backend, STATUS_PRUNED]
        if gpu_name is not None:
            where += " AND gpu_name = ?"
            params.append(gpu_name)
        names = ("compile_s", "first_call_s", "measure_s")
        with reading(self.path):
            count, *means = self._db.execute(
                f"SELECT COUNT(*), {', '.join(f'AVG(COALESCE({n}, 0))' for n in names)} FROM trials "
                f"WHERE {where}", params).fetchone()
        return {"rows": count, **dict(zip(names, means))} if count else None

    def sweeps(self) -> list[dict]:
        """Every sweep of the store, the one whose newest row is newest last: its id, kernels, devices
        and backends (comma-separated), its first and newest row's timestamps, and its rows: all, the
        finalists' re-timed ones, and of the others those ok and pruned (the rest failed)."""
        if self._db is None:
            return []
        query = ("SELECT s.sweep_id, GROUP_CONCAT(DISTINCT t.kernel), GROUP_CONCAT(DISTINCT t.gpu_name), "
                 "GROUP_CONCAT(DISTINCT t.backend), MIN(t.timestamp), MAX(t.timestamp), COUNT(*), "
                 "SUM(t.phase IS 'final'), SUM(t.status = ? AND t.phase IS NOT 'final'), SUM(t.status = ?) "
                 "FROM sweep_rows s JOIN trials t ON t.id = s.row_id "
                 "GROUP BY s.sweep_id ORDER BY MAX(t.timestamp), s.sweep_id")
        names = ("sweep_id", "kernels", "devices", "backends", "first", "last", "rows", "finalists", "ok",
                 "pruned")
        with reading(self.path):
            return [dict(zip(names, values))
                    for values in self._db.execute(query, (STATUS_OK, STATUS_PRUNED))]

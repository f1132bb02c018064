"""The results store: one SQLite file in WAL mode, one row per measured (or failed, or pruned) trial.
- Crash-safe: every measured row is its own transaction, committed with synchronous=FULL before the next
  trial starts, so a `kill -9` loses at most the trial in flight (the pruned rows go in one: append_many).
- Two writers on one node: WAL lets readers run beside a writer; busy_timeout makes a second writer wait.
- Resumable: a trial already stored for the same backend, timing method, GPU model, driver, torch, triton
  and kernel source hash is not measured again (unless force=true; the newest row then wins), except
  after a transient failure (timeout, crashed, oom). The seed and the timing preset are not in that key.
- A sweep's membership table lists every row it used, measured now or reused, so a resumed sweep's
  table, parquet file and export cover all its trials.
- Mergeable (`merge_from`, runners/merge.py), "the newest row wins" (the largest id) holding after it.
- A damaged file is refused whole at open, before anything is read or written (DamagedStore);
  `merge_from(..., recover=True)` copies out the rows SQLite can still read."""
from __future__ import annotations

import json
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Optional

from triton_sweep.model.columns import (BOOLEAN_COLUMNS, COLUMN_NAMES, COLUMNS, ENV_KEY, SAMPLE_COLUMNS,
                                        unknown_fields)
from triton_sweep.store.damage import DamagedStore, UnwritableStore, damage_of, reading
from triton_sweep.store.merging import MergeCounts, merge_rows
from triton_sweep.store.reader import measured_rows
from triton_sweep.store.schema import PEAK_KEY, SCHEMA
from triton_sweep.store.sources import (ARRIVING, StoredColumns, drop_staging, recover_source, source_uri,
                                        stage_rows, stage_source)

if TYPE_CHECKING:  # imported where used: the sweep opens its store before its workers start (0.45 s)
    import pandas as pd


# The pages a merge's transaction holds in memory (KiB): SQLite's default 2 MiB spilled the index's pages to
# the WAL again and again as rows arrived (a 408,000-row merge: 19.9 s, 5.1 s of it the system's; 17.3 s and
# 2.5 s with 64 MiB, 60 MB more at its peak).
MERGE_CACHE_KIB = 65536


class ResultStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        problem = damage_of(self.path)
        if problem:
            raise DamagedStore(self.path, problem)  # before anything is written to it
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UnwritableStore(self.path, f"{error.strerror}: {error.filename}") from None
        with reading(self.path):
            # isolation_level=None: autocommit, each statement its own transaction unless BEGIN is issued.
            # uri: a merge attaches its source by URI (sources.source_uri).
            self._db = sqlite3.connect(source_uri(self.path, immutable=False), uri=True, timeout=60,
                                       isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")  # the commit is on disk before append() returns
            self._db.execute("PRAGMA busy_timeout=60000")
            self._db.executescript(SCHEMA)
            self._add_new_columns()

    def _add_new_columns(self) -> None:
        """A store written by an older version gains the columns added since (left NULL there)."""
        trials = [(c.name, c.sql) for c in COLUMNS]
        for table, columns in (("trials", trials), ("device_peaks", [(name, "TEXT") for name in PEAK_KEY])):
            present = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
            for name, sql_type in columns:
                if name not in present:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {name} "
                                     f"{sql_type.replace(' NOT NULL', '')}")

    def close(self) -> None:
        self._db.close()

    def append(self, row: dict) -> int:
        """Insert one trial row and its membership of row["sweep_id"] in one transaction; returns the id.
        A field runners/model/columns.py does not declare is an error, not dropped."""
        return self.append_many([row])[0]

    def append_many(self, rows: list[dict]) -> list[int]:
        """Insert trial rows and their memberships in one transaction, all or none; returns their ids. One
        commit each costs a flush to disk: the 4648 pruned rows of softmax_export took 1.45-1.70 s that way on
        an H200 host, 0.20-0.23 s in one transaction (BENCHMARKS.md, O14)."""
        if not rows:
            return []  # no write lock taken for nothing (a batch without pruned configs)
        for row in rows:
            unknown_fields(row)
        values = [[_encode(name, row.get(name)) for name in COLUMN_NAMES] for row in rows]
        insert = (f"INSERT INTO trials ({', '.join(COLUMN_NAMES)}) "
                  f"VALUES ({', '.join('?' for _ in COLUMN_NAMES)})")
        ids = []
        with self._transaction():
            for row, row_values in zip(rows, values):
                ids.append(self._db.execute(insert, row_values).lastrowid)
                self._db.execute("INSERT OR IGNORE INTO sweep_rows VALUES (?, ?)", (row["sweep_id"], ids[-1]))
        return ids

    def adopt(self, row_ids: Iterable[int], sweep_id: str) -> None:
        """Make rows measured earlier part of this sweep (resume)."""
        with self._transaction():
            self._db.executemany("INSERT OR IGNORE INTO sweep_rows VALUES (?, ?)",
                                 [(sweep_id, i) for i in row_ids])

    def measured(self, env: dict) -> dict[str, int]:
        """trial_key -> id of the newest row measured under this environment (ENV_KEY), leaving out
        trials whose newest row has a transient status."""
        with reading(self.path):
            return measured_rows(self._db, env)

    def outcomes(self, row_ids: Iterable[int]) -> dict[int, dict]:
        """row id -> its status and p50 (what a search learns from a trial reused from the store)."""
        with reading(self.path):
            ids = list(row_ids)
            found = {}
            for start in range(0, len(ids), 500):  # SQLite limits the number of parameters
                chunk = ids[start:start + 500]
                rows = self._db.execute(f"SELECT id, status, p50_us FROM trials WHERE id IN "
                                        f"({', '.join('?' for _ in chunk)})", chunk)
                found.update({i: {"status": status, "p50_us": p50} for i, status, p50 in rows})
            return found

    def load(self, sweep_id: Optional[str] = None, kernel: Optional[str] = None,
             columns: Optional[Iterable[str]] = None, categories: Iterable[str] = ()) -> pd.DataFrame:
        """All rows (or a sweep's rows) as a DataFrame, every column or those named in `columns` (with
        "id" where a samples column is); samples_us decoded to float32 arrays; `categories`: text columns
        of few distinct values read as pandas categoricals (a code a row, not the text: a million rows)."""
        import pandas as pd

        with reading(self.path):
            named = ", ".join(f"trials.{_known(name)}" for name in columns) if columns else "trials.*"
            query, params = _selection(named, sweep_id, kernel)
            cursor = self._db.execute(query + " ORDER BY trials.id", params)  # SQLite's own errors, unwrapped
            frame = _frame(cursor, set(categories))
            for name in [n for n in SAMPLE_COLUMNS if n in frame]:
                frame[name] = [None if b is None else self._samples(i, name, b)
                               for i, b in zip(frame["id"], frame[name])]
            for name in [n for n in BOOLEAN_COLUMNS if n in frame]:
                frame[name] = frame[name].map(lambda v: None if pd.isna(v) else bool(v))
            return frame

    def check_samples(self, sweep_id: Optional[str] = None, kernel: Optional[str] = None) -> None:
        """What load says of a samples blob that holds no whole float32s, for every samples column of the
        rows it would load, read or not (SQLite gives their lengths without their bytes)."""
        lengths = ", ".join(f"length(trials.{name})" for name in SAMPLE_COLUMNS)
        query, params = _selection(f"trials.id, {lengths}", sweep_id, kernel,
                                   " OR ".join(f"length(trials.{name}) % 4" for name in SAMPLE_COLUMNS))
        with reading(self.path):
            found = self._db.execute(query + " ORDER BY trials.id LIMIT 1", params).fetchone()
        if found:
            torn = [(name, size) for name, size in zip(SAMPLE_COLUMNS, found[1:]) if (size or 0) % 4]
            self._torn(found[0], *torn[0])

    def _samples(self, row_id: int, name: str, blob: bytes):
        """A samples blob as its float32 array; MalformedRow naming the row where it holds no whole ones."""
        import numpy as np

        if len(blob) % 4:
            self._torn(row_id, name, len(blob))
        return np.frombuffer(blob, dtype=np.float32)

    def _torn(self, row_id: int, name: str, size: int):
        from triton_sweep.store.row_model import MalformedRow

        raise MalformedRow(f"{self.path}: row {row_id}: {name}: a blob of {size} bytes, not whole float32 "
                           "samples (a row no sweep writes)")

    def peaks(self, env: dict) -> Optional[dict]:
        where = " AND ".join(f"{name} IS ?" for name in PEAK_KEY)
        with reading(self.path):
            row = self._db.execute(
                f"SELECT peaks FROM device_peaks WHERE {where} ORDER BY rowid DESC LIMIT 1",
                [env[n] for n in PEAK_KEY]
            ).fetchone()
        return json.loads(row[0]) if row else None

    def save_peaks(self, env: dict, peaks: dict, measured_at: str) -> None:
        with self._transaction():
            self._db.execute(
                f"INSERT INTO device_peaks ({', '.join(PEAK_KEY)}, peaks, measured_at) VALUES "
                f"({', '.join('?' for _ in PEAK_KEY)}, ?, ?)",
                [env[n] for n in PEAK_KEY] + [json.dumps(peaks), measured_at],
            )

    def snapshot(self, path: str | Path) -> Path:
        """A copy of the whole store as one self-contained file (no WAL beside it), written aside and then
        renamed into place, for jobs on other machines to read while nobody writes it."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        partial.unlink(missing_ok=True)
        copy = sqlite3.connect(partial)
        try:
            self._db.backup(copy)
            copy.execute("PRAGMA journal_mode=DELETE")
        finally:
            copy.close()
        partial.replace(path)
        return path

    def merge_from(self, source: str | Path, env: Optional[dict] = None, trial_keys: Optional[set] = None,
                   immutable: bool = False, recover: bool = False, checked: bool = False) -> MergeCounts:
        """Copy into this store the rows, sweep memberships and device ceilings of another store file that
        it does not hold yet, in one transaction. A row is held already when every column is equal (the
        trial key, environment and timestamp make it one measurement): it is skipped, and only the sweeps
        that used it are added. Copied rows get new ids here, in timestamp order; where they are older
        than a row this store holds for the same trial and environment, that row is inserted again after
        them, with its memberships, so the newest measurement keeps the largest id (resume, finalists,
        report and export take the largest). env: only the rows of this environment (ENV_KEY) and the
        ceilings of its device (PEAK_KEY); trial_keys: only these trials. immutable: the source is a file
        nobody writes while it is read (a snapshot), read without locks. recover: the source is damaged;
        copy the rows, memberships and ceilings SQLite can still read (counts.unreadable: rows lost). A row
        no sweep writes (store/row_model.py) refuses the merge, MalformedRow naming it, before any write.
        checked: the caller found the source sound and its rows well-formed just before (merge's main checks
        every source before any is merged): neither is checked again."""
        source = Path(source)
        if source.resolve() == self.path.resolve():
            raise ValueError(f"{source}: a store cannot be merged into itself")
        counts = MergeCounts()
        previous = self._db.execute("PRAGMA cache_size").fetchone()[0]
        self._db.execute(f"PRAGMA cache_size = -{MERGE_CACHE_KIB}")
        try:
            if recover:
                rows, sweeps_of, peaks, counts.unreadable = recover_source(source)
                stage_rows(self._db, rows, sweeps_of)
            else:
                peaks, counts.unknown_columns = stage_source(self._db, source, env, trial_keys, immutable,
                                                             sound=checked)
                if not checked:
                    from triton_sweep.store.row_model import checked_rows  # pydantic: not at a sweep's start

                    checked_rows(StoredColumns(self._db, ARRIVING, "seq"), str(source))  # before any write
            with self._transaction():
                merge_rows(self._db, peaks, counts)
        finally:
            drop_staging(self._db)
            self._db.execute(f"PRAGMA cache_size = {previous}")
        return counts

    @contextmanager
    def _transaction(self):
        """BEGIN IMMEDIATE takes the write lock up front, so two writers queue instead of deadlocking."""
        with reading(self.path):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")


def _frame(cursor: sqlite3.Cursor, categories: set, chunk: int = 20_000) -> pd.DataFrame:
    """The rows of a query as one DataFrame.from_records would give them, read a chunk at a time (a row's
    Python objects, several times its share of the frame, live only while its chunk is converted); a
    column typed unlike in another chunk (all NULL in one) is typed again whole, as one call would; the
    columns of `categories` made categoricals a chunk at a time, their categories joined at the end."""
    import pandas as pd

    names = [d[0] for d in cursor.description]
    frames = [_categorized(pd.DataFrame.from_records(rows, columns=names, coerce_float=True), categories)
              for rows in iter(lambda: cursor.fetchmany(chunk), [])]
    if len(frames) < 2:
        return frames[0] if frames else pd.DataFrame.from_records([], columns=names, coerce_float=True)
    for name in categories.intersection(names):  # one set of categories, so that concat keeps them
        # sorted as text sorts (a groupby orders by them), by str: a blob beside text too
        joined = sorted({value for part in frames for value in part[name].cat.categories}, key=str)
        for part in frames:
            part[name] = part[name].cat.set_categories(joined)
    frame = pd.concat(frames, ignore_index=True)
    for name in names:
        if len({str(part[name].dtype) for part in frames}) > 1:
            frame[name] = pd.DataFrame.from_records([(v,) for part in frames for v in part[name].tolist()],
                                                    columns=[name], coerce_float=True)[name]
    return frame


def _categorized(frame: pd.DataFrame, categories: set) -> pd.DataFrame:
    for name in categories.intersection(frame.columns):
        frame[name] = frame[name].astype("category")
    return frame


def _selection(named: str, sweep_id: Optional[str], kernel: Optional[str],
               where: Optional[str] = None) -> tuple[str, list]:
    """The query of `named` (SQL) over the trials of a sweep, of a kernel (all where None), and its
    parameters; `where`: a further condition."""
    query, clauses, params = f"SELECT {named} FROM trials", [f"({where})"] if where else [], []
    if sweep_id is not None:
        query += " JOIN sweep_rows ON sweep_rows.row_id = trials.id"
        clauses.append("sweep_rows.sweep_id = ?")
        params.append(sweep_id)
    if kernel is not None:
        clauses.append("trials.kernel = ?")
        params.append(kernel)
    return query + (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def _known(name: str) -> str:
    """A column's name, checked against runners/model/columns.py before it enters a query."""
    if name != "id" and name not in COLUMN_NAMES:
        raise ValueError(f"no column {name!r} in the store's trials (runners/model/columns.py)")
    return name


def shape_label(shape_json: str) -> str:
    """A stored shape as people read it: "[4096, 1024]" -> "4096x1024"."""
    return "x".join(map(str, json.loads(shape_json)))


def _encode(name: str, value):
    if value is None:
        return None
    if name in ("shape", "config"):
        return json.dumps(list(value) if name == "shape" else dict(value))
    if name in SAMPLE_COLUMNS:
        import numpy as np

        return np.asarray(value, dtype=np.float32).tobytes()
    if name in BOOLEAN_COLUMNS:
        return int(bool(value))
    return value

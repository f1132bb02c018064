"""Reading another store file for a merge (ResultStore.merge_from, runners/merge.py): a sound one, whole
or one environment's rows; or, from a damaged one (merge --recover), the rows, memberships and ceilings
SQLite can still read, from a copy of it, keeping only the rows a sweep could have written."""
from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Optional
from urllib.parse import quote

from triton_sweep.model.columns import COLUMN_NAMES, COLUMNS, ENV_KEY, SAMPLE_COLUMNS
from triton_sweep.store.damage import SQLITE_MAGIC, DamagedStore, damage_of, reading
from triton_sweep.store.schema import AT, PEAK_COLUMNS, PEAK_KEY


def source_uri(path: Path, immutable: bool) -> str:
    """The URI SQLite opens another store file by. `immutable`: a file nobody writes (a snapshot), read
    without locks; else an ordinary file, whose WAL a job left behind is read (and cleaned up on close) as
    that job's own connection would have."""
    return f"file:{quote(str(path.resolve()))}" + ("?immutable=1" if immutable else "")


def sound_source(path: Path) -> None:
    """FileNotFoundError or DamagedStore unless `path` is a store file SQLite can read whole."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such store file")
    problem = damage_of(path)
    if problem:
        raise DamagedStore(path, problem)


def open_source(path: Path, immutable: bool) -> sqlite3.Connection:
    """A connection that only reads another store file (source_uri)."""
    sound_source(path)
    connection = sqlite3.connect(source_uri(path, immutable), uri=True, timeout=60)
    connection.execute("PRAGMA query_only = ON")
    return connection


# The tables a merge reads another store's rows into (temp: this connection's own, dropped after): the rows
# in timestamp order (seq; id: the source's) and their sweep memberships in the source's order.
ARRIVING = "temp.merge_arriving"
ARRIVING_SWEEPS = "temp.merge_arriving_sweeps"


def stage_source(db: sqlite3.Connection, path: Path, env: Optional[dict], trial_keys: Optional[set],
                 immutable: bool, sound: bool = False) -> tuple[list, list]:
    """Read another store file into ARRIVING and ARRIVING_SWEEPS (None where the source, written by an
    older version, lacks a column): every row, or those of one environment (ENV_KEY) and of trial_keys.
    Returns its device ceilings (of env's device) and the columns this version does not know. sound: the
    caller found the file sound (sound_source) just before."""
    if not sound or not path.is_file():
        sound_source(path)
    db.execute("ATTACH DATABASE ? AS merge_source", (source_uri(path, immutable),))
    try:
        with reading(path):
            return _stage_attached(db, path, env, trial_keys)
    finally:
        db.execute("DETACH DATABASE merge_source")


def _stage_attached(db: sqlite3.Connection, path: Path, env: Optional[dict], trial_keys: Optional[set]):
    """stage_source's reading, of the source attached as merge_source."""
    tables = {name for (name,) in db.execute("SELECT name FROM merge_source.sqlite_master "
                                             "WHERE type = 'table'")}
    if "trials" not in tables:
        raise ValueError(f"{path}: not a results store (it has no trials table)")
    present = [info[1] for info in db.execute("PRAGMA merge_source.table_info(trials)")]
    unknown = [name for name in present if name not in COLUMN_NAMES and name != "id"]
    _create_staging(db)
    clauses, params = [], []
    if env is not None:
        clauses += [f"{name} IS ?" for name in ENV_KEY]
        params += [env[name] for name in ENV_KEY]
    if trial_keys is not None:
        db.execute("CREATE TEMP TABLE merge_keys (trial_key TEXT PRIMARY KEY)")
        db.executemany("INSERT OR IGNORE INTO temp.merge_keys VALUES (?)", [(key,) for key in trial_keys])
        clauses.append("trial_key IN (SELECT trial_key FROM temp.merge_keys)")
    where = " WHERE " + " AND ".join(clauses) if clauses else ""
    named = ", ".join(name if name in present else "NULL" for name in COLUMN_NAMES)
    db.execute(f"INSERT INTO {ARRIVING} (id, {', '.join(COLUMN_NAMES)}) SELECT id, {named} "
               f"FROM merge_source.trials{where} ORDER BY timestamp, id", params)
    if "sweep_rows" in tables:
        db.execute(f"INSERT INTO {ARRIVING_SWEEPS} SELECT row_id, sweep_id FROM merge_source.sweep_rows "
                   f"WHERE row_id IN (SELECT id FROM {ARRIVING}) ORDER BY rowid")
    peaks = []
    if "device_peaks" in tables:
        where, params = "", []
        if env is not None:
            where = " WHERE " + " AND ".join(f"{name} IS ?" for name in PEAK_KEY)
            params = [env[name] for name in PEAK_KEY]
        peaks = db.execute(f"SELECT {', '.join(PEAK_COLUMNS)} FROM merge_source.device_peaks{where} "
                           "ORDER BY measured_at, rowid", params).fetchall()
    return peaks, unknown


def stage_rows(db: sqlite3.Connection, rows: list, sweeps_of: dict) -> None:
    """Python's (source id, row) pairs in timestamp order and source id -> sweep ids (recover_source's)
    into ARRIVING and ARRIVING_SWEEPS, as stage_source reads a sound store."""
    _create_staging(db)
    db.executemany(f"INSERT INTO {ARRIVING} (id, {', '.join(COLUMN_NAMES)}) "
                   f"VALUES (?, {', '.join('?' for _ in COLUMN_NAMES)})", [(i, *row) for i, row in rows])
    db.executemany(f"INSERT INTO {ARRIVING_SWEEPS} VALUES (?, ?)",
                   [(i, sweep_id) for i, _ in rows for sweep_id in sweeps_of.get(i, [])])


def _create_staging(db: sqlite3.Connection) -> None:
    columns = ", ".join(f"{c.name} {c.sql.replace(' NOT NULL', '')}" for c in COLUMNS)
    db.execute(f"CREATE TEMP TABLE merge_arriving (seq INTEGER PRIMARY KEY, id INTEGER, {columns})")
    db.execute("CREATE TEMP TABLE merge_arriving_sweeps (id INTEGER, sweep_id TEXT)")


def drop_staging(db: sqlite3.Connection) -> None:
    """Drop the temp tables of a merge (stage_source's and merging.merge_rows'), their pages left as they
    are: the rows are the source's (SQLite's secure_delete zeroes freed pages: 2 s a million rows)."""
    db.execute("PRAGMA temp.secure_delete = OFF")
    names = db.execute("SELECT name FROM temp.sqlite_master WHERE type = 'table' AND name LIKE 'merge%'")
    for (name,) in names.fetchall():
        db.execute(f"DROP TABLE temp.{name}")


class StoredColumns:
    """What row_model.checked_rows reads of every row of a store's table (a merge's check before any write),
    as suspects reads a frame's columns: each column read from SQLite when asked for (a million rows: one
    column's values at a time, no Python object a row), in `order`; a samples blob only where it holds no
    whole float32s, the check reading nothing else of it."""

    def __init__(self, db: sqlite3.Connection, table: str, order: str):
        import numpy as np

        from triton_sweep.store.row_model import StoredRow

        schema, name = table.split(".")
        present = {info[1] for info in db.execute(f"PRAGMA {schema}.table_info({name})")}
        self.names = tuple(name for name in dict.fromkeys(("id", *StoredRow.model_fields, *SAMPLE_COLUMNS))
                           if name in present)
        self.db, self.table = db, table
        self.rowids = np.array([i for (i,) in db.execute(f"SELECT rowid FROM {table} ORDER BY {order}")],
                               dtype=np.int64)
        self.rank = np.argsort(np.argsort(self.rowids))  # the place of each row in rowid order

    def __len__(self) -> int:
        return len(self.rowids)

    def __contains__(self, name: str) -> bool:
        return name in self.names

    def _read(self, name: str) -> str:
        if name in SAMPLE_COLUMNS:
            return f"CASE WHEN typeof({name}) = 'blob' AND length({name}) % 4 THEN {name} END"
        return name

    def __getitem__(self, name: str):
        import numpy as np
        import pandas as pd

        values = np.empty(len(self), dtype=object)
        values[:] = [value for (value,) in self.db.execute(f"SELECT {self._read(name)} FROM {self.table} "
                                                           "ORDER BY rowid")]
        return pd.Series(values[self.rank], dtype=object)

    def row_at(self, i: int) -> dict:
        """The i-th row in `order`, its fields by name."""
        read = ", ".join(map(self._read, self.names))
        values = self.db.execute(f"SELECT {read} FROM {self.table} WHERE rowid = ?", (int(self.rowids[i]),))
        return dict(zip(self.names, values.fetchone()))


RECOVER_CHUNK = 256  # rows read at once from a damaged store; a chunk that fails is split in two


def _read_rows(src: sqlite3.Connection, select: str, first: int, last: int, lost: list) -> list:
    """The rows of `select ... WHERE rowid BETWEEN ? AND ?` SQLite can read in [first, last]: a range
    that fails is split until single rows; the rowids that still fail are appended to `lost`."""
    try:
        return src.execute(select, (first, last)).fetchall()
    except sqlite3.DatabaseError:
        if first == last:
            lost.append(first)
            return []
    middle = (first + last) // 2
    return _read_rows(src, select, first, middle, lost) + _read_rows(src, select, middle + 1, last, lost)


def _plausible(row: dict, row_id: int) -> bool:
    """Whether a row read from a damaged store is one a sweep wrote (a page that SQLite read whole may
    still hold another page's bytes): its keys are text without NULs, and it holds to row_model's checks."""
    from triton_sweep.store.row_model import MalformedRow, checked_row

    required = ("trial_key", "sweep_id", "kernel", "provider", "dtype", "status", "backend", "gpu_name",
                "torch_version", "triton_version", "kernel_hash", "timestamp")
    if not all(isinstance(row[name], str) and row[name] and "\x00" not in row[name] for name in required):
        return False
    try:
        checked_row({**row, "id": row_id}, "")
    except MalformedRow:
        return False
    return True


def _last_rowid(src: sqlite3.Connection, table: str, fallback: int) -> int:
    queries = (f"SELECT seq FROM sqlite_sequence WHERE name = '{table}'", f"SELECT MAX(rowid) FROM {table}")
    for query in queries:
        try:
            found = src.execute(query).fetchone()
        except sqlite3.DatabaseError:
            continue
        if found and found[0]:
            return int(found[0])
    return fallback  # both pages unreadable: try every rowid the file could hold


def recover_source(path: Path):
    """What SQLite can still read of a damaged store, in read_source's form: (source id, row) pairs in
    timestamp order, source id -> sweep ids, device ceilings, and the number of rows lost. A row whose
    samples sit on a lost page is kept without them."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such store file")
    with tempfile.TemporaryDirectory() as scratch:
        # Read from a copy, never the file itself. A file cut short is cut to its whole pages and its
        # header told their number: SQLite refuses to load the schema of a file shorter than its header
        # says, and would read a missing page as zeros; told, it fails each read that needs one.
        copy = Path(scratch) / path.name
        shutil.copyfile(path, copy)
        wal = path.with_name(path.name + "-wal")
        if wal.exists():  # a killed writer's committed rows
            shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
        with copy.open("r+b") as file:
            header = file.read(100)
            page_size = int.from_bytes(header[16:18], "big")
            page_size = 65536 if page_size == 1 else page_size
            pages = copy.stat().st_size // page_size if page_size else 0
            if header.startswith(SQLITE_MAGIC) and 0 < pages < int.from_bytes(header[28:32], "big"):
                file.truncate(pages * page_size)
                file.seek(28)
                file.write(pages.to_bytes(4, "big"))
        return _recover_copy(copy, path)


def _recover_copy(copy: Path, path: Path):
    """recover_source's reading, from the copy of `path`."""
    src = sqlite3.connect(copy, timeout=60)
    try:
        try:
            present = [info[1] for info in src.execute("PRAGMA table_info(trials)")]
        except sqlite3.DatabaseError as error:
            raise DamagedStore(path, f"SQLite cannot read its list of tables ({error})",
                               "None of its rows can be read by SQLite: only a copy of the file brings "
                               "them back") from None
        if not present:
            raise DamagedStore(path, "SQLite finds no trials table in it",
                               "No rows can be recovered from it: only a copy of the file brings them back")
        columns = [name for name in COLUMN_NAMES if name in present]
        bound = path.stat().st_size // 64  # a row takes more than 64 bytes: no rowid lies beyond this
        lost: list[int] = []
        full = f"SELECT id, {', '.join(columns)} FROM trials WHERE id BETWEEN ? AND ?"
        by_id = {}
        last = _last_rowid(src, "trials", bound)
        for first in range(1, last + 1, RECOVER_CHUNK):
            for values in _read_rows(src, full, first, min(first + RECOVER_CHUNK - 1, last), lost):
                by_id[values[0]] = dict(zip(columns, values[1:]))
        without_samples = [name for name in columns if name not in SAMPLE_COLUMNS]
        short = f"SELECT id, {', '.join(without_samples)} FROM trials WHERE id BETWEEN ? AND ?"
        unreadable = 0
        for row_id in lost:  # the row's own page may be whole while its samples' overflow pages are lost
            found = _read_rows(src, short, row_id, row_id, [])
            if found:
                by_id[row_id] = dict(zip(without_samples, found[0][1:]))
            else:
                unreadable += 1
        rows = []
        for row_id, values in by_id.items():
            row = dict.fromkeys(COLUMN_NAMES)
            row.update(values)
            if _plausible(row, row_id):
                rows.append((row_id, tuple(row[name] for name in COLUMN_NAMES)))
            else:
                unreadable += 1
        rows.sort(key=lambda pair: (pair[1][AT["timestamp"]], pair[0]))
        sweeps_of: dict[int, list[str]] = {}
        memberships = "SELECT rowid, sweep_id, row_id FROM sweep_rows WHERE rowid BETWEEN ? AND ?"
        last = _last_rowid(src, "sweep_rows", bound)
        for first in range(1, last + 1, RECOVER_CHUNK * 16):
            for _, sweep_id, row_id in _read_rows(src, memberships, first,
                                                  min(first + RECOVER_CHUNK * 16 - 1, last), []):
                sweeps_of.setdefault(row_id, []).append(sweep_id)
        try:
            peaks = src.execute(f"SELECT {', '.join(PEAK_COLUMNS)} FROM device_peaks "
                                "ORDER BY measured_at, rowid").fetchall()
        except sqlite3.DatabaseError:
            peaks = []  # measured again by the next sweep on that device
    finally:
        src.close()
    return rows, sweeps_of, peaks, unreadable

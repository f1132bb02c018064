"""Reading another store file for a merge (ResultStore.merge_from, runners/merge.py): a sound one, whole
or one environment's rows; or, from a damaged one (merge --recover), the rows, memberships and ceilings
SQLite can still read, from a copy of it, keeping only the rows a sweep could have written."""
from __future__ import annotations

import operator
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Optional
from urllib.parse import quote

from triton_sweep.model.columns import COLUMN_NAMES, COLUMNS, ENV_KEY, SAMPLE_COLUMNS
from triton_sweep.store.damage import SQLITE_MAGIC, DamagedStore, damage_of
from triton_sweep.store.schema import AT, PEAK_COLUMNS, PEAK_KEY


def open_source(path: Path, immutable: bool) -> sqlite3.Connection:
    """A connection that only reads another store file. `immutable`: a file nobody writes (a snapshot),
    read without locks; else an ordinary connection, so that the WAL a job left behind is read (and
    cleaned up on close) as that job's own connection would have."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such store file")
    problem = damage_of(path)
    if problem:
        raise DamagedStore(path, problem)
    if immutable:
        return sqlite3.connect(f"file:{quote(str(path.resolve()))}?immutable=1", uri=True)
    connection = sqlite3.connect(path, timeout=60)
    connection.execute("PRAGMA query_only = ON")
    return connection


# Text that repeats from row to row (a sweep's, a device's, a config's): read for a merge as one object for
# every row that holds it, not a copy a row (at a million rows, a gigabyte of copies).
SHARED = tuple(column.name for column in COLUMNS
               if column.sql.startswith("TEXT") and column.name not in ("trial_key", "timestamp"))


def read_source(src: sqlite3.Connection, path: Path, env: Optional[dict], trial_keys: Optional[set]):
    """(source id, row) pairs in timestamp order, each row the values of COLUMN_NAMES in their order (None
    where the source, written by an older version, lacks one: a tuple, an eighth of a dict of them),
    source id -> sweep ids, device ceilings, unknown columns."""
    tables = {name for (name,) in src.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "trials" not in tables:
        raise ValueError(f"{path}: not a results store (it has no trials table)")
    present = [info[1] for info in src.execute("PRAGMA table_info(trials)")]
    columns = [name for name in COLUMN_NAMES if name in present]
    unknown = [name for name in present if name not in COLUMN_NAMES and name != "id"]
    where, params = "", []
    if env is not None:
        where = " WHERE " + " AND ".join(f"{name} IS ?" for name in ENV_KEY)
        params = [env[name] for name in ENV_KEY]
    order = [*SHARED, *(name for name in COLUMN_NAMES if name not in SHARED)]  # SHARED first, then put back
    named = ", ".join(name if name in columns else f"NULL AS {name}" for name in order)
    query = f"SELECT id, {named} FROM trials{where} ORDER BY timestamp, id"
    share, key, end = {}.setdefault, 1 + order.index("trial_key"), 1 + len(SHARED)
    back = operator.itemgetter(*[order.index(name) for name in COLUMN_NAMES])
    rows = [(values[0], back(tuple(map(share, values[1:end], values[1:end])) + values[end:]))
            for values in src.execute(query, params) if trial_keys is None or values[key] in trial_keys]
    sweeps_of: dict[int, list[str]] = {}
    if "sweep_rows" in tables:
        for sweep_id, row_id in src.execute("SELECT sweep_id, row_id FROM sweep_rows ORDER BY rowid"):
            sweeps_of.setdefault(row_id, []).append(sweep_id)
    peaks = []
    if "device_peaks" in tables:
        where, params = "", []
        if env is not None:
            where = " WHERE " + " AND ".join(f"{name} IS ?" for name in PEAK_KEY)
            params = [env[name] for name in PEAK_KEY]
        query = f"SELECT {', '.join(PEAK_COLUMNS)} FROM device_peaks{where} ORDER BY measured_at, rowid"
        peaks = src.execute(query, params).fetchall()
    return rows, sweeps_of, peaks, unknown


def checked_fields(src: sqlite3.Connection) -> tuple[list, tuple]:
    """What row_model.checked_rows reads of every row of a store (its fields and samples): (id, values)
    pairs in read_source's order, and the names of the values (the merge's check before any write)."""
    from triton_sweep.store.row_model import StoredRow

    present = {info[1] for info in src.execute("PRAGMA table_info(trials)")}
    names = tuple(name for name in (*StoredRow.model_fields, *SAMPLE_COLUMNS) if name in COLUMN_NAMES
                  and name in present)
    query = f"SELECT id, {', '.join(names)} FROM trials ORDER BY timestamp, id"
    return [(values[0], values[1:]) for values in src.execute(query)], names


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

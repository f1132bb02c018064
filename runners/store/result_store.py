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
import shutil
import sqlite3
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Optional
from urllib.parse import quote

from runners.model.columns import (BOOLEAN_COLUMNS, COLUMN_NAMES, COLUMNS, ENV_KEY, SAMPLE_COLUMNS,
                                unknown_fields)
from runners.measure.check import STATUSES

if TYPE_CHECKING:  # imported where used: the sweep opens its store before its workers start (0.45 s)
    import pandas as pd

# The row's fields are declared in runners/model/columns.py; the ceilings' key (a device's copy bandwidth and
# matmul rate) is the part of the resume key that says which device and timer measured them.
PEAK_KEY = ("gpu_name", "driver_version", "torch_version", "timing_method")
# Outcomes that may not repeat (a hang, a dead worker, memory taken by another process): resume measures
# these trials again. Every other status is a property of the trial and is kept.
TRANSIENT_STATUSES = ("timeout", "crashed", "oom")
PEAK_COLUMNS = PEAK_KEY + ("peaks", "measured_at")

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS trials (id INTEGER PRIMARY KEY AUTOINCREMENT, \
{", ".join(f"{c.name} {c.sql}" for c in COLUMNS)});
CREATE INDEX IF NOT EXISTS trials_by_key ON trials (trial_key, {", ".join(ENV_KEY)});
CREATE TABLE IF NOT EXISTS sweep_rows (sweep_id TEXT NOT NULL, row_id INTEGER NOT NULL REFERENCES trials(id),
                                       PRIMARY KEY (sweep_id, row_id));
CREATE TABLE IF NOT EXISTS device_peaks ({", ".join(f"{n} TEXT" for n in PEAK_KEY)}, peaks TEXT NOT NULL,
                                         measured_at TEXT NOT NULL);
"""


@dataclass
class MergeCounts:
    """What merge_from did with one source store."""

    kept: int = 0  # rows copied into the target
    skipped: int = 0  # rows held already (every column equal): one measurement, copied before
    moved: int = 0  # rows of the target inserted again after older arrivals of their trial and environment
    memberships: int = 0  # sweep memberships added: of kept rows, and of held rows that another sweep reused
    peaks_kept: int = 0
    peaks_skipped: int = 0
    kept_by_kernel: dict = field(default_factory=dict)
    sweeps: set = field(default_factory=set)  # sweep ids of the rows read from the source
    unknown_columns: list = field(default_factory=list)  # columns of the source this version does not know
    unreadable: int = 0  # rows of a damaged source that SQLite could not read (merge --recover)


SQLITE_MAGIC = b"SQLite format 3\x00"


class StoreError(ValueError):
    """A store that cannot be used as it is (damaged, or not writable); the message is one line naming the
    file and saying what to do."""


class UnwritableStore(StoreError):
    """A store SQLite cannot write: a full disk, a read-only file system, a folder that cannot be made."""

    def __init__(self, path: str | Path, problem: str):
        super().__init__(f"{path}: cannot write the results store ({problem}); the rows committed before "
                         f"are kept. Free space on its disk or make {Path(path).parent} writable (or give "
                         "store=... another path), then run again: a sweep resumes where it stopped")


class DamagedStore(StoreError):
    """A store file SQLite cannot read whole. The file is left as it is; the message names it, says what
    is wrong and what to do."""

    def __init__(self, path: str | Path, problem: str, advice: Optional[str] = None):
        self.path, self.problem = Path(path), problem
        advice = advice or (f"Move it aside (mv {path} {path}.damaged) to start a new store there, or copy "
                            f"out the rows SQLite can still read: python -m runners.merge --recover {path} "
                            "--into RECOVERED.sqlite")
        self.detail = f"a damaged results store: {problem}. It is left untouched. {advice}"
        super().__init__(f"{path}: {self.detail}")


def damage_of(path: str | Path) -> Optional[str]:
    """What is wrong with a store file: None for a missing or empty file (a new store) or a sound one.
    Its header first (overwritten; cut short of the pages it records), then SQLite's integrity check of
    every page, read only, in a snapshot (0.2 s for a store of 100,000 rows: BENCHMARKS.md, C1). Sound
    while other processes write the store (checked so: BENCHMARKS.md, C2)."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return None
    wal = path.with_name(path.name + "-wal")
    frames = wal.is_file() and wal.stat().st_size > 0
    size = path.stat().st_size
    with path.open("rb") as file:
        header = file.read(100)
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
        return "its first bytes are not an SQLite header (overwritten, or the file is no store)"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        return f"its header is damaged (page size {page_size})"
    pages = int.from_bytes(header[28:32], "big")
    # The page count in the header holds only where SQLite marked it valid (offset 92 = change counter),
    # and only at rest: a checkpoint (a -wal file holds frames) writes the header before it extends the file.
    at_rest = not (frames or (wal.is_file() and wal.stat().st_size > 0))  # before the header and after
    if at_rest and pages and header[92:96] == header[24:28] and size < pages * page_size:
        return f"it is cut short: {size} bytes of the {pages * page_size} its header records"
    try:
        with _reading(path):
            db = sqlite3.connect(path, timeout=60)
            try:
                db.execute("PRAGMA query_only = ON")
                found = db.execute("PRAGMA integrity_check(1)").fetchone()[0]
            finally:
                db.close()
    except DamagedStore as damaged:
        return damaged.problem
    return None if found == "ok" else f"SQLite's integrity check says: {' '.join(found.split())}"


def _is_damage(error: sqlite3.DatabaseError) -> bool:
    """A read that failed because the file is damaged (not a lock, a full disk or a bad query)."""
    name = getattr(error, "sqlite_errorname", "")
    if name:
        return name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or name.startswith("SQLITE_CORRUPT")
    text = str(error)
    return "malformed" in text or "not a database" in text


def _is_unwritable(error: sqlite3.DatabaseError) -> bool:
    """A write (or the open before it) that failed for the disk or the file system's permissions."""
    name = getattr(error, "sqlite_errorname", "")
    if name:
        return name.split("_")[1] in ("FULL", "IOERR", "READONLY", "CANTOPEN", "PERM")
    text = str(error)
    return any(words in text for words in ("disk is full", "disk I/O", "readonly", "unable to open"))


@contextmanager
def _reading(path: Path):
    """Turns SQLite's word for a damaged file, or for one it cannot write, into a StoreError naming it."""
    try:
        yield
    except sqlite3.DatabaseError as error:
        if _is_damage(error):
            raise DamagedStore(path, f"SQLite says: {error}") from None
        if _is_unwritable(error):
            raise UnwritableStore(path, f"SQLite says: {error}") from None
        raise


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
        with _reading(self.path):
            # isolation_level=None: autocommit, each statement its own transaction unless BEGIN is issued.
            self._db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")  # the commit is on disk before append() returns
            self._db.execute("PRAGMA busy_timeout=60000")
            self._db.executescript(_SCHEMA)
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
        with _reading(self.path):
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
        with _reading(self.path):
            ids = list(row_ids)
            found = {}
            for start in range(0, len(ids), 500):  # SQLite limits the number of parameters
                chunk = ids[start:start + 500]
                rows = self._db.execute(f"SELECT id, status, p50_us FROM trials WHERE id IN "
                                        f"({', '.join('?' for _ in chunk)})", chunk)
                found.update({i: {"status": status, "p50_us": p50} for i, status, p50 in rows})
            return found

    def load(self, sweep_id: Optional[str] = None, kernel: Optional[str] = None) -> pd.DataFrame:
        """All rows (or a sweep's rows) as a DataFrame; samples_us decoded to float32 arrays."""
        import numpy as np
        import pandas as pd

        with _reading(self.path):
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
            cursor = self._db.execute(query + " ORDER BY trials.id", params)  # SQLite's own errors, unwrapped
            frame = pd.DataFrame.from_records(cursor.fetchall(), columns=[d[0] for d in cursor.description],
                                              coerce_float=True)
            for name in SAMPLE_COLUMNS:
                frame[name] = [None if b is None else np.frombuffer(b, dtype=np.float32) for b in frame[name]]
            for name in BOOLEAN_COLUMNS:
                frame[name] = frame[name].map(lambda v: None if pd.isna(v) else bool(v))
            return frame

    def peaks(self, env: dict) -> Optional[dict]:
        where = " AND ".join(f"{name} IS ?" for name in PEAK_KEY)
        with _reading(self.path):
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
                   immutable: bool = False, recover: bool = False) -> MergeCounts:
        """Copy into this store the rows, sweep memberships and device ceilings of another store file that
        it does not hold yet, in one transaction. A row is held already when every column is equal (the
        trial key, environment and timestamp make it one measurement): it is skipped, and only the sweeps
        that used it are added. Copied rows get new ids here, in timestamp order; where they are older
        than a row this store holds for the same trial and environment, that row is inserted again after
        them, with its memberships, so the newest measurement keeps the largest id (resume, finalists,
        report and export take the largest). env: only the rows of this environment (ENV_KEY) and the
        ceilings of its device (PEAK_KEY); trial_keys: only these trials. immutable: the source is a file
        nobody writes while it is read (a snapshot), read without locks. recover: the source is damaged;
        copy the rows, memberships and ceilings SQLite can still read (counts.unreadable: rows lost)."""
        source = Path(source)
        if source.resolve() == self.path.resolve():
            raise ValueError(f"{source}: a store cannot be merged into itself")
        counts = MergeCounts()
        if recover:
            rows, sweeps_of, peaks, counts.unreadable = _recover_source(source)
        else:
            src = _open_source(source, immutable)
            try:
                with _reading(source):
                    rows, sweeps_of, peaks, counts.unknown_columns = _read_source(src, source, env,
                                                                                  trial_keys)
            finally:
                src.close()
        with self._transaction():
            new, arriving = [], set()
            for source_id, row in rows:
                sweeps = sweeps_of.get(source_id, [])
                counts.sweeps.update(sweeps)
                identity = tuple(row[name] for name in COLUMN_NAMES)
                held = None if identity in arriving else self._find_row(row)
                if held is None and identity not in arriving:
                    arriving.add(identity)
                    new.append((row, sweeps))
                    counts.kept_by_kernel[row["kernel"]] = counts.kept_by_kernel.get(row["kernel"], 0) + 1
                    continue
                counts.skipped += 1
                if held is not None:
                    counts.memberships += self._add_memberships(held, sweeps)
            moved = self._take_newer_rows(new)
            # Arrivals first where timestamps tie: a row of this store that ties one stays after it.
            ordered = sorted([(row["timestamp"], 0, i) for i, (row, _) in enumerate(new)]
                             + [(row["timestamp"], 1, i) for i, (row, _) in enumerate(moved)])
            for _, was_here, i in ordered:
                row, sweeps = (moved if was_here else new)[i]
                added = self._add_memberships(self._insert_stored(row), sweeps)
                counts.memberships += 0 if was_here else added  # a moved row's memberships are not new
            counts.kept, counts.moved = len(new), len(moved)
            counts.peaks_kept, counts.peaks_skipped = self._merge_peaks(peaks)
        return counts

    def _find_row(self, row: dict) -> Optional[int]:
        """The id of a row with every column equal to `row`'s (the index on trial_key + ENV_KEY finds it)."""
        where = " AND ".join(f"{name} IS ?" for name in COLUMN_NAMES)
        found = self._db.execute(f"SELECT id FROM trials WHERE {where} LIMIT 1",
                                 [row[name] for name in COLUMN_NAMES]).fetchone()
        return None if found is None else found[0]

    def _add_memberships(self, row_id: int, sweeps: Iterable[str]) -> int:
        added = 0
        for sweep_id in sweeps:
            added += self._db.execute("INSERT OR IGNORE INTO sweep_rows VALUES (?, ?)",
                                      (sweep_id, row_id)).rowcount
        return added

    def _insert_stored(self, row: dict) -> int:
        """Insert a row whose values are already in their stored form (as read from a store)."""
        placeholders = ", ".join("?" for _ in COLUMN_NAMES)
        cursor = self._db.execute(f"INSERT INTO trials ({', '.join(COLUMN_NAMES)}) VALUES ({placeholders})",
                                  [row[name] for name in COLUMN_NAMES])
        return cursor.lastrowid

    def _take_newer_rows(self, arriving: list) -> list:
        """Delete, to insert again after `arriving`, this store's rows that are newer than the oldest
        arriving row of their trial and environment; returns them with their sweep memberships."""
        oldest: dict[tuple, str] = {}
        for row, _ in arriving:
            group = (row["trial_key"],) + tuple(row[name] for name in ENV_KEY)
            oldest[group] = min(oldest.get(group, row["timestamp"]), row["timestamp"])
        where = " AND ".join(f"{name} IS ?" for name in ("trial_key",) + ENV_KEY)
        taken = []
        for group, timestamp in oldest.items():
            later = self._db.execute(f"SELECT id, {', '.join(COLUMN_NAMES)} FROM trials WHERE {where} "
                                     "AND timestamp > ? ORDER BY id", list(group) + [timestamp]).fetchall()
            for row_id, *values in later:
                memberships = self._db.execute("SELECT sweep_id FROM sweep_rows WHERE row_id = ?", (row_id,))
                sweeps = [sweep_id for (sweep_id,) in memberships]
                self._db.execute("DELETE FROM sweep_rows WHERE row_id = ?", (row_id,))
                self._db.execute("DELETE FROM trials WHERE id = ?", (row_id,))
                taken.append((dict(zip(COLUMN_NAMES, values)), sweeps))
        return taken

    def _merge_peaks(self, peaks: list[tuple]) -> tuple[int, int]:
        """Device ceilings as trial rows: identical ones skipped, and per device the one measured last is
        the last row (peaks() takes it). Returns (kept, skipped)."""
        columns, values = ", ".join(PEAK_COLUMNS), ", ".join("?" for _ in PEAK_COLUMNS)
        same = " AND ".join(f"{name} IS ?" for name in PEAK_COLUMNS)
        new = [p for p in dict.fromkeys(peaks)
               if self._db.execute(f"SELECT 1 FROM device_peaks WHERE {same}", p).fetchone() is None]
        oldest: dict[tuple, str] = {}
        for peak in new:
            device, measured_at = peak[:len(PEAK_KEY)], peak[-1]
            oldest[device] = min(oldest.get(device, measured_at), measured_at)
        key = " AND ".join(f"{name} IS ?" for name in PEAK_KEY)
        moved = []
        for device, measured_at in oldest.items():
            where, params = f"WHERE {key} AND measured_at > ?", list(device) + [measured_at]
            moved += self._db.execute(f"SELECT {columns} FROM device_peaks {where} ORDER BY rowid", 
                                      params).fetchall()
            self._db.execute(f"DELETE FROM device_peaks {where}", params)
        ordered = sorted([(p[-1], 0, i, p) for i, p in enumerate(new)]
                         + [(p[-1], 1, i, p) for i, p in enumerate(moved)])
        for *_, peak in ordered:
            self._db.execute(f"INSERT INTO device_peaks ({columns}) VALUES ({values})", peak)
        return len(new), len(peaks) - len(new)

    @contextmanager
    def _transaction(self):
        """BEGIN IMMEDIATE takes the write lock up front, so two writers queue instead of deadlocking."""
        with _reading(self.path):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")


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


def _open_source(path: Path, immutable: bool) -> sqlite3.Connection:
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


def _read_source(src: sqlite3.Connection, path: Path, env: Optional[dict], trial_keys: Optional[set]):
    """(source id, row) pairs in timestamp order with every column of COLUMN_NAMES (None where the source,
    written by an older version, lacks one), source id -> sweep ids, device ceilings, unknown columns."""
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
    rows = []
    query = f"SELECT id, {', '.join(columns)} FROM trials{where} ORDER BY timestamp, id"
    for values in src.execute(query, params):
        row = dict.fromkeys(COLUMN_NAMES)
        row.update(zip(columns, values[1:]))
        if trial_keys is None or row["trial_key"] in trial_keys:
            rows.append((values[0], row))
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


def _plausible(row: dict) -> bool:
    """Whether a row read from a damaged store is one a sweep wrote (a page that SQLite read whole may
    still hold another page's bytes): its keys are text without NULs, its shape and config JSON, its
    status one a trial ends in, its sample arrays whole float32s."""
    required = ("trial_key", "sweep_id", "kernel", "provider", "dtype", "status", "backend", "gpu_name",
                "torch_version", "triton_version", "kernel_hash", "timestamp")
    if not all(isinstance(row[name], str) and row[name] and "\x00" not in row[name] for name in required):
        return False
    if row["status"] not in STATUSES or row["phase"] not in (None, "screen", "final"):
        return False
    try:
        shape, config = json.loads(row["shape"]), json.loads(row["config"])
    except (TypeError, ValueError):
        return False
    if not isinstance(shape, list) or not isinstance(config, dict):
        return False
    return all(row[name] is None or (isinstance(row[name], bytes) and len(row[name]) % 4 == 0)
               for name in SAMPLE_COLUMNS)


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


def _recover_source(path: Path):
    """What SQLite can still read of a damaged store, in _read_source's form: (source id, row) pairs in
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
    """_recover_source's reading, from the copy of `path`."""
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
            if _plausible(row):
                rows.append((row_id, row))
            else:
                unreadable += 1
        rows.sort(key=lambda pair: (pair[1]["timestamp"], pair[0]))
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

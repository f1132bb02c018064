"""Merging another store's rows into this one (ResultStore.merge_from, runners/merge.py): rows held already
(every column equal) are skipped, copied rows get new ids in timestamp order, and a row of this store newer
than an arriving row of its trial and environment is inserted again after it, so "the newest row wins"
(the largest id) holds after the merge. MergeCounts says what was done."""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Iterable, Optional

from triton_sweep.model.columns import COLUMN_NAMES, ENV_KEY
from triton_sweep.store.schema import AT, PEAK_COLUMNS, PEAK_KEY


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


def merge_rows(db: sqlite3.Connection, rows: list, sweeps_of: dict, peaks: list,
               counts: MergeCounts) -> None:
    """Copy the rows, memberships and ceilings read from a source (runners/store/sources.py) that this
    store does not hold yet, counting what was done in `counts`; inside the caller's transaction."""
    new, arriving = [], set()
    keys = {key for (key,) in db.execute("SELECT DISTINCT trial_key FROM trials")}  # a row held has one
    for source_id, row in rows:  # row: the values of COLUMN_NAMES, its identity
        sweeps = sweeps_of.get(source_id, [])
        counts.sweeps.update(sweeps)
        held = None if row in arriving or row[AT["trial_key"]] not in keys else _find_row(db, row)
        if held is None and row not in arriving:
            arriving.add(row)
            new.append((row, sweeps))
            kernel = row[AT["kernel"]]
            counts.kept_by_kernel[kernel] = counts.kept_by_kernel.get(kernel, 0) + 1
            continue
        counts.skipped += 1
        if held is not None:
            counts.memberships += _add_memberships(db, held, sweeps)
    moved = _take_newer_rows(db, [(row, sweeps) for row, sweeps in new if row[AT["trial_key"]] in keys])
    # Arrivals first where timestamps tie: a row of this store that ties one stays after it.
    ordered = sorted([(row[AT["timestamp"]], 0, i) for i, (row, _) in enumerate(new)]
                     + [(row[AT["timestamp"]], 1, i) for i, (row, _) in enumerate(moved)])
    placed = [(moved if was_here else new)[i] for _, was_here, i in ordered]
    db.executemany(INSERT, [row for row, _ in placed])  # one statement, not one a row
    # AUTOINCREMENT: the rows of one statement take consecutive ids, the last of them the table's sequence.
    last = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'trials'").fetchone() if placed else None
    first = 0 if last is None else last[0] - len(placed) + 1
    memberships = [(sweep_id, first + k) for k, (_, sweeps) in enumerate(placed) for sweep_id in sweeps]
    again = sum(len(sweeps) for _, sweeps in moved)  # a moved row's memberships (new ids) are not new
    added = db.executemany("INSERT OR IGNORE INTO sweep_rows VALUES (?, ?)", memberships).rowcount
    counts.memberships += added - again
    counts.kept, counts.moved = len(new), len(moved)
    counts.peaks_kept, counts.peaks_skipped = _merge_peaks(db, peaks)


# Each statement's text built once, not once a row (a million rows spent 20 s joining them).
FIND = f"SELECT id FROM trials WHERE {' AND '.join(f'{name} IS ?' for name in COLUMN_NAMES)} LIMIT 1"
INSERT = f"INSERT INTO trials ({', '.join(COLUMN_NAMES)}) VALUES ({', '.join('?' for _ in COLUMN_NAMES)})"


def _find_row(db: sqlite3.Connection, row: tuple) -> Optional[int]:
    """The id of a row with every column equal to `row`'s (the index on trial_key + ENV_KEY finds it)."""
    found = db.execute(FIND, row).fetchone()
    return None if found is None else found[0]


def _add_memberships(db: sqlite3.Connection, row_id: int, sweeps: Iterable[str]) -> int:
    added = 0
    for sweep_id in sweeps:
        added += db.execute("INSERT OR IGNORE INTO sweep_rows VALUES (?, ?)",
                            (sweep_id, row_id)).rowcount
    return added


def _take_newer_rows(db: sqlite3.Connection, arriving: list) -> list:
    """Delete, to insert again after `arriving`, this store's rows that are newer than the oldest
    arriving row of their trial and environment; returns them with their sweep memberships."""
    oldest: dict[tuple, str] = {}
    for row, _ in arriving:
        group = tuple(row[AT[name]] for name in ("trial_key",) + ENV_KEY)
        oldest[group] = min(oldest.get(group, row[AT["timestamp"]]), row[AT["timestamp"]])
    where = " AND ".join(f"{name} IS ?" for name in ("trial_key",) + ENV_KEY)
    select = f"SELECT id, {', '.join(COLUMN_NAMES)} FROM trials WHERE {where} AND timestamp > ? ORDER BY id"
    taken = []
    for group, timestamp in oldest.items():
        later = db.execute(select, group + (timestamp,)).fetchall()
        for row_id, *values in later:
            memberships = db.execute("SELECT sweep_id FROM sweep_rows WHERE row_id = ?", (row_id,))
            sweeps = [sweep_id for (sweep_id,) in memberships]
            db.execute("DELETE FROM sweep_rows WHERE row_id = ?", (row_id,))
            db.execute("DELETE FROM trials WHERE id = ?", (row_id,))
            taken.append((tuple(values), sweeps))
    return taken


def _merge_peaks(db: sqlite3.Connection, peaks: list[tuple]) -> tuple[int, int]:
    """Device ceilings as trial rows: identical ones skipped, and per device the one measured last is
    the last row (peaks() takes it). Returns (kept, skipped)."""
    columns, values = ", ".join(PEAK_COLUMNS), ", ".join("?" for _ in PEAK_COLUMNS)
    same = " AND ".join(f"{name} IS ?" for name in PEAK_COLUMNS)
    new = [p for p in dict.fromkeys(peaks)
           if db.execute(f"SELECT 1 FROM device_peaks WHERE {same}", p).fetchone() is None]
    oldest: dict[tuple, str] = {}
    for peak in new:
        device, measured_at = peak[:len(PEAK_KEY)], peak[-1]
        oldest[device] = min(oldest.get(device, measured_at), measured_at)
    key = " AND ".join(f"{name} IS ?" for name in PEAK_KEY)
    moved = []
    for device, measured_at in oldest.items():
        where, params = f"WHERE {key} AND measured_at > ?", list(device) + [measured_at]
        moved += db.execute(f"SELECT {columns} FROM device_peaks {where} ORDER BY rowid",
                            params).fetchall()
        db.execute(f"DELETE FROM device_peaks {where}", params)
    ordered = sorted([(p[-1], 0, i, p) for i, p in enumerate(new)]
                     + [(p[-1], 1, i, p) for i, p in enumerate(moved)])
    for *_, peak in ordered:
        db.execute(f"INSERT INTO device_peaks ({columns}) VALUES ({values})", peak)
    return len(new), len(peaks) - len(new)


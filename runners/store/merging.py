"""Merging another store's rows into this one (ResultStore.merge_from, runners/merge.py): rows held already
(every column equal) are skipped, copied rows get new ids in timestamp order, and a row of this store newer
than an arriving row of its trial and environment is inserted again after it, so "the newest row wins"
(the largest id) holds after the merge. MergeCounts says what was done."""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from triton_sweep.model.columns import COLUMN_NAMES, ENV_KEY
from triton_sweep.store.schema import PEAK_COLUMNS, PEAK_KEY
from triton_sweep.store.sources import ARRIVING, ARRIVING_SWEEPS


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
    unknown_columns: list = field(default_factory=list)  # columns of the source this version does not know
    unreadable: int = 0  # rows of a damaged source that SQLite could not read (merge --recover)


def merge_rows(db: sqlite3.Connection, peaks: list, counts: MergeCounts) -> None:
    """Copy the rows and memberships read from a source (sources.stage_source: ARRIVING, ARRIVING_SWEEPS)
    and its ceilings that this store does not hold yet, counting what was done in `counts`; inside the
    caller's transaction, in SQL (a million rows bound one by one from Python took about a minute)."""
    _sort_arrivals(db)
    counts.memberships = db.execute(
        f"INSERT OR IGNORE INTO sweep_rows SELECT s.sweep_id, h.target FROM temp.merge_held h "
        f"JOIN {ARRIVING} a ON a.seq = h.seq JOIN {ARRIVING_SWEEPS} s ON s.id = a.id ORDER BY h.seq, s.rowid"
    ).rowcount
    counts.moved = _take_newer_rows(db)
    # Arrivals first where timestamps tie: a row of this store that ties one stays after it. Moved rows in
    # the order of their trial's first arrival, then their own.
    db.execute("CREATE TEMP TABLE merge_placed (k INTEGER PRIMARY KEY, seq INTEGER, old_id INTEGER, "
               "source INTEGER)")
    db.execute("INSERT INTO temp.merge_placed SELECT ROW_NUMBER() OVER (ORDER BY timestamp, here, arrival, "
               "old_id), seq, old_id, source FROM (SELECT timestamp, 0 AS here, seq AS arrival, 0 AS old_id, "
               f"seq, id AS source FROM {ARRIVING} WHERE seq IN temp.merge_new UNION ALL "
               "SELECT timestamp, 1, arrival, old_id, NULL, old_id FROM temp.merge_moved)")
    # The ids AUTOINCREMENT would give them, in that order.
    last = db.execute("SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'trials'), 0), "
                      "COALESCE((SELECT MAX(id) FROM trials), 0))").fetchone()[0]
    columns = ", ".join(COLUMN_NAMES)
    for table, key in ((ARRIVING, "seq"), ("temp.merge_moved", "old_id")):
        db.execute(f"INSERT INTO trials (id, {columns}) SELECT ? + p.k, {columns} FROM temp.merge_placed p "
                   f"JOIN {table} r ON r.{key} = p.{key} ORDER BY p.k", (last,))
    memberships = "INSERT OR IGNORE INTO sweep_rows SELECT s.sweep_id, ? + p.k FROM temp.merge_placed p JOIN "
    counts.memberships += db.execute(memberships + f"{ARRIVING_SWEEPS} s ON s.id = p.source "
                                     "WHERE p.seq IS NOT NULL ORDER BY p.k, s.rowid", (last,)).rowcount
    db.execute(memberships + "temp.merge_moved_sweeps s ON s.id = p.source WHERE p.seq IS NULL "
               "ORDER BY p.k, s.rowid", (last,))  # a moved row's memberships, not new
    counts.kept_by_kernel = dict(db.execute(f"SELECT kernel, COUNT(*) FROM {ARRIVING} "
                                            "WHERE seq IN temp.merge_new GROUP BY kernel"))
    counts.kept = sum(counts.kept_by_kernel.values())
    counts.skipped = db.execute(f"SELECT COUNT(*) FROM {ARRIVING}").fetchone()[0] - counts.kept
    counts.peaks_kept, counts.peaks_skipped = _merge_peaks(db, peaks)


SAME = " AND ".join(f"r.{name} IS a.{name}" for name in COLUMN_NAMES)  # rows r and a: every column equal


def _sort_arrivals(db: sqlite3.Connection) -> None:
    """temp.merge_held: the arriving rows this store holds (seq, and the id of the first such row, as the
    index on trial_key + ENV_KEY finds it); merge_new: the others, less copies of an earlier arriving row
    (looked for among the rows of a trial, timestamp and sweep that arrive more than once)."""
    db.execute("CREATE TEMP TABLE merge_held (seq INTEGER PRIMARY KEY, target INTEGER)")
    db.execute(f"INSERT INTO temp.merge_held SELECT a.seq, MIN(r.id) FROM {ARRIVING} a JOIN trials r "
               f"ON r.trial_key = a.trial_key AND {SAME} GROUP BY a.seq")
    db.execute("CREATE INDEX temp.merge_arriving_sweeps_id ON merge_arriving_sweeps (id)")
    twice = ("trial_key", "timestamp", "sweep_id")
    db.execute(f"CREATE TEMP TABLE merge_twice AS SELECT * FROM (SELECT seq, {', '.join(twice)}, COUNT(*) "
               f"OVER (PARTITION BY {', '.join(twice)}) AS n FROM {ARRIVING}) WHERE n > 1")
    copies = ("SELECT a.seq FROM temp.merge_twice x JOIN temp.merge_twice y ON y.seq < x.seq AND "
              + " AND ".join(f"y.{name} IS x.{name}" for name in twice)
              + f" JOIN {ARRIVING} a ON a.seq = x.seq JOIN {ARRIVING} r ON r.seq = y.seq AND {SAME}")
    db.execute("CREATE TEMP TABLE merge_new (seq INTEGER PRIMARY KEY)")
    db.execute(f"INSERT INTO temp.merge_new SELECT seq FROM {ARRIVING} WHERE seq NOT IN "
               f"(SELECT seq FROM temp.merge_held) AND seq NOT IN ({copies})")


def _take_newer_rows(db: sqlite3.Connection) -> int:
    """Delete, to insert again after the arriving rows (into temp.merge_moved, their memberships into
    merge_moved_sweeps), this store's rows that are newer than the oldest arriving row of their trial and
    environment; returns their number."""
    group = ", ".join(("trial_key",) + ENV_KEY)
    db.execute(f"CREATE TEMP TABLE merge_oldest AS SELECT {group}, MIN(timestamp) AS since, MIN(seq) AS "
               f"arrival FROM {ARRIVING} WHERE seq IN temp.merge_new AND trial_key IN (SELECT trial_key "
               f"FROM trials) GROUP BY {group}")
    same = " AND ".join(f"r.{name} IS o.{name}" for name in ENV_KEY)
    db.execute(f"CREATE TEMP TABLE merge_moved AS SELECT o.arrival AS arrival, r.id AS old_id, "
               f"{', '.join(f'r.{name}' for name in COLUMN_NAMES)} FROM temp.merge_oldest o JOIN trials r "
               f"ON r.trial_key = o.trial_key AND {same} AND r.timestamp > o.since")
    moved = "SELECT old_id FROM temp.merge_moved"
    db.execute(f"CREATE TEMP TABLE merge_moved_sweeps AS SELECT row_id AS id, sweep_id FROM sweep_rows "
               f"WHERE row_id IN ({moved}) ORDER BY rowid")
    db.execute(f"DELETE FROM sweep_rows WHERE row_id IN ({moved})")
    return db.execute(f"DELETE FROM trials WHERE id IN ({moved})").rowcount


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


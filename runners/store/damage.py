"""A store file that cannot be used as it is: damaged (refused whole at open, before anything is read or
written) or not writable (a full disk, a read-only file system). damage_of finds the damage; reading()
turns SQLite's word for it into a one-line StoreError naming the file and saying what to do."""
from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

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
                            f"out the rows SQLite can still read: triton-sweep-merge --recover {path} "
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
        with reading(path):
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
def reading(path: Path):
    """Turns SQLite's word for a damaged file, or for one it cannot write, into a StoreError naming it."""
    try:
        yield
    except sqlite3.DatabaseError as error:
        if _is_damage(error):
            raise DamagedStore(path, f"SQLite says: {error}") from None
        if _is_unwritable(error):
            raise UnwritableStore(path, f"SQLite says: {error}") from None
        raise


"""Writing a file whole: every file a command writes (the export's .json and .py, the plots, results.parquet,
summary.json, capture's files) goes to a temporary file in its folder, synced, then renamed onto its
path. A kill at any moment leaves the old file or the new one, never a part; a link at the path is
replaced by the file, never written through. Here, in the model, so that every room may use it."""
from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Write `data` (str: UTF-8) to `path` through a temporary file renamed onto it; returns the path.
    The file's mode is the old file's where one was there (a link aside), else 0o666 less the umask, as
    open() would have made it."""
    path = Path(path)
    if isinstance(data, str):
        data = data.encode()
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as file:
            try:
                old = os.lstat(path)
                if stat.S_ISREG(old.st_mode):
                    os.fchmod(file.fileno(), stat.S_IMODE(old.st_mode))
            except FileNotFoundError:
                pass
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)  # on a link, replaces the link itself
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)  # the rename itself survives a crash of the machine
    finally:
        os.close(folder)
    return path

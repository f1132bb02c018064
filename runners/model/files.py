"""Writing a file whole: every file a command writes (the export's .json and .py, the plots, results.parquet,
summary.json, capture's files) goes to a temporary file in its folder, synced, then renamed onto its
path. A kill at any moment leaves the old file or the new one, never a part; a link at the path is
replaced by the file, never written through. And holding a lock file for the rest of a process (claim).
Here, in the model, so that every room may use it."""
from __future__ import annotations

import fcntl
import os
import secrets
import stat
from pathlib import Path
from typing import Optional

_claimed: list = []  # the lock files this process holds: released when it ends, however it ends


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


def claim(path: str | Path) -> Optional[str]:
    """Hold an exclusive lock on `path` (created, never through a link) until this process ends; None,
    or what the process holding it wrote there (its pid) when another holds it. A POSIX lock: the
    process's own, never held on by the children it forks (its workers), which may outlive it a while."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    try:
        fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # EACCES or EAGAIN: held
        holder = os.pread(descriptor, 64, 0).decode(errors="replace").strip()
        os.close(descriptor)
        return holder or "?"
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, str(os.getpid()).encode(), 0)
    _claimed.append(descriptor)
    return None


def claim_sweep_id(store: str | Path, sweep_id: str) -> None:
    """One writer a sweep id of a store: ConfigError while another sweep writes it (the two would share
    one summary and choose two finalists of one group). The lock file: .locks/ beside the store."""
    from triton_sweep.model.trial import ConfigError

    try:
        other = claim(Path(store).parent / ".locks" / f"{Path(store).name}.{sweep_id}")
    except OSError:  # no folder for it: nor for the store, whose opening refuses it in one line
        return
    if other:
        raise ConfigError(f"sweep_id={sweep_id}: another sweep (pid {other}) is writing it into {store}; "
                          "wait for it to end, or give this one a sweep_id of its own")

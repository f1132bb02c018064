"""write_atomic (runners/model/files.py): the mode open() would give, or the old file's; a link at the path
replaced, never written through; nothing left behind by a write that fails."""
import os
import stat

import pytest

from triton_sweep.model import files
from triton_sweep.model.files import write_atomic


def test_a_new_file_has_the_umask_mode_and_an_old_file_keeps_its_mode(tmp_path):
    old = os.umask(0o027)
    try:
        write_atomic(tmp_path / "new.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "new.json").st_mode) == 0o640
    (tmp_path / "new.json").chmod(0o604)
    write_atomic(tmp_path / "new.json", b"[]")
    assert stat.S_IMODE(os.stat(tmp_path / "new.json").st_mode) == 0o604
    assert (tmp_path / "new.json").read_text() == "[]"


def test_a_link_at_the_path_is_replaced_and_its_target_left_as_it_was(tmp_path):
    (tmp_path / "outside").write_text("precious")
    (tmp_path / "outside").chmod(0o644)
    (tmp_path / "link").symlink_to(tmp_path / "outside")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    write_atomic(tmp_path / "link", "new")
    write_atomic(tmp_path / "dangling", "new")
    assert (tmp_path / "outside").read_text() == "precious" and not (tmp_path / "nowhere").exists()
    for name in ("link", "dangling"):
        assert stat.S_ISREG(os.lstat(tmp_path / name).st_mode) and (tmp_path / name).read_text() == "new"


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary_one(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("old")

    def refused(source, target):
        raise PermissionError(target)

    monkeypatch.setattr(files.os, "replace", refused)
    with pytest.raises(PermissionError):
        write_atomic(tmp_path / "file", "new")
    assert [p.name for p in tmp_path.iterdir()] == ["file"] and (tmp_path / "file").read_text() == "old"

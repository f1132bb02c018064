"""The export's files are written whole (runners/model/files.py): an export killed at any point of its
writes leaves the old .json and .py or the new ones, each whole, and the next export runs; a link planted
at a target is replaced by the file, and what it pointed to is left as it was."""
import json
import os
import re
import signal
import stat
import subprocess
import sys

import pytest

from tests.conftest import user_env
from tests.fixtures.synthetic_store import softmax_sweep
from triton_sweep.export.command import main as export_main
from triton_sweep.store.result_store import ResultStore

# The export under os.fsync that stops at its Nth call: write_atomic syncs the temporary file before its
# rename, then the folder after it, so 1..4 are: JSON written but not renamed, JSON renamed, .py written
# but not renamed, .py renamed.
PAUSED_EXPORT = """
import os, sys, time
from triton_sweep.export.command import main
calls, fsync = [], os.fsync
def paused(fd):
    fsync(fd)
    calls.append(fd)
    if len(calls) == int(sys.argv[1]):
        print("paused", flush=True)
        time.sleep(60)
os.fsync = paused
sys.exit(main(sys.argv[2:]))
"""


def _store(tmp_path, name, **fields):
    store = ResultStore(tmp_path / f"{name}.sqlite")
    softmax_sweep(store, name, **fields)
    store.close()
    return tmp_path / f"{name}.sqlite"


def _export(tmp_path, store, *flags) -> int:
    return export_main(["--store", str(store), "--out-dir", str(tmp_path / "out"), *flags])


def _undated(text: str) -> str:
    """The text less its timestamps (the export's exported_at: a second export's differs)."""
    return re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+(\+\d\d:\d\d)?", "T", text)


def _files(tmp_path) -> dict:
    return {name: (tmp_path / "out" / name).read_text() for name in ("softmax_configs.json",
                                                                      "softmax_configs.py")}


@pytest.mark.parametrize("stop", [1, 2, 3, 4])
def test_an_export_killed_during_its_writes_leaves_the_old_files_or_the_new_whole(tmp_path, stop):
    other = _store(tmp_path, "other", gpu_name="Other GPU")
    assert _export(tmp_path, _store(tmp_path, "first")) == 0
    old = _files(tmp_path)
    process = subprocess.Popen(
        [sys.executable, "-c", PAUSED_EXPORT, str(stop), "--store", str(other), "--out-dir",
         str(tmp_path / "out")], cwd=tmp_path, env=user_env(), umask=0o077, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    try:
        output = []
        for line in process.stdout:
            output.append(line)
            if line == "paused\n":
                process.send_signal(signal.SIGKILL)
                break
    finally:
        process.kill()
        process.wait()
    assert process.returncode == -signal.SIGKILL and output[-1] == "paused\n", "".join(output)
    killed = _files(tmp_path)
    json.loads(killed["softmax_configs.json"])
    assert _export(tmp_path, other) == 0  # on whatever the kill left
    new = _files(tmp_path)
    assert "Other GPU" not in old["softmax_configs.json"] and "Other GPU" in new["softmax_configs.json"]
    for name, renamed in (("softmax_configs.json", stop >= 2), ("softmax_configs.py", stop >= 4)):
        assert _undated(killed[name]) == _undated(new[name] if renamed else old[name]), name


@pytest.mark.parametrize("merge", [True, False])
def test_a_link_at_an_export_target_is_replaced_never_written_through(tmp_path, capsys, merge):
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "out").mkdir()
    for name in ("softmax_configs.py", "softmax_configs.json"):
        (outside / name).write_text("precious")
        (tmp_path / "out" / name).symlink_to(outside / name)
    store = _store(tmp_path, "first")
    if merge:  # the JSON is read to merge into: the file it points to is no export's, and is refused
        assert _export(tmp_path, store) == 2
        assert "softmax_configs.json" in capsys.readouterr().err
        os.unlink(tmp_path / "out" / "softmax_configs.json")
    assert _export(tmp_path, store, *([] if merge else ["--no-merge"])) == 0
    for name in ("softmax_configs.py", "softmax_configs.json"):
        assert (outside / name).read_text() == "precious", name
        assert stat.S_ISREG(os.lstat(tmp_path / "out" / name).st_mode), name
    json.loads((tmp_path / "out" / "softmax_configs.json").read_text())

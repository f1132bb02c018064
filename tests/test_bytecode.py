"""Bytecode kept where Python is told to write none (runners/engine/bytecode.py)."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from runners.engine import bytecode
from tests.conftest import run_sweep, sweep_rows

PACKAGE = "def answer():\n    return 42\n"


def _undone_after(monkeypatch) -> None:
    """What the code under test sets in this process (the cache folder, for itself and its children) is
    undone after the test."""
    monkeypatch.setattr(sys, "pycache_prefix", None)
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", "")  # recorded as absent, whatever is set next
    monkeypatch.delenv("PYTHONPYCACHEPREFIX")


@pytest.fixture
def told_not_to_write(monkeypatch, tmp_path):
    """This process as one started under PYTHONDONTWRITEBYTECODE=1, its cache folder under tmp_path."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    _undone_after(monkeypatch)
    monkeypatch.setenv(bytecode.VARIABLE, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_told_not_to_write_the_sweep_keeps_bytecode_in_its_own_folder(told_not_to_write):
    assert bytecode.keep_bytecode() == told_not_to_write
    assert sys.pycache_prefix == str(told_not_to_write) and not sys.dont_write_bytecode
    # what a process started from here inherits
    assert os.environ["PYTHONPYCACHEPREFIX"] == str(told_not_to_write)
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ


def test_off_or_writing_anyway_leaves_python_as_it_was(told_not_to_write, monkeypatch):
    monkeypatch.setenv(bytecode.VARIABLE, "off")
    assert bytecode.keep_bytecode() is None and sys.dont_write_bytecode and sys.pycache_prefix is None
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # Python writes its own: nothing to do
    monkeypatch.setenv(bytecode.VARIABLE, str(told_not_to_write))
    assert bytecode.keep_bytecode() is None and sys.pycache_prefix is None


def test_a_folder_that_cannot_be_written_is_said_and_python_left_as_it_was(told_not_to_write, monkeypatch,
                                                                          capsys):
    told_not_to_write.mkdir()
    told_not_to_write.chmod(0o500)
    try:
        if os.access(told_not_to_write, os.W_OK):
            pytest.skip("this user writes anywhere (root)")
        assert bytecode.keep_bytecode() is None and sys.dont_write_bytecode
    finally:
        told_not_to_write.chmod(0o700)
    assert f"{told_not_to_write} cannot be written" in capsys.readouterr().err


def test_a_failed_compile_is_said_and_not_tried_again_for_the_same_install(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setattr(bytecode, "_source_folders", lambda: [tmp_path])
    monkeypatch.setattr(os, "nice", lambda increment: None)
    _undone_after(monkeypatch)

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    import compileall

    monkeypatch.setattr(compileall, "compile_dir", full_disk)
    with pytest.raises(OSError):
        bytecode.precompile(cache)
    assert not bytecode._stamp(cache).exists()
    assert "No space left" in bytecode._stamp(cache).with_suffix(".failed").read_text()
    assert bytecode.precompile_in_background(cache) is None  # no second process for this install
    assert "the background compile of the bytecode cache failed" in capsys.readouterr().err


def test_the_sources_are_the_standard_library_then_the_installed_packages():
    folders = bytecode._source_folders()
    assert folders[0] == bytecode.Path(bytecode.sysconfig.get_path("stdlib"))
    import torch

    assert bytecode.Path(torch.__file__).parent in folders


def test_precompiled_bytecode_is_what_a_process_told_not_to_write_reads(tmp_path, monkeypatch):
    """The background compile fills the folder and leaves its stamp once; a process started with -B
    (as multiprocessing starts the workers of such a sweep) loads the module from the folder's bytecode,
    and an edited source is compiled again, never read stale."""
    sources = tmp_path / "src" / "cached_pkg"
    sources.mkdir(parents=True)
    (sources / "__init__.py").write_text(PACKAGE)
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setattr(bytecode, "_source_folders", lambda: [sources])
    monkeypatch.setattr(os, "nice", lambda increment: None)  # this test process keeps its priority
    _undone_after(monkeypatch)  # precompile points this process at the cache as the one it runs in
    bytecode.precompile(cache)
    assert bytecode._stamp(cache).exists()
    assert bytecode.precompile_in_background(cache) is None  # done for what is installed

    def load_source() -> tuple:
        result = subprocess.run(
            [sys.executable, "-B", "-v", "-c", "import cached_pkg; print(cached_pkg.answer())"],
            env={**os.environ, "PYTHONPYCACHEPREFIX": str(cache), "PYTHONPATH": str(sources.parent)},
            capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip(), [line for line in result.stderr.splitlines() if "cached_pkg" in line]

    answer, lines = load_source()
    assert answer == "42" and any("code object from" in line and str(cache) in line for line in lines)
    (sources / "__init__.py").write_text(PACKAGE.replace("42", "43") + "\n")
    answer, lines = load_source()
    assert answer == "43" and not any("code object from" in line and str(cache) in line for line in lines)


def test_a_sweep_told_not_to_write_fills_its_cache_in_the_background(tmp_path, monkeypatch):
    """End to end: the sweep's rows as always, and the stamp of the compile it started appears."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv(bytecode.VARIABLE, str(cache))
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)  # a developer's own would win
    result = run_sweep(tmp_path, "kernel=vector_add", "kernel.shapes=[[1000]]", "kernel.dtypes=[float32]",
                       "kernel.space.BLOCK_SIZE=[256]", "kernel.space.num_warps=[1]",
                       "kernel.baselines=[]", "sweep_id=told")
    assert (sweep_rows(tmp_path, "told")["status"] == "ok").all()
    assert f"compiled into {cache} in the background" in result.stderr
    assert any(cache.rglob("hydra/**/*.pyc"))  # the sweep's own imports, written as it went
    deadline = time.monotonic() + 900  # niced, on a box the suite keeps busy: up to minutes
    while not list(cache.glob("triton-sweep-*.compiled")) and time.monotonic() < deadline:
        time.sleep(0.5)
    if not list(cache.glob("triton-sweep-*.compiled")):
        pid = int(re.search(r"in the background \(process (\d+)\)", result.stderr).group(1))
        os.killpg(pid, signal.SIGKILL)  # its session: the compile processes it started too
        log = (cache / "precompile.log").read_text()
        raise AssertionError(f"the background compile did not finish: {log}")
    assert any(cache.rglob("torch/_dynamo/*.pyc"))

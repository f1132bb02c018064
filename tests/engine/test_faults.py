"""Faults and bad input that cannot run end in one line naming the field or the file, exit 2, before any
launch, and lose nothing measured: a sweep id that climbs out of outputs/, a field added with `+` that no
code reads, a sweep file with a YAML error, a disk that fills at the store's open or in the middle of a
sweep (a file size limit stands for it), a store in a folder that cannot be made."""
import contextlib
import resource
import sqlite3

import pytest

from triton_sweep import plot, sweep
from triton_sweep.model.trial import ConfigError, checked_name
from tests.conftest import run_sweep

ONE_TRIAL = ("kernel=vector_add", "kernel.shapes=[[1000]]", "kernel.space.BLOCK_SIZE=[256]")
SOME_TRIALS = ("kernel=vector_add", "kernel.shapes=[[1000],[2000],[3000]]",
               "kernel.space.BLOCK_SIZE=[128,256,512,1024]", "kernel.space.num_warps=[1,2,4]")


def _one_error_line(text: str, *words) -> str:
    lines = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in text, text
    assert all(word in lines[0] for word in words), (lines[0], words)
    return lines[0]


@pytest.mark.parametrize("sweep_id", ["../../../../tmp/x", "C:\\Nightly\\x"])
def test_a_sweep_id_that_is_no_folder_name_is_refused(tmp_path, sweep_id):
    result = run_sweep(tmp_path, *ONE_TRIAL, f"sweep_id={sweep_id}", check=False)
    assert result.returncode == 2
    _one_error_line(result.stderr, "sweep_id:", "cannot name a folder")
    assert not (tmp_path / "results.sqlite").exists()


@pytest.mark.parametrize("name", ["..", ".", "", "a/b", "a\nb", "a\x1b[2J", "x" * 10 + "/"])
def test_names_that_would_leave_their_folder(name):
    with pytest.raises(ConfigError, match="sweep_id: .* cannot name a folder"):
        checked_name(name, "sweep_id")
    assert checked_name("nightly 2026-12-01_a.b", "sweep_id") == "nightly 2026-12-01_a.b"


def test_plot_of_a_climbing_sweep_id_writes_nowhere(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert plot.main(["--store", str(tmp_path / "results.sqlite"), "--sweep-id", "../../../x"]) == 2
    _one_error_line(capsys.readouterr().err, "--sweep-id: '../../../x' cannot name a folder", "--out")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("field, multirun", [("kernel.shapez=[[1]]", False), ("timing.min_sampels=3", True),
                                             ("bogus=1", False)])
def test_a_field_added_with_plus_that_nothing_reads_is_refused_before_any_launch(tmp_path, field, multirun):
    result = run_sweep(tmp_path, *ONE_TRIAL, f"+{field}", multirun=multirun, check=False)
    assert result.returncode == 2
    name = field.split("=")[0]
    _one_error_line(result.stderr, f"error: {name}: not a field of the sweep's config")
    assert "trials planned" not in result.stdout and not (tmp_path / "results.sqlite").exists()


def test_a_sweep_file_with_a_yaml_error_is_named_by_file_line_and_column(tmp_path, capsys, monkeypatch):
    (tmp_path / "sweeps").mkdir()  # the sweep files of the directory the command runs in
    (tmp_path / "sweeps" / "mine.yaml").write_text("kernel:\n  shapes: [[1000]\n  dtypes: float32\n")
    monkeypatch.chdir(tmp_path)
    sweep.check_yaml_files(["backend=interpret", "+sweep=other,softmax_export"])  # no such file; sound
    with pytest.raises(SystemExit) as stopped:
        sweep.check_yaml_files(["backend=interpret", "+sweep=mine"])
    assert stopped.value.code == 2
    _one_error_line(capsys.readouterr().err, f"+sweep=mine: {tmp_path / 'sweeps' / 'mine.yaml'}:3:3:",
                    "while parsing a flow sequence")


def _file_size_limit(size: int):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


def _rows(path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return db.execute("SELECT COUNT(*) FROM trials").fetchone()[0]


@pytest.mark.parametrize("limit_kb", [40, 160])  # full at the store's open; full after some rows
def test_a_full_disk_stops_the_sweep_in_one_line_and_keeps_the_rows(tmp_path, limit_kb):
    result = run_sweep(tmp_path, *SOME_TRIALS, check=False, preexec_fn=_file_size_limit(limit_kb << 10))
    assert result.returncode == 2
    _one_error_line(result.stderr, f"{tmp_path / 'results.sqlite'}: cannot write the results store",
                    "the rows committed before are kept")
    kept = _rows(tmp_path / "results.sqlite")
    if limit_kb == 40:
        assert kept == 0
    else:  # the space freed, the sweep resumes: the rows kept are not measured again
        assert 0 < kept < 36
        assert f"resuming: {kept} of the " in run_sweep(tmp_path, *SOME_TRIALS).stdout


def test_a_store_whose_folder_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "a_file").touch()
    result = run_sweep(tmp_path, *ONE_TRIAL, f"store={tmp_path}/a_file/results.sqlite", check=False)
    assert result.returncode == 2
    _one_error_line(result.stderr, f"{tmp_path}/a_file/results.sqlite: cannot write the results store")

"""A damaged store (its header overwritten, cut to half its size, or one leaf page of its trials
overwritten) is refused whole by every command with one line naming it and saying what to do, before any
worker starts or any row is read, and is never written to; what SQLite can still read of it is recovered
by `triton-sweep-merge --recover`."""
import hashlib
import os

import pytest

from triton_sweep import merge, plot
from triton_sweep.compare import command as compare
from triton_sweep.export import command as export
from triton_sweep.store.damage import DamagedStore, damage_of
from triton_sweep.store.result_store import ResultStore
from tests.conftest import overwrite_a_leaf_page, run_command, run_sweep
from tests.fixtures.synthetic_store import softmax_sweep


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _store(path, sweeps=("base",)):
    store = ResultStore(path)
    rows = []
    for seed, sweep in enumerate(sweeps):
        rows += softmax_sweep(store, sweep, seed=seed)
    store.close()
    for leftover in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        assert not leftover.exists()  # the WAL was checkpointed into the file on close
    return rows


def _overwrite_header(path):
    with path.open("r+b") as file:
        file.write(os.urandom(4096))


def _cut_to_half(path):
    os.truncate(path, path.stat().st_size // 2)


DAMAGES = {"header overwritten": (_overwrite_header, "not an SQLite header"),
           "cut to half": (_cut_to_half, "cut short"),
           "a leaf page overwritten": (overwrite_a_leaf_page, "SQLite")}


@pytest.fixture(params=sorted(DAMAGES))
def damaged(request, tmp_path):
    path = tmp_path / "results.sqlite"
    _store(path)
    damage, words = DAMAGES[request.param]
    damage(path)
    return path, words, _digest(path)


def _one_error_line(text: str, path, words: str) -> None:
    lines = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, text
    assert str(path) in lines[0] and words in lines[0]
    assert "mv " in lines[0] and "triton-sweep-merge --recover" in lines[0]  # what to do
    assert "Traceback" not in text


def test_the_header_check_finds_both_damages_and_passes_sound_and_new_files(tmp_path, damaged):
    path, words, _ = damaged
    assert words in damage_of(path)
    sound = tmp_path / "sound.sqlite"
    _store(sound)
    assert damage_of(sound) is None
    assert damage_of(tmp_path / "missing.sqlite") is None
    (tmp_path / "empty.sqlite").touch()
    assert damage_of(tmp_path / "empty.sqlite") is None  # SQLite makes a new database of it
    with pytest.raises(DamagedStore, match="left untouched"):
        ResultStore(path)


def test_export_plot_compare_and_merge_say_one_line_and_leave_the_file(tmp_path, damaged, capsys):
    path, words, digest = damaged
    sound = tmp_path / "sound.sqlite"
    _store(sound)
    assert export.main(["--store", str(path), "--kernel", "softmax", "--out-dir", str(tmp_path / "x")]) == 2
    _one_error_line(capsys.readouterr().err, path, words)
    assert plot.main(["--store", str(path), "--sweep-id", "base", "--out", str(tmp_path / "p")]) == 2
    _one_error_line(capsys.readouterr().err, path, words)
    for argv in ([str(path), str(sound)], [str(sound), str(path)]):
        assert compare.main(argv) == 2
        _one_error_line(capsys.readouterr().err, path, words)
    # As a source: reported, the others merged; as the target: nothing written.
    assert merge.main([str(path), str(sound), "--into", str(tmp_path / "merged.sqlite")]) == 1
    err = capsys.readouterr().err
    assert f"{path}: not merged: a damaged results store" in err and words in err
    assert merge.main([str(sound), "--into", str(path)]) == 2
    _one_error_line(capsys.readouterr().err, path, words)
    assert _digest(path) == digest
    assert not path.with_name(path.name + "-wal").exists()


def test_a_sweep_on_a_damaged_store_stops_before_any_worker_starts(tmp_path, damaged):
    path, words, digest = damaged
    result = run_sweep(tmp_path, f"store={path}", "kernel=vector_add", "kernel.shapes=[[1000]]",
                       "kernel.space.BLOCK_SIZE=[256]", check=False)
    assert result.returncode == 2
    _one_error_line(result.stderr, path, words)
    assert "ready after" not in result.stdout and "trials planned" not in result.stdout
    assert _digest(path) == digest


def test_recover_copies_what_sqlite_can_read_of_a_store_cut_short(tmp_path, capsys):
    path = tmp_path / "results.sqlite"
    rows = _store(path, sweeps=("base", "again"))
    _cut_to_half(path)
    target = tmp_path / "recovered.sqlite"
    assert merge.main(["--recover", str(path), "--into", str(target)]) == 0
    out = capsys.readouterr().out
    recovered = ResultStore(target).load()
    assert 0 < len(recovered) < len(rows)  # half the file: some rows are gone, the rest come back
    assert f"kept {len(recovered)} rows" in out and "SQLite could not read (lost)" in out
    by_key = {(r["trial_key"], r["sweep_id"], r["phase"]): r for r in rows}
    for _, row in recovered.iterrows():
        original = by_key[(row["trial_key"], row["sweep_id"], row["phase"])]
        assert row["status"] == original["status"]
        if original["status"] == "ok":
            assert row["p50_us"] == original["p50_us"]
    assert set(recovered["sweep_id"]) <= {"base", "again"}


def test_recover_says_plainly_when_sqlite_can_read_nothing(tmp_path, capsys):
    path = tmp_path / "results.sqlite"
    _store(path)
    _overwrite_header(path)
    assert merge.main(["--recover", str(path), "--into", str(tmp_path / "recovered.sqlite")]) == 1
    err = capsys.readouterr().err
    assert "only a copy of the file brings" in err and "Traceback" not in err


def test_no_read_returns_part_of_a_store_damaged_inside(tmp_path):
    path = tmp_path / "results.sqlite"
    _store(path, sweeps=("base", "again"))
    overwrite_a_leaf_page(path)
    digest = _digest(path)
    with pytest.raises(DamagedStore, match="SQLite"):  # at open: load(sweep_id=...) never runs
        ResultStore(path).load(sweep_id="base")
    assert _digest(path) == digest


def test_the_cli_line_of_a_damaged_store_through_a_real_process(tmp_path):
    path = tmp_path / "results.sqlite"
    _store(path)
    _cut_to_half(path)
    result = run_command(["triton_sweep.export", "--store", path], cwd=tmp_path)
    assert result.returncode == 2
    _one_error_line(result.stderr, path, "cut short")

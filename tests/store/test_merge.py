"""Merging result stores (runners/merge.py, ResultStore.merge_from): what is kept, what is skipped, the
newest row of a trial winning after a merge, and one export file set per GPU model.

The rows here are written by hand, GPU-like (backend cuda, made-up p50s): no GPU measured them. They
test the bookkeeping of a merge and that the export of a merged store splits by GPU model; the
measurements of a real multirun are tested in tests/engine/test_launcher.py (interpreter) and on the GPU step.
"""
import json
import sqlite3

import pandas as pd
import pytest

from triton_sweep import merge
from triton_sweep.export import command as export
from triton_sweep.store.result_store import ResultStore

H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
ENV = {"backend": "cuda", "timing_method": "cupti/read-flush", "gpu_name": H100, "driver_version": "570.86",
       "torch_version": "2.11.0", "triton_version": "3.6.0", "kernel_hash": "abc123"}


def _row(key: str, timestamp: str, p50: float, sweep: str = "s1", gpu: str = H100, block: int = 256) -> dict:
    return {**ENV, "gpu_name": gpu, "trial_key": key, "sweep_id": sweep, "kernel": "vector_add",
            "provider": "triton", "shape": [4096], "dtype": "float16",
            "config": {"BLOCK_SIZE": block, "num_warps": 4, "num_stages": 1}, "status": "ok",
            "phase": "screen",
            "p50_us": p50, "gbps": 3 * 4096 * 2 / p50 / 1e3, "samples_us": [p50, p50 * 1.01, p50 * 0.99],
            "seed": 0, "timestamp": f"2026-11-01T{timestamp}:00.000+00:00"}


def _store(path, *rows, peaks_at=None) -> ResultStore:
    store = ResultStore(path)
    for row in rows:
        store.append(row)
    if peaks_at is not None:
        store.save_peaks(ENV, {"copy_gbps": float(peaks_at[:2])}, f"2026-11-01T{peaks_at}:00+00:00")
    return store


def _ids_by_key(path) -> dict:
    db = sqlite3.connect(path)
    try:
        return {key: [i for i, in db.execute("SELECT id FROM trials WHERE trial_key = ? ORDER BY id", (key,))]
                for key, in db.execute("SELECT DISTINCT trial_key FROM trials")}
    finally:
        db.close()


def test_merge_keeps_new_rows_skips_held_ones_and_keeps_sweeps_and_ceilings(tmp_path, capsys):
    a = _store(tmp_path / "a.sqlite", _row("k1", "10:00", 5.0), _row("k2", "10:01", 6.0), peaks_at="09:00")
    a.close()
    # b: another job that reused k1 from the store of record (copied into its store, adopted by its
    # sweep s2) and measured k3; a copy of one measurement is one row after the merge.
    b = _store(tmp_path / "b.sqlite", _row("k3", "11:00", 7.0, sweep="s2"))
    b.merge_from(tmp_path / "a.sqlite", trial_keys={"k1"})
    b.adopt(b.measured(ENV).values(), "s2")
    b.close()
    target = tmp_path / "merged.sqlite"

    assert merge.main([str(tmp_path / "a.sqlite"), str(tmp_path / "b.sqlite"), "--into", str(target)]) == 0
    out = capsys.readouterr().out
    assert "a.sqlite: kept 2 rows (vector_add 2), skipped 0" in out
    assert "b.sqlite: kept 1 rows (vector_add 1), skipped 1" in out
    assert "device ceilings: kept 1, skipped 0" in out and "device ceilings: kept 0, skipped 1" in out
    store = ResultStore(target)
    assert sorted(store.load()["trial_key"]) == ["k1", "k2", "k3"]
    assert sorted(store.load(sweep_id="s1")["trial_key"]) == ["k1", "k2"]
    assert sorted(store.load(sweep_id="s2")["trial_key"]) == ["k1", "k3"]  # the reuse kept its sweep
    assert store.peaks(ENV) == {"copy_gbps": 9.0}
    store.close()

    # Merging again adds nothing: every row and ceiling is held already.
    assert merge.main([str(tmp_path / "a.sqlite"), str(tmp_path / "b.sqlite"), "--into", str(target)]) == 0
    assert "kept 0 rows, skipped 4 (already held), from 2 of 2 source(s)" in capsys.readouterr().out
    assert {key: len(ids) for key, ids in _ids_by_key(target).items()} == {"k1": 1, "k2": 1, "k3": 1}


def test_after_a_merge_the_newest_row_of_a_trial_still_wins(tmp_path, capsys):
    # The target measured k1 at 12:00 (sweep late); a job store brings k1 from 10:00 and 13:00.
    target = _store(tmp_path / "target.sqlite", _row("k1", "12:00", 5.0, sweep="late"), peaks_at="12:00")
    target.close()
    job = _store(tmp_path / "job.sqlite", _row("k1", "10:00", 9.0), _row("k1", "13:00", 4.0),
                 peaks_at="10:00")
    job.close()

    assert merge.main([str(tmp_path / "job.sqlite"), "--into", str(tmp_path / "target.sqlite")]) == 0
    assert "1 rows of the target inserted again after older arrivals" in capsys.readouterr().out
    store = ResultStore(tmp_path / "target.sqlite")
    rows = store.load().sort_values("id")
    assert rows["timestamp"].is_monotonic_increasing  # ids follow time within the trial
    assert list(rows["p50_us"]) == [9.0, 5.0, 4.0]
    newest = store.measured(ENV)["k1"]
    assert rows.set_index("id").loc[newest, "p50_us"] == 4.0  # resume takes the 13:00 row
    assert list(store.load(sweep_id="late")["p50_us"]) == [5.0]  # the moved row kept its sweep
    assert store.peaks(ENV) == {"copy_gbps": 12.0}  # the ceilings measured last still win
    store.close()


def test_a_row_arriving_twice_is_kept_once_and_a_moved_row_stays_after_arrivals_it_ties(tmp_path, capsys):
    # The target measured k1 at 11:00; a job store brings k1 from 10:00 (twice: one measurement) and 11:00.
    _store(tmp_path / "target.sqlite", _row("k1", "11:00", 5.0, sweep="late")).close()
    _store(tmp_path / "job.sqlite", _row("k1", "10:00", 9.0), _row("k1", "10:00", 9.0),
           _row("k1", "11:00", 4.0)).close()

    assert merge.main([str(tmp_path / "job.sqlite"), "--into", str(tmp_path / "target.sqlite")]) == 0
    out = capsys.readouterr().out
    assert "kept 2 rows (vector_add 2), skipped 1 the target already held; 2 sweep memberships added" in out
    assert "1 rows of the target inserted again after older arrivals" in out
    store = ResultStore(tmp_path / "target.sqlite")
    rows = store.load().sort_values("id")
    assert list(rows["p50_us"]) == [9.0, 4.0, 5.0]  # the target's 11:00 row after the arrival it ties
    assert list(store.load(sweep_id="late")["p50_us"]) == [5.0]
    store.close()


def test_merged_stores_of_two_gpu_models_export_a_section_each(tmp_path, capsys):
    for name, gpu, fast in (("h100", H100, 128), ("h200", H200, 512)):
        rows = [_row(f"{name}-{block}", "10:00", 4.0 if block == fast else 6.0, gpu=gpu, block=block)
                for block in (128, 256, 512)]
        _store(tmp_path / f"{name}.sqlite", *rows).close()
    target = tmp_path / "results.sqlite"
    sources = [str(tmp_path / "h100.sqlite"), str(tmp_path / "h200.sqlite")]
    assert merge.main(sources + ["--into", str(target)]) == 0

    out_dir = tmp_path / "exports"
    assert export.main(["--store", str(target), "--kernel", "vector_add", "--out-dir", str(out_dir)]) == 0
    files = sorted(p.name for p in (tmp_path / "exports").iterdir())
    assert files == ["vector_add_configs.json", "vector_add_configs.py"]  # one file pair, a section per GPU
    gpus = json.loads((out_dir / "vector_add_configs.json").read_text())["gpus"]
    assert sorted(gpus) == sorted([H100, H200])
    for gpu, fast in ((H100, 128), (H200, 512)):
        assert gpus[gpu]["3.6.0"]["trials"] == 3  # one GPU's rows only
        (best,) = gpus[gpu]["3.6.0"]["dtypes"]["float16"]["best_by_shape"]
        assert best["config"]["BLOCK_SIZE"] == fast


def test_a_source_that_is_not_a_store_is_reported_and_the_others_merged(tmp_path, capsys):
    _store(tmp_path / "good.sqlite", _row("k1", "10:00", 5.0)).close()
    (tmp_path / "notes.sqlite").write_text("not a database")
    code = merge.main([str(tmp_path / "notes.sqlite"), str(tmp_path / "missing.sqlite"),
                       str(tmp_path / "good.sqlite"), "--into", str(tmp_path / "merged.sqlite")])
    captured = capsys.readouterr()
    assert code == 1
    assert "notes.sqlite: not merged" in captured.err and "missing.sqlite: not merged" in captured.err
    assert "kept 1 rows, skipped 0 (already held), from 1 of 3 source(s)" in captured.out
    assert _ids_by_key(tmp_path / "merged.sqlite") == {"k1": [1]}


def test_columns_of_another_version_are_filled_or_named(tmp_path, capsys):
    store = _store(tmp_path / "old.sqlite", _row("k1", "10:00", 5.0))
    store.close()
    db = sqlite3.connect(tmp_path / "old.sqlite")
    db.execute("ALTER TABLE trials DROP COLUMN noise")  # written before `noise` existed
    db.execute("ALTER TABLE trials ADD COLUMN future_metric REAL")  # or by a newer version
    db.commit()
    db.close()
    assert merge.main([str(tmp_path / "old.sqlite"), "--into", str(tmp_path / "merged.sqlite")]) == 0
    assert "columns this version does not know, not copied: future_metric" in capsys.readouterr().out
    merged = ResultStore(tmp_path / "merged.sqlite")
    row = merged.load().iloc[0]
    merged.close()
    assert row["p50_us"] == 5.0 and pd.isna(row["noise"])


def test_a_store_is_not_merged_into_itself(tmp_path):
    store = _store(tmp_path / "a.sqlite", _row("k1", "10:00", 5.0))
    with pytest.raises(ValueError, match="into itself"):
        store.merge_from(tmp_path / "a.sqlite")
    store.close()


@pytest.mark.parametrize("column, value, field", [
    ("samples_us", b"\x01\x02\x03\x04\x05", "samples_us: a blob of 5 bytes"),
    ("config", "{BLOCK_SIZE: 256", "config: not JSON"),
    ("shape", "4096]", "shape: not JSON"),
    ("kernel", "../../vector_add", "kernel:"),
    ("sweep_id", "s1/..", "sweep_id:"),
    ("status", "fine", "status:"),
])
def test_a_row_no_sweep_writes_refuses_the_merge_before_anything_is_written(tmp_path, capsys, column,
                                                                              value, field):
    """A store of someone else's: its second row malformed. The merge names the store, the row and the
    field in one line, exit 2, and the target is left as it was, though the first source is sound."""
    _store(tmp_path / "good.sqlite", _row("k1", "10:00", 5.0)).close()
    _store(tmp_path / "theirs.sqlite", _row("k2", "10:00", 5.0), _row("k3", "10:01", 6.0)).close()
    db = sqlite3.connect(tmp_path / "theirs.sqlite")
    db.execute(f"UPDATE trials SET {column} = ? WHERE id = 2", (value,))
    db.commit()
    db.close()
    target = tmp_path / "merged.sqlite"
    _store(target, _row("k0", "09:00", 4.0)).close()
    before = target.read_bytes()
    code = merge.main([str(tmp_path / "good.sqlite"), str(tmp_path / "theirs.sqlite"), "--into", str(target)])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    (line,) = captured.err.splitlines()
    assert "theirs.sqlite: row 2 of sweep" in line and field in line and "nothing was merged" in line
    assert target.read_bytes() == before and _ids_by_key(target) == {"k0": [1]}


def test_a_malformed_job_store_of_a_multirun_is_named_and_the_others_merged(tmp_path, capsys):
    """merge_stores (the multirun's end): a job store holding a row no sweep writes is not merged, in one
    line naming the row, and the other job stores are."""
    _store(tmp_path / "good.sqlite", _row("k1", "10:00", 5.0)).close()
    _store(tmp_path / "bad.sqlite", _row("k2", "10:00", 5.0)).close()
    db = sqlite3.connect(tmp_path / "bad.sqlite")
    db.execute("UPDATE trials SET shape = 'x' WHERE id = 1")
    db.commit()
    db.close()
    _, failed = merge.merge_stores([tmp_path / "bad.sqlite", tmp_path / "good.sqlite"], tmp_path / "m.sqlite")
    assert failed == [str(tmp_path / "bad.sqlite")]
    said = "bad.sqlite: row 1 of sweep 's1' (a row no sweep writes): shape: not JSON"
    assert said in capsys.readouterr().err
    assert _ids_by_key(tmp_path / "m.sqlite") == {"k1": [1]}

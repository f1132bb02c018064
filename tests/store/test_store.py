"""The results store: round trip, two writers at once, a writer killed mid-sweep, resume keys, parquet."""
import multiprocessing
import sqlite3

import numpy as np
import pandas as pd
import pytest

from triton_sweep.model.columns import ENV_KEY
from triton_sweep.outputs.parquet import write_parquet
from triton_sweep.store.result_store import ResultStore

ENV = {"backend": "cuda", "timing_method": "cupti/read-flush", "gpu_name": "NVIDIA H200",
       "driver_version": "580.1", "torch_version": "2.11", "triton_version": "3.6", "kernel_hash": "abc123"}


def _row(index: int, **changes) -> dict:
    return {**ENV, "trial_key": f"key{index}", "sweep_id": "s1", "kernel": "softmax", "provider": "triton",
            "shape": (4, 8), "dtype": "float16", "config": {"BLOCK_SIZE": 8, "num_warps": index},
            "status": "ok", "p50_us": 10.0 + index, "samples_us": [10.0 + index, 11.0], "throttled": False,
            "seed": 0, "timestamp": "2026-11-22T00:00:00", **changes}


def test_round_trip_keeps_every_field(tmp_path):
    store = ResultStore(tmp_path / "r.sqlite")
    store.append(_row(1, event_samples_us=[14.5, 13.5], event_p50_us=14.0, kernels_per_call=1.0,
                      timers_disagree=True))
    frame = store.load()
    assert frame.loc[0, "shape"] == "[4, 8]" and frame.loc[0, "config"] == '{"BLOCK_SIZE": 8, "num_warps": 1}'
    np.testing.assert_array_equal(frame.loc[0, "samples_us"], np.array([11.0, 11.0], dtype=np.float32))
    np.testing.assert_array_equal(frame.loc[0, "event_samples_us"], np.array([14.5, 13.5], dtype=np.float32))
    assert frame["throttled"].tolist() == [False] and frame["timers_disagree"].tolist() == [True]
    assert frame.loc[0, "gpu_name"] == "NVIDIA H200" and frame.loc[0, "timing_method"] == "cupti/read-flush"


def test_a_store_from_before_the_timing_method_measures_everything_again(tmp_path):
    # The store as the previous version wrote it: no timing_method column in either table.
    path = tmp_path / "old.sqlite"
    ResultStore(path).close()
    db = sqlite3.connect(path)
    db.execute("DROP INDEX trials_by_key")
    for table in ("trials", "device_peaks"):
        db.execute(f"ALTER TABLE {table} DROP COLUMN timing_method")
    db.execute("CREATE INDEX trials_by_key ON trials (trial_key, backend, gpu_name, driver_version, "
               "torch_version, triton_version, kernel_hash)")  # the old index, without the column
    db.execute("INSERT INTO device_peaks (gpu_name, driver_version, torch_version, peaks, measured_at) "
               "VALUES ('NVIDIA H200', '580.1', '2.11', '{\"copy_gbps\": 4226}', 'then')")
    db.commit()
    db.close()
    store = ResultStore(path)
    old = store.append(_row(1, timing_method=None))
    assert store.peaks({**ENV, "timing_method": None}) == {"copy_gbps": 4226}
    # Rows and ceilings of the event timer after a writing flush are neither reused nor mixed in.
    assert store.peaks(ENV) is None and store.measured(ENV) == {}
    assert store.measured({**ENV, "timing_method": None}) == {"key1": old}
    store.save_peaks(ENV, {"copy_gbps": 4251}, "now")
    assert store.peaks(ENV) == {"copy_gbps": 4251}


def test_measured_matches_the_whole_environment(tmp_path):
    store = ResultStore(tmp_path / "r.sqlite")
    first = store.append(_row(1))
    newer = store.append(_row(1, p50_us=9.0, sweep_id="s2"))  # force=true measured it again
    store.append(_row(2, driver_version=None))
    assert store.measured(ENV) == {"key1": newer} and first < newer
    assert store.measured({**ENV, "driver_version": None}) == {"key2": first + 2}
    for name in ENV_KEY:
        assert store.measured({**ENV, name: "other"}) == {}  # a different GPU or version never matches
    store.adopt([first], "s3")
    assert list(store.load(sweep_id="s3")["id"]) == [first]


def _write_rows(path, writer: int, count: int) -> None:
    store = ResultStore(path)
    for index in range(count):
        store.append(_row(writer * 1000 + index, sweep_id=f"writer{writer}"))
    store.close()


def test_two_writers_at_once_lose_nothing(tmp_path):
    path = tmp_path / "r.sqlite"
    ResultStore(path).close()
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_write_rows, args=(path, w, 200)) for w in (1, 2)]
    for process in writers:
        process.start()
    for process in writers:
        process.join(120)
        assert process.exitcode == 0
    frame = ResultStore(path).load()
    assert len(frame) == 400 and frame["trial_key"].is_unique
    assert frame.groupby("sweep_id").size().to_dict() == {"writer1": 200, "writer2": 200}
    assert len(ResultStore(path).load(sweep_id="writer2")) == 200


def _write_forever(path, started) -> None:
    store = ResultStore(path)
    index = 0
    while True:
        store.append(_row(index))
        index += 1
        if index == 20:
            started.set()


def test_a_killed_writer_loses_at_most_the_row_in_flight(tmp_path):
    path = tmp_path / "r.sqlite"
    context = multiprocessing.get_context("spawn")
    started = context.Event()
    process = context.Process(target=_write_forever, args=(path, started))
    process.start()
    assert started.wait(120)
    process.kill()  # SIGKILL: no chance to commit or close
    process.join()
    frame = ResultStore(path).load()
    assert len(frame) >= 20
    assert list(frame["trial_key"]) == [f"key{i}" for i in range(len(frame))]  # a gap-free prefix
    assert frame["p50_us"].notna().all()


def test_parquet_per_sweep(tmp_path):
    store = ResultStore(tmp_path / "r.sqlite")
    store.append(_row(1))
    store.append(_row(2, status="incorrect", p50_us=None, samples_us=None, message="2 of 32 wrong"))
    (tmp_path / "outside").write_text("precious")
    (tmp_path / "s1.parquet").symlink_to(tmp_path / "outside")  # replaced, never written through
    path = write_parquet(store.load(sweep_id="s1"), tmp_path / "s1.parquet")
    assert not path.is_symlink() and (tmp_path / "outside").read_text() == "precious"
    back = pd.read_parquet(path)
    assert list(back["status"]) == ["ok", "incorrect"]
    assert list(back["samples_us"][0]) == pytest.approx([11.0, 11.0])
    assert back["samples_us"][1] is None


def test_resume_retries_transient_failures_only(tmp_path):
    store = ResultStore(tmp_path / "r.sqlite")
    kept = {status: store.append(_row(i, status=status)) for i, status in
            enumerate(["ok", "incorrect", "compile_error", "pruned", "timeout", "crashed", "oom",
                       "launch_error", "reference_error"])}
    later = store.append(_row(4, status="ok"))  # the timed-out trial measured fine on a later run
    assert store.measured(ENV) == {"key0": kept["ok"], "key1": kept["incorrect"],
                                   "key2": kept["compile_error"], "key3": kept["pruned"], "key4": later,
                                   "key7": kept["launch_error"], "key8": kept["reference_error"]}


def test_a_field_the_row_record_does_not_declare_is_an_error_not_dropped(tmp_path):
    from triton_sweep.model.columns import UnknownField

    store = ResultStore(tmp_path / "r.sqlite")
    row = {"trial_key": "k", "sweep_id": "s", "kernel": "softmax", "provider": "triton", "shape": [4, 4],
           "dtype": "float16", "config": {}, "status": "ok", "backend": "cuda", "gpu_name": "g",
           "torch_version": "t", "triton_version": "t", "kernel_hash": "h", "seed": 0, "timestamp": "now"}
    with pytest.raises(UnknownField, match="p99_us, sticky"):
        store.append({**row, "p99_us": 1.0, "sticky": True})
    assert store.load().empty  # nothing half-written
    store.append(row)
    assert len(store.load()) == 1
    store.close()


def test_rows_appended_together_are_all_written_or_none(tmp_path):
    """append_many (the pruned configs of a batch): one transaction, the ids in order, each row a member of
    its sweep; a row the store refuses part-way (here NULL in a NOT NULL column, past the first two) leaves
    none of them written, nor their memberships."""
    store = ResultStore(tmp_path / "r.sqlite")
    ids = store.append_many([_row(1, status="pruned", p50_us=None, samples_us=None), _row(2), _row(3)])
    assert ids == sorted(ids) and len(set(ids)) == 3
    assert store.load(sweep_id="s1")["trial_key"].tolist() == ["key1", "key2", "key3"]
    with pytest.raises(sqlite3.IntegrityError):
        store.append_many([_row(4, sweep_id="s2"), _row(5, sweep_id="s2"),
                           _row(6, sweep_id="s2", kernel=None)])
    assert len(store.load()) == 3 and store.load(sweep_id="s2").empty
    assert store.append_many([]) == [] and len(store.load()) == 3
    store.close()


def test_columns_read_as_categories_hold_the_values_read_as_text():
    """load(categories=...): each chunk's categoricals joined into one set of categories, a column NULL
    in a whole chunk too; the values, the missing ones included, are those read as text."""
    from triton_sweep.store.result_store import _frame

    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (id INTEGER, gpu TEXT, host TEXT)")
    db.executemany("INSERT INTO t VALUES (?, ?, ?)",
                   [(1, "H100", None), (2, "H100", None), (3, "H200", "b"), (4, None, "a"), (5, "B200", "a")])
    text = _frame(db.execute("SELECT * FROM t ORDER BY id"), set(), chunk=2)
    kept = _frame(db.execute("SELECT * FROM t ORDER BY id"), {"gpu", "host"}, chunk=2)
    assert [str(kept[name].dtype) for name in kept] == ["int64", "category", "category"]
    assert sorted(kept["gpu"].cat.categories) == ["B200", "H100", "H200"]
    assert list(kept["gpu"].cat.categories) == ["B200", "H100", "H200"]  # as text sorts: a groupby's order
    plain = lambda column: [None if pd.isna(v) else v for v in column]
    assert all(plain(kept[name]) == plain(text[name]) for name in ("gpu", "host"))


def test_a_text_column_holding_a_blob_reads_as_categories_as_it_reads_as_text():
    """A store another tool wrote may hold a blob in a TEXT column (SQLite keeps what it is given): the
    chunks' categories are joined without ordering them, which bytes beside text would refuse."""
    from triton_sweep.store.result_store import _frame

    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (id INTEGER, gpu TEXT)")
    db.executemany("INSERT INTO t VALUES (?, ?)", [(1, "H100"), (2, "H100"), (3, b"\x00H200")])
    kept = _frame(db.execute("SELECT * FROM t ORDER BY id"), {"gpu"}, chunk=2)
    text = _frame(db.execute("SELECT * FROM t ORDER BY id"), set(), chunk=2)
    assert kept["gpu"].tolist() == text["gpu"].tolist() == ["H100", "H100", b"\x00H200"]

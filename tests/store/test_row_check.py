"""checked_rows checks a store's columns whole (row_model.suspects): it must refuse exactly the rows that
checked_row, one row at a time, refuses, and name the first of them as checked_row does; of a DataFrame,
of (id, dict) pairs, and of (id, values) pairs as a merge reads them."""
import json
import math

import numpy as np
import pandas as pd
import pytest

from triton_sweep.model.columns import COLUMN_NAMES
from triton_sweep.store.row_model import MalformedRow, StoredRow, checked_row, checked_rows, suspects

GOOD = {"sweep_id": "s1", "kernel": "softmax", "provider": "triton", "status": "ok", "phase": "screen",
        "dtype": "float16", "shape": "[4096, 1024]",
        "config": json.dumps({"BLOCK_SIZE": 1024, "num_warps": 4}),
        "p50_us": 12.5, "gbps": 640.0, "gpu_name": "NVIDIA H100", "backend": "cuda",
        "triton_version": "3.6.0", "torch_version": "2.11.0", "driver_version": None, "kernel_hash": "abc",
        "timing_method": "cupti", "samples_us": None, "trial_key": "k"}
NAN, INF = math.nan, math.inf
BROKEN = [  # (field, value): one field of a good row; some of them a sweep does write (accepted)
    ("p50_us", NAN), ("p50_us", INF), ("p50_us", -INF), ("p50_us", -1.0), ("p50_us", 0.0), ("p50_us", "5"),
    ("p50_us", True), ("p50_us", 5), ("p50_us", None), ("gbps", INF), ("gbps", NAN), ("gbps", -3.0),
    ("gbps", "fast"), ("id", True), ("id", 1.5), ("id", "3"),
    ("config", '{"BLOCK_SIZE": 1.5}'), ("config", '{"BLOCK_SIZE": true}'), ("config", '{"BLOCK_SIZE": "64"}'),
    ("config", "{BLOCK_SIZE: 1"), ("config", '{"num_warps": 3}'), ("config", '{"num_stages": 0}'),
    ("config", '{"a-b": 1}'), ("config", "[1]"), ("config", '{"BLOCK_SIZE": 2147483648}'), ("config", None),
    ("config", "{}"), ("shape", "4096]"), ("shape", "[4096, -1]"), ("shape", "[true]"), ("shape", "[1.5]"),
    ("shape", '{"a": 1}'), ("shape", None), ("shape", f"[{2 ** 62}]"), ("shape", "[]"),
    ("kernel", "a/b"), ("kernel", "../../evil"), ("kernel", "class"), ("kernel", ""), ("kernel", None),
    ("kernel", 3), ("kernel", NAN), ("sweep_id", "s1/.."), ("sweep_id", ".."), ("sweep_id", None),
    ("status", "fine"), ("status", "ok "), ("phase", "warm"), ("phase", None), ("phase", NAN),
    ("dtype", "float-16"), ("provider", "x" * 1001), ("provider", 7), ("provider", 7.0),
    ("gpu_name", None), ("backend", b"cuda"), ("triton_version", None), ("torch_version", None),
    ("kernel_hash", 5), ("timing_method", ["cupti"]), ("samples_us", b"\x01\x02\x03"),
    ("samples_us", np.ones(3, np.float32).tobytes()), ("samples_us", np.ones(3, np.float32)),
]


def _per_row(pairs, source="st"):
    """What checked_rows said of (id, row) pairs before it checked columns whole: the first message."""
    for row_id, row in pairs:
        try:
            checked_row({**row, "id": row_id}, f"{source}: row {row_id} of sweep {row.get('sweep_id')!r} "
                                               "(a row no sweep writes)")
        except MalformedRow as error:
            return str(error)
    return None


def _said(check, rows) -> str | None:
    try:
        check(rows, "st")
    except MalformedRow as error:
        return str(error)
    return None


def _pairs(field, value):
    return [(1, dict(GOOD)), (2, {**GOOD, field: value}), (3, dict(GOOD))] if field != "id" else \
        [(1, dict(GOOD)), (value, dict(GOOD)), (3, dict(GOOD))]


@pytest.mark.parametrize("field, value", BROKEN)
def test_the_columns_checked_whole_refuse_the_rows_each_row_checked_alone_refuses(field, value):
    pairs = _pairs(field, value)
    frame = pd.DataFrame.from_records([{**row, "id": i} for i, row in pairs], coerce_float=True)
    fields = [name for name in StoredRow.model_fields if name in frame]
    records = frame[fields].to_dict("records")
    alone = [_per_row([(row["id"], row)]) is not None for row in records]
    assert suspects(frame[fields]).tolist() == alone
    assert _said(checked_rows, frame) == _per_row([(row["id"], row) for row in records])
    assert _said(checked_rows, pairs) == _per_row(pairs)
    full = [(i, {name: row.get(name) for name in COLUMN_NAMES}) for i, row in pairs]  # as a merge reads
    assert _said(lambda rows, source: checked_rows(rows, source, COLUMN_NAMES),
                 [(i, tuple(row.values())) for i, row in full]) == _per_row(full)


def test_the_first_refused_row_is_named_whatever_its_field():
    pairs = [(1, dict(GOOD)), (2, {**GOOD, "p50_us": INF}), (3, {**GOOD, "kernel": "a/b"})]
    frame = pd.DataFrame.from_records([{**row, "id": i} for i, row in reversed(pairs)], coerce_float=True)
    assert "row 3 of sweep 's1' (a row no sweep writes): kernel:" in _said(checked_rows, frame)
    assert "row 2 of sweep 's1' (a row no sweep writes): p50_us:" in _said(checked_rows, pairs)


def test_a_required_column_missing_refuses_the_first_row_and_an_empty_frame_passes():
    frame = pd.DataFrame.from_records([{**GOOD, "id": i} for i in (5, 6)]).drop(columns="gpu_name")
    assert _said(checked_rows, frame).startswith("st: row 5 of sweep 's1' (a row no sweep writes): gpu_name:")
    assert _said(checked_rows, frame.iloc[:0]) is None and _said(checked_rows, []) is None

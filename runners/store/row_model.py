"""What a store's row holds, checked (pydantic, strict) wherever rows of someone else's may arrive: a
merge checks every row it copies (ResultStore.merge_from, before anything is written), the export and
the plots every row they read. Names are Python names (a kernel's names files: heatmap_<kernel>.png,
<kernel>_configs.json), a sweep id a folder name (model/trial.py's checked_name), sizes and launch
options ints, figures finite floats, shape and config their JSON, the status one a trial ends in, and
each samples blob whole float32s. The export's file format (export/fileformat.py) is built of these types.
"""
from __future__ import annotations

import json
import keyword
import math
import operator
from typing import TYPE_CHECKING, Annotated, Literal, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from triton_sweep.measure.check import STATUSES
from triton_sweep.model.columns import SAMPLE_COLUMNS
from triton_sweep.model.trial import NUM_WARPS_ALLOWED, checked_name
from triton_sweep.store.damage import StoreError

if TYPE_CHECKING:  # imported where used: the sweep imports the merge at its start
    import numpy as np
    import pandas as pd


def _python_name(text: str) -> str:
    if not text.isidentifier() or keyword.iskeyword(text):
        raise ValueError(f"{text!r} is not a Python name")
    return text


def _launch_options(config: dict) -> dict:
    if config.get("num_warps", 4) not in NUM_WARPS_ALLOWED:
        raise ValueError(f"num_warps {config['num_warps']} is not one of {NUM_WARPS_ALLOWED}")
    if not 1 <= config.get("num_stages", 1) <= 16:
        raise ValueError(f"num_stages {config['num_stages']} is not in 1..16")
    return config


Name = Annotated[StrictStr, AfterValidator(_python_name)]
Text = Annotated[StrictStr, Field(max_length=1000)]
FolderName = Annotated[Text, AfterValidator(lambda text: checked_name(text, "a folder's name"))]
Size = Annotated[StrictInt, Field(ge=0, lt=2 ** 62)]
Figure = Annotated[float, Field(allow_inf_nan=False)]
Latency = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Shape = list[Size]
# A triton.Config: meta-parameters (BLOCK sizes, ...) and launch options, all ints.
Config = Annotated[dict[Name, Annotated[StrictInt, Field(gt=-2 ** 31, lt=2 ** 31)]],
                   AfterValidator(_launch_options)]


class Model(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")  # fields not checked here reach no code


class Provenance(Model):
    """Where and how rows were measured: the fields an export's section and a store's row both carry."""

    triton_version: Text
    torch_version: Optional[Text] = None
    driver_version: Optional[Text] = None
    cuda_version: Optional[Text] = None
    kernel_hash: Optional[Text] = None
    timing_method: Optional[Text] = None


class StoredRow(Provenance):
    """The fields of a store's row that a merge, the export and the plots read, shape and config parsed
    from their JSON."""

    id: StrictInt
    sweep_id: FolderName
    kernel: Name
    provider: Text
    status: Literal[STATUSES]
    phase: Optional[Literal["screen", "final"]] = None
    dtype: Name
    shape: Shape
    config: Config
    p50_us: Optional[Latency] = None
    gbps: Optional[Figure] = None
    gpu_name: Text
    backend: Text


class MalformedRow(StoreError):
    """A store's row that no sweep writes; the message names the store, the row and the field."""


def first_error(error: ValidationError) -> str:
    """The first field a validation refused, what is wrong with it and what it holds, in one line."""
    first = error.errors()[0]
    field = ".".join(map(str, first["loc"])) or "the whole"
    got = repr(first.get("input"))
    return f"{field}: {first['msg']} (it holds {got[:80]}{'...' if len(got) > 80 else ''})"


def checked_row(row: dict, where: str) -> None:
    """MalformedRow naming `where` (the store and row) and the field, unless `row` (as stored: shape and
    config JSON text, samples bytes or their float32 arrays) holds what a sweep writes."""
    row = {name: None if isinstance(value, float) and math.isnan(value) else value
           for name, value in row.items()}
    for name in ("shape", "config"):
        try:
            row[name] = json.loads(row[name])
        except (TypeError, ValueError, RecursionError):
            raise MalformedRow(f"{where}: {name}: not JSON (it holds {str(row[name])[:80]!r})") from None
    for name in SAMPLE_COLUMNS:
        if isinstance(row.get(name), bytes) and len(row[name]) % 4:
            raise MalformedRow(f"{where}: {name}: a blob of {len(row[name])} bytes, not whole float32 "
                               "samples")
    try:
        StoredRow.model_validate(row)
    except ValidationError as error:
        raise MalformedRow(f"{where}: {first_error(error)}") from None


def checked_rows(rows, source: str, names: Optional[tuple] = None) -> None:
    """checked_row on each (id, row) of `rows` (a dict, or with `names` the values of those fields), on each
    row of a DataFrame of a store's rows, or of a store's table (sources.StoredColumns: a merge's source,
    before any write); `source`:
    the store, as the message names it. The columns are checked whole (suspects); a row they refuse is
    checked alone, in row order, for the message."""
    import numpy as np
    import pandas as pd

    if hasattr(rows, "columns"):
        frame = rows[[name for name in StoredRow.model_fields if name in rows]]
        row_at = lambda i: frame.iloc[[i]].to_dict("records")[0]
    elif hasattr(rows, "row_at"):  # a store's table, read a column at a time (sources.StoredColumns)
        frame, row_at = rows, rows.row_at
    else:
        rows = list(rows)
        frame = _Columns(rows, names)
        row_at = lambda i: {**(dict(zip(names, rows[i][1])) if names else rows[i][1]), "id": rows[i][0]}
    for i in np.flatnonzero(suspects(frame)):
        row = row_at(i)
        checked_row(row, f"{source}: row {row['id']} of sweep {row.get('sweep_id')!r} (a row no sweep "
                         "writes)")


class _Columns:
    """The checked fields of (id, row) pairs (checked_rows's) as suspects reads a frame's columns: each
    built when read, of objects, None where a row lacks the field (a million rows: no frame of them)."""

    def __init__(self, rows: list, names: Optional[tuple]):
        self.values = [row for _, row in rows]
        self.at, self.ids = {name: i for i, name in enumerate(names or ())}, [row_id for row_id, _ in rows]

    def __len__(self) -> int:
        return len(self.values)

    def __contains__(self, name: str) -> bool:
        return True

    def __getitem__(self, name: str) -> pd.Series:
        import pandas as pd

        if name == "id":
            column = self.ids
        elif self.at:
            column = list(map(operator.itemgetter(self.at[name]), self.values)) if name in self.at else \
                [None] * len(self)
        else:
            column = [row.get(name) for row in self.values]
        return pd.Series(column, dtype=object)


# Fields checked a column at once where its values are all of one kind (pandas' infer_dtype): the values
# the field accepts, of a float array (None: all). Any other column: each distinct value validated once.
RULES = {"id": ("integer", None), "p50_us": ("floating", lambda a: (a > 0) & (a < math.inf)),
         "gbps": ("floating", lambda a: abs(a) < math.inf)}
ONE_TYPE = ("string", "integer", "floating", "bytes", "empty")  # kinds whose values are of one type
DISTINCT_TYPES = (str, int, float, bytes)  # validated a distinct value at once; a row of another: a suspect


def suspects(frame: pd.DataFrame | _Columns) -> np.ndarray:
    """Which rows of `frame` (a store's columns, as checked_rows gives them) checked_row may refuse: each
    field's column checked at once, a required field no column holds refusing every row."""
    import numpy as np
    import pandas as pd

    bad = np.zeros(len(frame), bool)
    for name, field in StoredRow.model_fields.items():
        if name not in frame:
            bad |= field.is_required()
        elif len(frame):
            bad |= _refused(name, frame[name].to_numpy())
    for name in [name for name in SAMPLE_COLUMNS if name in frame]:
        values = frame[name].to_numpy()
        at = np.flatnonzero(~pd.isna(values))  # a merge reads only the torn blobs (sources.StoredColumns)
        bad[at] |= np.fromiter((isinstance(v, bytes) and len(v) % 4 != 0 for v in values[at]), bool, len(at))
    return bad


def _refused(name: str, values: np.ndarray) -> np.ndarray:
    """The rows of one field's column that checked_row refuses (or may: a type not of DISTINCT_TYPES)."""
    import numpy as np
    import pandas as pd

    missing = pd.isna(values)
    bad = missing & (missing.any() and not _accepts(name, None))  # NaN reads as None
    present = np.flatnonzero(~missing)
    kind = pd.api.types.infer_dtype(values[present], skipna=False)
    if name in RULES and kind == RULES[name][0]:
        accepts = RULES[name][1]
        bad[present] = False if accepts is None else ~accepts(values[present].astype(float))
        return bad
    types = None if kind in ONE_TYPE else np.array([type(v) for v in values[present]], dtype=object)
    for of_type in [None] if types is None else set(types):
        at = present if types is None else present[types == of_type]
        if of_type is not None and of_type not in DISTINCT_TYPES:
            bad[at] = True
            continue
        part = pd.Series(values[at], dtype=values.dtype)
        refused = [value for value in part.unique().tolist() if not _accepts(name, value)]
        bad[at] |= part.isin(refused).to_numpy() if refused else False
    return bad


_BLANK = StoredRow.model_construct()  # validate_assignment checks one field as model_validate does


def _accepts(name: str, value) -> bool:
    """Whether checked_row accepts `value` (as stored: shape and config their JSON) in field `name`."""
    if name in ("shape", "config"):
        try:
            value = json.loads(value)
        except (TypeError, ValueError, RecursionError):
            return False
    try:
        StoredRow.__pydantic_validator__.validate_assignment(_BLANK, name, value)
    except ValidationError:
        return False
    return True

"""The export's file format: `<kernel>_configs.json`, the data of record, one file per kernel for all GPUs
and Triton versions (format 3: gpus -> Triton version -> section). The section of an export's GPU and
Triton version replaces the one exported before; the other sections are kept from the existing JSON
(`--no-merge` / export.merge=false: rewrite from this export alone), so that a repository keeps working
configs for each version it meets. Files of format 2 (one section a GPU) still load (`upgraded`).
write_export writes the merged JSON, then the .py generated from it (render.py), each whole (model/files.py).

An export's JSON may come from someone else (a vendored file, another GPU's section merged in): every file
read, and every file about to be written, is checked against the format's model below (pydantic, strict,
of store/row_model.py's types: names are Python names, sizes and launch options ints, figures finite
floats, text strings) before any of it reaches generated code, a kernel launch or a path; so is every row
of a store an export reads (row_model.StoredRow).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal, Optional

from pydantic import BaseModel, Field, StrictBool, StrictInt, ValidationError, model_validator

from triton_sweep.export.render import render_module
from triton_sweep.export.settings import ExportError
from triton_sweep.model.files import write_atomic
from triton_sweep.store import row_model
from triton_sweep.store.row_model import Config, Figure, Latency, Model, Name, Provenance, Shape, Size, Text

FORMAT = 3  # of the JSON; 2 had one section a GPU, 1 one file a GPU with the configs ok at every shape


class Figures(Model):
    p50_us: Latency
    repetitions: Optional[Size] = None
    rep_noise: Optional[Figure] = None
    rep_p50s_us: Optional[list[Figure]] = None
    p50_precision: Optional[Figure] = None


class Verified(Figures):
    shape: Shape


class Listed(Model):
    config: Config
    ok_at: list[Verified]
    covers: list[Shape] = []


class Best(Verified):
    config: Config
    gbps: Optional[Figure] = None
    fastest_p50_us: Figure
    list_p50_us: Figure
    list_config: Optional[Config] = None
    baselines: dict[Text, Figures] = {}
    configs_measured: Optional[Size] = None  # how many configs were measured at the shape
    configs_planned: Optional[Size] = None  # of how many that passed the constraints


class LeaveOneOut(Model):
    aligned_apart: StrictBool = False


class OfDtype(Model):
    configs: list[Listed]
    best_by_shape: list[Best]
    leave_one_out: Optional[LeaveOneOut] = None
    calls: Optional[dict[Text, Size]] = None
    weighted_loss: Optional[Figure] = None


class Section(Provenance):
    backend: Optional[Literal["interpret"]] = None  # the interpreter's timings (export --interpreter)
    sweep_ids: list[Text]
    exported_at: Text
    trials: Size
    tolerance: Annotated[float, Field(ge=0, lt=1)]
    dtypes: dict[Name, OfDtype]


class ExportFile(Model):
    format: StrictInt
    kernel: Name
    dims: list[Name]
    key: dict[Name, Name] = {}
    gpus: dict[Text, dict[Text, Section]]

    @model_validator(mode="after")
    def _key_names_dims(self):
        for argument, dim in self.key.items():
            if dim not in self.dims:
                raise ValueError(f"key {argument}={dim}: {dim!r} is not one of the dims {self.dims}")
        return self


def validated(data, where: str, model: type[BaseModel] = ExportFile):
    """`data` (by default an export's JSON, current format) if it holds to the model; else ExportError
    naming `where` (a file, a store's row), the field and what is wrong with it, in one line."""
    try:
        model.model_validate(data)
    except ValidationError as error:
        raise ExportError(f"{where}: {row_model.first_error(error)}") from None
    return data


def checked_rows(rows, source: str) -> None:
    """ExportError naming the store (`source`), the row, its sweep and the field, for the first row of
    `rows` (a DataFrame of a store's rows) whose fields are not what a sweep writes (store/row_model.py)."""
    try:
        row_model.checked_rows(rows, source)
    except row_model.MalformedRow as error:
        raise ExportError(str(error)) from None


def _version_of(section: dict) -> str:
    version = section.get("triton_version")
    return version if isinstance(version, str) else repr(version)  # the section's check names it


def upgraded(data: dict) -> dict:
    """An export's data in the current format: format 2 (gpus -> section) files each section under its
    Triton version (gpus -> version -> section)."""
    if data.get("format") == 2:
        gpus = {gpu: {_version_of(section): section} for gpu, section in data["gpus"].items()}
        return {**data, "format": FORMAT, "gpus": gpus}
    return data


def read_export(path: str | Path) -> dict:
    """An export's JSON (format 2 or 3), in the current format; ExportError naming the file otherwise."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as error:  # ValueError: not JSON, not UTF-8
        raise ExportError(f"{path}: not a readable export ({error})") from None
    if not isinstance(data, dict) or data.get("format") not in (2, FORMAT) or not isinstance(
            data.get("gpus"), dict) or not all(isinstance(s, dict) for s in data["gpus"].values()):
        raise ExportError(f"{path}: not an export of format 2 or {FORMAT} "
                          "(runners/export/fileformat.py)")
    return validated(upgraded(data), str(path))


def sections(data: dict):
    """(gpu, Triton version, section) of every section of an export, in file order."""
    for gpu, versions in data["gpus"].items():
        for version, section in versions.items():
            yield gpu, version, section


def merged(path: Path, kernel: str, dims: tuple, merge: bool) -> dict:
    """The sections to keep from an existing JSON export of the kernel."""
    if not merge or not path.exists():
        return {}
    how = "move it away, or export with --no-merge (export.merge=false)"
    try:
        data = read_export(path)
    except ExportError as error:
        raise ExportError(f"cannot merge into {error}; {how}") from None
    if data.get("kernel") != kernel or tuple(data.get("dims", ())) != dims:
        raise ExportError(f"cannot merge into {path}: it holds kernel {data.get('kernel')!r}, dims "
                          f"{data.get('dims')}, not {kernel!r}, {list(dims)}; {how}")
    return data


def write_export(kernel: str, new: dict[str, dict], out_dir: str | Path, dims: tuple, key: dict | None,
                 merge: bool = True) -> list[Path]:
    """Write <kernel>_configs.json (the sections of this export, gpu -> section, each filed under its
    Triton version, over those kept from the existing file) and the .py generated from it; returns
    their paths."""
    out_dir = Path(out_dir)
    json_path = out_dir / f"{kernel}_configs.json"
    existing = merged(json_path, kernel, dims, merge)
    gpus: dict[str, dict] = {}
    for gpu, version, section in sections(existing) if existing else ():
        if not (gpu in new and new[gpu]["triton_version"] == version):
            print(f"note: {json_path.name} keeps the configs of {gpu!r}, Triton {version!r}, exported "
                  f"{section['exported_at']!r}")
            gpus.setdefault(gpu, {})[version] = section
    for gpu, section in new.items():
        gpus.setdefault(gpu, {})[section["triton_version"]] = section
    data = {"format": FORMAT, "kernel": kernel, "dims": list(dims),
            "key": key if key else existing.get("key", {}),
            "gpus": {gpu: dict(sorted(gpus[gpu].items())) for gpu in sorted(gpus)}}
    text = json.dumps(data, indent=1)
    validated(json.loads(text), f"{json_path} as it would be written")  # nothing written otherwise
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(json_path, text)
    py_path = out_dir / f"{kernel}_configs.py"
    write_atomic(py_path, render_module(json.loads(text), json_path.name))  # from the JSON as written
    return [py_path, json_path]

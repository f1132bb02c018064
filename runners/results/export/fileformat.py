"""The export's file format: `<kernel>_configs.json`, the data of record, one file per kernel for all GPUs
and Triton versions (format 3: gpus -> Triton version -> section). The section of an export's GPU and
Triton version replaces the one exported before; the other sections are kept from the existing JSON
(`--no-merge` / export.merge=false: rewrite from this export alone), so that a repository keeps working
configs for each version it meets. Files of format 2 (one section a GPU) still load: `upgraded` files each
section under its Triton version. The .py is generated from the merged JSON (render.py).
"""
from __future__ import annotations

import json
from pathlib import Path

from runners.results.export.settings import ExportError

FORMAT = 3  # of the JSON; 2 had one section a GPU, 1 one file a GPU with the configs ok at every shape


def upgraded(data: dict) -> dict:
    """An export's data in the current format: format 2 (gpus -> section) files each section under its
    Triton version (gpus -> version -> section)."""
    if data.get("format") == 2:
        gpus = {gpu: {section["triton_version"]: section} for gpu, section in data["gpus"].items()}
        return {**data, "format": FORMAT, "gpus": gpus}
    return data


def read_export(path: str | Path) -> dict:
    """An export's JSON (format 2 or 3), in the current format; ExportError naming the file otherwise."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ExportError(f"{path}: not a readable export ({error})") from None
    if not isinstance(data, dict) or data.get("format") not in (2, FORMAT) or "gpus" not in data:
        raise ExportError(f"{path}: not an export of format 2 or {FORMAT} "
                          "(runners/results/export/fileformat.py)")
    return upgraded(data)


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

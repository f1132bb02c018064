"""The program's own kernel, for a replay (runners/capture/replay.py): its @triton.jit function and the
@triton.heuristics around it, imported from the module a launch record names (a script loaded from its
file under another name, so its `if __name__ == "__main__":` part does not run), and the text of that
file for the kernel's hash."""
from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Optional

from triton_sweep.model.trial import ConfigError


class LoadedKernel:
    """A replayed kernel: its @triton.jit function, and the heuristics around it (outermost first)."""

    def __init__(self, jit, heuristics: list):
        self.jit, self.heuristics = jit, heuristics


def load_kernel(record: dict) -> LoadedKernel:
    """The @triton.jit function of the record, from its module (a program's own script, or a module that
    its name finds elsewhere than the file the program ran, is loaded from that file under another name,
    so that a script's `if __name__ == "__main__":` part does not run), with the @triton.heuristics
    around it. A module whose top level fails or exits is a named error, never the sweep's end."""
    for entry in (record.get("path0"), str(Path(record["file"]).parent)):
        if entry and entry not in sys.path:
            sys.path.append(entry)
    module_name = record["module"]
    argv = sys.argv
    try:
        sys.argv = [record["file"]]  # a script that parses its arguments at import sees none
        module = None if module_name == "__main__" else importlib.import_module(module_name)
        if module is None or not _same_file(getattr(module, "__file__", None), record["file"]):
            module = _module_from_file(record["file"])
    except BaseException as error:  # SystemExit from a script's argparse too
        raise ConfigError(f"kernel.spec: cannot import {module_name} ({record['file']}) to replay "
                          f"{record['qualname']}: {type(error).__name__}: {error} (a script's program "
                          "belongs under if __name__ == \"__main__\":)") from None
    finally:
        sys.argv = argv
    obj = module
    for part in record["qualname"].split("."):
        obj = getattr(obj, part, None)
    if obj is None:
        raise ConfigError(f"kernel.spec: {module_name} has no {record['qualname']}")
    heuristics = []
    while type(obj).__name__ in ("Autotuner", "Heuristics"):
        if type(obj).__name__ == "Heuristics":
            heuristics.extend(obj.values.items())
        obj = obj.fn
    return LoadedKernel(obj, heuristics)


def source_text(path: str) -> str:
    """A file's text for the kernel's hash (read, not imported: the sweep's process imports no program)."""
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _same_file(a: Optional[str], b: str) -> bool:
    return bool(a) and Path(a).resolve() == Path(b).resolve()


@functools.lru_cache(maxsize=None)
def _module_from_file(path: str):
    name = f"_replayed_{Path(path).stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

"""The program's own kernel, for a replay (runners/capture/replay.py): its @triton.jit function and the
@triton.heuristics around it (found through any wrapper), imported from the module a launch record names
(a script loaded from its file under another name, so its `if __name__ == "__main__":` part does not
run), and the text of that file for the kernel's hash. A launches file may come from someone else: its
records' file and path0 are imported from only inside the working directory's tree, the import path the
sweep started with (installed packages, PYTHONPATH) or a folder the user names (kernel.spec's
;allow=DIR); others refused."""
from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.util
import site
import sys
import sysconfig
from pathlib import Path
from typing import Optional

from triton_sweep.model.trial import ConfigError


class LoadedKernel:
    """A replayed kernel: its @triton.jit function, and the heuristics around it (outermost first)."""

    def __init__(self, jit, heuristics: list):
        self.jit, self.heuristics = jit, heuristics


_START_PATH = tuple(entry for entry in sys.path if entry)  # before any replay adds to it


def allowed_places(allow: tuple = ()) -> list[Path]:
    """The folders a replay imports from: the working directory's tree, the import path the process
    started with and the installed packages' folders, and the folders `allow` names."""
    paths = sysconfig.get_paths()
    installed = [paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")]
    installed += site.getsitepackages()
    places = [Path.cwd(), *map(Path, _START_PATH + tuple(installed)), *(Path(a).resolve() for a in allow)]
    return [place.resolve() for place in places]


def trusted_file(record, launches: Path, allow: tuple = ()) -> tuple[Path, list[str]]:
    """The record's file, resolved (links followed), and the folders to put on the import path for it:
    none where its module is found there by the import path, else path0 and the file's folder, both in
    allowed_places. Its fields checked for their types first; refused, a ConfigError naming the launches
    file, the place and the knob."""
    def refused(why: str) -> ConfigError:
        return ConfigError(f"kernel.spec: {launches}: {why}")

    if not isinstance(record, dict):
        raise refused(f"a launch record is a {type(record).__name__}, not an object")
    for field in ("module", "file", "qualname", "path0"):
        value = record.get(field)
        if not (isinstance(value, str) and value) and not (field == "path0" and value is None):
            raise refused(f"a launch record's {field} is {value!r}, not a path or name")
    if not all(part.isidentifier() for part in record["module"].split(".")):
        raise refused(f"a launch record's module {record['module']!r} is not a module name")
    file = Path(record["file"]).resolve()
    if record["module"] != "__main__" and _found_at(record["module"]) == file:
        return file, []
    places = allowed_places(allow)
    for field in ("file", "path0"):
        place = Path(record[field]).resolve() if record[field] else None
        if place and not any(place.is_relative_to(allowed) for allowed in places):
            folder = place.parent if field == "file" else place
            said = record[field] if str(place) == record[field] else f"{record[field]} ({place})"
            raise refused(f"its {field} {said} is outside the working directory, the "
                          f"import path and the installed packages: a replay imports from none other "
                          f"(to allow it, append ;allow={folder} to kernel.spec)")
    return file, [str(Path(record["path0"]).resolve())] * bool(record["path0"]) + [str(file.parent)]


def _found_at(module: str) -> Optional[Path]:
    """The file the import path finds a module at, resolved; found without importing it or its
    packages (their finders asked, none of their code run); None where it finds none."""
    parts, locations, spec = module.split("."), None, None
    for depth in range(len(parts)):
        name = ".".join(parts[:depth + 1])
        finders = sys.meta_path if locations is None else [importlib.machinery.PathFinder]
        try:
            spec = next(filter(None, (finder.find_spec(name, locations) for finder in finders
                                      if hasattr(finder, "find_spec"))), None)
        except (ImportError, ValueError):
            return None
        if spec is None or (depth < len(parts) - 1 and not spec.submodule_search_locations):
            return None
        locations = spec.submodule_search_locations
    return Path(spec.origin).resolve() if spec.origin and spec.has_location else None


def load_kernel(record: dict, launches: Path, allow: tuple = ()) -> LoadedKernel:
    """The @triton.jit function of the record, from its module (a program's own script, or a module that
    its name finds elsewhere than the file the program ran, is loaded from that file under another name,
    so that a script's `if __name__ == "__main__":` part does not run), with the @triton.heuristics
    around it; only from a place trusted_file allows. A module whose top level fails or exits is a
    named error, never the sweep's end."""
    file, entries = trusted_file(record, launches, allow)
    for entry in entries:
        if entry not in sys.path:
            sys.path.append(entry)
    module_name = record["module"]
    argv = sys.argv
    try:
        sys.argv = [record["file"]]  # a script that parses its arguments at import sees none
        by_name = module_name != "__main__" and _found_at(module_name) == file
        module = importlib.import_module(module_name) if by_name else _module_from_file(str(file))
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
    return unwrapped(obj, f"{module_name}.{record['qualname']}")


WRAPPERS_BOUND = 16  # wrappers followed inward before a chain of .fn is taken for a cycle


def unwrapped(obj, name: str) -> LoadedKernel:
    """The @triton.jit function inside whatever wraps it, known by its type, never its name: Triton's
    Autotuner and Heuristics, their subclasses (a library's own autotuner) or any wrapper holding it as
    `.fn`; the heuristics met on the way kept, outermost first. Its own `run` is what a replay calls, so
    a wrapper's configs never come on top of the replay's (the program's configs are in its records)."""
    from triton.runtime import Heuristics, JITFunction
    from triton.runtime.interpreter import InterpretedFunction

    heuristics = []
    for _ in range(WRAPPERS_BOUND):
        if isinstance(obj, (JITFunction, InterpretedFunction)):
            return LoadedKernel(obj, heuristics)
        if isinstance(obj, Heuristics):
            heuristics.extend(obj.values.items())
        if getattr(obj, "fn", None) is None:
            break
        obj = obj.fn
    raise ConfigError(f"kernel.spec: {name} is a {type(obj).__name__}: no @triton.jit function found in "
                      f"it (through .fn, {WRAPPERS_BOUND} wrappers deep at most)")


def source_text(path: str) -> str:
    """A file's text for the kernel's hash (read, not imported: the sweep's process imports no program)."""
    try:
        return Path(path).read_text()
    except OSError:
        return ""


@functools.lru_cache(maxsize=None)
def _module_from_file(path: str):
    name = f"_replayed_{Path(path).stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

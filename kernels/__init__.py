"""Kernels shipped with the runner: one module a family, each defining its KernelSpec(s) (kernels/spec.py).

`builtin()` finds them without importing a kernel module (the sweep names a kernel's module before it
imports torch): every module-level assignment in kernels/*.py of an UPPER_CASE name from a call of
`KernelSpec(name="...")`, or of a function whose name ends in `_spec` with the kernel's name as its
first argument, is a built-in kernel. A new kernel is one module here; kernels from other packages plug
in through `kernel=external kernel.spec=pkg.module:SPEC`, without being listed anywhere.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

_NOT_KERNELS = ("__init__", "spec")


def _spec_name(call: ast.Call) -> Optional[str]:
    """The kernel name a spec-making call gives, or None for any other call."""
    callee = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
    if callee != "KernelSpec" and not callee.endswith("_spec"):
        return None
    for keyword in call.keywords:
        if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
            return keyword.value.value
    first = call.args[0] if call.args else None
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


def _parsed(stem: str) -> ast.Module:
    return ast.parse((Path(__file__).parent / f"{stem}.py").read_text())


def _literals(name: str, argument: str) -> list:
    """The values of the `argument=` keywords in the module of a built-in kernel that are literals (a
    dict's keys where the values are not: `baselines={"torch": ...}`), in source order."""
    module = builtin()[name].split(":")[0].rsplit(".", 1)[1]
    found = []
    for node in ast.walk(_parsed(module)):
        if isinstance(node, ast.keyword) and node.arg == argument:
            try:
                found.append(ast.literal_eval(node.value))
            except ValueError:
                if isinstance(node.value, ast.Dict):
                    found.append({k.value: None for k in node.value.keys if isinstance(k, ast.Constant)})
    return found


def _literal_names(name: str, argument: str) -> tuple[str, ...]:
    """The names every `argument=` literal of a built-in kernel's module holds (a dict's keys, a tuple's
    items), merged."""
    return tuple(dict.fromkeys(key for literal in _literals(name, argument) for key in literal))


@functools.cache
def space_names(name: str) -> tuple[str, ...]:
    """The names of a built-in kernel's search space (its module's `space={...}` literals), read from the
    source: what `kernel.space.<name>=...` may set without a `+`."""
    return _literal_names(name, "space")


@functools.cache
def dim_names(name: str) -> tuple[str, ...]:
    """The names of a built-in kernel's shape dims (its module's `dims=(...)` literals), read from the
    source: what `kernel.grid.<dim>=...` may set without a `+`."""
    return _literal_names(name, "dims")


@functools.cache
def outline(name: str) -> Optional[SimpleNamespace]:
    """What the checks of a sweep's input read of a built-in kernel's spec (name, dims, dtypes, space,
    baselines, default shapes and dtypes), read from its module's literals without importing it, every
    config taken as runnable; None (the whole, or baselines and default_shapes) where a literal is missing
    or ambiguous: the spec's own checks decide later. The names a module declares in several spec calls
    are merged: never a false refusal."""
    found = {field: _literals(name, field) for field in ("dims", "dtypes", "space")}
    if not all(found.values()) or len({len(dims) for dims in found["dims"]}) > 1:
        return None
    space: dict = {}
    for literal in found["space"]:
        for key, values in literal.items():
            space.setdefault(key, []).extend(values)
    shapes = _literals(name, "default_shapes")
    dtypes = _literal_names(name, "dtypes")
    return SimpleNamespace(
        name=name, dims=found["dims"][0], dtypes=dtypes, default_dtypes=dtypes, space=space,
        baselines=dict.fromkeys(_literal_names(name, "baselines")) or None,
        default_shapes=shapes[0] if len(shapes) == 1 else None, constraints=lambda *_: None)


@functools.cache
def builtin() -> dict[str, str]:
    """name -> "triton_sweep.kernels.module:ATTR" of every built-in kernel (the module docstring: how they
    are found)."""
    found = {}
    for path in sorted(Path(__file__).parent.glob("*.py")):
        if path.stem in _NOT_KERNELS:
            continue
        for node in _parsed(path.stem).body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name) and node.targets[0].id.isupper()
                    and isinstance(node.value, ast.Call)):
                name = _spec_name(node.value)
                if name:
                    found[name] = f"triton_sweep.kernels.{path.stem}:{node.targets[0].id}"
    return found

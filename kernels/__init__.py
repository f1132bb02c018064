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


def _literal_names(name: str, argument: str) -> tuple[str, ...]:
    """The string constants of the `argument=` literals (a dict's keys, a tuple's items) in the module
    of a built-in kernel."""
    module = builtin()[name].split(":")[0].rsplit(".", 1)[1]
    names = {}
    for node in ast.walk(_parsed(module)):
        if isinstance(node, ast.keyword) and node.arg == argument:
            items = node.value.keys if isinstance(node.value, ast.Dict) else getattr(node.value, "elts", [])
            names.update(dict.fromkeys(k.value for k in items if isinstance(k, ast.Constant)))
    return tuple(names)


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

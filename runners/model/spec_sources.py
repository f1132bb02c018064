"""Loading a kernel: its KernelSpec by name (built in) or by kernel.spec (kernel=external), and the hash of
the sources that define it (part of every row's resume key: a changed kernel is measured again).

kernel.spec is read by one lookup, SOURCES: a target whose prefix names a source goes to that source's
loader (itself an import path, imported only then, so the model imports none of it); any other target is
an import path "pkg.module:ATTR", the default source."""
from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import os
import sys
import sysconfig
from typing import Optional

from triton_sweep.kernels import builtin
from triton_sweep.kernels.spec import KernelSpec
from triton_sweep.model.trial import ConfigError, checked_name


# prefix of kernel.spec -> "pkg.module:ATTR" of its loader (target -> KernelSpec)
SOURCES = {
    "replay:": "triton_sweep.capture.replay:replay_spec",  # a kernel a program launched (runners/capture/)
}


def load_spec(name: str, spec_path: Optional[str]) -> KernelSpec:
    """The KernelSpec for kernel.name (a builtin) or kernel.spec (a target of one of SOURCES)."""
    if name == "external":
        if not spec_path:
            raise ConfigError("kernel.spec: an external kernel needs an import path, e.g. pkg.module:SPEC")
        target = spec_path
    elif name in builtin():
        if spec_path:
            raise ConfigError(f"kernel.spec: only kernel=external takes an import path (kernel is {name})")
        target = builtin()[name]
    else:
        known = ", ".join(sorted(builtin()) + ["external"])
        raise ConfigError(f"kernel.name: unknown kernel {name!r}; known: {known}")
    loader = next((path for prefix, path in SOURCES.items() if target.startswith(prefix)), None)
    spec = _imported(target) if loader is None else _imported(loader)(target)
    if not isinstance(spec, KernelSpec):
        raise ConfigError(f"kernel.spec: {target!r} is not a triton_sweep.kernels.spec.KernelSpec "
                          f"(got {type(spec).__name__})")
    checked_name(spec.name, f"kernel.spec: {target}'s name")  # it names files: plots, exports
    return spec


def _imported(target: str):
    """The attribute an import path "pkg.module:ATTR" names (a KernelSpec, or a source's loader)."""
    module_name, _, attr = target.partition(":")
    if not attr:
        raise ConfigError(f"kernel.spec: {target!r} must look like pkg.module:ATTR")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigError(f"kernel.spec: cannot import {module_name!r}: {error}") from error
    if not hasattr(module, attr):
        specs = sorted(name for name, value in vars(module).items() if isinstance(value, KernelSpec))
        raise ConfigError(f"kernel.spec: module {module_name!r} has no attribute {attr!r} (its KernelSpecs: "
                          f"{', '.join(specs) or 'none'})")
    return getattr(module, attr)


def builtin_spec(name: str) -> Optional[KernelSpec]:
    """The KernelSpec of a built-in kernel of that name (its module imported), None for any other name."""
    return load_spec(name, None) if name in builtin() else None


def kernel_source_hash(spec: KernelSpec) -> str:
    """Hash of the sources that define the kernel: a changed kernel is measured again.

    The module of the launcher, the module of every Triton kernel it holds a name for (a launcher may
    call a @triton.jit function imported from elsewhere), and every module of the user's own code it
    imports (`from triton_sweep.kernels import vector_add`; not installed libraries), sorted by name.
    """
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    launch = spec.launch.func if isinstance(spec.launch, functools.partial) else spec.launch
    module = sys.modules[launch.__module__]
    modules = {module.__name__: module}
    for value in vars(module).values():
        if isinstance(value, (JITFunction, InterpretedFunction)):
            value = sys.modules[value.fn.__module__]
        if inspect.ismodule(value) and _is_user_code(value):
            modules[value.__name__] = value
    digest = hashlib.sha256()
    for name in sorted(modules):
        digest.update(inspect.getsource(modules[name]).encode())
    for text in spec.sources:
        digest.update(text.encode())
    return digest.hexdigest()[:12]


_INSTALLED = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})


def _is_user_code(module) -> bool:
    path = getattr(module, "__file__", None)
    return bool(path) and not os.path.abspath(path).startswith(_INSTALLED)

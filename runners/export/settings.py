"""Every setting of an export, resolved and checked in one place: the tolerance, merge, whether interpreter
rows are exported (export.interpreter, --interpreter), the key (the kernel's argument that gives each dim:
`export.key.<kernel>` of the sweep's config, `--key` of the command, else the kernel's own
KernelSpec.export_key), the dims (a kernel not built in: from its spec, or --dims), the kernel's
constraints (the `check` the leave-one-out estimate plays), and the call counts that weigh the covering set
(kernel.calls of a sweep file of python -m triton_sweep.capture). The end of a sweep (`from_sweep`) and
`python -m triton_sweep.export` (`from_command`) resolve them here, from the same primary config
(conf/config.yaml's export section), so that both write the same files; a sweep checks them before
anything is launched (`check_sweep`).
"""
from __future__ import annotations

from typing import Optional

from triton_sweep.model.schema import CONF_DIR
from triton_sweep.model.trial import ConfigError


class ExportError(ValueError):
    """Bad input to the export (a setting, a file, rows that cannot be exported); the message names it."""


def sweep_export_conf():
    """The sweep's export settings when no override is given: the export section of conf/config.yaml
    over its schema (the section is the primary config's own; no group changes it)."""
    from omegaconf import OmegaConf

    from triton_sweep.model.schema import ExportConf

    primary = OmegaConf.load(CONF_DIR / "config.yaml")
    return OmegaConf.merge(OmegaConf.structured(ExportConf), primary.export)


def _loaded(kernel: str, spec_path: Optional[str]):
    """The KernelSpec the export has: the import path given (--spec), else the built-in kernel's (None if
    it is not built in)."""
    from triton_sweep.model.spec_sources import builtin_spec, load_spec

    return load_spec("external", spec_path) if spec_path else builtin_spec(kernel)


def _of(kernel: str, spec):
    """`spec` where it is the kernel's, else None."""
    return spec if spec is not None and spec.name == kernel else None


def resolve(export_conf, kernel: str, name: Optional[str] = None, spec_path: Optional[str] = None,
            sweep_kernel=None) -> tuple[dict, object]:
    """export_kernel's settings from an export section, and the KernelSpec the export has: kernel.name
    `name`'s (with `spec_path`, its kernel.spec) where it is the exported kernel or external, else the
    built-in kernel's (None if not built in). The settings: the section's tolerance, merge and
    interpreter, the key it gives the kernel (export.key.<kernel>), else the one the kernel declares
    (KernelSpec.export_key); the kernel's constraints (where the spec is the kernel's); an external
    kernel, its dims from its spec; and the calls of `sweep_kernel` (a sweep's kernel section) where its
    kernel is the one exported."""
    from omegaconf import OmegaConf

    from triton_sweep.model.spec_sources import builtin_spec, load_spec
    from triton_sweep.model.space import parse_calls

    key = export_conf.key.get(kernel)
    settings = {"tolerance": export_conf.tolerance, "merge": export_conf.merge,
                "interpreter": export_conf.interpreter,
                "key_field": f"export.key.{kernel}" if key else f"{kernel}'s KernelSpec.export_key"}
    own = load_spec(name, spec_path) if name else None
    loaded = own if own is not None and (spec_path or own.name == kernel) else builtin_spec(kernel)
    spec = _of(kernel, loaded)
    settings.update(key=dict(key) if key else dict(spec.export_key if spec else {}),
                    rule=spec.constraints if spec is not None else None)
    if spec_path and spec is not None:  # not a built-in kernel: its dims come from its spec
        settings["dims"] = tuple(spec.dims)
    if sweep_kernel is not None and sweep_kernel.get("calls") is not None and own.name == kernel:
        kernel_conf = OmegaConf.to_container(sweep_kernel, resolve=True)  # they weigh its own shapes
        settings["calls"] = parse_calls(kernel_conf["calls"], kernel_conf["shapes"], len(own.dims))
    return settings, loaded


def from_sweep(cfg, kernel: str) -> dict:
    """export_kernel's settings at the end of a sweep: its config's export section, and the calls of its
    kernel.calls where the sweep's own kernel is the one exported."""
    spec_path = cfg.kernel.spec if cfg.kernel.name == "external" else None
    return resolve(cfg.export, kernel, cfg.kernel.name, spec_path, cfg.kernel)[0]


def from_command(kernel: str, spec_path: Optional[str] = None, key: Optional[list[str]] = None,
                 tolerance: Optional[float] = None, merge: bool = True, dims: Optional[tuple] = None,
                 calls: Optional[str] = None, interpreter: bool = False) -> dict:
    """export_kernel's settings for `python -m triton_sweep.export`: what the end of a sweep exports with (the
    primary config's export section), then the command's options over it (--key, --tolerance,
    --no-merge, --dims, --calls, --interpreter)."""
    settings, loaded = resolve(sweep_export_conf(), kernel, "external" if spec_path else None, spec_path)
    if key:
        settings.update(key=parse_key(key), key_field="--key")
    if tolerance is not None:
        settings["tolerance"] = tolerance
    settings["merge"] = settings["merge"] and merge
    settings["interpreter"] = settings["interpreter"] or interpreter
    if dims:
        settings["dims"] = dims
    if calls:
        settings["calls"] = calls_of(calls, kernel, loaded, dims)
    return settings


def from_export(data: dict, tolerance: float, spec_path: Optional[str] = None,
                interpreter: bool = False) -> dict:
    """export_kernel's settings for a new section of an existing export (triton_sweep.revalidate): its key,
    dims and the section's tolerance, merged into it, and the kernel's constraints; `interpreter`: the
    section re-validated is the interpreter's (it was exported with --interpreter)."""
    spec = _of(data["kernel"], _loaded(data["kernel"], spec_path))
    return {"tolerance": tolerance, "key": data["key"], "dims": tuple(data["dims"]), "merge": True,
            "rule": spec.constraints if spec is not None else None, "interpreter": interpreter}


def check_sweep(cfg, spec) -> None:
    """export.tolerance and the kernel's export.key, checked before the sweep rather than at its end."""
    from omegaconf import OmegaConf

    check_tolerance(cfg.export.tolerance)
    key = OmegaConf.to_container(cfg.export.key, resolve=True).get(spec.name)
    if key:
        check_key(key, tuple(spec.dims), spec.name, f"export.key.{spec.name}")
    else:  # the kernel's own: a mistake of its author, found before the sweep
        check_key(dict(spec.export_key), tuple(spec.dims), spec.name, f"{spec.name}'s KernelSpec.export_key")


def check_tolerance(tolerance) -> None:
    if not (isinstance(tolerance, (int, float)) and 0 <= tolerance < 1):
        raise ConfigError(f"export.tolerance: {tolerance!r} must be a share in [0, 1), e.g. 0.03 for 3%")


def checked(kernel: str, rank: int, tolerance, key: Optional[dict], dims: Optional[tuple],
            key_field: str) -> tuple[tuple, dict]:
    """(dims, key) of an export whose shapes have `rank` dims, its settings checked (ExportError naming
    each): the tolerance, the dims (the kernel's own where not given), the key against them."""
    try:
        check_tolerance(tolerance)
    except ConfigError as error:
        raise ExportError(str(error)) from None
    if dims is None:
        dims = kernel_dims(kernel, rank)
    elif len(dims) != rank:
        raise ExportError(f"--dims: {', '.join(dims)} names {len(dims)} dims; {kernel}'s shapes have {rank}")
    try:
        return dims, check_key(key or {}, dims, kernel, key_field)
    except ConfigError as error:
        raise ExportError(str(error)) from None


def check_key(key: dict, dims: tuple, kernel: str, field: str) -> dict[str, str]:
    """An export key ({argument of the kernel: dim}) checked against the kernel's dims; `field` names
    where it was given (export.key.<kernel>, --key)."""
    for argument, dim in key.items():
        if not str(argument).isidentifier():
            raise ConfigError(f"{field}: {argument!r} is not a Python name (an argument of {kernel}'s "
                              "kernel)")
        if dim not in dims:
            raise ConfigError(f"{field}: {argument}={dim}: {dim!r} is not a dim of {kernel} "
                              f"({', '.join(dims)})")
    return {str(argument): str(dim) for argument, dim in key.items()}


def kernel_dims(kernel: str, rank: int) -> tuple[str, ...]:
    """The names of a built-in kernel's shape dims (its KernelSpec's), else d0, d1, ... (see --dims)."""
    from triton_sweep.model.spec_sources import builtin_spec

    spec = builtin_spec(kernel)
    if spec is not None and len(spec.dims) == rank:
        return tuple(spec.dims)
    return tuple(f"d{i}" for i in range(rank))


def parse_key(items: list[str]) -> dict[str, str]:
    """["n_cols=cols", ...] (the --key option) -> {"n_cols": "cols"}."""
    key = {}
    for item in items:
        argument, sep, dim = item.partition("=")
        if not sep:
            raise ExportError(f"--key: {item!r} must look like ARGUMENT=DIM, e.g. n_cols=cols")
        key[argument.strip()] = dim.strip()
    return key


def calls_of(path: str, kernel: str, spec, dims: Optional[tuple]) -> dict:
    """shape -> calls of a sweep file's kernel.shapes and kernel.calls (--calls); `spec`: the KernelSpec
    the export has (_loaded), which gives the rank where --dims does not."""
    from omegaconf import OmegaConf

    from triton_sweep.model.space import parse_calls

    captured = OmegaConf.to_container(OmegaConf.load(path), resolve=True).get("kernel") or {}
    if captured.get("calls") is None:
        raise ConfigError(f"--calls: {path} has no kernel.calls (triton-sweep-capture writes them)")
    rank = len(dims) if dims else len(spec.dims) if spec is not None else None
    if rank is None:
        raise ConfigError(f"--calls: {kernel} is not built in; give --spec or --dims")
    return parse_calls(captured["calls"], captured.get("shapes"), rank)

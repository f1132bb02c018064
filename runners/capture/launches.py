"""Mapping the captured launches to kernel specs: a launch is a spec's where the spec's module defines its
@triton.jit function and the spec gives it a shape (kernels/spec.py launch_shape, else the integer
arguments of its export key) at one of its dtypes; a launch no spec maps is kept with the reason. Then the
dims that vary from call to call rounded up to powers of two (--bucket pow2), and the shapes where no
config of a spec's default space can run, for which its BLOCK meta-parameters are widened down."""
from __future__ import annotations

import inspect
import json
import sys
from typing import Optional

FLOAT_DTYPES = ("float16", "bfloat16", "float32")
VARYING = 4  # a dim taking more sizes than this varies from call to call (a model's widths take a few)


def _function_name(obj) -> Optional[str]:
    """"module.qualname" of a @triton.jit function (or of the one an autotuner or heuristics wraps)."""
    for _ in range(4):
        if inspect.isfunction(obj):
            return f"{obj.__module__}.{obj.__qualname__}"
        obj = getattr(obj, "fn", None)
        if obj is None:
            return None
    return None


def jit_functions(spec) -> set[str]:
    """The @triton.jit functions of the module that defines the spec's launch."""
    module = sys.modules.get(getattr(spec.launch, "__module__", ""), None)
    names = set()
    for value in vars(module).values() if module else ():
        if type(value).__name__ in ("JITFunction", "InterpretedFunction", "Autotuner", "Heuristics"):
            name = _function_name(value)
            if name:
                names.add(name)
    return names


def launch_shape(spec, args: dict) -> Optional[tuple]:
    """The launch's shape in the spec's dims, None when the launch is not the spec's (kernels/spec.py)."""
    if spec.launch_shape is not None:
        try:
            shape = spec.launch_shape(args)
        except (KeyError, IndexError, TypeError):  # an argument it reads is not there: not its launch
            return None
        if shape is not None and len(shape) != len(spec.dims):
            raise ValueError(f"{spec.name}'s launch_shape gave {list(shape)}, not one size for each of "
                             f"its dims {spec.dims}")
        return None if shape is None else tuple(int(d) for d in shape)
    sizes = {dim: args[arg] for arg, dim in spec.export_key.items() if type(args.get(arg)) is int}
    sizes.update({dim: args[dim] for dim in spec.dims if dim not in sizes and type(args.get(dim)) is int})
    return tuple(sizes[dim] for dim in spec.dims) if len(sizes) == len(spec.dims) else None


def first_float_dtype(args: dict) -> Optional[str]:
    """The dtype of the launch's first floating-point tensor argument."""
    for value in args.values():
        if isinstance(value, list) and len(value) == 2 and value[0] in FLOAT_DTYPES:
            return value[0]
    return None


def map_launches(functions: dict, specs: list) -> tuple[dict, list]:
    """kernel -> {(shape, dtype): {"calls", "configs": {config JSON: calls}}}, and the launches no spec
    maps: (function, calls, argument sets, why)."""
    owners = {spec.name: jit_functions(spec) for spec in specs}
    mapped: dict[str, dict] = {}
    unmapped = []
    for function, launches in sorted(functions.items()):
        candidates = [spec for spec in specs if function in owners[spec.name]]
        left = {"calls": 0, "sets": 0, "why": set()}
        for launch in launches.values():
            if not launch["calls"]:
                continue  # launched only by an autotuner's benchmark
            args, found, why = launch["args"], False, set()
            dtype = first_float_dtype(args)
            for spec in candidates:
                shape = launch_shape(spec, args)
                if shape is None:
                    continue
                if min(shape) <= 0:
                    why.add(f"a dim of {list(shape)} is 0 (a launch on an empty tensor)")
                    continue
                if dtype not in spec.dtypes:
                    why.add(f"dtype {dtype} is not one of {spec.name}'s ({', '.join(spec.dtypes)})")
                    continue
                entry = mapped.setdefault(spec.name, {}).setdefault((shape, dtype),
                                                                    {"calls": 0, "configs": {}})
                entry["calls"] += launch["calls"]
                config = json.dumps({k: args[k] for k in spec.space if k in args}, sort_keys=True)
                entry["configs"][config] = entry["configs"].get(config, 0) + launch["calls"]
                found = True
                break
            if not found:  # the reasons of the launches left out, and only theirs
                left["calls"] += launch["calls"]
                left["sets"] += 1
                if not candidates:
                    why.add("no spec names this function (a kernel of another package: --spec "
                            "pkg.module:SPEC, or --replay to sweep it with no spec)")
                elif not why:
                    why.add("no spec of its module gives a shape for these arguments (its "
                            "launch_shape, or the integer arguments of its export key)")
                left["why"] |= why
        if left["calls"]:
            unmapped.append((function, left["calls"], left["sets"], "; ".join(sorted(left["why"]))))
    return mapped, unmapped


def bucketed(entries: dict, bucket: Optional[str], dims: tuple, named: Optional[list] = None) -> dict:
    """The entries with the dims that vary from call to call (`named`, else those taking more than
    VARYING sizes) rounded up to a power of two (bucket="pow2"; in the lowest bucket, to the smallest
    size called), merged where they meet."""
    if bucket is None:
        return entries
    import triton

    shapes = [shape for shape, _ in entries]
    varying = [dim in named if named else len({shape[i] for shape in shapes}) > VARYING
               for i, dim in enumerate(dims)]
    smallest = [min(shape[i] for shape in shapes) for i in range(len(dims))]

    def rounded(size: int, low: int) -> int:
        # The lowest bucket keeps the smallest size called: what is measured spans every call.
        up = triton.next_power_of_2(size)
        return low if up == triton.next_power_of_2(low) else up

    merged: dict = {}
    for (shape, dtype), entry in entries.items():
        rounded_shape = tuple(rounded(d, low) if vary else d
                              for d, vary, low in zip(shape, varying, smallest))
        into = merged.setdefault((rounded_shape, dtype), {"calls": 0, "configs": {}})
        into["calls"] += entry["calls"]
        for config, calls in entry["configs"].items():
            into["configs"][config] = into["configs"].get(config, 0) + calls
    return merged


def unrunnable(spec, entries: dict, space: Optional[dict] = None) -> list[tuple]:
    """The (shape, dtype) of the entries where no config of `space` (the spec's default space) passes its
    constraints: a sweep of the captured file would prune every trial there."""
    from triton_sweep.model.space import space_configs

    configs = space_configs(spec.space if space is None else space)
    return [(shape, dtype) for shape, dtype in entries
            if all(spec.constraints(shape, dtype, config) is not None for config in configs)]


# The smallest block a captured space is widened to: the smallest tile tl.dot takes.
BLOCK_FLOOR = 16


def widened_space(spec, entries: dict) -> tuple[dict, list[tuple]]:
    """Where no config of the spec's default space can run at some captured (shape, dtype) (a program's
    shapes smaller than the space was made for), its BLOCK meta-parameters (powers of two) widened down,
    a power of two at a time to BLOCK_FLOOR, one parameter a step: the widening that leaves the fewest
    such shapes, then the fewest values added, until none is left or no widening helps. Returns the
    widened parameters (name -> every value, for kernel.space) and the (shape, dtype)s still left."""
    from triton_sweep.kernels.spec import is_power_of_two

    space = {name: list(values) for name, values in spec.space.items()}
    left = unrunnable(spec, entries, space)
    while left:
        best = None
        for name, values in space.items():
            if not name.startswith("BLOCK") or not all(is_power_of_two(v) for v in values):
                continue
            lower, value = [], min(values) // 2
            while value >= BLOCK_FLOOR:
                lower.insert(0, value)
                still = len(unrunnable(spec, dict.fromkeys(left), {**space, name: lower + values}))
                if still < len(left) and (best is None or (still, len(lower)) < best[0]):
                    best = ((still, len(lower)), name, list(lower))
                value //= 2
        if best is None:
            break
        space[best[1]] = best[2] + space[best[1]]
        left = unrunnable(spec, entries, space)
    return {name: values for name, values in space.items() if values != list(spec.space[name])}, left

"""From a composed kernel config to the list of trials, with every bad input rejected before any launch:
the shapes (a list, or a grid of forms), dtypes and search space a kernel is swept at (runners/engine/
trial.py: the trial itself)."""
from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

from triton_sweep.model.trial import NUM_WARPS_ALLOWED, TRITON_PROVIDER, ConfigError, Trial

if TYPE_CHECKING:  # the checks run before torch is imported (runners/model/plan.py: check_early)
    from triton_sweep.kernels.spec import KernelSpec

DTYPES = ("float16", "bfloat16", "float32")
# num_warps beyond 32 exceeds the 1024 threads of a CUDA block.
# The interpreter runs every program in Python: past this many elements one trial takes minutes.
INTERPRET_MAX_ELEMENTS = 1 << 20
MAX_TRIALS = 250_000  # a job's planned trials: SweepConf.max_trials's default (conf/config.yaml)


def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_shapes(value: Any, rank: int) -> list[tuple[int, ...]]:
    """`kernel.shapes` holds one shape or a list of shapes; a shape of a 1-D kernel may be a bare int."""
    items = _as_list(value)
    if rank > 1 and items and all(_is_int(v) for v in items):
        items = [items]  # one shape, e.g. [4096, 4096] for a 2-D kernel
    shapes = []
    for index, item in enumerate(items):
        shape = _as_list(item)
        where = f"kernel.shapes[{index}]"
        if len(shape) != rank or not all(_is_int(d) for d in shape):
            raise ConfigError(f"{where}: {item!r} must be {rank} integer(s)")
        if any(d <= 0 for d in shape):
            raise ConfigError(f"{where}: {item!r} has a dimension <= 0; every dimension must be positive")
        shapes.append(tuple(shape))
    if not shapes:
        raise ConfigError("kernel.shapes: empty; give at least one shape")
    return shapes


def parse_calls(calls: Any, shapes: Any, rank: int) -> dict[tuple[int, ...], int]:
    """`kernel.calls`: how many times the program called each of `kernel.shapes`, in order
    (triton-sweep-capture writes both); shape -> calls, the weights of the export's covering set. {} if
    None."""
    if calls is None:
        return {}
    if shapes is None:
        raise ConfigError("kernel.calls: weights the shapes of kernel.shapes, which is not given")
    shapes = parse_shapes(shapes, rank)
    calls = _as_list(calls)
    if len(calls) != len(shapes):
        raise ConfigError(f"kernel.calls: {len(calls)} counts for the {len(shapes)} shapes of kernel.shapes; "
                          "give one count a shape, in the same order")
    for index, count in enumerate(calls):
        if not _is_int(count) or count < 0:
            raise ConfigError(f"kernel.calls[{index}]: {count!r} must be an integer >= 0 (a call count)")
    weights: dict[tuple[int, ...], int] = {}
    for shape, count in zip(shapes, calls):
        weights[shape] = weights.get(shape, 0) + count
    return weights


GRID_FORMS = ("a list of sizes, {pow2: [lo, hi]}, {geom: [lo, hi, n]} or {range: [lo, hi, step]} (each form "
              "with an optional multiple_of: m), or a list of these")


def _form_values(value: dict, where: str) -> list[int]:
    """The sizes of one form of `kernel.grid` (grid_values)."""
    forms = [name for name in value if name in ("pow2", "geom", "range")]
    unknown = [name for name in value if name not in ("pow2", "geom", "range", "multiple_of")]
    if len(forms) != 1 or unknown:
        raise ConfigError(f"{where}: {value!r} is not {GRID_FORMS}")
    form = forms[0]
    bounds = value[form]
    counts = {"pow2": 2, "geom": 3, "range": 3}
    if (not isinstance(bounds, (list, tuple)) or len(bounds) != counts[form]
            or not all(_is_int(b) and b > 0 for b in bounds)):
        raise ConfigError(f"{where}.{form}: {bounds!r} must be {counts[form]} positive integers")
    low, high = bounds[0], bounds[1]
    if low > high:
        raise ConfigError(f"{where}.{form}: the bounds {low} > {high} are the wrong way round")
    if form == "pow2":
        values = [1 << n for n in range(low.bit_length() - 1, high.bit_length()) if low <= 1 << n <= high]
    elif form == "geom":
        steps = bounds[2]
        if steps < 2:
            raise ConfigError(f"{where}.geom: {steps} sizes: give at least 2 (the bounds)")
        values = [round(low * (high / low) ** (i / (steps - 1))) for i in range(steps)]
    else:
        values = list(range(low, high + 1, bounds[2]))
    if not values:
        raise ConfigError(f"{where}.{form}: {bounds!r} gives no size")
    multiple = value.get("multiple_of", 1)
    if not (_is_int(multiple) and multiple > 0):
        raise ConfigError(f"{where}.multiple_of: {multiple!r} must be a positive integer")
    # Each size to its nearest multiple (one at least): Triton compiles a kernel apart for sizes divisible
    # by 16, so a grid can measure that kind on purpose.
    return [max(multiple, multiple * round(v / multiple)) for v in values]


def grid_values(value: Any, where: str) -> list[int]:
    """The sizes one dim of `kernel.grid` gives (schema.KernelConf says the forms), ascending, each once."""
    items = [value] if isinstance(value, dict) else _as_list(value)
    values = []
    for position, item in enumerate(items):
        if isinstance(item, dict):
            values += _form_values(item, where if isinstance(value, dict) else f"{where}[{position}]")
        elif _is_int(item) and item > 0:
            values.append(item)
        else:
            raise ConfigError(f"{where}: {value!r} is not {GRID_FORMS} (positive integers)")
    if not values:
        raise ConfigError(f"{where}: {value!r} is not {GRID_FORMS} (positive integers)")
    return sorted(set(values))


def grid_shapes(grid: dict, spec: KernelSpec, max_trials: int = MAX_TRIALS) -> list[tuple[int, ...]]:
    """The shapes of `kernel.grid`: every dim's sizes crossed, in the order of the kernel's dims. Dims
    left out (None) give no grid; a grid names every dim or none; one of more shapes than max_trials is
    refused before they are made."""
    given = {dim: value for dim, value in (grid or {}).items() if value is not None}
    if not given:
        return []
    unknown = sorted(set(given) - set(spec.dims))
    if unknown:
        raise ConfigError(f"kernel.grid.{unknown[0]}: not a dim of {spec.name} ({', '.join(spec.dims)})")
    missing = [dim for dim in spec.dims if dim not in given]
    if missing:
        raise ConfigError(f"kernel.grid.{missing[0]}: give sizes for every dim of {spec.name} "
                          f"({', '.join(spec.dims)}; given: {', '.join(given)})")
    sizes = [grid_values(given[dim], f"kernel.grid.{dim}") for dim in spec.dims]
    if math.prod(map(len, sizes)) > max_trials:
        raise ConfigError(f"max_trials: kernel.grid crosses {math.prod(map(len, sizes)):,} shapes, over "
                          f"max_trials={max_trials:,}: narrow kernel.grid, or raise max_trials")
    return list(itertools.product(*sizes))


def parse_dtypes(value: Any, supported: tuple[str, ...]) -> list[str]:
    dtypes = [str(v) for v in _as_list(value)]
    for dtype in dtypes:
        if dtype not in supported:
            raise ConfigError(f"kernel.dtypes: {dtype!r} is not supported by this kernel; "
                              f"use one of {supported}")
    if not dtypes:
        raise ConfigError("kernel.dtypes: empty; give at least one dtype")
    return dtypes


def parse_space(overrides: dict, spec: KernelSpec) -> dict[str, list[int]]:
    """The kernel's default space with the user's entries replacing whole keys; every value checked.

    An entry set to None (null in YAML) keeps the kernel's default for that key.
    """
    overrides = {name: value for name, value in overrides.items() if value is not None}
    unknown = sorted(set(overrides) - set(spec.space))
    if unknown:
        raise ConfigError(f"kernel.space.{unknown[0]}: not a parameter of {spec.name}; "
                          f"known: {sorted(spec.space)}")
    space = {name: list(values) for name, values in spec.space.items()}
    space.update({name: _as_list(value) for name, value in overrides.items()})
    for name, values in space.items():
        where = f"kernel.space.{name}"
        if not values:
            raise ConfigError(f"{where}: empty; give at least one value")
        for value in values:
            if not _is_int(value):
                raise ConfigError(f"{where}: {value!r} is not an integer")
            if name.startswith("BLOCK") and (value < 1 or value & (value - 1)):
                raise ConfigError(f"{where}: {value} is not a power of 2 (tl.arange needs power-of-2 blocks)")
            if name == "num_warps" and value not in NUM_WARPS_ALLOWED:
                raise ConfigError(f"{where}: {value} must be one of {NUM_WARPS_ALLOWED}")
            if name == "num_stages" and value < 1:
                raise ConfigError(f"{where}: {value} must be >= 1")
    return space


def space_configs(space: dict) -> list[dict]:
    """Every config of a search space (name -> values), in the order of its names."""
    names = list(space)
    return [dict(zip(names, values)) for values in itertools.product(*(space[n] for n in names))]


def _dropped(gridded: list, runnable: list) -> None:
    """The grid's shapes where no config of the space can run (the kernel's constraints) named in one
    line: a grid crosses sizes blindly, and a shape no config can run adds nothing."""
    kept = set(runnable)
    dropped = [s for s in gridded if s not in kept]
    if dropped:
        named = ", ".join("x".join(map(str, s)) for s in dropped[:10]) + (" ..." if len(dropped) > 10 else "")
        print(f"kernel.grid: {len(dropped)} shape(s) no config of the space can run, left out: {named}")
    if gridded and not runnable:
        raise ConfigError("kernel.grid: no config of the space can run at any of its shapes")


def _baselines(spec: KernelSpec, given: Any, backend: str) -> list[str]:
    """kernel.baselines checked: None gives the kernel's defaults (_default_baselines)."""
    baselines = _default_baselines(spec, backend) if given is None else [str(b) for b in _as_list(given)]
    for name in baselines:
        if name not in spec.baselines:
            raise ConfigError(f"kernel.baselines: {name!r} is not a baseline of {spec.name}; "
                              f"known: {sorted(spec.baselines)}")
    return baselines


def _default_baselines(spec: KernelSpec, backend: str) -> list[str]:
    """The baselines of kernel.baselines=null: all the kernel declares, but, on the interpreter, those
    whose first call compiles (torch.compile: kernels/spec.py), left out in one line. There they time
    inductor's CPU code against the interpreter (no figure of a GPU, swinging from microseconds to
    milliseconds) and take most of a small sweep's time; named in kernel.baselines, they run."""
    names = list(spec.baselines)
    if backend != "interpret":
        return names
    compiled = [name for name in names if getattr(spec.baselines[name], "compiles", False)]
    if compiled:
        print(f"kernel.baselines: {', '.join(compiled)} (torch.compile) left out on the interpreter, where "
              f"its timings mean nothing; kernel.baselines=[{','.join(names)}] times it")
    return [name for name in names if name not in compiled]


def _within_cap(shapes: int, dtypes: int, space: dict, baselines: int, max_trials: int) -> None:
    """ConfigError, in one line, where the job would plan more than max_trials trials (counted, not built)."""
    configs = math.prod(len(set(values)) for values in space.values())
    count = shapes * dtypes * (configs + baselines)
    if count > max_trials:
        extra = f" and {baselines} baseline(s)" if baselines else ""
        raise ConfigError(f"max_trials: the job plans {count:,} trials ({shapes:,} shape(s) x {dtypes} "
                          f"dtype(s) x {configs:,} config(s){extra}), over max_trials={max_trials:,}: narrow "
                          "kernel.shapes, kernel.grid or kernel.space, or raise max_trials")


def plan_trials(spec: KernelSpec, kernel_conf: dict, backend: str,
                max_trials: int = MAX_TRIALS) -> list[Trial]:
    """Every trial of the job in a stable order: shapes, then dtypes, then the space grid, baselines last.

    Raises ConfigError for bad input, and for a plan of more than max_trials trials before any is built;
    configs the kernel cannot run at a shape come back pruned.
    """
    gridded = grid_shapes(kernel_conf.get("grid"), spec, max_trials)
    shapes = kernel_conf.get("shapes")
    parse_calls(kernel_conf.get("calls"), shapes, len(spec.dims))  # checked before any launch
    if shapes is None and not gridded:
        if not spec.default_shapes:
            raise ConfigError(f"kernel.shapes: give the shapes to sweep ({spec.name} declares no "
                              "default_shapes), or kernel.grid")
        shapes = [list(shape) for shape in spec.default_shapes]
    shapes = [] if shapes is None else parse_shapes(shapes, len(spec.dims))
    dtypes = kernel_conf.get("dtypes")
    dtypes = parse_dtypes(list(spec.default_dtypes) if dtypes is None else dtypes, spec.dtypes)
    space = parse_space(dict(kernel_conf.get("space") or {}), spec)
    baselines = _baselines(spec, kernel_conf.get("baselines"), backend)
    # counted with every shape of the grid, before the ones no config can run are found and dropped
    _within_cap(len(shapes) + len(gridded), len(set(dtypes)), space, len(baselines), max_trials)
    listed, on_grid = set(shapes), set(gridded)
    shapes = list(dict.fromkeys(shapes + gridded))  # a value listed twice is one trial, measured once
    dtypes = list(dict.fromkeys(dtypes))
    configs = space_configs({name: list(dict.fromkeys(values)) for name, values in space.items()})
    trials, runnable = [], []
    for shape in shapes:  # each config's constraints evaluated once, a grid's shapes that none runs dropped
        planned = [Trial(spec.name, TRITON_PROVIDER, shape, dtype, dict(config),
                         spec.constraints(shape, dtype, config)) for dtype in dtypes for config in configs]
        runs = not all(trial.pruned_reason for trial in planned)
        runnable += [shape] * (runs and shape in on_grid)
        if not runs and shape not in listed:
            continue
        if backend == "interpret" and math.prod(shape) > INTERPRET_MAX_ELEMENTS:
            raise ConfigError(f"kernel.shapes: {list(shape)} has more than {INTERPRET_MAX_ELEMENTS} "
                              "elements; backend=interpret runs every program in Python, use small shapes")
        for index, dtype in enumerate(dtypes):
            trials += planned[index * len(configs):(index + 1) * len(configs)]
            trials += [Trial(spec.name, name, shape, dtype, {}) for name in baselines]
    _dropped(gridded, runnable)
    return trials

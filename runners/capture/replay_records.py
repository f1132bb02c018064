"""What one launch record of the hook (runners/capture/launch_hook/triton_launch_hook.py) says, as a
replay (runners/capture/replay.py) reads it: whether it can be replayed (why_not), the dims that tell
launches apart, its dtype, an argument's size or value, the space, its grid at a config (the user's grid
expression checked against it), the config it ran."""
from __future__ import annotations

from typing import Optional

from triton_sweep.capture.replay_expressions import expression
from triton_sweep.model.trial import ConfigError

LAUNCH_DIM = "launch"
ADDRESS_LIKE = 1 << 40  # an int argument above this is an address, not a size
REPLAY_MAX_BYTES = 4 << 30  # a launch's tensors, each held three times (inputs, outputs, reference)
OPTIONS = ("num_warps", "num_stages")
NUM_WARPS = (1, 2, 4, 8, 16, 32)  # a replay's space where the program gave no autotune configs
NUM_STAGES = (1, 2, 3, 4)
# Triton's launch options an autotuner passes with a config's (never the kernel's arguments, nor sizes)
LAUNCH_OPTIONS = (*OPTIONS, "num_ctas", "maxnreg", "enable_fp_fusion", "launch_cooperative_grid",
                  "launch_pdl")


def why_not(record: dict) -> Optional[str]:
    """Why a launch cannot be replayed, None when it can.

    Not replayable, said per kernel (`why_not`): a tensor descriptor, an integer that looks like an address
    (a pointer passed without its tensor), an integer tensor over the recorded bound, an argument of
    another type, a kernel defined inside a function, tensor arguments whose memory overlaps (one tensor
    passed twice), tensors beyond REPLAY_MAX_BYTES. A kernel with side
    effects outside its arguments is not detected: its replay checks its arguments only.
    """
    if "<locals>" in record["qualname"]:
        return "the kernel is defined inside a function (a replay imports it from its module)"
    tensors = 0
    for name, arg in record["positional"] + record["keywords"]:
        kind = arg["kind"]
        if kind == "descriptor":
            return f"argument {name} is a tensor descriptor"
        if kind == "int" and abs(arg["value"]) >= ADDRESS_LIKE and name not in record["constexprs"]:
            return f"argument {name} = {arg['value']} looks like an address (a pointer without its tensor)"
        if kind == "tensor":
            if not arg["dtype"].startswith(("float", "bfloat")) and "values" not in arg and arg["extent"]:
                return (f"argument {name} is an integer tensor of {arg['extent']} elements, over the "
                        "recorded bound (its values, indices perhaps, are not known)")
            tensors += arg["nbytes"]
        elif kind not in ("int", "float", "bool", "none", "str", "tl_dtype"):
            return f"argument {name} is a {kind}"
    overlap = _overlapping(record)
    if overlap:
        return (f"arguments {overlap[0]} and {overlap[1]} overlap in memory (a replay gives each tensor "
                "memory of its own)")
    if tensors > REPLAY_MAX_BYTES:
        return (f"its tensors take {tensors / 2**30:.1f} GiB, over the {REPLAY_MAX_BYTES / 2**30:.0f} GiB "
                "bound")
    if record["grid"].get("fixed", 0) is None:
        return "its grid was not recorded"
    return None


def _overlapping(record: dict) -> Optional[tuple]:
    """Two tensor arguments whose memory overlaps (one passed twice, or views into one part of a buffer);
    views of one buffer that do not overlap (q and k cut from qkv) replay apart as they ran."""
    spans = [(name, arg["storage"] + arg["offset"] * arg["itemsize"], arg["storage"] + arg["extent"]
              * arg["itemsize"]) for name, arg in record["positional"] + record["keywords"]
             if arg["kind"] == "tensor" and arg.get("storage") and arg["extent"]]
    for i, (name, start, end) in enumerate(spans):
        for other, other_start, other_end in spans[i + 1:]:
            if start < other_end and other_start < end:
                return name, other
    return None


def replay_dtype(record: dict) -> str:
    """The dtype a replayed launch is swept at: its first floating tensor's, else its first tensor's."""
    tensors = [arg for _, arg in record["positional"] + record["keywords"] if arg["kind"] == "tensor"]
    floating = [arg for arg in tensors if arg["dtype"].startswith(("float", "bfloat"))]
    return (floating or tensors or [{"dtype": "float32"}])[0]["dtype"]


def varying_dims(records: list) -> list[str]:
    """The dims that tell launches apart, named as the kernel and its tensors name them, sizes only (> 0 at
    every launch): every integer argument (not a constexpr) whose value differs between launches, but
    those named like a stride; then each axis of a tensor argument (ARG_shapeN) that varies and repeats
    no dim's values (a row count only the grid and the tensors carry: no axis dropped); where none
    varies, the integer arguments, else the first tensor's axes; then, while two launches of one dtype
    still share their sizes, the strides; then `launch`."""
    def column(dim: str) -> Optional[tuple]:
        try:
            return tuple(size_at(record, dim) for record in records)
        except (KeyError, IndexError):
            return None

    ints, axes = [], []
    for name, arg in records[0]["positional"] + records[0]["keywords"]:
        if arg["kind"] == "int" and name not in records[0]["constexprs"] and name not in LAUNCH_OPTIONS:
            ints += [name] * all(_has_int(r, name) for r in records)
        elif arg["kind"] == "tensor" and all(len((_tensor(r, name) or {}).get("shape", ()))
                                             == len(arg["shape"]) for r in records):
            axes += [f"{name}_shape{axis}" for axis in range(len(arg["shape"]))]

    def sized(name: str) -> bool:  # a size is positive: an argument 0 at a launch is a flag or an offset
        return column(name) is not None and min(column(name)) > 0

    strides = [name for name in ints if "stride" in name.lower() and sized(name)]
    sizes = [name for name in ints if name not in strides and sized(name)]
    axes = [name for name in axes if sized(name)]
    dims = [name for name in sizes if len(set(column(name))) > 1]
    for name in axes:
        if len(set(column(name))) > 1 and column(name) not in map(column, dims):
            dims.append(name)
    if not dims:  # one shape (in one or more dtypes): named by its sizes all the same
        dims = sizes or [name for name in axes if name.startswith(axes[0].rsplit("_shape", 1)[0] + "_shape")]

    def kinds(chosen: list) -> int:
        return len({(tuple(size_at(r, d) for d in chosen), replay_dtype(r)) for r in records})

    for name in strides:
        if kinds(dims) == len(records):
            break
        if kinds(dims + [name]) > kinds(dims):
            dims.append(name)
    return dims if dims and kinds(dims) == len(records) else dims + [LAUNCH_DIM]


def _tensor(record: dict, name: str) -> Optional[dict]:
    return next((arg for arg_name, arg in record["positional"] + record["keywords"]
                 if arg_name == name and arg["kind"] == "tensor"), None)


def _has_int(record: dict, name: str) -> bool:
    return any(arg_name == name and arg["kind"] == "int" for arg_name, arg in record["positional"]
               + record["keywords"])


def size_at(record: dict, dim: str):
    """A dim's size at a launch: an integer argument's value, or a tensor argument's axis (ARG_shapeN)."""
    arg, _, axis = dim.rpartition("_shape")
    if arg and axis.isdigit() and _tensor(record, arg):
        return _tensor(record, arg)["shape"][int(axis)]
    return value_at(record, dim)


def value_at(record: dict, name: str):
    """An argument's value at the launch; a block left at its default, its default."""
    for arg_name, arg in record["positional"] + record["keywords"]:
        if arg_name == name:
            return arg["value"]
    if name in record.get("launched", {}):
        return record["launched"][name]
    raise KeyError(name)


def signature(record: dict) -> tuple:
    """A launch's arguments as Replay._index_of reads them from a call's."""
    return tuple((tuple(arg["shape"]), tuple(arg["stride"]), arg["dtype"]) if arg["kind"] == "tensor"
                 else arg["value"] for _, arg in record["positional"] + record["keywords"])


def recorded_grid(record: dict, config) -> Optional[tuple]:
    """The grid the program launched at `config`: its callable grid's value there as captured, or its
    fixed grid where fixed_grid_refusal has nothing against it; None otherwise."""
    grid = record["grid"]
    if "fixed" in grid:
        return None if fixed_grid_refusal(record, config) else tuple(grid["fixed"])
    wanted = [config.get(b, value_at(record, b)) for b in grid["blocks"]]
    for combo, evaluated in grid["table"]:
        if combo == wanted:
            return tuple(evaluated)
    return None


def fixed_grid_refusal(record: dict, config) -> Optional[str]:
    """Why the program's fixed grid (a tuple it computed, from its blocks perhaps: cdiv(n, 256)) may not
    fit `config`: a block other than launched. None where it fits, or where the config is one of the
    program's @triton.autotune configs (which the program itself launched with that grid)."""
    if "fixed" not in record["grid"] or dict(config) in record["autotune"]:
        return None
    changed = [f"{b}={config[b]}" for b in record["blocks"] if config.get(b, value_at(record, b))
               != value_at(record, b)]
    if not changed:
        return None
    launched = ", ".join(f"{b}={value_at(record, b)}" for b in record["blocks"])
    return (f"the program launched a fixed grid {tuple(record['grid']['fixed'])} at {launched}: a grid "
            f"computed from its blocks would not fit {', '.join(changed)} (kernel.spec's ;grid=EXPR "
            "gives the grid at every config)")


def launched_config(record: dict) -> dict:
    """The config the program launched: its blocks' values (and its autotune keys'), its options."""
    names = set(record["blocks"]) | ({k for c in record["autotune"] for k in c} - set(OPTIONS))
    config = {name: value_at(record, name) for name in names}
    for name in OPTIONS:
        try:
            config[name] = value_at(record, name)
        except KeyError:
            pass
    return config


def replay_space(records: list) -> dict:
    """Every block's candidate values over the launches (or the autotune configs' values)."""
    space: dict[str, set] = {}
    for record in records:
        if record["autotune"]:
            for config in record["autotune"]:
                for name, value in config.items():
                    space.setdefault(name, set()).add(value)
            continue
        table = record["grid"].get("table")
        for position, block in enumerate(record["blocks"]):
            if table:
                space.setdefault(block, set()).update(row[0][position] for row in table)
            else:
                launched = value_at(record, block)
                space.setdefault(block, set()).update(max(1, int(launched * 2.0 ** k))
                                                      for k in range(-2, 3))
        launched = launched_config(record)
        for name, values in (("num_warps", NUM_WARPS), ("num_stages", NUM_STAGES)):
            space.setdefault(name, set()).update(values, [launched[name]] if name in launched else [])
    return {name: sorted(values) for name, values in space.items()}


def grid_model(text: str, records: list, names: set):
    """The user's grid, an expression of the kernel's integer arguments, its tensors' axes (ARG_shapeN)
    and the config's entries; refused unless it gives the grid the program launched, at every launch."""
    names = sorted(names | set().union(*map(grid_names, records)))
    model = expression("grid", text, names, tuples=True)
    for number, record in enumerate(records, 1):
        config = launched_config(record)
        given = grid_tuple(model({**grid_names(record), **config}))
        launched = recorded_grid(record, config)
        if launched is not None and given != grid_tuple(launched):
            raise ConfigError(f"kernel.spec: grid={text!r}: gives {given} at launch {number} "
                              f"({', '.join(f'{k}={v}' for k, v in config.items())}), where the program "
                              f"launched {grid_tuple(launched)}")
    return model


def grid_names(record: dict) -> dict:
    """What a grid expression may name at a launch: integer arguments, tensors' axes (ARG_shapeN)."""
    names = {}
    for name, arg in record["positional"] + record["keywords"]:
        if arg["kind"] == "int":
            names[name] = arg["value"]
        elif arg["kind"] == "tensor":
            names.update({f"{name}_shape{axis}": size for axis, size in enumerate(arg["shape"])})
    return {**record.get("launched", {}), **names}


def grid_tuple(grid) -> tuple:
    """A grid as Triton takes it, trailing 1s dropped (the same launch): (n,), (n, m) or (n, m, k)."""
    values = [int(g) for g in (grid if isinstance(grid, (tuple, list)) else (grid,))]
    while len(values) > 1 and values[-1] == 1:
        values.pop()
    return tuple(values)

"""What one launch record of the hook (runners/capture/launch_hook/triton_launch_hook.py) says, as a
replay (runners/capture/replay.py) reads it: whether it can be replayed (why_not), the dims that tell
launches apart, its dtype, an argument's size or value, its grid at a config, the config it ran."""
from __future__ import annotations

from typing import Optional

LAUNCH_DIM = "launch"
ADDRESS_LIKE = 1 << 40  # an int argument above this is an address, not a size
REPLAY_MAX_BYTES = 4 << 30  # a launch's tensors, each held three times (inputs, outputs, reference)
OPTIONS = ("num_warps", "num_stages")


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
        elif kind not in ("int", "float", "bool", "none", "str"):
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
    """Every integer argument (not a constexpr) whose value differs between launches; then, while two
    launches of one dtype still share their sizes, the axes of tensor arguments that tell more apart
    (named ARG_shapeN: a row count only the grid and the tensors carry); then `launch`."""
    values: dict[str, set] = {}
    for record in records:
        for name, arg in record["positional"] + record["keywords"]:
            if arg["kind"] == "int" and name not in record["constexprs"] and name not in OPTIONS:
                values.setdefault(name, set()).add(arg["value"])
            elif arg["kind"] == "tensor" and all(_tensor(r, name) for r in records):
                for axis, size in enumerate(arg["shape"]):
                    values.setdefault(f"{name}_shape{axis}", set()).add(size)
    dims = [name for name, seen in values.items() if len(seen) > 1 and "_shape" not in name
            and all(_has_int(r, name) for r in records)]

    def kinds(chosen: list) -> int:
        return len({(tuple(size_at(r, d) for d in chosen), replay_dtype(r)) for r in records})

    for name, seen in values.items():
        if kinds(dims) == len(records):
            break
        if len(seen) > 1 and name not in dims and kinds(dims + [name]) > kinds(dims):
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
    """The grid the program launched at `config`: its fixed grid, else its callable grid's value
    there as captured; None where that was not recorded."""
    grid = record["grid"]
    if "fixed" in grid:
        return tuple(grid["fixed"])
    wanted = [config.get(b, value_at(record, b)) for b in grid["blocks"]]
    for combo, evaluated in grid["table"]:
        if combo == wanted:
            return tuple(evaluated)
    return None


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

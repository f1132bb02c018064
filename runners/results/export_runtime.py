"""The lookup code of every exported module (runners/export.py copies this file below the marker line).

A generated `<kernel>_configs.py` is its data (KERNEL, DIMS, KEY, CONFIGS, COVER, BEST_BY_SHAPE as
literals) followed by the code below the marker, verbatim. That code imports nothing at module level
(the generated module imports only triton); `os` and `torch` are imported inside gpu_name(), on the
first lookup that needs the GPU's name. The names above the marker are placeholders that keep this
file importable and checkable on its own; the runner never calls it.

Lookups, for a call's sizes (the kernel's arguments named in KEY, or the dims of DIMS):
- The distance between the call and a measured shape is the Euclidean distance of the logs of the
  sizes, over the dims the call gives (4096 columns is as far from 2048 as from 8192). Shapes at the
  same distance: the larger first (product of the dims, then dim by dim), because a block that holds a
  longer row also holds a shorter one, while the converse fails.
- The measured shapes around a call: for each dim the call gives, the measured sizes next below and next
  above its size (the size itself where it was measured, the nearest alone where the call lies beyond
  the measured range), and every measured shape with those sizes, whatever its other dims: the cell of
  the grid that holds the call. Where no measured shape has them, the nearest measured shape.
- The prune keeps, at each measured shape around the call, the fastest config of COVER verified (ok)
  there among those given to autotune that pass `check` (if one was given): autotune times these few,
  one a shape at most. Where none passes at any of them, the fastest that passes at the nearest shape
  that has one. A config is verified only at the shapes it was measured ok at: at any other shape only
  `check` (the kernel's own rule) can say whether it is valid; without one, the configs around are trusted.
- config_for takes one config for each measured point of the key around the call: its winner where the
  point has one shape; where it has several (sizes of the other dims, which a call's key does not give),
  the config of COVER fastest over all of them (the least sum of log p50 / the list's fastest there).
  Where these share a form (a meta-parameter equal to the next power of two of a dim at every point,
  as a softmax block that just holds the row), the one whose form fits the call comes first; else the
  nearest first. It returns the first that passes `check`; where none does, the winner of the nearest
  shape or the configs verified there, fastest first, that pass; else the same at the next nearest shape.
- Both warn (ExportRangeWarning, once per GPU, dtype and sizes) where the call lies outside the measured
  range of a dim it gives, or farther from every measured shape than the grid's own spacing: the config
  is then extrapolated, and only a sweep at those sizes says how good it is.
- The GPU: the `gpu` argument, else the environment variable in GPU_ENV, else the name of the CUDA
  device of the call's first tensor argument (torch.cuda.get_device_name), else of the current device.
  A GPU that was never measured is an error (ExportLookupError naming the measured ones): another GPU's
  configs are used only when asked for by name.
- The Triton version: the `triton_version` argument, else the environment variable in TRITON_ENV (each
  must name a version measured on that GPU), else the running Triton's section; where it was not
  measured, the nearest older version's, else the nearest newer's, with an ExportVersionWarning naming
  both, once per GPU (configs tuned on a newer Triton may not even compile on an older one).
- The dtype: the `dtype` argument, else that of the call's first tensor argument (in the kernel's
  argument order: positional arguments, then keywords), written as in the store ("float16").
"""
import triton  # as in a generated module, whose data builds triton.Config objects

KERNEL = "placeholder"
DIMS = ()
KEY = {}
GPU_ENV = "TRITON_EXPORT_GPU"
TRITON_ENV = "TRITON_EXPORT_TRITON"
CONFIGS = []
COVER = {}
BEST_BY_SHAPE = {}

# ---- generated modules copy everything below this line ----


class ExportLookupError(LookupError):
    """No exported config for this GPU, dtype or call: the message says which, and what was measured."""


class ExportVersionWarning(UserWarning):
    """The configs used were measured with a newer Triton than the running one (filter it by this class)."""


class ExportRangeWarning(UserWarning):
    """A call's sizes lie outside the measured range of a key dim, or farther from every measured shape than
    the grid's own spacing: its config is extrapolated (filter it by this class)."""


_warned_versions = set()
_warned_sizes = set()


def version_key(version):
    """'3.6.0' -> (3, 6, 0); local parts (+git...) and suffixes (rc1) ignored."""
    import re

    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def pick_version(measured, running):
    """(the version whose section applies, how): the running one where measured ("exact"), else the
    nearest older ("older"), else the nearest newer ("newer")."""
    if running in measured:
        return running, "exact"
    older = [v for v in measured if version_key(v) <= version_key(running)]
    if older:
        return max(older, key=version_key), "older"
    return min(measured, key=version_key), "newer"


def _section(gpu, version=None):
    """Triton version -> COVER and BEST_BY_SHAPE of the section that applies on `gpu` (module doc)."""
    import os

    measured = COVER[gpu]
    wanted = version or os.environ.get(TRITON_ENV)
    if wanted:
        if wanted not in measured:
            raise ExportLookupError(f"{KERNEL}: no configs measured with Triton {wanted} on {gpu} (measured: "
                                    f"{', '.join(measured)})")
        return wanted
    picked, how = pick_version(list(measured), triton.__version__)
    if how == "newer" and gpu not in _warned_versions:
        import warnings

        _warned_versions.add(gpu)
        warnings.warn(f"{KERNEL}: configs measured with Triton {picked}, newer than the running "
                      f"{triton.__version__}, on {gpu}: no older version was measured", ExportVersionWarning)
    return picked


def gpu_name(gpu=None, device=None):
    """The GPU whose configs apply: `gpu`, else $TRITON_EXPORT_GPU, else torch's name of `device` (None:
    the current CUDA device)."""
    if gpu is not None:
        return gpu
    import os

    name = os.environ.get(GPU_ENV)
    if name:
        return name
    try:
        import torch
    except ImportError as error:
        raise ExportLookupError(f"{KERNEL}: cannot tell which GPU this is without torch; pass gpu=... "
                                f"or set {GPU_ENV} (measured: {', '.join(COVER)})") from error
    if not torch.cuda.is_available():
        raise ExportLookupError(f"{KERNEL}: no CUDA device to name; pass gpu=... or set {GPU_ENV} "
                                f"(measured: {', '.join(COVER)})")
    return torch.cuda.get_device_name(device)


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def _cover(gpu, dtype, version=None):
    """(the covering set, the Triton version of its section) for the GPU and dtype."""
    if gpu not in COVER:
        raise ExportLookupError(
            f"{KERNEL}: no configs were measured on {gpu!r} (measured: {', '.join(COVER)}); tune on it, or "
            f"pass gpu=... or set {GPU_ENV} to use another GPU's configs")
    version = _section(gpu, version)
    if dtype not in COVER[gpu][version]:
        raise ExportLookupError(f"{KERNEL}: no configs for dtype {dtype!r} on {gpu} with Triton {version} "
                                f"(measured: {', '.join(COVER[gpu][version])})")
    return COVER[gpu][version][dtype], version


def _by_distance(shapes, sizes, dims):
    """Measured shapes nearest first (log distance over the dims in `sizes`), larger first at a tie."""
    import math

    def order(shape):
        distance = math.sqrt(sum((math.log(size) - math.log(shape[dims.index(dim)])) ** 2
                                 for dim, size in sizes.items()))
        return round(distance, 9), -math.prod(shape), tuple(-n for n in shape)

    return sorted(shapes, key=order)


def _around(shapes, sizes, dims):
    """The measured shapes around a call (module doc), nearest first."""
    nearest = _by_distance(shapes, sizes, dims)
    sides = {}
    for dim, size in sizes.items():
        measured = {shape[dims.index(dim)] for shape in shapes}
        below = [n for n in measured if n < size]
        above = [n for n in measured if n > size]
        sides[dim] = {size} if size in measured else {max(below, default=None), min(above, default=None)}
    around = [shape for shape in nearest if all(shape[dims.index(dim)] in sides[dim] for dim in sizes)]
    return around or nearest[:1]


def _fastest_at(cover, shape, passes):
    """The list's fastest config verified at `shape` that passes, else None."""
    timed = [(at[shape], index) for index, (config, at) in enumerate(cover) if shape in at and passes(config)]
    return cover[min(timed)[1]][0] if timed else None


def _kept(cover, sizes, passes, dims):
    """The prune's choice (module doc): the list's fastest config at each measured shape around the call,
    else at the nearest shape that has one; each once."""
    shapes = list(dict.fromkeys(shape for _, at in cover for shape in at))
    kept = [_fastest_at(cover, shape, passes) for shape in _around(shapes, sizes, dims)]
    if all(config is None for config in kept):
        kept = [next((c for c in (_fastest_at(cover, s, passes) for s in _by_distance(shapes, sizes, dims))
                      if c is not None), None)]
    unique = {}
    for config in kept:
        if config is not None:
            unique.setdefault(_identity(config), config)
    return list(unique.values())


def _robust(cover, shapes, passes):
    """The config of the list verified at every one of `shapes` (a measured point of the key, at several
    sizes of the other dims) that is the fastest over all of them: the least sum of log(p50 / the list's
    fastest p50 there); None where no config passing was verified at all of them."""
    import math

    fastest = {shape: min(at[shape] for _, at in cover if shape in at) for shape in shapes}
    scored = [(sum(math.log(at[shape] / fastest[shape]) for shape in shapes), index)
              for index, (config, at) in enumerate(cover) if all(s in at for s in shapes) and passes(config)]
    return cover[min(scored)[1]][0] if scored else None


def _next_power_of_two(n):
    return 1 << (n - 1).bit_length()


def _choice(cover, best, sizes, passes, dims):
    """config_for's choice (module doc), else None."""
    points = {}  # each measured point of the key around the call -> its shapes, nearest first
    for shape in _around(list(best), sizes, dims):
        points.setdefault(tuple(shape[dims.index(dim)] for dim in sizes), []).append(shape)
    picks = []
    for shapes in points.values():
        pick = _robust(cover, shapes, passes) if len(shapes) > 1 else None
        picks.append((shapes[0], pick or best[shapes[0]]))
    # The form the picks share: a meta-parameter equal to the next power of two of a dim at every point.
    forms = [(name, dim) for name in picks[0][1].kwargs for dim in sizes
             if all(config.kwargs.get(name) == _next_power_of_two(shape[dims.index(dim)])
                    for shape, config in picks)]
    fitting = [config for _, config in picks
               if forms and all(config.kwargs[name] == _next_power_of_two(sizes[dim]) for name, dim in forms)]
    for config in fitting + [config for _, config in picks]:
        if passes(config):
            return config
    for shape in _by_distance(list(best), sizes, dims):  # none passed: the nearest shapes' verified configs
        verified = sorted(((at[shape], index) for index, (_, at) in enumerate(cover) if shape in at))
        for config in [best[shape]] + [cover[index][0] for _, index in verified]:
            if passes(config):
                return config
    return None


def _warn_if_far(shapes, sizes, gpu, dtype):
    """ExportRangeWarning, once per (GPU, dtype, sizes), where a call lies outside the measured range of a
    dim it gives, or farther from every measured shape than the grid's spacing (the norm, over those dims,
    of the median step between consecutive measured sizes, in log space)."""
    import math
    import statistics

    seen = (gpu, dtype, tuple(sorted(sizes.items())))
    if seen in _warned_sizes:
        return
    _warned_sizes.add(seen)
    measured = {dim: sorted({shape[DIMS.index(dim)] for shape in shapes}) for dim in sizes}
    ranges = ", ".join(f"{dim} {values[0]}..{values[-1]}" for dim, values in measured.items())
    outside = [dim for dim, values in measured.items() if not values[0] <= sizes[dim] <= values[-1]]
    steps = [statistics.median(math.log(b / a) for a, b in zip(values, values[1:])) if len(values) > 1
             else 0.0 for values in measured.values()]
    spacing = math.sqrt(sum(step ** 2 for step in steps))
    nearest = min(math.sqrt(sum(math.log(sizes[dim] / shape[DIMS.index(dim)]) ** 2 for dim in sizes))
                  for shape in shapes)
    if outside:
        why = f"outside the measured range of {', '.join(outside)}"
    elif nearest > spacing * (1 + 1e-9):
        why = (f"farther from every measured shape (log distance {nearest:.2f}) than the grid's spacing "
               f"({spacing:.2f})")
    else:
        return
    import warnings

    warnings.warn(f"{KERNEL}: {_where(sizes, gpu, dtype)} lies {why} (measured: {ranges}); its config is "
                  "extrapolated: sweep these sizes and export again", ExportRangeWarning, stacklevel=3)


def _sizes(given, key):
    """{dim: size} from sizes named by dim or by a kernel argument of `key`."""
    sizes = {}
    for name, value in given.items():
        dim = name if name in DIMS else key.get(name)
        if dim is None:
            raise ExportLookupError(f"{KERNEL}: {name!r} is neither a dim {DIMS} nor an argument of KEY "
                                    f"{key}")
        index = getattr(value, "__index__", None)  # ints, numpy ints; not floats or bools
        if index is None or isinstance(value, bool) or index() <= 0:
            raise ExportLookupError(f"{KERNEL}: size {name}={value!r} must be a positive int")
        sizes[dim] = index()
    if not sizes:
        raise ExportLookupError(f"{KERNEL}: no sizes given; name them by dim {DIMS} or by argument of "
                                f"KEY {key}")
    return sizes


def _named(sizes, key):
    """The call's sizes by dim and by kernel argument, as `check` receives them."""
    return {**sizes, **{argument: sizes[dim] for argument, dim in key.items() if dim in sizes}}


def _where(sizes, gpu, dtype):
    return f"{', '.join(f'{d}={n}' for d, n in sizes.items())} on {gpu} {dtype}"


def _identity(config):
    return (tuple(sorted(config.kwargs.items())), config.num_warps, config.num_stages,
            getattr(config, "num_ctas", 1), getattr(config, "maxnreg", None))


def _prune(configs, args, key, check, gpu, dtype, version):
    if not key:  # no map stored: the kernel's arguments named like the dims (matmul's M, N, K)
        key = {dim: dim for dim in DIMS if dim in args}
    if not key:
        raise ExportLookupError(
            f"{KERNEL}: KEY is empty and no argument is named like a dim {DIMS}: export with --key ARG=DIM "
            "or use make_prune(key={'n_cols': 'cols'})")
    missing = [argument for argument in key if argument not in args]
    if missing:
        raise ExportLookupError(f"{KERNEL}: KEY names {missing}, not arguments of this call: {sorted(args)}")
    sizes = _sizes({argument: args[argument] for argument in key}, key)
    tensors = (value for value in args.values() if hasattr(value, "dtype") and hasattr(value, "device"))
    tensor = next(tensors, None)
    if dtype is None:
        if tensor is None:
            raise ExportLookupError(f"{KERNEL}: no tensor argument to take the dtype from; use "
                                    "make_prune(dtype=...)")
        dtype = tensor.dtype
    dtype = _dtype_name(dtype)
    device = tensor.device if tensor is not None and getattr(tensor.device, "type", None) == "cuda" else None
    gpu = gpu_name(gpu, device)
    cover, _ = _cover(gpu, dtype, version)
    given = {}
    for config in configs:
        given.setdefault(_identity(config), config)
    named = _named(sizes, key)
    offered = [(given[_identity(config)], at) for config, at in cover if _identity(config) in given]
    shapes = list(dict.fromkeys(shape for _, verified in cover for shape in verified))
    _warn_if_far(shapes, sizes, gpu, dtype)
    kept = _kept(offered, sizes, lambda config: check is None or check(config, named), DIMS)
    if kept:
        return kept
    raise ExportLookupError(
        f"{KERNEL}: no exported config for {_where(sizes, gpu, dtype)}: none of the {len(configs)} configs "
        f"given to autotune was verified at a measured shape{' and passed check' if check else ''} "
        f"(measured shapes {DIMS}: {sorted(shapes)})")


def make_prune(key=None, check=None, gpu=None, dtype=None, triton_version=None):
    """An early_config_prune for @triton.autotune. key: {kernel argument: dim} (default KEY); check:
    check(config, sizes) -> bool, the kernel's own validity rule, sizes by dim and by argument name;
    gpu, dtype and triton_version: fixed instead of read from the device, the first tensor argument
    and the running Triton."""
    key = dict(KEY if key is None else key)

    def prune(configs, named_args, **kwargs):
        return _prune(configs, {**named_args, **kwargs}, key, check, gpu, dtype, triton_version)

    return prune


def prune_configs(configs, named_args, **kwargs):
    """make_prune() with the defaults: for prune_configs_by={"early_config_prune": prune_configs}."""
    return _prune(configs, {**named_args, **kwargs}, dict(KEY), None, None, None, None)


def cover_for(dtype, gpu=None, triton_version=None):
    """The covering set that applies (the module docstring: which GPU and Triton version):
    [(config, {shape where it was verified: its p50 there, us}), ...], best first."""
    return _cover(gpu_name(gpu), _dtype_name(dtype), triton_version)[0]


def config_for(dtype, *, gpu=None, check=None, triton_version=None, **sizes):
    """The config to launch with, without autotune: config_for("float16", n_cols=3000) or (cols=3000)."""
    dtype = _dtype_name(dtype)
    sizes = _sizes(sizes, KEY)
    gpu = gpu_name(gpu)
    cover, version = _cover(gpu, dtype, triton_version)
    named = _named(sizes, KEY)
    best = {shape: config for (of_dtype, shape), config in BEST_BY_SHAPE[gpu][version].items()
            if of_dtype == dtype}
    _warn_if_far(list(best), sizes, gpu, dtype)
    config = _choice(cover, best, sizes, lambda config: check is None or check(config, named), DIMS)
    if config is not None:
        return config
    raise ExportLookupError(f"{KERNEL}: no exported config for {_where(sizes, gpu, dtype)} passed check "
                            f"(measured shapes {DIMS}: {sorted(best)})")

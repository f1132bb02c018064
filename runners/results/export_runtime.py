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
- The prune keeps the configs of COVER verified (ok) at the nearest measured shape that has one,
  among those given to autotune and, if a `check` was given, passing it. A config is verified only at
  the shapes it was measured ok at: at any other shape only `check` (the kernel's own rule) can say
  whether it is valid; without one, the nearest shape's configs are trusted.
- config_for returns the winner of the nearest measured shape, or, if `check` refuses it, the first
  config verified there that passes, fastest there first; else the same at the next nearest shape.
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


_warned_versions = set()


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


def _by_distance(shapes, sizes):
    """Measured shapes nearest first (log distance over the dims in `sizes`), larger first at a tie."""
    import math

    def order(shape):
        distance = math.sqrt(sum((math.log(size) - math.log(shape[DIMS.index(dim)])) ** 2
                                 for dim, size in sizes.items()))
        return round(distance, 9), -math.prod(shape), tuple(-n for n in shape)

    return sorted(shapes, key=order)


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
    shapes = list(dict.fromkeys(shape for _, verified in cover for shape in verified))
    for shape in _by_distance(shapes, sizes):
        kept = [given[_identity(config)] for config, verified in cover
                if shape in verified and _identity(config) in given
                and (check is None or check(config, named))]
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
    for shape in _by_distance(list(best), sizes):
        verified = sorted(((at[shape], config) for config, at in cover if shape in at),
                          key=lambda item: item[0])
        for config in [best[shape]] + [config for _, config in verified]:
            if check is None or check(config, named):
                return config
    raise ExportLookupError(f"{KERNEL}: no exported config for {_where(sizes, gpu, dtype)} passed check "
                            f"(measured shapes {DIMS}: {sorted(best)})")

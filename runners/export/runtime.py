"""The lookup code of every exported module (runners/export/render.py copies this file below the marker
line, then lookup.py's: the module's entry points).

A generated `<kernel>_configs.py` is its data (KERNEL, DIMS, KEY, CONFIGS, COVER, BEST_BY_SHAPE as
literals) followed by the code below the marker, verbatim. That code imports nothing at module level
(the generated module imports only triton); `os` and `torch` are imported inside gpu_name(), on the
first lookup that needs the GPU's name. The names above the marker are placeholders that keep this
file importable and checkable on its own. lookup.LOOKUP_RULES, the rules the code follows, goes into
the generated module's docstring.
"""


class _Triton:
    """Triton, imported on first use: a generated module imports it at its top (its data builds
    triton.Config objects), while the runner imports this file for the code below the marker (the
    leave-one-out estimate plays it) without loading Triton."""

    def __getattr__(self, name):
        import triton

        return getattr(triton, name)


triton = _Triton()

KERNEL = "placeholder"
DIMS = ()
KEY = {}
GPU_ENV = "TRITON_EXPORT_GPU"
TRITON_ENV = "TRITON_EXPORT_TRITON"
CONFIGS = []
COVER = {}
BEST_BY_SHAPE = {}
ALIGNED_APART = set()

# ---- generated modules copy everything below this line ----

# Between measured points the prune keeps every listed config within SPREAD times the list's fastest at
# a measured shape around the call (module doc). 2x: on an H200 layernorm's best at 4096x12000 ran at
# half the best speed at 13004 columns, and 1.5x kept too few (BENCHMARKS.md, issue 20).
SPREAD = 2.0
# The section of interpreter timings (triton-sweep-export --interpreter), to try the flow on a CPU: used
# only where kernels run in the Triton interpreter (TRITON_INTERPRET=1), never on a GPU, whose speed it
# says nothing of.
INTERPRETER = "Triton interpreter (CPU)"
# Triton compiles a kernel apart for an integer argument divisible by 16 (a row length, a stride): a row's
# start is then known aligned and its loads can be wide, so the best config can differ between sizes that
# are multiples of 16 and sizes that are not (module doc: ALIGNED_APART).
ALIGNMENT = 16


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


def interpreting():
    """Whether kernels run in the Triton interpreter (TRITON_INTERPRET set as Triton reads it)."""
    import os

    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")


def gpu_name(gpu=None, device=None):
    """The GPU whose configs apply: `gpu`, else $TRITON_EXPORT_GPU, else INTERPRETER where kernels run in
    the interpreter and the module has its section, else torch's name of `device` (None: the current CUDA
    device)."""
    if gpu is not None:
        return gpu
    import os

    name = os.environ.get(GPU_ENV)
    if name:
        return name
    if INTERPRETER in COVER and interpreting():
        return INTERPRETER
    try:
        import torch
    except ImportError as error:
        raise ExportLookupError(f"{KERNEL}: cannot tell which GPU this is without torch; pass gpu=... "
                                f"or set {GPU_ENV} (measured: {', '.join(COVER)})") from error
    if not torch.cuda.is_available():
        hint = ("; in the Triton interpreter, an export with the interpreter's own section "
                "(triton-sweep-export --interpreter)" if interpreting() else "")
        raise ExportLookupError(f"{KERNEL}: no CUDA device to name; pass gpu=... or set {GPU_ENV} "
                                f"(measured: {', '.join(COVER)}){hint}")
    return torch.cuda.get_device_name(device)


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def _cover(gpu, dtype, version=None):
    """(the list, the Triton version of its section) for the GPU and dtype."""
    if gpu not in COVER:
        raise ExportLookupError(
            f"{KERNEL}: no configs were measured on {gpu!r} (measured: {', '.join(COVER)}); tune on it, or "
            f"pass gpu=... or set {GPU_ENV} to use another GPU's configs")
    version = _section(gpu, version)
    if dtype not in COVER[gpu][version]:
        raise ExportLookupError(f"{KERNEL}: no configs for dtype {dtype!r} on {gpu} with Triton {version} "
                                f"(measured: {', '.join(COVER[gpu][version])})")
    return COVER[gpu][version][dtype], version


def _distance_order(sizes, dims):
    """The sort key of measured shapes, nearest first (log distance over the dims in `sizes`), larger
    first at a tie."""
    import math

    logs = [(dims.index(dim), math.log(size)) for dim, size in sizes.items()]

    def order(shape):
        distance = math.sqrt(sum((log - math.log(shape[index])) ** 2 for index, log in logs))
        return round(distance, 9), -math.prod(shape), tuple(-n for n in shape)

    return order


def _by_distance(shapes, sizes, dims):
    """Measured shapes nearest first (_distance_order)."""
    return sorted(shapes, key=_distance_order(sizes, dims))


def _around(shapes, sizes, dims):
    """The measured shapes around a call (module doc), nearest first; the nearest one where none is."""
    sides = {}
    for dim, size in sizes.items():
        measured = {shape[dims.index(dim)] for shape in shapes}
        below = [n for n in measured if n < size]
        above = [n for n in measured if n > size]
        sides[dim] = {size} if size in measured else {max(below, default=None), min(above, default=None)}
    around = [shape for shape in shapes if all(shape[dims.index(dim)] in sides[dim] for dim in sizes)]
    order = _distance_order(sizes, dims)  # only the few shapes around are sorted
    if around:
        return sorted(around, key=order)
    return [min(shapes, key=order)] if shapes else []


def _is_aligned(size):
    """Whether `size` is of the kind Triton compiles apart: a multiple of ALIGNMENT."""
    return size % ALIGNMENT == 0


def _aligned_like(shapes, sizes, dims, apart):
    """The measured shapes that share the call's divisibility by ALIGNMENT, dim by dim over the dims the
    call gives, where some measured shape has it in that dim (else that dim does not filter); all of them
    where sizes are not looked up apart."""
    matching = list(shapes)
    if not apart:
        return matching
    for dim, size in sizes.items():
        index = dims.index(dim)
        same = [shape for shape in matching if _is_aligned(shape[index]) == _is_aligned(size)]
        matching = same or matching
    return matching


def _verified_at(cover, shape, passes):
    """(p50 there, index in the list) of each listed config verified at `shape` that passes."""
    return [(at[shape], index) for index, (config, at) in enumerate(cover) if shape in at and passes(config)]


def _fastest_at(cover, shape, passes):
    """The list's fastest config verified at `shape` that passes, else None."""
    timed = _verified_at(cover, shape, passes)
    return cover[min(timed)[1]][0] if timed else None


def _at_measured_point(shapes, sizes, dims):
    """Whether every one of `shapes` (the measured shapes around a call) has the call's own sizes."""
    return all(shape[dims.index(dim)] == size for shape in shapes for dim, size in sizes.items())


def _kept(cover, sizes, passes, dims, spread=SPREAD, apart=False):
    """The prune's choice (module doc): at a measured point, the list's fastest config at each of its
    shapes; between or beyond points, every listed config within `spread` times the list's fastest at some
    shape around the call; where none passes there, the fastest that passes at the nearest shape that has
    one. Each config once, in the list's order. `apart`: the shapes around are taken among those that share
    the call's divisibility by ALIGNMENT (_aligned_like)."""
    shapes = list(dict.fromkeys(shape for _, at in cover for shape in at))
    around = _around(_aligned_like(shapes, sizes, dims, apart), sizes, dims)
    if _at_measured_point(around, sizes, dims):
        kept = [_fastest_at(cover, shape, passes) for shape in around]
    else:
        kept = []
        for shape in around:
            timed = _verified_at(cover, shape, passes)
            limit = spread * min(timed)[0] if timed else 0.0
            kept += [cover[index][0] for p50, index in timed if p50 <= limit]
    if all(config is None for config in kept):
        kept = [next((c for c in (_fastest_at(cover, s, passes) for s in _by_distance(shapes, sizes, dims))
                      if c is not None), None)]
    identities = {_identity(config) for config in kept if config is not None}
    return [config for config, _ in cover if _identity(config) in identities]  # the list holds each once


def _weights(shapes, sizes, dims):
    """Each measured shape around a call -> its weight: over the dims the call gives, the product of the
    linear interpolation weights in log size between the measured sizes below and above the call (1 where
    the call's size was measured or lies beyond the measured ones)."""
    import math

    weights = dict.fromkeys(shapes, 1.0)
    for dim, size in sizes.items():
        index = dims.index(dim)
        sides = sorted({shape[index] for shape in shapes})
        if len(sides) == 2:  # measured below and above the call
            share = math.log(size / sides[0]) / math.log(sides[1] / sides[0])
            for shape in shapes:
                weights[shape] *= share if shape[index] == sides[1] else 1 - share
    return weights


def _next_power_of_two(n):
    return 1 << (n - 1).bit_length()


def _choice(cover, best, sizes, passes, dims, apart=False):
    """config_for's choice (module doc), else None; `apart` as for _kept."""
    import math

    around = _around(_aligned_like(best, sizes, dims, apart), sizes, dims)
    if len(around) == 1 and _at_measured_point(around, sizes, dims) and passes(best[around[0]]):
        return best[around[0]]
    weights = _weights(around, sizes, dims)
    fastest = {shape: min(at[shape] for _, at in cover if shape in at) for shape in around}

    def loss(at):  # the interpolated log loss over the shapes around where the config was verified
        verified = [s for s in around if s in at]
        total = sum(weights[s] * math.log(at[s] / fastest[s]) for s in verified)
        return total / sum(weights[s] for s in verified)

    candidates = [index for index, (config, at) in enumerate(cover)
                  if passes(config) and any(s in at for s in around)]
    # The form the winners around share: a meta-parameter equal to the next power of two of a dim at
    # every one of them (a softmax block that just holds the row); a config of that form at the call's
    # size comes first, though it could not be verified at all of them (a block too short for the
    # longer row around).
    winners = [best[shape] for shape in around]
    forms = [(name, dim) for name in winners[0].kwargs for dim in sizes
             if all(config.kwargs.get(name) == _next_power_of_two(shape[dims.index(dim)])
                    for shape, config in zip(around, winners))]
    fitting = [index for index in candidates
               if forms and all(cover[index][0].kwargs.get(name) == _next_power_of_two(sizes[dim])
                                for name, dim in forms)]
    everywhere = {index for index in candidates if all(s in cover[index][1] for s in around)}
    if fitting or everywhere:  # of the fitting ones, those verified at every shape around first
        return cover[min(fitting or everywhere,
                         key=lambda index: (index not in everywhere, loss(cover[index][1]), index))][0]
    for shape in _by_distance(list(best), sizes, dims):  # none verified around: the nearest shapes' configs
        verified = sorted(((at[shape], index) for index, (_, at) in enumerate(cover) if shape in at))
        for config in [best[shape]] + [cover[index][0] for _, index in verified]:
            if passes(config):
                return config
    return None


def _multiple(size):
    return f"{'' if _is_aligned(size) else 'not '}a multiple of {ALIGNMENT}"


def _warn_if_far(shapes, sizes, gpu, dtype, apart):
    """ExportRangeWarning where a call's size is of a kind (a multiple of ALIGNMENT or not) that no measured
    size of its dim is, once per (GPU, dtype, dim, kind); and, once per (GPU, dtype, sizes), where it lies
    outside the measured range of a dim it gives, or farther from every measured shape than the grid's
    spacing (the norm, over those dims, of the median step between consecutive measured sizes in log
    space); where sizes are looked up apart (`apart`), measured among the shapes of the call's kind. The
    steps are those between sizes of the call's kind where it has three or more in that dim: a grid that
    measures both kinds may pair them (1020 and 1024), and its steps within a pair are no spacing."""
    import math
    import statistics
    import warnings

    every = {dim: sorted({shape[DIMS.index(dim)] for shape in shapes}) for dim in sizes}
    of_kind = {dim: [value for value in values if _is_aligned(value) == _is_aligned(sizes[dim])]
               for dim, values in every.items()}
    for dim, size in sizes.items():
        kind = (gpu, dtype, dim, _is_aligned(size))
        if not of_kind[dim] and kind not in _warned_sizes:
            _warned_sizes.add(kind)
            warnings.warn(f"{KERNEL}: {dim}={size} on {gpu} {dtype} is {_multiple(size)}, unlike every "
                          f"measured {dim}: Triton compiles a kernel apart for such sizes, whose speed was "
                          "not measured: sweep sizes of this kind and export again", ExportRangeWarning,
                          stacklevel=3)
    seen = (gpu, dtype, tuple(sorted(sizes.items())))
    if seen in _warned_sizes:
        return
    _warned_sizes.add(seen)
    spaced = [of_kind[dim] if len(of_kind[dim]) >= 3 else values for dim, values in every.items()]
    steps = [statistics.median(math.log(b / a) for a, b in zip(values, values[1:])) if len(values) > 1
             else 0.0 for values in spaced]
    spacing = math.sqrt(sum(step ** 2 for step in steps))
    shapes = _aligned_like(shapes, sizes, DIMS, apart)
    measured = {dim: sorted({shape[DIMS.index(dim)] for shape in shapes}) for dim in sizes}
    ranges = ", ".join(f"{dim} {values[0]}..{values[-1]}" for dim, values in measured.items())
    outside = [dim for dim, values in measured.items() if not values[0] <= sizes[dim] <= values[-1]]
    nearest = min(math.sqrt(sum(math.log(sizes[dim] / shape[DIMS.index(dim)]) ** 2 for dim in sizes))
                  for shape in shapes)
    if outside:
        why = f"outside the measured range of {', '.join(outside)}"
    elif nearest > spacing * (1 + 1e-9):
        why = (f"farther from every measured shape (log distance {nearest:.2f}) than the grid's spacing "
               f"({spacing:.2f})")
    else:
        return
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


def _prune(configs, args, key, check, gpu, dtype, version, spread=SPREAD):
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
    cover, version = _cover(gpu, dtype, version)
    apart = (gpu, version, dtype) in ALIGNED_APART
    given = {}
    for config in configs:
        given.setdefault(_identity(config), config)
    named = _named(sizes, key)
    offered = [(given[_identity(config)], at) for config, at in cover if _identity(config) in given]
    shapes = list(dict.fromkeys(shape for _, verified in cover for shape in verified))
    _warn_if_far(shapes, sizes, gpu, dtype, apart)
    kept = _kept(offered, sizes, lambda config: check is None or check(config, named), DIMS, spread, apart)
    if kept:
        return kept
    raise ExportLookupError(
        f"{KERNEL}: no exported config for {_where(sizes, gpu, dtype)}: none of the {len(configs)} configs "
        f"given to autotune was verified at a measured shape{' and passed check' if check else ''} "
        f"(measured shapes {DIMS}: {sorted(shapes)})")


def make_prune(key=None, check=None, gpu=None, dtype=None, triton_version=None, spread=SPREAD):
    """An early_config_prune for @triton.autotune. key: {kernel argument: dim} (default KEY); check:
    check(config, sizes) -> bool, the kernel's own validity rule, sizes by dim and by argument name;
    gpu, dtype and triton_version: fixed instead of read from the device, the first tensor argument
    and the running Triton; spread: between measured points, keep the listed configs within this factor
    of the list's fastest at a shape around the call (SPREAD; 1.0 keeps only the fastest there)."""
    key = dict(KEY if key is None else key)
    if not (isinstance(spread, (int, float)) and spread >= 1):
        raise ValueError(f"make_prune: spread={spread!r} must be a number >= 1 (1.0: the fastest alone)")

    def prune(configs, named_args, **kwargs):
        return _prune(configs, {**named_args, **kwargs}, key, check, gpu, dtype, triton_version, spread)

    return prune

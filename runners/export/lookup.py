"""The end of the lookup code every exported module carries: its entry points (do_bench, prune_configs,
cover_for, config_for), which render.py copies below runtime.py's code, and LOOKUP_RULES, the rules that
code follows, which goes into the generated module's docstring. The names imported above the marker are
runtime.py's, so that this file is importable and checkable on its own; the runner never calls it.
"""
from triton_sweep.export.runtime import (ALIGNED_APART, BEST_BY_SHAPE, DIMS, KERNEL, KEY, ExportLookupError,
                                         _choice, _cover, _dtype_name, _named, _prune, _sizes, _warn_if_far,
                                         _where, gpu_name, interpreting)

# The rules the code below the marker follows: the end of every generated module's docstring (render.py).
LOOKUP_RULES = """Lookups, for a call's sizes (the kernel's arguments named in KEY, or the dims of DIMS):
- The distance between the call and a measured shape is the Euclidean distance of the logs of the
  sizes, over the dims the call gives (4096 columns is as far from 2048 as from 8192). Shapes at the
  same distance: the larger first (product of the dims, then dim by dim), because a block that holds a
  longer row also holds a shorter one, while the converse fails.
- The measured shapes around a call: for each dim the call gives, the measured sizes next below and next
  above its size (the size itself where it was measured, the nearest alone where the call lies beyond
  the measured range), and every measured shape with those sizes, whatever its other dims: the cell of
  the grid that holds the call. Where no measured shape has them, the nearest measured shape.
- Sizes that are multiples of 16 and sizes that are not: Triton compiles a kernel apart for each kind (a
  row's start known aligned, wide loads), and a kernel's best config can differ between them. In the
  sections of ALIGNED_APART, where the export's leave-one-out estimate was higher so, the shapes around a
  call are taken among the measured shapes of its kind, dim by dim where that kind was measured.
- The prune keeps, among the configs given to autotune that are listed in COVER and pass `check` (if one
  was given): at a measured point of the key (every shape around has the call's sizes), the fastest
  verified (ok) at each shape around, since it was measured there; between or beyond measured points,
  every config within SPREAD (2x) of the fastest verified at some shape around: a config's speed moves
  between measured sizes (a block's ragged last tile, a wave of programs more or less), so the best
  there can be one that was behind at every point around, and autotune times what is kept. Where none
  passes at any of them, the fastest that passes at the nearest shape that has one. A config is verified
  only at the shapes it was measured ok at: at any other shape only `check` (the kernel's own rule) can
  say whether it is valid; without one, the configs around are trusted.
- config_for takes the key's sizes and any other dim of DIMS the caller knows (the rows of a row-wise
  kernel, which autotune's key cannot carry): every dim given narrows the shapes around. At a measured
  shape (the sizes given measured at one shape) it returns its winner; elsewhere the listed config with
  the least interpolated loss: the mean over the shapes around where it was verified of log(p50 / the
  list's fastest there), weighted linearly in log size between the measured sizes below and above the
  call (dim by dim; shapes that differ only in dims not given weigh the same). The configs verified at
  every shape around compete; where the winners around share a form (a meta-parameter equal to the next
  power of two of a dim at each of them, as a softmax block that just holds the row), the configs of
  that form at the call's size come first, those verified at every shape around before the others (a
  block too short for the longer row around). Only configs that pass `check`; where none does, the
  winner of the nearest shape or the configs verified there, fastest first, that pass; else the same at
  the next nearest shape.
- do_bench, for @triton.autotune(do_bench=...), times as the sweep did (the L2 evicted by a read, the
  median of CUDA-event times), so that autotune ranks near-tied configs in the sweep's order: Triton's
  own benchmarker zeroes a buffer to flush the L2, and the dirty lines it leaves are written back during
  a 4-40 us kernel, enough to reorder configs a few % apart. In the Triton interpreter
  (TRITON_INTERPRET=1) it takes the median wall time of calls on the host.
- Both warn (ExportRangeWarning, once per GPU, dtype and sizes) where the call lies outside the measured
  range of a dim it gives, or farther from every measured shape than the grid's own spacing: the config
  is then extrapolated, and only a sweep at those sizes says how good it is. Also once per GPU, dtype,
  dim and kind, where a size is of a kind (a multiple of 16 or not) that no measured size of its dim is.
- The GPU: the `gpu` argument, else the environment variable in GPU_ENV, else INTERPRETER where kernels
  run in the Triton interpreter (TRITON_INTERPRET=1) and the module has the interpreter's section (its
  timings, exported with --interpreter to try the flow on a CPU), else the name of the CUDA device of
  the call's first tensor argument (torch.cuda.get_device_name), else of the current device. A GPU that
  was never measured is an error (ExportLookupError naming the measured ones): another GPU's configs
  are used only when asked for by name, the interpreter's only in the interpreter or by name.
- The Triton version: the `triton_version` argument, else the environment variable in TRITON_ENV (each
  must name a version measured on that GPU), else the running Triton's section; where it was not
  measured, the nearest older version's, else the nearest newer's, with an ExportVersionWarning naming
  both, once per GPU (configs tuned on a newer Triton may not even compile on an older one).
- The dtype: the `dtype` argument, else that of the call's first tensor argument (in the kernel's
  argument order: positional arguments, then keywords), written as in the store ("float16").
"""

# ---- generated modules copy everything below this line ----

_flush_buffers = {}


def _quantiles(times, quantiles):
    """The median of `times` (sorted, ms), or the `quantiles` asked, interpolated linearly between the order
    statistics."""
    def quantile(q):
        position = q * (len(times) - 1)
        low = int(position)
        high = min(low + 1, len(times) - 1)
        return times[low] + (times[high] - times[low]) * (position - low)

    return [quantile(q) for q in quantiles] if quantiles else quantile(0.5)


def _wall_bench(fn, quantiles, rep):
    """do_bench in the Triton interpreter, which runs kernels on the host: each call's wall time, about
    `rep` ms of calls (3 at least) after a first one."""
    import time

    fn()
    times = []
    began = time.perf_counter()
    while len(times) < 3 or time.perf_counter() - began < rep / 1e3:
        start = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - start))
    return _quantiles(sorted(times), quantiles)


def do_bench(fn, quantiles=None, warmup=25, rep=100, **_):
    """A timer for @triton.autotune(..., do_bench=do_bench) that ranks configs as the sweep did (module
    doc): `fn` run for about `warmup` ms, then timed alone about `rep` ms long (10 times at least), each
    call after a read of a buffer twice the L2 (a read leaves no dirty lines to write back), enqueued
    64 at a time behind a spin that holds the GPU (else the host, tens of us a call, falls behind a short
    kernel and the events time the launch); the median in ms, or the `quantiles` asked (autotune asks
    for (0.5, 0.2, 0.8) and ranks by the first). In the Triton interpreter: the wall clock of each call."""
    import time

    if interpreting():
        return _wall_bench(fn, quantiles, rep)
    import torch

    device = torch.cuda.current_device()
    if device not in _flush_buffers:
        l2_bytes = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
        _flush_buffers[device] = torch.ones(max(2 * l2_bytes, 16 << 20) // 4, dtype=torch.int32,
                                            device=f"cuda:{device}")
    flush = _flush_buffers[device]

    def events(n):
        return [torch.cuda.Event(enable_timing=True) for _ in range(n)]

    fn()  # compiles where it has not yet
    torch.cuda.synchronize()
    start, end = events(2)
    began = time.perf_counter()
    start.record()
    for _ in range(5):
        flush.sum()
        fn()
    end.record()
    host_s = (time.perf_counter() - began) / 5  # the host's time to enqueue a call
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 5, 1e-3)  # ms a flushed call
    for _ in range(max(1, int(warmup / estimate))):
        fn()
    n = max(10, int(rep / estimate))
    starts, ends = events(n), events(n)
    for first in range(0, n, 64):
        chunk = range(first, min(first + 64, n))
        torch.cuda._sleep(int(1.25 * host_s * len(chunk) * 2e9))  # cycles, at a clock of 2 GHz or less
        for i in chunk:
            flush.sum()
            starts[i].record()
            fn()
            ends[i].record()
    torch.cuda.synchronize()
    return _quantiles(sorted(s.elapsed_time(e) for s, e in zip(starts, ends)), quantiles)


def prune_configs(configs, named_args, **kwargs):
    """make_prune() with the defaults: for prune_configs_by={"early_config_prune": prune_configs}."""
    return _prune(configs, {**named_args, **kwargs}, dict(KEY), None, None, None, None)


def cover_for(dtype, gpu=None, triton_version=None):
    """The list that applies (the module docstring: which GPU and Triton version): the covering set, best
    first, then the alternates: [(config, {shape where it was verified: its p50 there, us}), ...]."""
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
    apart = (gpu, version, dtype) in ALIGNED_APART
    _warn_if_far(list(best), sizes, gpu, dtype, apart)
    config = _choice(cover, best, sizes, lambda config: check is None or check(config, named), DIMS, apart)
    if config is not None:
        return config
    raise ExportLookupError(f"{KERNEL}: no exported config for {_where(sizes, gpu, dtype)} passed check "
                            f"(measured shapes {DIMS}: {sorted(best)})")

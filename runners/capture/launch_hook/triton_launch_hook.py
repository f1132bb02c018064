"""Counts the Triton launches of the process it runs in (`python -m triton_sweep.capture` puts this directory
first on the program's PYTHONPATH; its sitecustomize.py calls install()). Self-contained: it imports
nothing of this project, so it never shadows a module of the program it watches.

Per @triton.jit function it counts each combination of the launch's int and bool arguments (values) and
tensor arguments (dtype and shape) launched; launches made while an @triton.autotune benchmarks its
configs are counted apart (`tuning_calls`). The hook is Triton's per-function pre-run hook, added to
every @triton.jit function as it is made (where there is none, its `run` is wrapped). The counts go to
$TRITON_CAPTURE_DIR/launches-<pid>.json at a normal exit and at a forked worker's end; not counted:
fn.warmup(), a process killed by a signal (close() and join() a Pool rather than let it SIGTERM its
workers), a captured CUDA graph's replays, torch.compile's kernels. With $TRITON_CAPTURE_REPLAY set, the
first launches of each combination also record what running them again takes (_launch_record)."""
import atexit
import importlib.abc
import importlib.util
import json
import os
import sys
import threading
import time

_counts = {}  # "module.qualname" -> [the jit function, {launch key: [calls, tuning_calls]}]
_state = threading.local()  # .tuning: inside an @triton.autotune benchmark on this thread
_seconds = [0.0]  # time spent in the hook, for the overhead the capture reports
_records = {}  # "module.qualname" -> {launch key: what a replay of that launch needs}
_wrappers = {}  # id of a @triton.jit function -> {"autotune": [configs], "heuristics": [names]}
REPLAY = bool(os.environ.get("TRITON_CAPTURE_REPLAY"))
REPLAY_LAUNCHES = 64  # launch records kept per function: a program's distinct shapes, not its every call
VALUES_BOUND = 65536  # integer tensors up to this many elements are recorded with their values
WATCHED = ("triton.runtime.jit", "triton.runtime.interpreter", "triton.runtime.autotuner")


SIMPLE = frozenset((int, bool))  # recorded as they are: sizes and flags (a constexpr choosing an epilogue)


class _NotALaunch(Exception):
    """fn.warmup() with MockTensors: Triton runs the pre-run hooks for it, but nothing runs on the GPU."""


def _recorded(value):
    """What a launch records of an argument that is not an int or a bool: a tensor's (dtype, shape) as
    torch gives them (named at the exit), an integer of another type (numpy's) as an int, else None (a
    float scale, a None, a string)."""
    if not hasattr(value, "data_ptr"):
        if hasattr(value, "__index__") and not isinstance(value, float):
            return int(value)
        value = getattr(value, "base", None)  # a tensor descriptor: its tensor
        if value is None or not hasattr(value, "data_ptr"):
            return None
    if value.__class__.__name__ == "MockTensor":
        raise _NotALaunch
    return (value.dtype, value.shape)


def _hook_for(jit_function):
    fn = getattr(jit_function, "fn", jit_function)
    name = f"{fn.__module__}.{fn.__qualname__}"
    counts = _counts.setdefault(name, [jit_function, {}])[1]
    records = _records.setdefault(name, {})

    def hook(*args, grid=None, **kwargs):
        # At every launch: kept to list comprehensions and one dict lookup (about 3-8 us a launch).
        began = time.perf_counter()
        try:
            key = (tuple([v if v.__class__ in SIMPLE else _recorded(v) for v in args]), tuple(kwargs),
                   tuple([v if v.__class__ in SIMPLE else _recorded(v) for v in kwargs.values()]))
            slot = counts.get(key)
            if slot is None:
                slot = counts[key] = [0, 0]
            tuning = getattr(_state, "tuning", False)
            # The program's own first launch of the key (an autotuner's benchmark may have made it first);
            # none while a CUDA graph is captured (copying an integer tensor to the host would break it).
            if REPLAY and not tuning and key not in records and len(records) < REPLAY_LAUNCHES \
                    and not _capturing_graph():
                records[key] = _launch_record(jit_function, args, kwargs, grid)
            slot[1 if tuning else 0] += 1
        except Exception:  # a warmup, or an argument nothing here foresaw: never the program's failure
            pass
        _seconds[0] += time.perf_counter() - began

    return hook


def _capturing_graph() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized()
                and torch.cuda.is_current_stream_capturing())


def _is_constexpr(parameter) -> bool:
    annotation = parameter.annotation
    return "constexpr" in (annotation if isinstance(annotation, str) else getattr(annotation, "__name__", ""))


def _described(value) -> dict:
    """An argument as a replay rebuilds it: a tensor by its layout (and an integer tensor's values, up
    to VALUES_BOUND elements), a number, bool, None, string or Triton dtype as it is; anything else by its
    type."""
    if value is None or isinstance(value, (bool, int, float, str)):
        kind = "none" if value is None else type(value).__name__
        return {"kind": kind, "value": value}
    if hasattr(value, "__index__") and not hasattr(value, "data_ptr"):
        return {"kind": "int", "value": int(value)}
    language = sys.modules.get("triton.language")
    if language is not None and type(value) is language.dtype:  # a constexpr: compute_type=tl.bfloat16
        return {"kind": "tl_dtype", "value": str(value)}
    if not hasattr(value, "data_ptr"):
        kind = "descriptor" if hasattr(value, "base") else type(value).__name__
        return {"kind": kind, "value": None}
    extent = value.storage_offset() + 1 + sum((size - 1) * stride for size, stride in
                                              zip(value.shape, value.stride()) if size > 0)
    described = {"kind": "tensor", "dtype": str(value.dtype).replace("torch.", ""),
                 "shape": list(value.shape), "stride": list(value.stride()),
                 "offset": value.storage_offset(), "extent": extent if value.numel() else 0,
                 "device": str(value.device), "nbytes": value.numel() * value.element_size(),
                 # where its memory starts, to find arguments that share memory (one buffer, two views)
                 "storage": value.untyped_storage().data_ptr(), "itemsize": value.element_size()}
    if not value.is_floating_point() and not value.is_complex() and value.numel() <= VALUES_BOUND:
        described["values"] = value.detach().cpu().tolist()
    return described


def _blocks(named: dict, constexprs: set, made: set) -> list[str]:
    """The meta-parameters a replay varies: constexpr ints named like a block (BLOCK_SIZE, BLOCK_M) that
    no @triton.heuristics computes. Other constexprs (a head count, a padded size) keep their values."""
    return [name for name in named if name in constexprs and name not in made and "BLOCK" in name.upper()
            and isinstance(named[name], int) and not isinstance(named[name], bool)]


def _grid_table(grid, named: dict, blocks: list[str], configs: list) -> dict:
    """A callable grid evaluated at the launch's meta-parameters, at the powers of two around each block
    (1/4x to 4x; fewer where there are many blocks) and at each autotune config: a table keyed by the
    blocks and every other meta-parameter an autotune config sets (BS, which the grid may read too)."""
    import itertools

    options = ("num_warps", "num_stages", "num_ctas", "maxnreg")
    keys = blocks + sorted({k for config in configs for k in config
                            if k not in blocks and k not in options and k in named})
    reach = (-2, -1, 0, 1, 2) if len(blocks) <= 3 else (-1, 0, 1) if len(blocks) <= 5 else (0,)
    values = [sorted({max(1, int(named[b] * 2.0 ** k)) for k in reach}) for b in blocks]
    launched = tuple(named[k] for k in keys[len(blocks):])
    combos = {combo + launched for combo in itertools.product(*values)}
    combos |= {tuple(config.get(k, named[k]) for k in keys) for config in configs}
    table = []
    for combo in sorted(combos):
        evaluated = grid({**named, **dict(zip(keys, combo))})
        table.append([list(combo), [int(g) for g in (evaluated if isinstance(evaluated, tuple)
                                                          else tuple(evaluated))]])
    return {"blocks": keys, "table": table}


def _launch_record(jit_function, args: tuple, kwargs: dict, grid) -> dict:
    """What a replay of this launch needs (runners/capture/replay.py runs it); grid: the launch's grid.

    Made for the first launch of each combination, at most REPLAY_LAUNCHES a function: every argument (a
    tensor's dtype, shape, strides, storage offset and device, and the values of an integer or bool
    tensor of at most VALUES_BOUND elements; a number, a bool, None as they are), which are constexprs,
    the launch's options (num_warps, num_stages), the grid (a tuple as it is; a callable one evaluated
    for the launched meta-parameters and for the powers of two around each BLOCK-like one: a table), the
    configs of an @triton.autotune around it and the names an @triton.heuristics computes. For this,
    every function's `run` is wrapped (its pre-run hooks do not see the grid)."""
    import inspect

    fn = getattr(jit_function, "fn", jit_function)
    parameters = inspect.signature(fn).parameters
    constexprs = {name for name, parameter in parameters.items() if _is_constexpr(parameter)}
    names = list(parameters)
    named = {name: parameter.default for name, parameter in parameters.items()
             if parameter.default is not inspect.Parameter.empty}
    named.update(zip(names, args))
    named.update({k: v for k, v in kwargs.items() if k in parameters})
    wrappers = _wrappers.get(id(jit_function), {})
    configs = wrappers.get("autotune", [])
    made = set(wrappers.get("heuristics", []))
    blocks = _blocks(named, constexprs, made)
    if callable(grid):
        try:
            grid_record = _grid_table(grid, named, blocks, configs)
        except Exception as error:  # the grid reads more than the arguments: the launch's own only
            grid_record = {"blocks": blocks, "table": [[[named[b] for b in blocks],
                                                        [int(g) for g in grid(named)]]],
                           "note": f"evaluated at the launched meta-parameters only ({error!r})"}
    else:
        grid_record = {"fixed": [int(g) for g in grid]} if grid is not None else {"fixed": None}
    return {"file": inspect.getsourcefile(fn), "module": fn.__module__, "qualname": fn.__qualname__,
            "positional": [[name, _described(value)] for name, value in zip(names, args)],
            "keywords": [[name, _described(value)] for name, value in kwargs.items()],
            "constexprs": sorted(constexprs), "blocks": blocks, "grid": grid_record,
            "launched": {block: named[block] for block in blocks},  # a block left at its default too
            "autotune": configs, "heuristics": sorted(made), "path0": sys.path[0]}


def _named(jit_function, key) -> dict:
    """A launch key as JSON: argument name -> int, bool or [dtype, shape]; the others left out."""
    positional, keyword_names, keyword_values = key
    names = list(getattr(jit_function, "arg_names", ()))
    named = {}
    for name, value in list(zip(names, positional)) + list(zip(keyword_names, keyword_values)):
        if isinstance(value, tuple):
            value = [str(value[0]).replace("torch.", ""), list(value[1])]
        if value is not None:
            named[name] = value
    return named


def _attach(jit_function):
    hook = _hook_for(jit_function)
    if hasattr(jit_function, "add_pre_run_hook") and not REPLAY:
        jit_function.add_pre_run_hook(hook)
        return
    run = jit_function.run

    def run_with_hook(*args, grid, warmup, **kwargs):
        if not warmup:
            hook(*args, grid=grid, **kwargs)
        return run(*args, grid=grid, warmup=warmup, **kwargs)

    jit_function.run = run_with_hook


def _patch(module):
    if module.__name__ == "triton.runtime.autotuner":
        tuner = module.Autotuner
        bench = tuner._bench

        def _bench(self, *args, **kwargs):
            _state.tuning = True
            try:
                return bench(self, *args, **kwargs)
            finally:
                _state.tuning = False

        tuner._bench = _bench
        for cls in (tuner, module.Heuristics):
            _remember_wrapper(cls, (tuner, module.Heuristics))
        return
    cls = module.JITFunction if module.__name__ == "triton.runtime.jit" else module.InterpretedFunction
    init = cls.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        _attach(self)

    cls.__init__ = __init__


def _remember_wrapper(cls, wrappers: tuple):
    """An @triton.autotune's configs and an @triton.heuristics's names, kept for the @triton.jit
    function they wrap (for a replay's space); their subclasses' (a library's own autotuner) too."""
    init = cls.__init__

    def __init__(self, fn, *args, **kwargs):
        init(self, fn, *args, **kwargs)
        inner = fn
        while isinstance(inner, wrappers):
            inner = inner.fn
        into = _wrappers.setdefault(id(inner), {})
        if hasattr(self, "configs"):
            into["autotune"] = [{**config.kwargs, "num_warps": config.num_warps,
                                 "num_stages": config.num_stages} for config in self.configs]
        else:
            into.setdefault("heuristics", []).extend(self.values)

    cls.__init__ = __init__


class _Finder(importlib.abc.MetaPathFinder):
    """Patches a watched Triton module right after it is executed, before any kernel is defined."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in WATCHED:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


def _write():
    folder = os.environ.get("TRITON_CAPTURE_DIR")
    if not folder:
        return
    functions = []
    for name, (jit_function, counts) in _counts.items():
        records = _records.get(name, {})
        launches = [{"args": _named(jit_function, key), "calls": calls, "tuning_calls": tuning,
                     **({"replay": records[key]} if key in records else {})}
                    for key, (calls, tuning) in counts.items()]
        if launches:
            functions.append({"function": name, "launches": launches})
    record = {"pid": os.getpid(), "argv": sys.argv, "hook_seconds": _seconds[0], "functions": functions}
    path = os.path.join(folder, f"launches-{os.getpid()}.json")
    with open(path + ".tmp", "w") as handle:
        json.dump(record, handle)
    os.replace(path + ".tmp", path)


def _in_forked_child():
    """A forked child starts with its parent's counts: empty them, and write its own at its end, also
    where it ends by os._exit after multiprocessing's finalizers (a forked Process or Pool worker)."""
    for _, counts in _counts.values():
        counts.clear()
    _seconds[0] = 0.0
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        util.Finalize(None, _write, exitpriority=100)
        # A multiprocessing child empties the finalizers as it starts, then runs the after-fork callbacks.
        util.register_after_fork(_write, lambda _: util.Finalize(None, _write, exitpriority=100))


def install():
    for name in WATCHED:  # already imported (by another sitecustomize): patched now
        if name in sys.modules:
            _patch(sys.modules[name])
    sys.meta_path.insert(0, _Finder())
    atexit.register(_write)
    os.register_at_fork(after_in_child=_in_forked_child)

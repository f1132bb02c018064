"""Counts the Triton launches of the process it runs in (`python -m runners.capture` puts this directory
first on the program's PYTHONPATH; its sitecustomize.py calls install()). Self-contained: it imports
nothing of this project, so it never shadows a module of the program it watches.

Per @triton.jit function (its module and qualified name) it counts how many times each combination of
the launch's int and bool arguments (values) and tensor arguments (dtype and shape; a tensor
descriptor's base tensor) was launched; launches made while an @triton.autotune benchmarks its configs
are counted apart (`tuning_calls`): they are the tuner's, not the program's.

The hook is Triton's per-function pre-run hook (JITFunction.add_pre_run_hook: called with the launch's
arguments before every run), added to every @triton.jit function as it is made; where a function has
none (the interpreter before triton 3.6) its `run` is wrapped to call the same hook. Triton's global
launch_enter_hook sees a launch's name and stream, not its arguments, so it cannot give shapes.
At the process's exit the counts are written to $TRITON_CAPTURE_DIR/launches-<pid>.json: at a normal
exit, and in a forked multiprocessing worker at its end; a forked child starts with none of its
parent's counts. Not counted: fn.warmup() (nothing runs); a process killed by a signal, such as the
workers a `with Pool(...)` block ends with SIGTERM (a handler writing the counts there proved unreliable
and once hung the pool: close() and join() the pool instead); what never goes through a JITFunction's
run: the replays of a captured CUDA graph, the kernels torch.compile generates.
"""
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
    counts = _counts.setdefault(f"{fn.__module__}.{fn.__qualname__}", [jit_function, {}])[1]

    def hook(*args, **kwargs):
        # At every launch: kept to list comprehensions and one dict lookup (about 3-8 us a launch).
        began = time.perf_counter()
        try:
            key = (tuple([v if v.__class__ in SIMPLE else _recorded(v) for v in args]), tuple(kwargs),
                   tuple([v if v.__class__ in SIMPLE else _recorded(v) for v in kwargs.values()]))
            slot = counts.get(key)
            if slot is None:
                slot = counts[key] = [0, 0]
            slot[1 if getattr(_state, "tuning", False) else 0] += 1
        except Exception:  # a warmup, or an argument nothing here foresaw: never the program's failure
            pass
        _seconds[0] += time.perf_counter() - began

    return hook


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
    if hasattr(jit_function, "add_pre_run_hook"):
        jit_function.add_pre_run_hook(hook)
        return
    run = jit_function.run

    def run_with_hook(*args, grid, warmup, **kwargs):
        if not warmup:
            hook(*args, **kwargs)
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
        return
    cls = module.JITFunction if module.__name__ == "triton.runtime.jit" else module.InterpretedFunction
    init = cls.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        _attach(self)

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
        launches = [{"args": _named(jit_function, key), "calls": calls, "tuning_calls": tuning}
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

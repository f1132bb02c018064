"""The compile phase: every config's binary built by a pool of processes before the GPU worker needs it.

Each compile worker runs Triton's real compiler for the GPU's target (from NVML, confirmed by the GPU
workers) through a driver that knows that target and nothing else (runners/engine/internals.py:
CompileOnly): no CUDA context, no GPU memory, no launch, so compiling never disturbs the timing beside it,
and runs on a machine without a GPU. The launcher runs on meta tensors, each @triton.jit launch in it a
compile whose binary lands in the Triton cache, where the GPU worker's first call only loads it. The
workers are forked from a fork server that imported torch, Triton and the kernel's module once, each the
leader of its own process group (a compile past its timeout is killed with its ptxas). Outcomes: None
(built), compile_error, out_of_resources, timeout; any other exception is the launcher's (it read a meta
tensor's value, say), and the trial is left to the GPU worker. A Triton without what this needs gets no
pool (compile_workers): each GPU worker compiles in its first call."""
from __future__ import annotations

import os
import time
from typing import Optional

from triton_sweep.engine.fork_server import ForkServer
from triton_sweep.engine.process import WorkerProcess
from triton_sweep.model.trial import Trial
from triton_sweep.measure import check

BUILT = None  # the outcome of a successful compile
DEFERRED = "deferred"  # not decided here; the GPU worker compiles it


# Below the GPU workers, the torch.compile worker and the sweep's own process: a pool of one process a
# core took a fifth of each core from their imports and first calls (the README sweep's torch.compile
# worker imported in 11.8 s beside it on an H200 host, 8.6-9.0 s alone), and gets every core they leave.
COMPILE_NICENESS = 10


def _compile_main(conn, kernel_name: str, spec_path: Optional[str]) -> None:
    os.nice(COMPILE_NICENESS)  # ptxas, which it starts, inherits it
    import torch

    from triton_sweep.engine.internals import CompileOnly
    from triton_sweep.model.spec_sources import load_spec

    spec = load_spec(kernel_name, spec_path)
    compiling = CompileOnly()
    conn.send(("ready", {"pid": os.getpid()}))
    while True:
        message = conn.recv()
        if message is None:
            return
        _, trial, target = message
        compiling.set_target(target)
        compiling.compiled.clear()
        conn.send(("compiled", compile_trial(spec, trial, torch, compiling.compiled)))


def compile_trial(spec, trial: Trial, torch, compiled: list) -> dict:
    """Run the launcher on meta tensors with launches turned into compiles; classify what happened.
    A build reports the most shared memory one of its kernels needs (`shared_bytes`, with that
    kernel's name): whether the device has that much is the scheduler's call, which knows the device."""
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources

    began = time.perf_counter()
    try:
        inputs = spec.make_inputs(trial.shape, getattr(torch, trial.dtype), 0, torch.device("meta"))
        spec.launch(inputs, spec.output_like(inputs), trial.config)
    except CompilationError as error:
        return _outcome(check.STATUS_COMPILE_ERROR, f"CompilationError: {error}", began)
    except OutOfResources as error:
        return _outcome(check.STATUS_OUT_OF_RESOURCES, f"OutOfResources: {error}", began)
    except Exception as error:
        return _outcome(DEFERRED, f"{type(error).__name__}: {error}", began)
    outcome = _outcome(BUILT, None, began)
    for kernel in compiled:
        shared = getattr(getattr(kernel, "metadata", None), "shared", None) or 0
        if shared > outcome.get("shared_bytes", 0):
            outcome.update(shared_bytes=shared, kernel_name=getattr(kernel, "name", "a kernel"))
    return outcome


def _outcome(status: Optional[str], message: Optional[str], began: float) -> dict:
    return {"status": status, "message": message if message is None else message[:4000],
            "compile_s": time.perf_counter() - began}


def kernel_module(kernel_name: str, spec_path: Optional[str]) -> Optional[str]:
    """The module that defines the kernel's KernelSpec, named without importing anything heavy: a
    builtin's from triton_sweep.kernels.builtin() (read from the source, not imported), an external
    kernel's from kernel.spec ("pkg.mod:SPEC" -> "pkg.mod"). None where neither names one (validation says
    what is wrong)."""
    from triton_sweep.kernels import builtin

    target = spec_path if kernel_name == "external" else builtin().get(kernel_name)
    module, colon, attr = (target or "").partition(":")
    return module if module and colon and attr else None


def fork_server(kernel_name: str, spec_path: Optional[str]) -> ForkServer:
    """A fork server (not started) that imports torch, Triton, this module and the kernel's module
    once: a kernel library whose import takes seconds is imported there, not again in every compile
    worker (17 processes importing one at once on a 16-core host made a sweep's start 22 s)."""
    # torch.fx.experimental.symbolic_shapes (and sympy with it): torch imports it at the first meta
    # tensor an output_like allocates (torch.empty_like); each compile worker's first compile imported
    # it, 2.6-3.3 s on an H100 host (0.001-0.002 s each later compile): BENCHMARKS.md, O.
    preload = ("torch", "triton", "torch.fx.experimental.symbolic_shapes", "triton_sweep.model.spec_sources",
               "triton_sweep.engine.compile_pool")
    module = kernel_module(kernel_name, spec_path)
    return ForkServer(preload + ((module,) if module else ()))


def compile_workers(count: int, kernel_name: str, spec_path: Optional[str],
                    server: Optional[ForkServer] = None) -> list[WorkerProcess]:
    """`count` compile workers, none started, all forked from `server` (a new one when None); the
    scheduler forks them as the work needs them (runners/engine/placement.py). None where this Triton
    cannot compile without a GPU (internals.compile_only_problem): said in a line."""
    from triton_sweep.engine.internals import compile_only_problem

    problem = compile_only_problem() if count else None
    if problem:
        print(f"note: no compile pool ({problem}): each GPU worker compiles a config in its first call")
        return []
    server = server or fork_server(kernel_name, spec_path)
    return [WorkerProcess(f"compile worker {i}", _compile_main, (kernel_name, spec_path),
                          new_session=True,
                          interpret=False,  # the real compiler, whatever the shell or backend says
                          server=server)
            for i in range(count)]


def compile_request(trial: Trial, target: tuple) -> tuple:
    return ("compile", trial, target)

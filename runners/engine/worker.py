"""The trial worker: one process per GPU (or one interpreter process) that runs trials one at a time.

The sweep process never touches CUDA. It sends each trial to a worker and waits at most the trial's
timeout (runners/engine/process.py); a worker that hangs is killed (`timeout`), one that dies or hits a
sticky CUDA error (illegal address, launch failure) is replaced (`crashed`), and the sweep goes on.
Beside the trial worker of a GPU, a job with torch.compile baselines runs a side worker for them (one a
GPU, up to the number of such baselines): it imports dynamo and inductor (seconds) at its start while
the trial worker measures, and compiles each baseline ahead of its trial (`prepare_baseline`: nothing
launched, no lock), so the trial's first call runs what was compiled. The two take turns: each holds its
GPU's lock around all it does on the GPU (its CUDA start, each request), so that no sample shares the GPU
with the other's work; the scheduler gives the trial worker no new request while its side worker holds
the lock (runners/engine/side.py), so that neither waits longer than one request of the other."""
from __future__ import annotations

import concurrent.futures
import fcntl
import importlib
import os
import time
from typing import Optional

from triton_sweep.engine.process import WorkerProcess
from triton_sweep.engine.trial_run import prepare_baseline, run_finalists, run_trial
from triton_sweep.measure.inputs import ShapeCache


class GpuLock:
    """One GPU to one worker at a time (module docstring): an exclusive flock on a file the sweep made;
    no file, no lock (a GPU with one worker). The kernel releases it if the holder dies."""

    def __init__(self, path: Optional[str]):
        self.fd = os.open(path, os.O_RDWR) if path else None

    def __enter__(self) -> "GpuLock":
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)


def _worker_main(conn, backend: str, kernel_name: str, spec_path: Optional[str], rule, warmup_s: float,
                 seed: int, device_index: int, lock_path: Optional[str] = None, side: bool = False):
    # torch.compile baselines compile in this process, one small graph at a time, while the GPU waits,
    # beside our own compile pool: inductor's pool of compile processes (one per core) would compete
    # with it. The gain is not established: the README sweep's first torch.compile call took 7.3 s with
    # this on an H200 against 7.9 s without, one run each. A value the user set is kept.
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    began = time.perf_counter()
    gpu_start = None
    try:
        lock = GpuLock(lock_path)
        # Imported here, not in a first timer loop: the stop rule's ranks, the L2 flush kernel's Triton.
        for module in ("scipy.stats", "triton"):
            importlib.import_module(module)
        import torch

        from triton_sweep.model.spec_sources import load_spec
        from triton_sweep.measure import device as device_info
        from triton_sweep.measure.timing import InterpreterTimer
        device = torch.device("cpu") if backend == "interpret" else torch.device("cuda", device_index)
        # The GPU's part of the start, beside the imports below; the torch.compile worker's after them:
        # begun beside them, it would ask for the GPU's lock with the trial worker's start and could hold
        # that start behind its own.
        if backend != "interpret" and not side:
            pool = concurrent.futures.ThreadPoolExecutor(1, "worker-start")
            gpu_start = pool.submit(_start_on_gpu, torch, device_info, device, lock, rule, warmup_s)
            pool.shutdown(wait=False)  # its thread ends with its task
        if side:  # what each of its compiles needs (module docstring)
            import torch._dynamo  # noqa: F401
            import torch._inductor.compile_fx  # noqa: F401
        imported = time.perf_counter()
        spec = load_spec(kernel_name, spec_path)
        loaded = time.perf_counter()
        if backend == "interpret":
            timer = InterpreterTimer(rule, warmup_s)
        else:
            timer, gpu_part = _gpu_timer(torch, device_info, device, device_index, lock, rule, warmup_s,
                                         gpu_start)
        described = time.perf_counter()
        info = {**device_info.describe(backend, device_index), "timing_method": timer.method}
    except Exception as error:
        # Said to the parent, not printed: the sweep starts this worker before it has validated its
        # input, and a bad input (no GPU, an unknown kernel) is reported there, naming the field.
        conn.send(("failed", f"{type(error).__name__}: {error}"[:4000]))
        return
    # Where the start went (seconds): imports, the kernel's module; on a GPU the GPU's part (the wait for
    # its lock, the CUDA context, the L2 flush buffer and kernel, the SM clock reader, the CUPTI probe),
    # how long after the imports it ended (all of it where it came after them), and the device's
    # description (NVML, versions): imports, kernel module, gpu after imports and describe add up to the
    # worker's start.
    seconds = {"imports": imported - began, "kernel_module": loaded - imported}
    if backend == "interpret":
        seconds["device"] = time.perf_counter() - loaded
    else:
        seconds.update(gpu=gpu_part, gpu_after_imports=described - loaded,
                       describe=time.perf_counter() - described)
    info["start_seconds"] = seconds
    conn.send(("ready", info))
    _serve(conn, spec, ShapeCache(spec, seed, device), timer, device, lock, side)


def _gpu_timer(torch, device_info, device, device_index: int, lock: GpuLock, rule, warmup_s: float,
               gpu_start: Optional[concurrent.futures.Future]) -> tuple:
    """The GPU's timer once the GPU's part of the start is done (on its thread, `gpu_start`, or here),
    its CUPTI probe taken on this thread; returns it and where the GPU's part went (seconds)."""
    from triton_sweep.measure.timing import METHOD_CUPTI

    timer, gpu_part = (gpu_start.result() if gpu_start is not None
                       else _start_on_gpu(torch, device_info, device, lock, rule, warmup_s))
    # The current device is a thread's own: this thread's CUDA calls go to the worker's GPU too
    # (the context exists: the call only makes it current here).
    torch.cuda.set_device(device)
    probing = time.perf_counter()
    with lock:  # here, on the thread that measures (CudaTimer.probe_kernel_clock)
        timer.probe_kernel_clock()
    gpu_part["cupti_probe"] = time.perf_counter() - probing  # with its wait for the lock
    if timer.method != METHOD_CUPTI:
        print(f"note: GPU {device_index}: CUPTI kernel records unavailable "
              f"({timer.kernel_clock.reason}); rows are timed with CUDA events, launch overhead "
              "included")
    return timer, gpu_part


def _start_on_gpu(torch, device_info, device, lock: GpuLock, rule, warmup_s: float) -> tuple:
    """The GPU's part of a worker's start. The trial worker runs it on a thread of its own while it
    imports the kernel's module: a kernel library's import takes seconds
    (tests/fixtures/slow_import_kernel.py), and the CUDA context and the timer's start (the L2 flush kernel's
    compile on a cold Triton cache, then the CUPTI probe) took 1.1-1.3 s after it on an H200. The timer's
    CUPTI probe is left to the caller's thread (CudaTimer.probe_kernel_clock). Returns the timer and where its
    time went (seconds)."""
    began = time.perf_counter()
    with lock:  # the flush kernel runs on the GPU
        locked = time.perf_counter()  # the side worker may wait here for the trial worker
        torch.cuda.set_device(device)  # CUDA 12 creates the context here (older: at the flush)
        context = time.perf_counter()
        timer = device_info.cuda_timer(device.index, rule, warmup_s, probe_clock=False)
    nvml = time.perf_counter() - context - sum(timer.start_seconds.values())
    return timer, {"lock": locked - began, "cuda_context": context - locked, **timer.start_seconds,
                   "nvml": nvml}


def _serve(conn, spec, cache: ShapeCache, timer, device, lock: GpuLock, side: bool) -> None:
    """Answer the sweep's requests until it says stop (None) or a sticky CUDA error ends this worker."""
    from triton_sweep.measure import device as device_info

    while True:
        message = conn.recv()
        if message is None:
            return
        kind, payload = message[0], message[1:]
        if kind == "prepare":  # no lock: it launches nothing
            conn.send(("prepared", prepare_baseline(spec, payload[0], device)))
            continue
        with lock:
            if kind == "peaks":
                answer, outcome = ("peaks", device_info.measure_peaks(timer, device)), {}
            elif kind == "trial":
                trial, peaks = payload
                outcome = run_trial(spec, trial, cache, timer, device, peaks)
                answer = ("result", outcome)
            else:
                trials, peaks, final_rule, tie_floor = payload
                results = run_finalists(spec, trials, cache, timer, peaks, final_rule, tie_floor)
                answer, outcome = ("finalists", results), results[0]
            if side:  # its inputs and references would sit beside the trial worker's in GPU memory
                cache.release()
        conn.send(answer)
        if outcome.get("sticky"):
            return  # the CUDA context is unusable; the parent replaces this worker


def trial_worker(backend: str, kernel_name: str, spec_path: Optional[str], rule, warmup_s: float, seed: int,
                 device_index: int = 0, lock_path: Optional[str] = None, side: bool = False) -> WorkerProcess:
    """A worker for one GPU (its index among the visible ones) or for the interpreter; `side`: the
    worker of the torch.compile baselines beside it (module docstring), sharing its `lock_path`."""
    name = f"worker on GPU {device_index}" if backend == "cuda" else f"interpreter worker {device_index}"
    if side:
        name = f"torch.compile worker on GPU {device_index}"
    # A TRITON_INTERPRET=1 left in the shell (or by an interpret job) must not reach a CUDA worker:
    # it would time the interpreter. Its main by name: the parent starts it before importing torch.
    args = (backend, kernel_name, spec_path, rule, warmup_s, seed, device_index, lock_path, side)
    return WorkerProcess(name, "triton_sweep.engine.worker:_worker_main", args,
                         interpret=backend == "interpret")

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
the lock (runners/engine/scheduler.py), so that neither waits longer than one request of the other."""
from __future__ import annotations

import concurrent.futures
import fcntl
import hashlib
import os
import random
import time
from typing import Callable, Optional

from runners.engine.process import WorkerProcess
from runners.model.trial import TRITON_PROVIDER, Trial
from runners.measure import check


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


def compiles(spec, trial: Trial) -> bool:
    """Whether the trial is a baseline whose first call compiles (kernels/spec.py: compiled)."""
    baseline = spec.baselines.get(trial.provider) if trial.provider != TRITON_PROVIDER else None
    return getattr(baseline, "compiles", False)


def input_seed(seed: int, trial: Trial) -> int:
    """Seed of a trial's inputs: the same inputs for every config at a (shape, dtype), fresh elsewhere."""
    payload = f"{seed}:{trial.kernel}:{list(trial.shape)}:{trial.dtype}".encode()
    return int.from_bytes(hashlib.sha256(payload).digest()[:4], "little")


class ShapeCache:
    """Inputs, float64 references and accumulation bound of the last (shape, dtype) seen.

    Every config of a shape is checked on the same inputs, so they are made and the reference computed
    once per shape, not once per trial (a float64 reference of a 4096^3 matmul or of seq-16K attention
    costs far more than the trial it checks). One entry only: the scheduler sends a worker the trials
    of one shape in a row, and a second entry could double the memory of the largest shapes.
    Kernels and baselines must not write to their inputs; one that does fails the gate of later configs.
    """

    def __init__(self, spec, seed: int, device):
        self.spec, self.seed, self.device = spec, seed, device
        self.key = None
        self.inputs = self.references = self.bound = None

    def get(self, trial: Trial, with_bound: bool):
        import torch

        key = (trial.shape, trial.dtype)
        if key != self.key:
            self.key = None
            self.inputs = self.references = self.bound = None  # free the old shape before making the new one
            dtype = getattr(torch, trial.dtype)
            self.inputs = self.spec.make_inputs(trial.shape, dtype, input_seed(self.seed, trial), self.device)
            self.references = check.references(self.spec, self.inputs)
            self.key = key
        if with_bound and self.bound is None and self.spec.accumulation_bound:
            self.bound = self.spec.accumulation_bound(*self.inputs)
        return self.inputs, self.references, (self.bound if with_bound else None)

    def release(self) -> None:
        """Drop the entry and give its memory back to the device (torch's allocator keeps what it freed)."""
        import torch

        self.key = None
        self.inputs = self.references = self.bound = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


# A repetition's buffers start at a random offset below PLACEMENT_SPAN_BYTES in an allocation of their
# own, in steps of the caching allocator's 512 bytes (so every pointer keeps the alignment Triton
# specializes on); earlier repetitions' buffers stay allocated, so that later ones land elsewhere,
# while they take at most HELD_SHARE of the free device memory.
PLACEMENT_SPAN_BYTES = 1 << 20
PLACEMENT_ALIGN_BYTES = 512
HELD_SHARE = 0.25


class Placements:
    """Copies of a call's tensors placed anew in device memory, one set per repetition (timing.py's
    docstring: why). The offsets are drawn from the system's entropy, not the sweep's seed: each run
    meets placements of its own, as two runs of a program do."""

    def __init__(self, device):
        self.device = device
        self.random = random.Random()
        self.held: list = []

    def place(self, tensor, copy: bool = True):
        import torch

        if not isinstance(tensor, torch.Tensor):
            return tensor  # a plain number (a scale)
        item = tensor.element_size()
        offset = self.random.randrange(0, PLACEMENT_SPAN_BYTES, PLACEMENT_ALIGN_BYTES) // item
        extent = tensor.untyped_storage().nbytes() // item
        storage = torch.empty(extent + offset, dtype=tensor.dtype, device=tensor.device)
        placed = storage.as_strided(tensor.shape, tensor.stride(), offset + tensor.storage_offset())
        if copy:
            check.copy_storage(placed, tensor)  # an expanded tensor's elements overlap
        self.held.append(storage)
        return placed

    def keep_or_release(self) -> None:
        """After a repetition: keep its buffers (the next set lands elsewhere) while they fit in
        HELD_SHARE of the free memory, else let them go."""
        import torch

        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            if sum(s.untyped_storage().nbytes() for s in self.held) > HELD_SHARE * free:
                self.held.clear()

    def release(self) -> None:
        self.held.clear()


def measure_repetitions(timer, calls_at: Callable[[int], list], rule, placements: Placements,
                        settled: Optional[Callable[[list], bool]] = None) -> list:
    """Time calls_at(r)'s calls round-robin in rule.repetitions blocks, r = 0 on the buffers the gate
    checked, each later one on buffers placed anew; one pooled Measurement a call (timing.pooled).
    `settled`: a block also stops once it holds for each call's samples of all blocks so far."""
    from runners.measure.timing import pooled

    if rule.repetitions <= 1:
        return timer.measure_interleaved(calls_at(0), rule, settled=settled)
    block = rule.per_repetition()
    blocks = []

    def settled_so_far(samples: list) -> bool:
        return settled([[s for m in blocks for s in m[i].samples_s] + block_samples
                        for i, block_samples in enumerate(samples)])

    try:
        for r in range(rule.repetitions):
            # Repetitions after the first: binaries loaded, one call each touches the new buffers.
            blocks.append(timer.measure_interleaved(calls_at(r), block, warmup_s=None if r == 0 else 0.0,
                                                    settled=settled_so_far if settled else None))
            placements.keep_or_release()
    finally:
        placements.release()
    return [pooled([measured[i] for measured in blocks]) for i in range(len(blocks[0]))]


def run_trial(spec, trial: Trial, cache: ShapeCache, timer, device, peaks: dict) -> dict:
    """Gate then time one trial; every outcome is a row fragment with a status, never an exception."""
    import torch

    first_launch_done = False
    try:
        inputs, references, bound = cache.get(trial, with_bound=trial.provider == TRITON_PROVIDER)
        normwise = False
        began = time.perf_counter()
        run, out = timed_call(spec, trial, inputs)
        if out is not None:
            if not spec.prepare_output:  # (a kernel that reads its outputs had them prepared by timed_call)
                for tensor in check.as_tuple(out):
                    tensor.fill_(float("nan"))  # poison: an element the kernel never writes stays NaN
            run()
        else:
            out = run()
            references = references[:1]  # a baseline returns the main output only (see kernels/spec.py)
            normwise = True  # the user's code: rounding after every op (runners/measure/check.py)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        first_call_s = time.perf_counter() - began  # load (and compile, unless the pool did) + one run
        first_launch_done = True
        problem = check.compare_outputs(check.as_tuple(out), references, normwise, bound)
        if problem:
            return {"status": check.STATUS_INCORRECT, "message": problem, "first_call_s": first_call_s}
        placements = Placements(device)

        def calls_at(repetition: int) -> list:
            if repetition == 0:
                return [run]
            return [timed_call(spec, trial, tuple(placements.place(x) for x in inputs), placements)[0]]

        (measurement,) = measure_repetitions(timer, calls_at, timer.rule, placements)
        fields = measured_fields(spec, trial, measurement, peaks)
    except Exception as error:  # classified and recorded: a failing trial never stops the sweep
        return _failure(error, first_launch_done)
    return {**fields, "first_call_s": first_call_s}


def prepare_baseline(spec, trial: Trial, device) -> dict:
    """Compile a torch.compile baseline ahead for the trial's inputs (kernels/spec.py: compiled), from
    inputs made on the meta device and allocated empty on this one: nothing is launched, so it needs no
    lock. What fails here is left to the trial's first call, which compiles again and reports it."""
    import torch

    baseline = spec.baselines[trial.provider]
    if not hasattr(baseline, "prepare"):
        return {"compile_s": None}
    began = time.perf_counter()
    try:
        made = spec.make_inputs(trial.shape, getattr(torch, trial.dtype), 0, torch.device("meta"))
        baseline.prepare(tuple(torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=device)
                               if isinstance(x, torch.Tensor) else x for x in made))
    except Exception as error:
        return {"compile_s": None, "message": f"{type(error).__name__}: {error}"[:2000]}
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the empty inputs' memory back to the device
    return {"compile_s": time.perf_counter() - began}


def timed_call(spec, trial: Trial, inputs: tuple, placements: Optional[Placements] = None):
    """(the zero-argument call that is timed, the output it writes into): our kernel launches into an
    output allocated here (placed anew by `placements`, if given); a baseline returns its output (None
    here)."""
    if trial.provider == TRITON_PROVIDER:
        out = spec.output_like(inputs)
        if placements is not None:
            out = (tuple(placements.place(o, copy=False) for o in out) if isinstance(out, tuple)
                   else placements.place(out, copy=False))
        if spec.prepare_output:  # outputs it also reads hold their inputs, not what the memory held
            spec.prepare_output(inputs, out)
        return (lambda: spec.launch(inputs, out, trial.config)), out
    baseline = spec.baselines[trial.provider]
    return (lambda: baseline(inputs)), None


def run_finalists(spec, trials: list[Trial], cache: ShapeCache, timer, peaks: dict, rule,
                  tie_floor: float) -> list[dict]:
    """Re-time trials of one (shape, dtype) that already passed the gate (configs of ours, and the
    baselines beside them), interleaved round-robin with the L2 flush before every call, until `rule`
    holds or the ties of ours at tie_floor are settled (runners/model/finalists.py); one row fragment
    per trial (or one failure for all)."""
    from runners.model.finalists import settled

    ours = [i for i, trial in enumerate(trials) if trial.provider == TRITON_PROVIDER]
    try:
        inputs, _, _ = cache.get(trials[0], with_bound=False)
        placements = Placements(cache.device)

        def calls_at(repetition: int) -> list:
            if repetition == 0:
                return [timed_call(spec, trial, inputs)[0] for trial in trials]
            placed = tuple(placements.place(x) for x in inputs)  # one placement for the whole round
            return [timed_call(spec, trial, placed, placements)[0] for trial in trials]

        measurements = measure_repetitions(timer, calls_at, rule, placements,
                                           lambda samples: settled([samples[i] for i in ours], tie_floor))
        return [measured_fields(spec, trial, m, peaks) for trial, m in zip(trials, measurements)]
    except Exception as error:
        return [_failure(error, first_launch_done=True)]


def _failure(error: Exception, first_launch_done: bool) -> dict:
    return {"status": check.classify(error, first_launch_done),
            "message": f"{type(error).__name__}: {error}"[:4000],
            "sticky": check.is_sticky_cuda_error(error)}


class NoGpuWork(ValueError):
    """The timed call did no GPU work at all (its CUPTI time is 0): nothing to report a throughput of."""


# A CUDA-event pair around one launch adds about 3 us to the kernel's own time (2.7-3.6 us on an
# H200 from 4 us to 0.7 ms kernels), and each further kernel of a call about 2 us of gap (eager softmax,
# 5 kernels: 10.4 us over their sum). Beyond this allowance per kernel, and 2% for clock changes between
# the two medians, the two timers disagree by more than launch overhead explains: the row is flagged.
LAUNCH_ALLOWANCE_US = 5.0
TIMER_DISAGREE_RELATIVE = 0.02


def timers_disagree(p50_us: float, event_p50_us: Optional[float],
                    kernels_per_call: Optional[float]) -> Optional[bool]:
    """Whether the CUDA-event time contradicts the kernel time of record: the window around the call
    shorter than the GPU work inside it, or longer by more than launch overhead explains. None when
    there is nothing to cross-check (one timer only)."""
    if event_p50_us is None or kernels_per_call is None:
        return None
    slack = TIMER_DISAGREE_RELATIVE * p50_us
    allowance = LAUNCH_ALLOWANCE_US * max(kernels_per_call, 1)
    return event_p50_us < p50_us - slack or event_p50_us > p50_us + allowance + slack


def measured_fields(spec, trial: Trial, measurement, peaks: dict) -> dict:
    """Statistics, throughput from the kernel's FLOP and byte models, and % of the measured ceilings.

    p50_us, the figure of record, is the GPU time per call (CUPTI: the kernels, memsets and memcpys
    of one call, one after another); event_p50_us is the CUDA-event time of the same calls, launch
    gaps and the event pair included, of the calls the GPU ran back to back (those the host enqueued
    late are late_event_samples_us: timing.host_late)."""
    import torch

    from runners.measure.stop_rule import STOP_CONVERGED, quantization_note
    from runners.measure.timing import repetition_noise, summarize

    stats = summarize(measurement.samples_s)
    if stats["p50_us"] <= 0:
        raise NoGpuWork(f"no GPU activity was recorded for this call ({measurement.method}): a call "
                        "that launches no kernel, memset or memcpy has no GPU time to report")
    p50_s = stats["p50_us"] * 1e-6
    gbps = spec.bytes_moved(trial.shape, getattr(torch, trial.dtype)) / p50_s / 1e9
    tflops = spec.flops(trial.shape) / p50_s / 1e12
    copy_gbps = peaks.get("copy_gbps")
    matmul_tflops = peaks.get(f"matmul_tflops_{trial.dtype}")
    events = measurement.event_samples_s
    event_p50_us = summarize(events)["p50_us"] if events else None
    repetition_p50s = measurement.repetition_p50s_s or []
    kernels = measurement.kernels_per_call
    return {
        "status": check.STATUS_OK,
        # Not converged because the timer's resolution bounds the precision: say so (stop_rule.py).
        "message": (quantization_note(measurement.samples_s)
                    if measurement.stop_reason != STOP_CONVERGED else None),
        "stop_reason": measurement.stop_reason,
        **stats,
        "samples_us": [s * 1e6 for s in measurement.samples_s],
        "event_p50_us": event_p50_us,
        "event_samples_us": [s * 1e6 for s in events] if events else None,
        "late_event_samples_us": [s * 1e6 for s in measurement.late_event_samples_s or []] or None,
        "kernels_per_call": kernels,
        "timers_disagree": timers_disagree(stats["p50_us"], event_p50_us, kernels),
        "measure_s": measurement.measure_s,
        "repetitions": max(len(repetition_p50s), 1),
        "rep_p50s_us": [s * 1e6 for s in repetition_p50s] or None,
        "rep_noise": repetition_noise(repetition_p50s),
        "gbps": gbps,
        "tflops": tflops,
        "pct_copy_bw": 100 * gbps / copy_gbps if copy_gbps else None,
        "pct_matmul": 100 * tflops / matmul_tflops if matmul_tflops else None,
        "sm_clock_start_mhz": measurement.sm_clock_start_mhz,
        "sm_clock_end_mhz": measurement.sm_clock_end_mhz,
    }


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
        import scipy.stats  # noqa: F401  (the stop rule's ranks: imported here, not in a first timer loop)
        import torch

        from runners.model.spec_sources import load_spec
        from runners.measure import device as device_info
        from runners.measure.timing import METHOD_CUPTI, InterpreterTimer
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


def _start_on_gpu(torch, device_info, device, lock: GpuLock, rule, warmup_s: float) -> tuple:
    """The GPU's part of a worker's start. The trial worker runs it on a thread of its own while it
    imports the kernel's module: a kernel library's import takes seconds (tests/slow_import_kernel.py),
    and the CUDA context and the timer's start (the L2 flush kernel's compile on a cold Triton cache, then
    the CUPTI probe) took 1.1-1.3 s after it on an H200. The timer's CUPTI probe is left to the caller's
    thread (CudaTimer.probe_kernel_clock). Returns the timer and where its time went (seconds)."""
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
    from runners.measure import device as device_info

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
    return WorkerProcess(name, "runners.engine.worker:_worker_main", args, interpret=backend == "interpret")

"""The trial worker: one process that owns the GPU (or the interpreter) and runs trials one at a time.

The sweep process never touches CUDA. It sends each trial to the worker and waits at most the trial's
timeout; a worker that hangs is killed (`timeout`), one that dies or hits a sticky CUDA error
(illegal address, launch failure) is replaced (`crashed`), and the sweep goes on with a fresh worker.
"""
from __future__ import annotations

import hashlib
import multiprocessing
import os
import traceback
from typing import Optional

from runners import check
from runners.trials import TRITON_PROVIDER, Trial

READY_TIMEOUT_S = 600  # imports, CUDA context and the L2 flush buffer; generous for a cold file cache


def input_seed(seed: int, trial: Trial) -> int:
    """Seed of a trial's inputs: the same inputs for every config at a (shape, dtype), fresh elsewhere."""
    payload = f"{seed}:{trial.kernel}:{list(trial.shape)}:{trial.dtype}".encode()
    return int.from_bytes(hashlib.sha256(payload).digest()[:4], "little")


def run_trial(spec, trial: Trial, seed: int, timer, device, peaks: dict) -> dict:
    """Gate then time one trial; every outcome is a row fragment with a status, never an exception."""
    import torch

    from runners.timing import summarize

    first_launch_done = False
    try:
        dtype = getattr(torch, trial.dtype)
        inputs = spec.make_inputs(trial.shape, dtype, input_seed(seed, trial), device)
        exact_inputs = check.upcast(inputs)
        references = check.as_tuple(spec.reference(*exact_inputs))
        bound = None  # baselines are checked normwise, without it
        normwise = False
        if trial.provider == TRITON_PROVIDER:
            if spec.accumulation_bound:
                bound = spec.accumulation_bound(*inputs)
            out = spec.output_like(inputs)
            for tensor in check.as_tuple(out):
                tensor.fill_(float("nan"))  # poison: an element the kernel never writes stays NaN
            run = lambda: spec.launch(inputs, out, trial.config)
            run()
        else:
            baseline = spec.baselines[trial.provider]
            run = lambda: baseline(inputs)
            out = run()
            references = references[:1]  # a baseline returns the main output only (see kernels/spec.py)
            normwise = True  # the user's code: rounding after every op (runners/check.py)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        first_launch_done = True
        problem = check.compare_outputs(check.as_tuple(out), references, normwise, bound)
        del references, bound
        if problem:
            return {"status": check.STATUS_INCORRECT, "message": problem}
        measurement = timer.measure(run)
    except Exception as error:  # classified and recorded: a failing trial never stops the sweep
        status = check.classify(error, first_launch_done)
        return {"status": status, "message": f"{type(error).__name__}: {error}"[:4000],
                "sticky": check.is_sticky_cuda_error(error)}

    stats = summarize(measurement.samples_s)
    p50_s = stats["p50_us"] * 1e-6
    gbps = spec.bytes_moved(trial.shape, dtype) / p50_s / 1e9
    tflops = spec.flops(trial.shape) / p50_s / 1e12
    copy_gbps = peaks.get("copy_gbps")
    matmul_tflops = peaks.get(f"matmul_tflops_{trial.dtype}")
    return {
        "status": check.STATUS_OK,
        "message": None,
        "stop_reason": measurement.stop_reason,
        **stats,
        "samples_us": [s * 1e6 for s in measurement.samples_s],
        "gbps": gbps,
        "tflops": tflops,
        "pct_copy_bw": 100 * gbps / copy_gbps if copy_gbps else None,
        "pct_matmul": 100 * tflops / matmul_tflops if matmul_tflops else None,
        "sm_clock_start_mhz": measurement.sm_clock_start_mhz,
        "sm_clock_end_mhz": measurement.sm_clock_end_mhz,
    }


def _worker_main(conn, backend: str, kernel_name: str, spec_path: Optional[str], timing: dict, device_index: int):
    if backend == "interpret":
        os.environ["TRITON_INTERPRET"] = "1"  # before triton decorates any kernel
    else:  # a TRITON_INTERPRET=1 left in the shell (or by an interpret job) would time the interpreter
        os.environ.pop("TRITON_INTERPRET", None)
    import torch

    from runners import device as device_info
    from runners.timing import InterpreterTimer, StopRule
    from runners.trials import load_spec

    spec = load_spec(kernel_name, spec_path)
    rule = StopRule(timing["min_samples"], timing["min_time_s"], timing["max_noise"], timing["max_time_s"])
    if backend == "interpret":
        device = torch.device("cpu")
        timer = InterpreterTimer(rule, timing["warmup_s"])
    else:
        device = torch.device("cuda", device_index)
        torch.cuda.set_device(device)
        timer = device_info.cuda_timer(device_index, rule, timing["warmup_s"])
    conn.send(("ready", device_info.describe(backend, device_index)))
    while True:
        message = conn.recv()
        if message is None:
            return
        if message[0] == "peaks":
            conn.send(("peaks", device_info.measure_peaks(timer, device)))
        elif message[0] == "trial":
            _, trial, seed, peaks = message
            result = run_trial(spec, trial, seed, timer, device, peaks)
            conn.send(("result", result))
            if result.get("sticky"):
                return  # the CUDA context is unusable; the parent replaces this worker


def _worker_entry(*args):
    try:
        _worker_main(*args)
    except BaseException:
        traceback.print_exc()
        raise


class WorkerLost(Exception):
    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status


class TrialWorker:
    """Parent-side handle: start, send, wait with a timeout, replace on death."""

    def __init__(self, backend: str, kernel_name: str, spec_path: Optional[str], timing: dict, device_index: int = 0):
        self._args = (backend, kernel_name, spec_path, timing, device_index)
        self._context = multiprocessing.get_context("spawn")  # never fork a process that may hold CUDA
        self._process = None
        self._conn = None
        self.env: Optional[dict] = None
        self.restarts = -1

    def start(self) -> dict:
        self.stop()
        parent_end, child_end = self._context.Pipe()
        self._process = self._context.Process(target=_worker_entry, args=(child_end, *self._args), daemon=True)
        self._process.start()
        child_end.close()
        self._conn = parent_end
        self.restarts += 1
        _, self.env = self._receive(READY_TIMEOUT_S, "starting the worker")
        return self.env

    def _receive(self, timeout_s: float, doing: str):
        if not self._conn.poll(timeout_s):
            self.stop(graceful=False)
            raise WorkerLost(check.STATUS_TIMEOUT, f"no answer within {timeout_s:g} s while {doing}; worker killed")
        try:
            return self._conn.recv()
        except (EOFError, ConnectionError):
            self._process.join(5)
            code = self._process.exitcode
            self.stop(graceful=False)
            raise WorkerLost(check.STATUS_CRASHED, f"worker died (exit code {code}) while {doing}")

    def request(self, message: tuple, timeout_s: float, doing: str):
        if self._process is None or not self._process.is_alive():
            self.start()
        try:
            self._conn.send(message)
        except (BrokenPipeError, OSError) as error:
            self.stop(graceful=False)
            raise WorkerLost(check.STATUS_CRASHED, f"worker gone ({error}) before {doing}")
        return self._receive(timeout_s, doing)[1]

    def run_trial(self, trial: Trial, seed: int, peaks: dict, timeout_s: float) -> dict:
        """The trial's result; a hung or dead worker becomes the trial's status, and the next trial
        gets a fresh worker."""
        try:
            result = self.request(("trial", trial, seed, peaks), timeout_s, f"running {trial.label}")
        except WorkerLost as lost:
            return {"status": lost.status, "message": str(lost)}
        if result.pop("sticky", False):
            self.stop(graceful=False)  # it is exiting anyway; never hand it the next trial
        return result

    def stop(self, graceful: bool = True) -> None:
        if self._process is not None:
            if graceful and self._process.is_alive():
                try:
                    self._conn.send(None)
                    self._process.join(5)
                except (BrokenPipeError, OSError):
                    pass
            if self._process.is_alive():
                self._process.kill()
                self._process.join()
            self._conn.close()
        self._process = None
        self._conn = None

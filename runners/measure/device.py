"""What the trials run on: GPU, clocks, versions; and the device's measured ceilings.

Ceilings are measured, not taken from a datasheet: a device-to-device copy (bytes read + written) and a
cuBLAS matmul per dtype, timed as every trial is (runners/measure/cuda_timer.py). They are measured once
per (GPU, driver, torch, timing method) and cached in the results store.
"""
from __future__ import annotations

import platform
import socket
from typing import Callable, Optional

INTERPRETER_DEVICE_NAME = "Triton interpreter (CPU)"
# 1 GiB each way: far past any L2, long enough (~0.5 ms on an H200) that launch cost is noise.
COPY_BYTES = 1 << 30
# 8192^3: large enough to reach cuBLAS's plateau on Hopper (685 TFLOP/s bf16 measured on an H200 here).
MATMUL_SIZE = 8192
PEAK_DTYPES = ("float16", "bfloat16", "float32")
# Ceilings are measured with the timer of every trial (CUPTI kernel time, clean flush) to the precision
# of the default preset; they are long, steady kernels, so this takes tens of samples.
PEAK_RULE = dict(min_samples=10, min_time_s=0.02, rel_precision=0.005, max_time_s=2.0)


def nvml_unavailable(error: Exception) -> bool:
    """No NVML library on this machine, or NVML failed (pynvml's NVMLError subclasses are created at
    run time, so they are told apart by name)."""
    return isinstance(error, (ImportError, OSError)) or type(error).__name__.startswith("NVMLError")


def nvml_text(value) -> str:
    """A string NVML returned: bytes in older pynvml releases, str in newer ones."""
    return value.decode() if isinstance(value, bytes) else value


def _nvml_handle(torch, device_index: int):
    """NVML handle of the torch device, matched by PCI bus id (CUDA_VISIBLE_DEVICES may reorder)."""
    import pynvml

    pynvml.nvmlInit()
    props = torch.cuda.get_device_properties(device_index)
    bus_id = getattr(props, "pci_bus_id", None)
    if bus_id is not None:
        domain = getattr(props, "pci_domain_id", 0)
        device = getattr(props, "pci_device_id", 0)
        try:
            return pynvml.nvmlDeviceGetHandleByPciBusId(f"{domain:08X}:{bus_id:02X}:{device:02X}.0")
        except pynvml.NVMLError:
            pass  # fall back to the index, right whenever CUDA_VISIBLE_DEVICES is unset
    return pynvml.nvmlDeviceGetHandleByIndex(device_index)


def sm_clock_reader(torch,
                    device_index: int) -> tuple[Callable[[], Optional[int]], Optional[int], Optional[str]]:
    """(read current SM clock in MHz, max SM clock in MHz, driver version); Nones where NVML is absent."""
    try:
        import pynvml

        handle = _nvml_handle(torch, device_index)
        max_clock = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
        driver = nvml_text(pynvml.nvmlSystemGetDriverVersion())
        return (lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)), max_clock, driver
    except Exception as error:
        if not nvml_unavailable(error):
            raise
        print(f"note: SM clocks not read ({error})")
    return (lambda: None), None, None


def cuda_timer(device_index: int, rule, warmup_s: float, probe_clock: bool = True):
    """A CudaTimer on the device, reading its SM clock through NVML; probe_clock=False leaves its CUPTI
    probe to the thread that will measure (CudaTimer.probe_kernel_clock)."""
    import torch

    from triton_sweep.measure.cuda_timer import CudaTimer

    read_clock, max_clock, _ = sm_clock_reader(torch, device_index)
    return CudaTimer(torch.device("cuda", device_index), rule, warmup_s, read_clock, max_clock, probe_clock)


def nvml_compile_target() -> Optional[tuple]:
    """The compile target of this machine's GPUs, read through NVML (no CUDA, no torch): Triton's
    GPUTarget("cuda", 10 * major + minor, 32) when every GPU has the same compute capability, else
    None. It lets the compile pool start before a GPU worker has reported its own target."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        capabilities = {tuple(pynvml.nvmlDeviceGetCudaComputeCapability(h)) for h in handles}
    except Exception as error:
        if not nvml_unavailable(error):
            raise
        return None
    if len(capabilities) != 1:
        return None
    major, minor = capabilities.pop()
    return ("cuda", 10 * major + minor, 32)


def nvml_gpu() -> Optional[dict]:
    """{gpu_name, driver_version} of this machine's GPUs, read through NVML (no CUDA, no torch), where
    every GPU is of one model (a job keeps one model's GPUs); None where NVML cannot tell or models
    differ. What a dry run matches the store's rows by, before any worker has described its GPU."""
    try:
        import pynvml

        pynvml.nvmlInit()
        names = {nvml_text(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)))
                 for i in range(pynvml.nvmlDeviceGetCount())}
        driver = nvml_text(pynvml.nvmlSystemGetDriverVersion())
    except Exception as error:
        if not nvml_unavailable(error):
            raise
        return None
    return {"gpu_name": names.pop(), "driver_version": driver} if len(names) == 1 else None


def describe(backend: str, device_index: int = 0) -> dict:
    """The environment columns every result row carries."""
    import torch
    import triton

    env = {
        "backend": backend,
        "torch_version": torch.__version__,
        "triton_version": triton.__version__,
        "python_version": platform.python_version(),
        "host": socket.gethostname(),
    }
    if backend == "interpret":
        env.update(gpu_name=INTERPRETER_DEVICE_NAME, gpu_uuid=None, driver_version=None, cuda_version=None,
                   sm_count=None, l2_bytes=None, sm_clock_max_mhz=None, compile_target=None,
                   max_shared_bytes=None)
        return env
    props = torch.cuda.get_device_properties(device_index)
    _, max_clock, driver = sm_clock_reader(torch, device_index)
    env.update(gpu_name=props.name, gpu_uuid=f"GPU-{props.uuid}", driver_version=driver,
               cuda_version=torch.version.cuda, sm_count=props.multi_processor_count,
               l2_bytes=props.L2_cache_size, sm_clock_max_mhz=max_clock,
               # what the compile pool builds for: Triton's GPUTarget("cuda", 10 * major + minor, warp size)
               compile_target=("cuda", 10 * props.major + props.minor, getattr(props, "warp_size", 32)),
               max_shared_bytes=getattr(props, "shared_memory_per_block_optin", None))
    return env


def measure_peaks(timer, device) -> dict:
    """Measured ceilings: copy GB/s (read + write) and cuBLAS TFLOP/s per dtype, from p50 times."""
    import torch

    from triton_sweep.measure.stop_rule import StopRule
    from triton_sweep.measure.timing import summarize

    rule = StopRule(**PEAK_RULE)
    peaks = {"copy_gbps": measure_copy(timer, device, COPY_BYTES, rule)[1]}
    n = MATMUL_SIZE
    for dtype_name in PEAK_DTYPES:
        dtype = getattr(torch, dtype_name)
        a = torch.randn(n, n, device=device).to(dtype)  # random, never zeros: zeros run faster
        b = torch.randn(n, n, device=device).to(dtype)
        p50_s = summarize(timer.measure(lambda: torch.matmul(a, b), rule).samples_s)["p50_us"] * 1e-6
        peaks[f"matmul_tflops_{dtype_name}"] = 2 * n**3 / p50_s / 1e12
    return peaks


def measure_copy(timer, device, n_bytes: int, rule) -> tuple[float, float]:
    """(p50 us, GB/s counting bytes read + written) of a device-to-device copy of n_bytes."""
    import torch

    from triton_sweep.measure.timing import summarize

    source = torch.randn(n_bytes // 4, device=device)  # random data, never zeros
    destination = torch.empty_like(source)
    p50_us = summarize(timer.measure(lambda: destination.copy_(source), rule).samples_s)["p50_us"]
    return p50_us, 2 * n_bytes / p50_us / 1e3

"""Synthetic result stores for the plot and compare tests: rows as a sweep writes them, with seeded
random samples, no kernel run. The latency model is made up (it only has to give every plot something
to draw and every comparison a known answer); it is not a measurement."""

from __future__ import annotations

import itertools
from typing import Optional

import numpy as np

from runners.engine.trials import Trial
from runners.results.store import ResultStore

ENV = {
    "backend": "cuda",
    "timing_method": "cupti/read-flush",
    "gpu_name": "Synthetic GPU",
    "driver_version": "1.0",
    "cuda_version": "13.0",
    "torch_version": "2.99",
    "triton_version": "9.9",
    "python_version": "3.12.0",
    "sm_count": 132,
    "l2_bytes": 50 << 20,
    "host": "synthetic",
    "sm_clock_max_mhz": 1980,
}
PEAKS = {
    "copy_gbps": 4000.0,
    "matmul_tflops_float16": 600.0,
    "matmul_tflops_bfloat16": 620.0,
    "matmul_tflops_float32": 50.0,
}
SHAPES = ((4096, 1024), (4096, 4096))
SPACE = {"BLOCK_SIZE": (1024, 2048, 4096, 8192), "num_warps": (1, 2, 4, 8), "num_stages": (1,)}
BASELINES = {"torch": 2.5, "eager": 7.0}  # p50 as a multiple of the best config of ours


def samples(
    p50_us: float, n: int, rng: np.random.Generator, noise: float = 0.01, tail: float = 0.05
) -> np.ndarray:
    """n per-sample times around p50_us: log-normal, relative spread `noise`, and a share `tail` of
    samples 1.5x slower (the long right tail GPU samples have)."""
    values = p50_us * np.exp(rng.normal(0.0, noise, n))
    values[rng.random(n) < tail] *= 1.5
    return values.astype(np.float32)


def model_p50(shape, config) -> float:
    """Made up: 8 µs per 4M elements at 4 warps and the tightest block, slower away from that."""
    rows, cols = shape
    base = 8.0 * rows * cols / (4096 * 1024)
    return (
        base
        * (1 + 0.15 * abs(np.log2(config["num_warps"] / 4)))
        * (1 + 0.1 * np.log2(config["BLOCK_SIZE"] / cols))
    )


def row(
    sweep_id: str,
    provider: str,
    shape,
    config: dict,
    p50_us: Optional[float],
    rng,
    status: str = "ok",
    kernel: str = "softmax",
    dtype: str = "float16",
    phase: str = "screen",
    n: int = 20,
    **fields,
) -> dict:
    trial = Trial(kernel, provider, tuple(shape), dtype, config)
    values = {
        "trial_key": trial.key,
        "sweep_id": sweep_id,
        "kernel": kernel,
        "provider": provider,
        "shape": list(shape),
        "dtype": dtype,
        "config": config,
        "status": status,
        "phase": phase,
        "kernel_hash": "aaaaaaaaaaaa",
        "git_sha": "0" * 40,
        "seed": 0,
        "timestamp": "2026-01-01T00:00:00",
        **ENV,
    }
    if status == "ok":
        data = samples(p50_us, n, rng)
        flops, moved = 5 * shape[0] * shape[1], 4 * shape[0] * shape[1]  # softmax's models, fp16
        p50 = float(np.median(data))
        values.update(
            p50_us=p50,
            p20_us=float(np.percentile(data, 20)),
            p80_us=float(np.percentile(data, 80)),
            min_us=float(data.min()),
            mean_us=float(data.mean()),
            noise=float(data.std() / data.mean()),
            n_samples=n,
            samples_us=data,
            gbps=moved / p50 / 1e3,
            tflops=flops / p50 / 1e6,
        )
        values.update(
            pct_copy_bw=100 * values["gbps"] / PEAKS["copy_gbps"],
            pct_matmul=100 * values["tflops"] / PEAKS[f"matmul_tflops_{dtype}"],
        )
    elif status != "pruned":
        values["message"] = f"synthetic {status}"
    else:
        values["message"] = "BLOCK_SIZE < row length"
    values.update(fields)
    return values


def softmax_sweep(
    store: ResultStore,
    sweep_id: str,
    seed: int = 0,
    shapes=SHAPES,
    space=SPACE,
    baselines=BASELINES,
    slower: float = 1.0,
    finalists: bool = True,
    **fields,
) -> list[dict]:
    """A softmax-like sweep: pruned configs (block < row), one incorrect config, the baselines, and the
    top 3 of the first shape re-timed as finalists (the fastest chosen). `slower` scales our p50s.
    Returns the rows appended."""
    rng = np.random.default_rng(seed)
    rows = []
    for shape in shapes:
        best = None
        for values in itertools.product(*space.values()):
            config = dict(zip(space, values))
            if config.get("BLOCK_SIZE", shape[1]) < shape[1]:
                rows.append(row(sweep_id, "triton", shape, config, None, rng, status="pruned", **fields))
                continue
            if config.get("num_warps") == 1 and config.get("BLOCK_SIZE") == 8192:
                rows.append(row(sweep_id, "triton", shape, config, None, rng, status="incorrect", **fields))
                continue
            p50 = model_p50(shape, config) * slower
            best = p50 if best is None else min(best, p50)
            rows.append(row(sweep_id, "triton", shape, config, p50, rng, **fields))
        for provider, factor in baselines.items():
            rows.append(row(sweep_id, provider, shape, {}, factor * best / slower, rng, **fields))
    if finalists:
        first = [
            r
            for r in rows
            if r["shape"] == list(shapes[0]) and r["provider"] == "triton" and r["status"] == "ok"
        ]
        for rank, r in enumerate(sorted(first, key=lambda r: r["p50_us"])[:3], start=1):
            rows.append(
                row(
                    sweep_id,
                    "triton",
                    shapes[0],
                    r["config"],
                    r["p50_us"],
                    rng,
                    phase="final",
                    rank=rank,
                    tie=rank == 1,
                    chosen=rank == 1,
                    **fields,
                )
            )
    for r in rows:
        store.append(r)
    store.save_peaks(ENV, PEAKS, "2026-01-01T00:00:00")
    return rows

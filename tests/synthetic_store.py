"""Synthetic result stores for the plot and compare tests: rows as a sweep writes them, with seeded
random samples, no kernel run. The latency model is made up (it only has to give every plot something
to draw and every comparison a known answer); it is not a measurement."""

from __future__ import annotations

import itertools
import json
from typing import Optional

import numpy as np

from runners.model.trial import Trial
from runners.measure.stop_rule import median_precision
from runners.store.result_store import ResultStore

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
            p50_precision=median_precision(data),
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


# Between-run noise as measured on an H200 (BENCHMARKS.md, "noise between runs"), as standard deviations
# of ln(p50): where a run's buffers land moves a 5 us softmax by ~2% and a 30 us one by ~0.3%; every
# repetition of one run shares ~0.5% more (process, clocks); one repetition's own median ~0.3%.
PLACEMENT_NOISE = {(4096, 1024): 0.02, (4096, 2048): 0.005, (4096, 4096): 0.003}
RUN_NOISE = 0.005
SAMPLING_NOISE = 0.003


def noisy_run(
    store: ResultStore,
    sweep_id: str,
    rng: np.random.Generator,
    shapes=SHAPES,
    space=SPACE,
    slower: float = 1.0,
    repetitions: int = 5,
    top_k: int = 4,
    placement_noise: Optional[dict] = None,
    run_noise: float = RUN_NOISE,
    slowed_shapes: Optional[set] = None,
    **fields,
) -> list[dict]:
    """One run of a softmax-like sweep as a GPU gives it, with run-level variance drawn anew: an offset
    every row of the run shares (sd `run_noise`); per shape, the placement of its inputs, which every
    screening row and the finalists' first repetition share; per later repetition, a placement the
    finalists of a shape share. Screening rows have one repetition; the top_k of each shape and its
    baselines are re-timed in `repetitions` (rank, tie, chosen set; the fastest chosen), unless top_k < 2.
    `slower` scales our kernel's times, not the baselines', at `slowed_shapes` (default every shape).
    `fields` set columns of every row (gpu_name, kernel_hash, ...).
    Returns the rows appended."""
    placement_noise = placement_noise or PLACEMENT_NOISE
    run_offset = rng.normal(0.0, run_noise)
    rows = []
    for shape in shapes:
        spread = placement_noise[tuple(shape)]
        shared = rng.normal(0.0, spread)  # the shape's inputs, made once
        true, screened = {}, []
        slowed = slower if slowed_shapes is None or tuple(shape) in slowed_shapes else 1.0
        for values in itertools.product(*space.values()):
            config = dict(zip(space, values))
            if config["BLOCK_SIZE"] < shape[1]:
                continue
            true[json.dumps(config)] = model_p50(shape, config) * slowed
        best = min(true.values()) / slowed
        for provider, factor in BASELINES.items():
            true[json.dumps({"provider": provider})] = factor * best
        for key, p50 in true.items():
            provider, config = _provider_config(key)
            times = p50 * np.exp(run_offset + shared + rng.normal(0.0, SAMPLING_NOISE, 10))
            screened.append(_measured(row(sweep_id, provider, shape, config, p50, rng, **fields), times,
                                      [float(np.median(times))]))
        ours = sorted((r for r in screened if r["provider"] == "triton"), key=lambda r: r["p50_us"])
        group = [json.dumps(r["config"]) for r in ours[:top_k]] + [k for k in true if "provider" in k]
        if top_k < 2:  # finalists off, as in a sweep
            group = []
        offsets = [shared] + list(rng.normal(0.0, spread, repetitions - 1))  # one placement a round
        finals = []
        for key in group:
            provider, config = _provider_config(key)
            blocks = [true[key] * np.exp(run_offset + o + rng.normal(0.0, SAMPLING_NOISE, 8))
                      for o in offsets]
            finals.append(_measured(row(sweep_id, provider, shape, config, true[key], rng, phase="final",
                                        **fields),
                                    np.concatenate(blocks), [float(np.median(b)) for b in blocks]))
        ranked = sorted((r for r in finals if r["provider"] == "triton"), key=lambda r: r["p50_us"])
        for rank, r in enumerate(ranked, start=1):
            r.update(rank=rank, tie=rank == 1, chosen=rank == 1)
        rows += screened + finals
    for r in rows:
        store.append(r)
    return rows


def _provider_config(key: str) -> tuple[str, dict]:
    config = json.loads(key)
    return (config["provider"], {}) if "provider" in config else ("triton", config)


def _measured(values: dict, times: np.ndarray, repetition_p50s: list[float]) -> dict:
    """A row's timing fields set from its samples and its repetitions' medians."""
    times = times.astype(np.float32)
    logs = np.log(repetition_p50s)
    values.update(p50_us=float(np.median(times)), samples_us=times, p50_precision=median_precision(times),
                  p20_us=float(np.percentile(times, 20)),
                  p80_us=float(np.percentile(times, 80)), min_us=float(times.min()),
                  mean_us=float(times.mean()),
                  n_samples=len(times), repetitions=len(repetition_p50s), rep_p50s_us=repetition_p50s,
                  rep_noise=float(np.std(logs, ddof=1)) if len(logs) > 1 else None)
    return values

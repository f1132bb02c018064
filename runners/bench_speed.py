"""Sweep speed on a GPU (a benchmark, not a test): prints the tables BENCHMARKS.md records.

    python -m runners.bench_speed autotune [--kernel matmul|softmax]   # our sweep vs @triton.autotune
    python -m runners.bench_speed search                               # Optuna and random vs the grid
    python -m runners.bench_speed gpus                                 # throughput on 1 GPU vs all visible

autotune: the same kernel, the same list of configs, each side with a fresh Triton cache of its own:
  theirs = the first call of @triton.autotune over triton.Configs of the same list, in a fresh process
  (compile + do_bench of every config, one after another).
  Then an exhaustive careful re-measure of every config, round-robin on one GPU (runners/timing.py's
  interleaved timer, every median to 0.2% or 10 s), and each side's pick against the best there.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The lists both sides get: 96 matmul configs at 4096^3 fp16 and 72 softmax configs at 8192x8192 fp16.
CASES = {
    "matmul": {"shape": [4096, 4096, 4096], "space": {
        "BLOCK_M": [64, 128], "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64], "GROUP_M": [8],
        "num_warps": [4, 8], "num_stages": [2, 3, 4, 5]}},
    "softmax": {"shape": [8192, 8192], "space": {
        "BLOCK_SIZE": [8192, 16384, 32768], "num_warps": [1, 2, 4, 8, 16, 32], "num_stages": [1, 2, 3, 4]}},
}
DTYPE = "float16"
REPO = Path(__file__).resolve().parent.parent


def _configs(space: dict) -> list[dict]:
    return [dict(zip(space, values)) for values in itertools.product(*space.values())]


def _run(args: list[str], cache_dir: str, **env) -> tuple[float, subprocess.CompletedProcess]:
    environment = {**os.environ, "TRITON_CACHE_DIR": cache_dir, "WANDB_SILENT": "true", **env}
    began = time.perf_counter()
    result = subprocess.run(args, cwd=REPO, env=environment, capture_output=True, text=True)
    seconds = time.perf_counter() - began
    if result.returncode != 0:
        raise SystemExit(f"failed: {' '.join(args)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return seconds, result


def _space_overrides(space: dict) -> list[str]:
    return [f"kernel.space.{name}=[{','.join(map(str, values))}]" for name, values in space.items()]


def our_sweep(kernel: str, shape: list[int], space: dict, work: Path, extra: list[str] = ()) -> dict:
    sweep_id = f"speed_{kernel}_{time.time_ns()}"
    args = [sys.executable, "-m", "runners.sweep", f"kernel={kernel}", f"kernel.shapes=[{shape}]",
            f"kernel.dtypes=[{DTYPE}]", "kernel.baselines=[]", "timing=screen", "logger.mode=disabled",
            f"store={work}/results.sqlite", f"export_dir={work}/exports", f"hydra.run.dir={work}/run",
            f"sweep_id={sweep_id}", *_space_overrides(space), *extra]
    cache_dir = tempfile.mkdtemp(prefix="triton-cache-ours-")
    seconds, result = _run(args, cache_dir)
    summary = json.loads((work / "run" / "summary.json").read_text())
    from runners.finalists import winner
    from runners.store import ResultStore

    store = ResultStore(work / "results.sqlite")
    rows = store.load(sweep_id=sweep_id)
    store.close()
    ok = rows[(rows["status"] == "ok")]
    pick = json.loads(ok.loc[winner(ok)]["config"])
    ready = next((line for line in result.stdout.splitlines() if line.startswith("ready after")), "")
    return {"seconds": seconds, "job_seconds": summary["wall_seconds"], "pick": pick, "rows": rows,
            "statuses": summary["statuses"], "phases": summary["phase_seconds"], "ready": ready,
            "cache_dir": cache_dir}


def measure_peaks_once(work: Path) -> None:
    """A one-config sweep in the benchmark's store: the ceilings are measured there, once."""
    our_sweep("vector_add", [1 << 20], {"BLOCK_SIZE": [1024], "num_warps": [4]}, work, ["finalists.top_k=0"])


AUTOTUNE_SCRIPT = r'''
import json, sys, time, torch, triton
kernel, shape, configs = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
triton_configs = [triton.Config({k: v for k, v in c.items() if k not in ("num_warps", "num_stages")},
                                num_warps=c["num_warps"], num_stages=c["num_stages"]) for c in configs]
torch.manual_seed(0)
if kernel == "matmul":
    from kernels.matmul import _matmul_kernel as fn
    M, N, K = shape
    a, b = torch.randn(M, K, device="cuda", dtype=torch.float16), torch.randn(K, N, device="cuda", dtype=torch.float16)
    out = torch.empty(M, N, device="cuda", dtype=torch.float16)
    tuned = triton.autotune(configs=triton_configs, key=["M", "N", "K"])(fn)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    call = lambda: tuned[grid](out, a, b, a, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                               out.stride(0), out.stride(1), HAS_BIAS=False, ACTIVATION=0, EXACT_FP32=False,
                               INT64_OFFSETS=False)
else:
    from kernels.softmax import _softmax_kernel as fn
    x = torch.randn(*shape, device="cuda", dtype=torch.float16)
    out = torch.empty_like(x)
    tuned = triton.autotune(configs=triton_configs, key=["n_cols"])(fn)
    call = lambda: tuned[lambda meta: (shape[0],)](out, x, shape[1], x.stride(0), out.stride(0))
torch.cuda.synchronize()
began = time.perf_counter()
call()
torch.cuda.synchronize()
seconds = time.perf_counter() - began
best = tuned.best_config
pick = {**best.kwargs, "num_warps": best.num_warps, "num_stages": best.num_stages}
print("RESULT " + json.dumps({"seconds": seconds, "pick": pick}))
'''


def autotune_first_call(kernel: str) -> dict:
    case = CASES[kernel]
    process_seconds, result = _run([sys.executable, "-c", AUTOTUNE_SCRIPT, kernel, json.dumps(case["shape"]),
                                    json.dumps(_configs(case["space"]))], tempfile.mkdtemp(prefix="triton-cache-autotune-"))
    line = next(l for l in result.stdout.splitlines() if l.startswith("RESULT "))
    # process_seconds: the whole process (Python start, imports, inputs, the first call, exit), the
    # counterpart of our command's seconds
    return {**json.loads(line[len("RESULT "):]), "process_seconds": process_seconds}


def careful_remeasure(kernel: str, configs: list[dict]) -> dict[str, float]:
    """p50 (us) of every config, all timed round-robin until each median is known to 0.2%, or 10 s."""
    import torch

    from runners.device import cuda_timer
    from runners.timing import StopRule
    from runners.trials import load_spec

    spec = load_spec(kernel, None)
    case = CASES[kernel]
    inputs = spec.make_inputs(tuple(case["shape"]), torch.float16, 0, torch.device("cuda"))
    rule = StopRule(min_samples=50, min_time_s=0.5, rel_precision=0.002, max_time_s=10.0)
    timer = cuda_timer(0, rule, warmup_s=0.1)
    runnable, runs = [], []
    for config in configs:  # every config that launches, whether or not our constraints prune it
        out = spec.output_like(inputs)
        try:
            spec.launch(inputs, out, config)
            torch.cuda.synchronize()
        except Exception:  # out of resources at launch: neither side can pick it (never a sticky error here)
            continue
        runnable.append(config)
        runs.append(lambda out=out, config=config: spec.launch(inputs, out, config))
    measurements = timer.measure_interleaved(runs)
    import numpy as np

    return {json.dumps(c, sort_keys=True): float(np.median(m.samples_s)) * 1e6 for c, m in zip(runnable, measurements)}


def bench_autotune(kernels: list[str]) -> None:
    lines = ["| kernel, shape | configs | ours: job s | @autotune first call s | speed-up, job vs call | ours: command s "
             "| @autotune process s | speed-up, command vs process | ours pick vs best | autotune pick vs best |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for kernel in kernels:
        case = CASES[kernel]
        configs = _configs(case["space"])
        with tempfile.TemporaryDirectory() as work:
            measure_peaks_once(Path(work))
            ours = our_sweep(kernel, case["shape"], case["space"], Path(work))
        theirs = autotune_first_call(kernel)
        # The re-measure is neither side's time: it loads our side's binaries instead of compiling
        # every config again, one after another, in this process.
        os.environ["TRITON_CACHE_DIR"] = ours["cache_dir"]
        p50 = careful_remeasure(kernel, configs)
        best = min(p50.values())
        mine = p50[json.dumps(ours["pick"], sort_keys=True)] / best
        their = p50[json.dumps(theirs["pick"], sort_keys=True)] / best
        print(f"{kernel}: ours {ours['seconds']:.1f} s (job {ours['job_seconds']:.1f} s: {ours['phases']}, {ours['statuses']}; "
              f"{ours['ready']}), pick {ours['pick']}; "
              f"autotune {theirs['seconds']:.1f} s, pick {theirs['pick']}; best re-measured {best:.2f} us "
              f"({min(p50, key=p50.get)}), {len(p50)} configs runnable", flush=True)
        lines.append(f"| {kernel} {'x'.join(map(str, case['shape']))} {DTYPE} | {len(configs)} | {ours['job_seconds']:.1f} | "
                     f"{theirs['seconds']:.1f} | {theirs['seconds'] / ours['job_seconds']:.2f}x | {ours['seconds']:.1f} | "
                     f"{theirs['process_seconds']:.1f} | {theirs['process_seconds'] / ours['seconds']:.2f}x | "
                     f"{100 * (mine - 1):+.2f}% | {100 * (their - 1):+.2f}% |")
        print(lines[-1], flush=True)  # each kernel's row as soon as it is measured
    print("\n".join(lines))


def bench_search(seeds=(0, 1), spent=(8, 16, 32, 64)) -> None:
    """Best p50 found after N configs: grid (its plan order), random and Optuna (2 seeds each), relative
    to the best of the whole grid, on a 240-config matmul space at 4096^3 fp16."""
    space = {"BLOCK_M": [32, 64, 128, 256], "BLOCK_N": [32, 64, 128, 256], "BLOCK_K": [32, 64, 128],
             "GROUP_M": [8], "num_warps": [4, 8], "num_stages": [2, 3, 4, 5]}
    curves = {}
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        measure_peaks_once(work)
        runs = [("grid", ["finalists.top_k=0"])] + [
            (f"{method} seed {seed}", [f"search={method}", f"search.seed={seed}", f"search.budget_trials={max(spent)}",
                                             "finalists.top_k=0", "force=true"])
            for method in ("random", "optuna") for seed in seeds]
        for name, extra in runs:
            result = our_sweep("matmul", [4096, 4096, 4096], space, work, extra)
            ok = result["rows"].sort_values("id")
            ok = ok[(ok["status"] == "ok") & (ok["phase"] == "screen")]
            measured = result["rows"][result["rows"]["status"] != "pruned"].sort_values("id")
            best_so_far = []
            best = float("inf")
            for _, row in measured.iterrows():
                if row["status"] == "ok":
                    best = min(best, row["p50_us"])
                best_so_far.append(best)
            curves[name] = best_so_far
            print(f"{name}: {len(measured)} configs measured in {result['seconds']:.1f} s, best {min(ok['p50_us']):.1f} us", flush=True)
    grid_best = min(curves["grid"])
    header = "| search | " + " | ".join(f"after {n}" for n in spent) + " | configs measured |"
    lines = [header, "|" + "---|" * (len(spent) + 2)]
    for name, curve in curves.items():
        cells = [f"{curve[n - 1] / grid_best:.3f}" if len(curve) >= n else "-" for n in spent]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {len(curve)} |")
    print(f"best p50 found / best of the full grid ({len(curves['grid'])} configs measured, best {grid_best:.1f} us):")
    print("\n".join(lines))


def bench_gpus(counts=None) -> None:
    """One softmax sweep (timing=quick, finalists on) on 1 GPU and on every visible GPU: job wall time,
    and the measuring throughput (screened trials per second between the first and the last result,
    which leaves out the start-up both runs pay once)."""
    import pandas as pd
    import torch

    from runners.store import ResultStore

    count = torch.cuda.device_count()
    overrides = ["kernel=softmax", "kernel.dtypes=[float16]", "kernel.baselines=[]", "logger.mode=disabled",
                 "timing=quick", "kernel.space.num_warps=[2,4,8,16]",
                 "kernel.shapes=[[4096,2048],[4096,4096],[8192,4096],[8192,8192],[16384,4096],[16384,8192]]"]
    lines = ["| GPUs | trials timed | job wall s | trials/s, whole job | trials/s, measuring |", "|---|---|---|---|---|"]
    rates = {}
    for gpus in counts or sorted({1, count}):
        with tempfile.TemporaryDirectory() as work:
            args = [sys.executable, "-m", "runners.sweep", *overrides, f"gpu_workers={gpus}", "sweep_id=gpus",
                    f"store={work}/results.sqlite", f"export_dir={work}/exports", f"hydra.run.dir={work}/run"]
            _run(args, tempfile.mkdtemp(prefix="triton-cache-gpus-"))
            summary = json.loads((Path(work) / "run" / "summary.json").read_text())
            store = ResultStore(Path(work) / "results.sqlite")
            rows = store.load(sweep_id="gpus")
            store.close()
        timed = rows[(rows["status"] != "pruned") & (rows["phase"] == "screen")]
        stamps = pd.to_datetime(timed["timestamp"])
        measuring_s = (stamps.max() - stamps.min()).total_seconds()
        rates[gpus] = (len(timed) - 1) / measuring_s
        lines.append(f"| {gpus} | {len(timed)} | {summary['wall_seconds']:.1f} | {len(timed) / summary['wall_seconds']:.2f} | "
                     f"{rates[gpus]:.2f} |")
        print(lines[-1], flush=True)
    print("\n".join(lines))
    if count > 1 and {1, count} <= set(rates):
        print(f"measuring throughput on {count} GPUs / on 1: {rates[count] / rates[1]:.2f}x")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["autotune", "search", "gpus"])
    parser.add_argument("--kernel", choices=sorted(CASES), action="append")
    parser.add_argument("--gpus", type=int, action="append", help="gpus: these GPU counts only (default 1 and all)")
    args = parser.parse_args(argv)
    if args.what == "autotune":
        bench_autotune(args.kernel or ["matmul", "softmax"])
    elif args.what == "search":
        bench_search()
    else:
        bench_gpus(args.gpus)


if __name__ == "__main__":
    main()

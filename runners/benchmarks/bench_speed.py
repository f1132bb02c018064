"""Sweep speed on a GPU (a benchmark, not a test): prints the tables BENCHMARKS.md records.

    python -m triton_sweep.benchmarks.bench_speed autotune [--kernel matmul|softmax|slow_import]  # autotune
    python -m triton_sweep.benchmarks.bench_speed search           # Optuna and random vs the grid
    python -m triton_sweep.benchmarks.bench_speed gpus             # throughput on 1 GPU vs all visible
    python -m triton_sweep.benchmarks.bench_speed sweeps [--old TREE] [--old-extra OVERRIDE ...]
                                                 [--sweeps readme softmax_export ...]  # old tree beside
    python -m triton_sweep.benchmarks.bench_speed firstcall [--kernel softmax]  # where a first call goes

autotune: ours against the first call of @triton.autotune over the same configs, each on a fresh Triton
cache, then each side's pick against the best of a round-robin re-measure (slow_import: a module whose
import sleeps 5 s). sweeps: the README and export-grade sweeps, each tree's seconds, phases, GPU share."""
from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

# The lists both sides get: 96 matmul configs at 4096^3 fp16 and 72 softmax configs at 8192x8192 fp16;
# 30 softmax configs over 4 shapes behind a slow import (those valid at a shape are tried there).
CASES = {
    "matmul": {"shapes": [[4096, 4096, 4096]], "space": {
        "BLOCK_M": [64, 128], "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64], "GROUP_M": [8],
        "num_warps": [4, 8], "num_stages": [2, 3, 4, 5]}},
    "softmax": {"shapes": [[8192, 8192]], "space": {
        "BLOCK_SIZE": [8192, 16384, 32768], "num_warps": [1, 2, 4, 8, 16, 32], "num_stages": [1, 2, 3, 4]}},
    "slow_import": {"shapes": [[4096, 1024], [4096, 2048], [4096, 4096], [4096, 8192]], "space": {
        "BLOCK_SIZE": [1024, 2048, 4096, 8192, 16384], "num_warps": [1, 2, 4, 8, 16, 32], "num_stages": [1]},
        "spec_path": "tests.fixtures.slow_import_kernel:SPEC", "module": "tests.fixtures.slow_import_kernel",
        "spec": "softmax",
        "pruned": True},
}
DTYPE = "float16"
PHASES = ("start", "peaks", "trials", "finalists", "finish")  # a sweep's phase line, in order
REPO = Path(__file__).resolve().parents[2]


def _configs(space: dict) -> list[dict]:
    return [dict(zip(space, values)) for values in itertools.product(*space.values())]


def _run(args: list[str], cache_dir: str, cwd: Path = REPO,
         **env) -> tuple[float, subprocess.CompletedProcess]:
    # SWEEP_RESIDENT_S=0: an older tree leaves no resident (a process that outlived its commands)
    environment = {**os.environ, "TRITON_CACHE_DIR": cache_dir, "WANDB_SILENT": "true",
                   "SWEEP_RESIDENT_S": "0", **env}
    began = time.perf_counter()
    result = subprocess.run(args, cwd=cwd, env=environment, capture_output=True, text=True)
    seconds = time.perf_counter() - began
    if result.returncode != 0:
        raise SystemExit(f"failed in {cwd}: {' '.join(args)}\n{result.stdout[-3000:]}\n"
                         f"{result.stderr[-3000:]}")
    return seconds, result


def _space_overrides(space: dict, add: bool = False) -> list[str]:
    """kernel.space overrides; `add` for an external kernel, whose conf has no space entries to override."""
    prefix = "+kernel.space" if add else "kernel.space"
    return [f"{prefix}.{name}=[{','.join(map(str, values))}]" for name, values in space.items()]


def our_sweep(kernel: str, shapes: list, space: dict, work: Path, extra: list[str] = (),
              spec_path: Optional[str] = None, cache_dir: Optional[str] = None, **env) -> dict:
    """Our sweep of `kernel` (a builtin, or "external" with its `spec_path`) at `shapes`, in a fresh
    Triton cache (or `cache_dir`), `env` added to its environment: seconds of the command and of the
    job, and our pick at each shape."""
    sweep_id = f"speed_{kernel}_{time.time_ns()}"
    shape_list = ",".join(json.dumps(shape).replace(" ", "") for shape in shapes)
    args = [sys.executable, "-m", "triton_sweep.sweep", f"kernel={kernel}", f"kernel.shapes=[{shape_list}]",
            f"kernel.dtypes=[{DTYPE}]", "kernel.baselines=[]", "timing=screen", "logger.mode=disabled",
            "verbose=true",
            f"store={work}/results.sqlite", f"export_dir={work}/exports", f"hydra.run.dir={work}/run",
            f"sweep_id={sweep_id}", *([f"kernel.spec={spec_path}"] if spec_path else []),
            *_space_overrides(space, add=bool(spec_path)), *extra]
    cache_dir = cache_dir or tempfile.mkdtemp(prefix="triton-cache-ours-")
    seconds, result = _run(args, cache_dir, **env)
    summary = json.loads((work / "run" / "summary.json").read_text())
    from triton_sweep.model.finalists import winner
    from triton_sweep.store.result_store import ResultStore

    store = ResultStore(work / "results.sqlite")
    rows = store.load(sweep_id=sweep_id)
    store.close()
    ok = rows[(rows["status"] == "ok")]
    picks = [json.loads(ok.loc[winner(ok[ok["shape"] == json.dumps(shape)])]["config"]) for shape in shapes]
    # Where its start and its trials went, as the sweep said it
    said = "; ".join(line for line in result.stdout.splitlines()
                     if line.startswith(("ready after", "time spent")))
    return {"seconds": seconds, "job_seconds": summary["wall_seconds"], "picks": picks, "rows": rows,
            "statuses": summary["statuses"], "phases": summary["phase_seconds"], "said": said,
            "cache_dir": cache_dir}


def measure_peaks_once(work: Path, cache_dir: str, **env) -> None:
    """A one-config sweep in the benchmark's store: the ceilings are measured there, once. Then the
    Triton cache it used is emptied: what it compiled (the L2 flush kernel too) is not our side's."""
    our_sweep("vector_add", [[1 << 20]], {"BLOCK_SIZE": [1024], "num_warps": [4]}, work,
              ["finalists.top_k=0"], cache_dir=cache_dir, **env)
    for entry in Path(cache_dir).iterdir():
        if entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()


AUTOTUNE_SCRIPT = r'''
import importlib, json, sys, time
kernel, cases, module = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
if module:
    importlib.import_module(module)  # a kernel library's import is part of its process, as of our sweep's
import torch, triton


def triton_configs(configs):
    return [triton.Config({k: v for k, v in c.items() if k not in ("num_warps", "num_stages")},
                          num_warps=c["num_warps"], num_stages=c["num_stages"]) for c in configs]


torch.manual_seed(0)
calls, tuners = [], []
for shape, configs in cases:  # one @triton.autotune per shape, over the configs tried at that shape
    if kernel == "matmul":
        from triton_sweep.kernels.matmul import _matmul_kernel as fn
        M, N, K = shape
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(K, N, device="cuda", dtype=torch.float16)
        out = torch.empty(M, N, device="cuda", dtype=torch.float16)
        tuned = triton.autotune(configs=triton_configs(configs), key=["M", "N", "K"])(fn)
        grid = lambda meta, M=M, N=N: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
        calls.append(lambda tuned=tuned, a=a, b=b, out=out, grid=grid, M=M, N=N, K=K: tuned[grid](
            out, a, b, a, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0),
            out.stride(1), HAS_BIAS=False, ACTIVATION=0, EXACT_FP32=False, INT64_OFFSETS=False))
    else:
        from triton_sweep.kernels.softmax import _softmax_kernel as fn
        x = torch.randn(*shape, device="cuda", dtype=torch.float16)
        out = torch.empty_like(x)
        tuned = triton.autotune(configs=triton_configs(configs), key=["n_cols"])(fn)
        calls.append(lambda tuned=tuned, x=x, out=out, shape=shape: tuned[lambda meta: (shape[0],)](
            out, x, shape[1], x.stride(0), out.stride(0)))
    tuners.append(tuned)
torch.cuda.synchronize()
began = time.perf_counter()
for call in calls:
    call()
torch.cuda.synchronize()
seconds = time.perf_counter() - began
picks = [{**t.best_config.kwargs, "num_warps": t.best_config.num_warps,
          "num_stages": t.best_config.num_stages} for t in tuners]
print("RESULT " + json.dumps({"seconds": seconds, "picks": picks}))
'''


def tried_configs(case: dict) -> list[list[dict]]:
    """Per shape, the configs both sides try there: the whole list, or (a case marked "pruned") those
    the kernel's constraints keep at that shape, as our sweep plans them."""
    configs = _configs(case["space"])
    if not case.get("pruned"):
        return [configs for _ in case["shapes"]]
    from triton_sweep.model.spec_sources import load_spec

    spec = load_spec(case["spec"], None)
    return [[c for c in configs if not spec.constraints(tuple(shape), DTYPE, c)] for shape in case["shapes"]]


def autotune_first_call(kernel: str) -> dict:
    case = CASES[kernel]
    cases = list(zip(case["shapes"], tried_configs(case)))
    args = [sys.executable, "-c", AUTOTUNE_SCRIPT, case.get("spec", kernel), json.dumps(cases),
            case.get("module", "")]
    process_seconds, result = _run(args, tempfile.mkdtemp(prefix="triton-cache-autotune-"))
    line = next(l for l in result.stdout.splitlines() if l.startswith("RESULT "))
    # process_seconds: the whole process (Python start, imports, inputs, the first call, exit), the
    # counterpart of our command's seconds
    return {**json.loads(line[len("RESULT "):]), "process_seconds": process_seconds}


def careful_remeasure(kernel: str, shape: list, configs: list[dict]) -> dict[str, float]:
    """p50 (us) of every config at `shape`, all timed round-robin until each median is known to 0.2%, or
    10 s."""
    import torch

    from triton_sweep.model.spec_sources import load_spec
    from triton_sweep.measure.device import cuda_timer
    from triton_sweep.measure.stop_rule import StopRule

    spec = load_spec(kernel, None)
    inputs = spec.make_inputs(tuple(shape), torch.float16, 0, torch.device("cuda"))
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

    return {json.dumps(c, sort_keys=True): float(np.median(m.samples_s)) * 1e6
            for c, m in zip(runnable, measurements)}


def bench_autotune(kernels: list[str]) -> None:
    """Our sweep against @triton.autotune: the same kernel and list of configs, each side on a fresh
    Triton cache of its own. Theirs: the first call of @triton.autotune over the same triton.Configs in
    a fresh process (compile and do_bench of every config, one after another). Then every config
    re-measured round-robin on one GPU (the interleaved timer, every median to 0.2% or 10 s), and each
    side's pick against the best there. Two large lists (96 matmul configs, 72 softmax ones, one shape
    each) and slow_import: tests/fixtures/slow_import_kernel.py, kernels/softmax.py's kernel behind a module
    whose import sleeps 5 s (as a large kernel library's import takes seconds), 4 shapes, 30 configs listed;
    both sides import that module, and its "pick vs best" is the worst over the 4 shapes."""
    lines = ["| kernel, shape | configs | ours: job s | @autotune first call s | speed-up, job vs call | "
             "ours: command s | @autotune process s | speed-up, command vs process | ours pick vs best | "
             "autotune pick vs best |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for kernel in kernels:
        case = CASES[kernel]
        tried = tried_configs(case)
        with tempfile.TemporaryDirectory() as work:
            cache_dir = tempfile.mkdtemp(prefix="triton-cache-ours-")
            measure_peaks_once(Path(work), cache_dir)
            ours = our_sweep("external" if "spec_path" in case else kernel, case["shapes"],
                             case["space"], Path(work), spec_path=case.get("spec_path"), cache_dir=cache_dir)
        theirs = autotune_first_call(kernel)
        # The re-measure is neither side's time: it loads our side's binaries instead of compiling
        # every config again, one after another, in this process.
        os.environ["TRITON_CACHE_DIR"] = ours["cache_dir"]
        mine, their, notes = [], [], []
        for shape, configs, our_pick, their_pick in zip(case["shapes"], tried, ours["picks"],
                                                         theirs["picks"]):
            p50 = careful_remeasure(case.get("spec", kernel), shape, configs)
            best = min(p50.values())
            mine.append(p50[json.dumps(our_pick, sort_keys=True)] / best)
            their.append(p50[json.dumps(their_pick, sort_keys=True)] / best)
            notes.append(f"{'x'.join(map(str, shape))}: ours {our_pick}, autotune {their_pick}, best "
                         f"re-measured {best:.2f} us ({min(p50, key=p50.get)}), {len(p50)} configs runnable")
        print(f"{kernel}: ours {ours['seconds']:.1f} s (job {ours['job_seconds']:.1f} s: {ours['phases']}, "
              f"{ours['statuses']}; "
              f"{ours['said']}); autotune {theirs['seconds']:.1f} s; " + "; ".join(notes), flush=True)
        shapes = " ".join("x".join(map(str, shape)) for shape in case["shapes"])
        listed = len(_configs(case["space"]))
        count = sum(map(len, tried))
        label = f"{kernel} {shapes} {DTYPE}" + (f", {case['module']} imports in 5 s" if "module" in case
                                                else "")
        tried_count = count if count == listed else f"{count} ({listed} listed)"
        lines.append(f"| {label} | {tried_count} | {ours['job_seconds']:.1f} | "
                     f"{theirs['seconds']:.1f} | {theirs['seconds'] / ours['job_seconds']:.2f}x | "
                     f"{ours['seconds']:.1f} | {theirs['process_seconds']:.1f} | "
                     f"{theirs['process_seconds'] / ours['seconds']:.2f}x | "
                     f"{100 * (max(mine) - 1):+.2f}% | {100 * (max(their) - 1):+.2f}% |")
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
        measure_peaks_once(work, tempfile.mkdtemp(prefix="triton-cache-ours-"))
        runs = [("grid", ["finalists.top_k=0"])] + [
            (f"{method} seed {seed}", [f"search={method}", f"search.seed={seed}",
                                             f"search.budget_trials={max(spent)}",
                                             "finalists.top_k=0", "force=true"])
            for method in ("random", "optuna") for seed in seeds]
        for name, extra in runs:
            result = our_sweep("matmul", [[4096, 4096, 4096]], space, work, extra)
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
            print(f"{name}: {len(measured)} configs measured in {result['seconds']:.1f} s, "
                  f"best {min(ok['p50_us']):.1f} us", flush=True)
    grid_best = min(curves["grid"])
    header = "| search | " + " | ".join(f"after {n}" for n in spent) + " | configs measured |"
    lines = [header, "|" + "---|" * (len(spent) + 2)]
    for name, curve in curves.items():
        cells = [f"{curve[n - 1] / grid_best:.3f}" if len(curve) >= n else "-" for n in spent]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {len(curve)} |")
    print(f"best p50 found / best of the full grid ({len(curves['grid'])} configs measured, "
          f"best {grid_best:.1f} us):")
    print("\n".join(lines))


def bench_gpus(counts=None) -> None:
    """One softmax sweep (timing=quick, finalists on) on 1 GPU and on every visible GPU: job wall time,
    and the measuring throughput (screened trials per second between the first and the last result,
    which leaves out the start-up both runs pay once)."""
    import pandas as pd
    import torch

    from triton_sweep.store.result_store import ResultStore

    count = torch.cuda.device_count()
    overrides = ["kernel=softmax", "kernel.dtypes=[float16]", "kernel.baselines=[]", "logger.mode=disabled",
                 "timing=quick", "kernel.space.num_warps=[2,4,8,16]",
                 "kernel.shapes=[[4096,2048],[4096,4096],[8192,4096],[8192,8192],[16384,4096],[16384,8192]]"]
    lines = ["| GPUs | trials timed | job wall s | trials/s, whole job | trials/s, measuring |",
             "|---|---|---|---|---|"]
    rates = {}
    for gpus in counts or sorted({1, count}):
        with tempfile.TemporaryDirectory() as work:
            args = [sys.executable, "-m", "triton_sweep.sweep", *overrides, f"gpu_workers={gpus}",
                    "sweep_id=gpus",
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
        lines.append(f"| {gpus} | {len(timed)} | {summary['wall_seconds']:.1f} | "
                     f"{len(timed) / summary['wall_seconds']:.2f} | "
                     f"{rates[gpus]:.2f} |")
        print(lines[-1], flush=True)
    print("\n".join(lines))
    if count > 1 and {1, count} <= set(rates):
        print(f"measuring throughput on {count} GPUs / on 1: {rates[count] / rates[1]:.2f}x")


# The sweeps `sweeps` times: the README's main command (cold, then warm) and the export-grade sweeps.
WARM = [("warm", ["force=true"])]
# Then as on a machine's first torch.compile: a store, Triton cache and inductor cache of its own, all
# empty. The cold run finds the torch.compile baselines' graphs in inductor's cache, which keeps their
# Triton binaries too; here their worker builds them (BENCHMARKS.md, O).
FIRST_USE = ("cold, no inductor cache", [])
# The README's command and every export-grade sweep file; by default DEFAULT_SWEEPS.
SWEEPS = {"readme": [], **{path.stem: [f"+sweep={path.stem}"]
                           for path in sorted((REPO / "sweeps").glob("*_export.yaml"))}}
DEFAULT_SWEEPS = ["readme", "softmax_export", "layernorm_export"]


def _tree_env(tree: Path) -> dict:
    """PYTHONPATH with `tree` first and without this tree, so that another tree's code is the one run."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
             if p and Path(p).resolve() != REPO]
    return {"PYTHONPATH": os.pathsep.join([str(tree)] + paths)}


def _timed_sweep(tree: Path, work: Path, name: str, overrides: list[str], cache_dir: str,
                 extra: list[str] = (), **env) -> dict:
    """One sweep command run from `tree` with its store and runs under `work`: its seconds, summary,
    and the export's leave-one-out lines."""
    run_dir = work / f"run_{time.time_ns()}"
    args = [sys.executable, "-m", "triton_sweep.sweep", *overrides, f"sweep_id={name}",
            f"store={work}/results.sqlite", f"export_dir={work}/exports", f"logger.dir={work}",
            f"hydra.run.dir={run_dir}", *extra]
    seconds, result = _run(args, cache_dir, tree, **_tree_env(tree), **env)
    summary = json.loads((run_dir / "summary.json").read_text())
    between = [line for line in result.stdout.splitlines() if "at sizes the sweep did not measure" in line]
    return {"seconds": seconds, "summary": summary, "between": between,
            "output": result.stdout + result.stderr}


def _spent_cells(summary: dict) -> str:
    spent = summary.get("time_spent")
    if not spent:
        return "- | - | - | -"
    phases = spent["phases"]

    def share(phase: str) -> str:
        busy = phases.get(phase, {}).get("busy_share")
        return "-" if busy is None else f"{100 * busy:.0f}%"

    first = phases.get("screen", {}).get("first_call_s", 0.0)
    return f"{share('screen')} | {share('final')} | {first:.1f} | {sum(spent['limit'].values()):.1f}"


def bench_sweeps(names: list[str], trees: list[Path], calibration: Optional[str],
                 old_extra: list[str]) -> None:
    """Each sweep of `names` from each tree (this one last), cold (a fresh Triton cache and store) and,
    for the README's, again warm (force=true), then as on a machine's first torch.compile (FIRST_USE):
    command and phase seconds, the GPU-busy shares, first calls, this host's limit; then compare's verdict
    of the last tree's run against each other tree's, and each run's leave-one-out lines."""
    lines = ["| sweep | tree | run | command s | before job | start | peaks | trials | finalists | finish | "
             "trials GPU-busy | finalists GPU-busy | first calls s | limit s |", "|" + "---|" * 14]
    runs = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            for tree in trees:
                work = Path(scratch) / f"{name}_{len(runs)}"
                work.mkdir()
                cache_dir = tempfile.mkdtemp(prefix="triton-cache-sweeps-")
                modes = [("cold", [])] + (WARM + [FIRST_USE] if name == "readme" else [])
                for mode, extra in modes:
                    sweep_id = name if mode == "cold" else f"{name}_{re.sub(r'[^a-z]+', '_', mode)}"
                    here, cache_here, env = work, cache_dir, {}
                    if (mode, extra) == FIRST_USE:
                        here = Path(scratch) / f"{name}_{len(runs)}_first_use"
                        here.mkdir()
                        cache_here = tempfile.mkdtemp(prefix="triton-cache-", dir=scratch)
                        env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-", dir=scratch)
                    extra = [*extra, *(old_extra if tree != trees[-1] else ["verbose=true"])]
                    run = _timed_sweep(tree, here, sweep_id, SWEEPS[name], cache_here, extra, **env)
                    summary, phases = run["summary"], run["summary"]["phase_seconds"]
                    before = summary.get("before_job_seconds") or 0.0
                    lines.append(f"| {name} | {tree.name} | {mode} | {run['seconds']:.1f} | {before:.1f} | "
                                 + " | ".join(f"{phases.get(p, 0.0):.1f}" for p in PHASES)
                                 + f" | {_spent_cells(summary)} |")
                    print(lines[-1], flush=True)
                    said = ("time spent", "wall time", "finish ", "ready after")
                    print("\n".join(l for l in run["output"].splitlines()
                                     if l.startswith(said) or "reused from the store" in l), flush=True)
                    if mode == "cold":
                        runs[(name, tree)] = (work, run["between"])
        print("\n".join(lines))
        for name in names:
            new_work, new_between = runs[(name, trees[-1])]
            for tree in trees[:-1]:
                old_work, old_between = runs[(name, tree)]
                args = [sys.executable, "-m", "triton_sweep.compare", f"{old_work}/results.sqlite:{name}",
                        f"{new_work}/results.sqlite:{name}", "--fail-on-slow", "2%"]
                args += ["--calibration", calibration] if calibration and name == "readme" else []
                result = subprocess.run(args, cwd=REPO, capture_output=True, text=True)
                print(f"compare {name}, {tree.name} -> {trees[-1].name} (exit status {result.returncode}):\n"
                      + "\n".join(result.stdout.splitlines()[-12:]), flush=True)
                for label, between in ((tree.name, old_between), (trees[-1].name, new_between)):
                    print("\n".join(f"leave-one-out, {label}: {line}" for line in between))


def bench_first_call(kernel: str, top: int = 25) -> None:
    """The GPU worker's first call of each config of `kernel`'s default shapes and space, its binary
    built beforehand by a compile process as the pool builds it (TRITON_CACHE_DIR: cold or warm, the
    caller's choice), each first call timed and profiled in this process; then each baseline's first
    call. Prints the seconds and the profile of the Triton first calls (cumulative, then own time)."""
    import cProfile
    import multiprocessing
    import pstats

    import torch
    import triton

    from triton_sweep.engine import compile_pool
    from triton_sweep.model.spec_sources import load_spec
    from triton_sweep.model.trial import TRITON_PROVIDER, Trial
    from triton_sweep.engine.trial_run import timed_call
    from triton_sweep.measure.inputs import ShapeCache
    from triton_sweep.measure.device import cuda_timer
    from triton_sweep.measure.stop_rule import StopRule

    spec = load_spec(kernel, None)
    dtype = spec.default_dtypes[0]
    trials = [Trial(kernel, TRITON_PROVIDER, tuple(shape), dtype, config)
              for shape in spec.default_shapes for config in _configs(spec.space)
              if not spec.constraints(tuple(shape), dtype, config)]
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    target = triton.runtime.driver.active.get_current_target()
    target = (target.backend, target.arch, target.warp_size)
    parent, child = multiprocessing.get_context("spawn").Pipe()
    compiler = multiprocessing.get_context("spawn").Process(
        target=compile_pool._compile_main, args=(child, kernel, None))
    began = time.perf_counter()
    compiler.start()
    parent.recv()  # ready
    compile_s = []
    for trial in trials:
        parent.send(compile_pool.compile_request(trial, target))
        compile_s.append(parent.recv()[1]["compile_s"])
    parent.send(None)
    compiler.join()
    print(f"{len(trials)} configs of {kernel} {dtype} built by a compile process in "
          f"{time.perf_counter() - began:.1f} s (compiles {sum(compile_s):.1f} s, median "
          f"{statistics.median(compile_s):.3f})", flush=True)
    timer = cuda_timer(0, StopRule(min_samples=10, rel_precision=0.02, max_time_s=0.05), 0.005)
    cache = ShapeCache(spec, 0, device)
    profile = cProfile.Profile()
    first, measured = [], []
    for trial in trials:
        inputs, _, _ = cache.get(trial, with_bound=False)  # once a shape: not the first call's
        torch.cuda.synchronize()
        called = time.perf_counter()
        profile.enable()
        run, out = timed_call(spec, trial, inputs)
        run()
        torch.cuda.synchronize()
        profile.disable()
        first.append(time.perf_counter() - called)
        measured.append(timer.measure(run).measure_s)
    print(f"Triton first calls: {sum(first):.2f} s over {len(first)} configs (first three "
          f"{', '.join(f'{s:.3f}' for s in first[:3])}; median {statistics.median(first):.3f}; max "
          f"{max(first):.3f}); their screening measurements {sum(measured):.2f} s", flush=True)
    for name, baseline in spec.baselines.items():
        for shape in spec.default_shapes:
            inputs, _, _ = cache.get(Trial(kernel, name, tuple(shape), dtype, {}), with_bound=False)
            called = time.perf_counter()
            baseline(inputs)
            torch.cuda.synchronize()
            print(f"baseline {name} {shape}: first call {time.perf_counter() - called:.3f} s", flush=True)
    stats = pstats.Stats(profile)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["autotune", "search", "gpus", "sweeps", "firstcall"])
    parser.add_argument("--sweeps", nargs="+", choices=sorted(SWEEPS), default=DEFAULT_SWEEPS)
    parser.add_argument("--old", type=Path, action="append", default=[],
                        help="sweeps: another tree of the project, run before this one")
    parser.add_argument("--calibration", help="sweeps: earlier README runs for compare (STORE:ID,...)")
    parser.add_argument("--kernel", action="append",
                        help=f"autotune: of {sorted(CASES)}; firstcall: a built-in kernel (default softmax)")
    parser.add_argument("--old-extra", nargs="*", default=[],
                        help="sweeps: overrides for the --old trees only (e.g. an option only they know)")
    parser.add_argument("--gpus", type=int, action="append",
                        help="gpus: these GPU counts only (default 1 and all)")
    args = parser.parse_args(argv)
    if args.what == "autotune" and not set(args.kernel or []) <= set(CASES):
        parser.error(f"--kernel: autotune's cases are {sorted(CASES)}")
    if args.what == "autotune":
        bench_autotune(args.kernel or ["matmul", "softmax", "slow_import"])
    elif args.what == "search":
        bench_search()
    elif args.what == "gpus":
        bench_gpus(args.gpus)
    elif args.what == "firstcall":
        bench_first_call((args.kernel or ["softmax"])[0])
    else:
        bench_sweeps(args.sweeps, [tree.resolve() for tree in args.old] + [REPO], args.calibration,
                     args.old_extra)


if __name__ == "__main__":
    main()

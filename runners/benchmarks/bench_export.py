"""The export at shapes it was not tuned at, on a GPU (a benchmark, not a test): prints the table
BENCHMARKS.md records.

    python -m runners.benchmarks.bench_export [--kernels softmax layernorm matmul] [--no-first-call]
        [--work DIR]

For each kernel, fp16:
1. Tune: `python -m runners.sweep` at 3 shapes over the kernel's default space (timing=screen, the
   finalists on), in a store of its own; its end-of-sweep export is the module under test.
2. Exhaustive: the same sweep at the held-out shapes (between the tuned ones and beyond them); its
   winner at each is the best there.
3. At each held-out shape, the export's picks: @triton.autotune over CONFIGS with the export's prune
   (softmax with check=the block holds the row: the kernel's own rule), and config_for; and
   autotune over the whole space (the configs the kernel's constraints keep at that shape) beside it.
   The first call of each autotune (compile and autotune's timing of what it was given) in seconds,
   each with a fresh Triton cache and a fresh JIT function, in this process.
4. Every distinct pick is checked against the float64 reference and timed with the project's timer
   (runners.measure.device.cuda_timer, L2 flushed before each sample) at that shape, one after the other;
   percentages are the exhaustive winner's p50 over the pick's, timed the same way.

Sized to finish within 8 minutes on one H200 (6 sweeps at timing=screen, about 40 first calls; an
estimate until it is run); --no-first-call leaves out the first calls, most of the compiling.
"""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DTYPE = "float16"
# Tuned at the default sweep's shapes (conf/kernel/*.yaml), except matmul's smaller ones (time);
# held out: between the tuned shapes and beyond them on either side, some not a power of 2.
CASES = {
    "softmax": {"tune": [[4096, 1024], [4096, 4096], [2048, 16384]],
                "held_out": [[8192, 512], [4096, 3000], [4096, 12000], [1024, 32768]]},
    "layernorm": {"tune": [[16384, 4096], [8192, 8192], [2048, 65536]],
                  "held_out": [[16384, 1024], [8192, 6144], [1024, 131072]]},
    "matmul": {"tune": [[1024, 1024, 1024], [4096, 4096, 4096], [8192, 8192, 8192]],
               "held_out": [[512, 512, 512], [2048, 2048, 2048], [16384, 16384, 4096]]},
}


def _rule():
    """The stopping rule for timing the picks: the one place to adapt to runners.measure.timing's API."""
    from runners.measure.stop_rule import StopRule

    # the default preset
    return StopRule(min_samples=20, min_time_s=0.01, rel_precision=0.005, max_time_s=1.0)


def _p50_us(timer, fn) -> float:
    from runners.measure.timing import summarize

    return summarize(timer.measure(fn).samples_s)["p50_us"]


def sweep(kernel: str, shapes: list, sweep_id: str, work: Path, export_dir: Path) -> None:
    args = [sys.executable, "-m", "runners.sweep", f"kernel={kernel}", f"kernel.shapes={json.dumps(shapes)}",
            f"kernel.dtypes=[{DTYPE}]", "kernel.baselines=[]", "timing=screen", "logger.mode=disabled",
            f"store={work}/results.sqlite", f"export_dir={export_dir}",
            f"hydra.run.dir={work}/run_{sweep_id}", f"sweep_id={sweep_id}"]
    result = subprocess.run(args, cwd=REPO, capture_output=True, text=True,
                            env={**os.environ, "WANDB_SILENT": "true"})
    if result.returncode != 0:
        raise SystemExit(f"sweep failed: {' '.join(args)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


def winners(work: Path, kernel: str, sweep_id: str) -> dict[tuple, dict]:
    """shape -> the exhaustive sweep's winning config there (runners/engine/finalists.py's choice)."""
    from runners.engine.finalists import winner
    from runners.results.export import select_rows
    from runners.results.store import ResultStore

    store = ResultStore(work / "results.sqlite")
    frame = store.load(sweep_id=sweep_id, kernel=kernel)
    store.close()
    (rows,) = select_rows(frame, kernel).values()
    return {tuple(json.loads(shape)): json.loads(group.loc[winner(group)]["config"])
            for shape, group in rows.groupby("shape")}


def load_export(path: Path):
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def as_dict(config) -> dict:
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


def as_config(config: dict):
    import triton

    return triton.Config({k: v for k, v in config.items() if k not in ("num_warps", "num_stages")},
                         num_warps=config.get("num_warps", 4), num_stages=config.get("num_stages", 3))


def holds_row(config, sizes) -> bool:
    """softmax's rule: one program holds a whole row (kernels/softmax.py)."""
    return config.kwargs["BLOCK_SIZE"] >= sizes["cols"]


def autotuned_call(kernel: str, configs: list, prune, inputs, out, do_bench=None):
    """@triton.autotune over `configs` on a fresh JIT function of the kernel, and a call of it.
    do_bench: autotune's timer where the default cannot run (the interpreter's tests)."""
    import triton

    key = ["M", "N", "K"] if kernel == "matmul" else ["n_cols"]
    options = {"prune_configs_by": {"early_config_prune": prune}} if prune else {}
    options.update({"do_bench": do_bench} if do_bench else {})
    if kernel == "softmax":
        from kernels.softmax import _softmax_kernel

        tuned = triton.autotune(configs=configs, key=key, **options)(triton.jit(_softmax_kernel.fn))
        x = inputs[0]
        return tuned, lambda: tuned[(x.shape[0],)](out, x, x.shape[1], x.stride(0), out.stride(0))
    if kernel == "layernorm":
        from kernels.layernorm import EPS, _layernorm_kernel

        single_pass = triton.heuristics({"SINGLE_PASS": lambda args: args["BLOCK_SIZE"] >= args["n_cols"]})
        fresh = single_pass(triton.jit(_layernorm_kernel.fn))
        tuned = triton.autotune(configs=configs, key=key, **options)(fresh)
        (x, weight, bias), (y, mean, rstd) = inputs, out
        return tuned, lambda: tuned[(x.shape[0],)](y, mean, rstd, x, weight, bias, x.shape[1], x.stride(0),
                                                   y.stride(0), EPS)
    from kernels.matmul import _matmul_kernel

    tuned = triton.autotune(configs=configs, key=key, **options)(triton.jit(_matmul_kernel.fn))
    a, b = inputs
    M, K = a.shape
    N = b.shape[1]
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    strides = (a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1))
    return tuned, lambda: tuned[grid](out, a, b, a, M, N, K, *strides, HAS_BIAS=False, ACTIVATION=0,
                                      EXACT_FP32=False, INT64_OFFSETS=False)


def first_call(call, sync) -> tuple[float, bool]:
    """Seconds of the first call with a fresh Triton cache; whether the cache was written (cold)."""
    cache = tempfile.mkdtemp(prefix="triton-cache-bench-export-")
    before = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = cache
    try:
        sync()
        began = time.perf_counter()
        call()
        sync()
        seconds = time.perf_counter() - began
    finally:
        if before is None:
            os.environ.pop("TRITON_CACHE_DIR")
        else:
            os.environ["TRITON_CACHE_DIR"] = before
    return seconds, any(Path(cache).iterdir())


def full_space(spec, shape: tuple) -> list[dict]:
    """The kernel's default space at `shape`, less what its constraints prune (what a user would tune)."""
    names = list(spec.space)
    configs = [dict(zip(names, values)) for values in itertools.product(*spec.space.values())]
    return [c for c in configs if spec.constraints(shape, DTYPE, c) is None]


def bench_shape(kernel: str, spec, exported, shape: tuple, best: dict, timer, with_first_call: bool,
                device: str = "cuda", do_bench=None) -> dict:
    """The picks at one held-out shape, their check and their p50 (module doc, steps 3 and 4)."""
    import torch

    from runners.measure import check

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    # The sizes the prune reads (KEY's dims; all dims when KEY is empty, as the prune falls back to),
    # so that config_for and the prune look from the same point.
    key_dims = set(exported.KEY.values()) or set(spec.dims)
    sizes = {dim: size for dim, size in zip(spec.dims, shape) if dim in key_dims}
    inputs = spec.make_inputs(shape, getattr(torch, DTYPE), 0, torch.device(device))
    references = check.as_tuple(spec.reference(*check.upcast(inputs)))
    bound = spec.accumulation_bound(*inputs) if spec.accumulation_bound else None
    row = {"shape": shape, "picks": {"exhaustive": best}, "notes": []}
    kept = {}
    rule = holds_row if kernel == "softmax" else None
    prune = exported.make_prune(check=rule)

    def counting_prune(configs, named_args, **kwargs):
        kept["configs"] = prune(configs, named_args, **kwargs)
        return kept["configs"]

    try:
        row["picks"]["config_for"] = as_dict(exported.config_for(DTYPE, check=rule, **sizes))
        tuned, call = autotuned_call(kernel, exported.CONFIGS, counting_prune, inputs,
                                     spec.output_like(inputs), do_bench)
        seconds, cold = first_call(call, sync) if with_first_call else (None, True)
        if not with_first_call:
            call()
        row["picks"]["export"] = as_dict(tuned.best_config)
        row["kept"] = len(kept.get("configs", exported.CONFIGS))
        if "configs" not in kept:  # triton's Autotuner prunes only a list of 2 or more
            row["notes"].append("autotune called no prune: CONFIGS holds one config")
        row["first_call_short_s"] = seconds
        row["notes"] += [] if cold or device != "cuda" else ["short list's first call found a warm cache"]
    except exported.ExportLookupError as error:
        row["notes"].append(f"export: {error}")
    full = [as_config(c) for c in full_space(spec, shape)]
    tuned, call = autotuned_call(kernel, full, None, inputs, spec.output_like(inputs), do_bench)
    seconds, cold = first_call(call, sync) if with_first_call else (None, True)
    if not with_first_call:
        call()
    row["picks"]["autotune_full"] = as_dict(tuned.best_config)
    row["full_configs"] = len(full)
    row["first_call_full_s"] = seconds
    # The interpreter compiles nothing, so only a GPU's cache tells whether the first call was cold.
    row["notes"] += [] if cold or device != "cuda" else ["full space's first call found a warm cache"]

    row["us"] = {}
    timed = {}
    for name, config in row["picks"].items():
        identity = json.dumps(config, sort_keys=True)
        if identity not in timed:
            out = spec.output_like(inputs)
            for tensor in check.as_tuple(out):
                tensor.fill_(float("nan"))
            spec.launch(inputs, out, config)
            sync()
            problem = check.compare_outputs(check.as_tuple(out), references, False, bound)
            timed[identity] = None if problem else _p50_us(timer, lambda out=out, config=config: spec.launch(
                inputs, out, config))
            if problem:
                row["notes"].append(f"{name} pick {config} incorrect: {problem}")
        row["us"][name] = timed[identity]
    return row


def _percent(best_us, us) -> str:
    if us is None or best_us is None:
        return "—"
    return f"{us:.1f} ({100 * best_us / us:.0f}%)"


def table(results: list[dict]) -> str:
    lines = ["| kernel | held-out shape | exhaustive best µs | export under autotune µs (% of best) | "
             "config_for µs (% of best) | autotune, full space µs (% of best) | list length (kept here) | "
             "first call s: export / full space |",
             "|---|---|---|---|---|---|---|---|"]
    for result in results:
        for row in result["rows"]:
            us, best = row["us"], row["us"]["exhaustive"]
            kept = f"{result['list_length']} ({row.get('kept', 'none')})"
            short, full = row.get("first_call_short_s"), row["first_call_full_s"]
            first = "—" if full is None else (f"{'—' if short is None else f'{short:.1f}'} / {full:.1f} "
                                              f"({row['full_configs']} configs)")
            lines.append(f"| {result['kernel']} | {'x'.join(map(str, row['shape']))} | "
                         f"{'—' if best is None else f'{best:.1f}'} | {_percent(best, us.get('export'))} | "
                         f"{_percent(best, us.get('config_for'))} | "
                         f"{_percent(best, us.get('autotune_full'))} | "
                         f"{kept} | {first} |")
    return "\n".join(lines)


def bench_kernel(kernel: str, work: Path, timer, with_first_call: bool) -> dict:
    from runners.engine.trials import load_spec

    case, began = CASES[kernel], time.perf_counter()
    sweep(kernel, case["tune"], f"tune_{kernel}", work, work / "exports")
    module = work / "exports" / f"{kernel}_configs.py"
    if not module.exists():
        raise SystemExit(f"the tuning sweep of {kernel} exported nothing (see {work}/run_tune_{kernel})")
    exported = load_export(module)
    sweep(kernel, case["held_out"], f"held_out_{kernel}", work, work / "held_out_exports")
    best = winners(work, kernel, f"held_out_{kernel}")
    spec = load_spec(kernel, None)
    gpu = exported.gpu_name()
    listed = exported.cover_for(DTYPE, gpu)
    result = {"kernel": kernel, "list_length": len(listed), "list": [as_dict(c) for c, _ in listed],
              "rows": []}
    for shape in map(tuple, case["held_out"]):
        result["rows"].append(bench_shape(kernel, spec, exported, shape, best[shape], timer, with_first_call))
    print(f"{kernel}: {time.perf_counter() - began:.0f} s; list {result['list']}", flush=True)
    return result


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--no-first-call", action="store_true",
                        help="leave out autotune's first-call seconds (the compiles of the full space)")
    parser.add_argument("--work", help="folder for the store, exports and run directories (default: a "
                                       "temporary one)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("error: bench_export needs a CUDA GPU (it times the export's picks on it)", file=sys.stderr)
        return 2
    from runners.measure.device import cuda_timer

    work = Path(args.work or tempfile.mkdtemp(prefix="bench-export-"))
    began = time.perf_counter()
    timer = cuda_timer(0, _rule(), warmup_s=0.05)
    results = [bench_kernel(kernel, work, timer, not args.no_first_call) for kernel in args.kernels]
    print(f"\n{torch.cuda.get_device_name(0)}, {DTYPE}, exports tuned at timing=screen with finalists; "
          f"picks timed by runners.measure.device.cuda_timer (L2 flushed), p50\n")
    print(table(results))
    for result in results:
        print(f"\n{result['kernel']} list: {result['list']}")
        for row in result["rows"]:
            picks = "; ".join(f"{name} {config}" for name, config in row["picks"].items())
            notes = "".join(f"\n  note: {note}" for note in row["notes"])
            print(f"- {'x'.join(map(str, row['shape']))}: {picks}{notes}")
    print(f"\nwall time {time.perf_counter() - began:.0f} s; store and exports in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

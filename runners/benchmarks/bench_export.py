"""The dense workflow's export at shapes it never measured, on a GPU (a benchmark, not a test): prints the
tables BENCHMARKS.md records.

    python -m triton_sweep.benchmarks.bench_export [--kernels softmax layernorm matmul]
        [--sweep-only KERNEL ...] [--autotune-full] [--work DIR]

Per kernel and dtype (float16, bfloat16): the export-grade sweep (`+sweep=<kernel>_export`) timed, its
export the module under test; the same sweep at the held-out shapes (CASES), whose winners are the best
there; at each held-out shape the export's picks (autotune with its prune and do_bench, the same under
Triton's benchmarker, config_for; with --autotune-full, autotune over the whole space and each first
call), every pick checked and timed with the project's timer; then per path the shapes within 97% of the
best and the geometric mean, beside the leave-one-out estimate. --sweep-only: the first step alone."""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DTYPES = ("float16", "bfloat16")
GOOD = 97.0  # % of the best: the export's own tolerance (3%)
# Held out from sweeps/<kernel>_export.yaml's grid: between its points and beyond them, in the key dims
# (softmax's and layernorm's cols; matmul's M, N, K) and in the others (rows).
CASES = {
    "softmax": [[4096, 300], [4096, 600], [4096, 1200], [2048, 2500], [4096, 3000], [4096, 5000],
                [4096, 7000], [4096, 10000], [2048, 14000], [4096, 20000], [4096, 28000],
                [4096, 200], [16384, 1500], [512, 4096]],
    "layernorm": [[4096, 600], [4096, 1000], [4096, 2000], [2048, 3000], [4096, 5000], [4096, 6144],
                  [4096, 12000], [4096, 20000], [2048, 40000], [4096, 50000],
                  [4096, 384], [1024, 98304], [16384, 4096], [512, 16384]],
    "matmul": [[100, 4096, 4096], [300, 2048, 1024], [1000, 3072, 4096], [3000, 1536, 2048],
               [6000, 4096, 2048], [768, 5120, 1024], [2048, 2048, 3072], [96, 8192, 4096],
               [4096, 5120, 4096],
               [32, 4096, 4096], [16384, 4096, 1024], [2048, 16384, 4096], [1024, 1024, 8192],
               [4096, 512, 4096]],
}


def _rule():
    """The stopping rule for timing the picks: the one place to adapt to triton_sweep.measure.timing's API."""
    from triton_sweep.measure.stop_rule import StopRule

    # the default preset
    return StopRule(min_samples=20, min_time_s=0.01, rel_precision=0.005, max_time_s=1.0)


def _p50_us(timer, fn) -> float:
    from triton_sweep.measure.timing import summarize

    return summarize(timer.measure(fn).samples_s)["p50_us"]


def sweep(kernel: str, sweep_id: str, work: Path, export_dir: Path, shapes: list | None = None) -> tuple:
    """`+sweep=<kernel>_export` (at `shapes` instead of its grid where given): (wall seconds, stdout)."""
    from triton_sweep.model.spec_sources import load_spec

    args = [sys.executable, "-m", "triton_sweep.sweep", f"+sweep={kernel}_export", "logger.mode=disabled",
            f"store={work}/results.sqlite", f"export_dir={export_dir}",
            f"hydra.run.dir={work}/run_{sweep_id}", f"sweep_id={sweep_id}"]
    if shapes is not None:
        args += [f"kernel.shapes={json.dumps(shapes)}"] + [f"kernel.grid.{dim}=null"
                                                           for dim in load_spec(kernel, None).dims]
    began = time.perf_counter()
    result = subprocess.run(args, cwd=REPO, capture_output=True, text=True,
                            env={**os.environ, "WANDB_SILENT": "true"})
    seconds = time.perf_counter() - began
    if result.returncode != 0:
        raise SystemExit(f"sweep failed: {' '.join(args)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return seconds, result.stdout


def winners(work: Path, kernel: str, sweep_id: str) -> dict[tuple, dict]:
    """(dtype, shape) -> the exhaustive sweep's winning config there (runners/model/finalists.py's
    choice)."""
    from triton_sweep.model.finalists import winner
    from triton_sweep.export.rows import select_rows
    from triton_sweep.store.result_store import ResultStore

    store = ResultStore(work / "results.sqlite")
    frame = store.load(sweep_id=sweep_id, kernel=kernel)
    store.close()
    (rows,) = select_rows(frame, kernel).values()
    return {(dtype, tuple(json.loads(shape))): json.loads(group.loc[winner(group)]["config"])
            for (dtype, shape), group in rows.groupby(["dtype", "shape"])}


def load_export(path: Path):
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def as_dict(config) -> dict:
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


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
        from triton_sweep.kernels.softmax import _softmax_kernel

        tuned = triton.autotune(configs=configs, key=key, **options)(triton.jit(_softmax_kernel.fn))
        x = inputs[0]
        return tuned, lambda: tuned[(x.shape[0],)](out, x, x.shape[1], x.stride(0), out.stride(0))
    if kernel == "layernorm":
        from triton_sweep.kernels.layernorm import EPS, _layernorm_kernel

        single_pass = triton.heuristics({"SINGLE_PASS": lambda args: args["BLOCK_SIZE"] >= args["n_cols"]})
        fresh = single_pass(triton.jit(_layernorm_kernel.fn))
        tuned = triton.autotune(configs=configs, key=key, **options)(fresh)
        (x, weight, bias), (y, mean, rstd) = inputs, out
        return tuned, lambda: tuned[(x.shape[0],)](y, mean, rstd, x, weight, bias, x.shape[1], x.stride(0),
                                                   y.stride(0), EPS)
    from triton_sweep.kernels.matmul import _matmul_kernel

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


def full_space(space: dict, spec, shape: tuple, dtype: str) -> list[dict]:
    """The space at `shape`, less what the kernel's constraints prune (what a user would tune)."""
    names = list(space)
    configs = [dict(zip(names, values)) for values in itertools.product(*space.values())]
    return [c for c in configs if spec.constraints(shape, dtype, c) is None]


def sweep_space(kernel: str, spec) -> dict:
    """The space of sweeps/<kernel>_export.yaml: the kernel's default, the file's kernel.space over it."""
    from omegaconf import OmegaConf

    conf = OmegaConf.to_container(OmegaConf.load(REPO / "sweeps" / f"{kernel}_export.yaml"))
    return {**spec.space, **conf.get("kernel", {}).get("space", {})}


def where(shape: tuple, measured: list) -> str:
    """"beyond" where a dim of `shape` lies outside the measured sizes of that dim, else "between"."""
    return "beyond" if any(not min(s[i] for s in measured) <= n <= max(s[i] for s in measured)
                           for i, n in enumerate(shape)) else "between"


def bench_shape(kernel: str, spec, exported, shape: tuple, dtype: str, best: dict, timer, full: bool,
                device: str = "cuda", do_bench=None) -> dict:
    """The picks at one held-out shape, their check and their p50; `full`: autotune over the whole space
    too, and the first calls (compile and autotune's timing of what it was given, a fresh Triton cache
    and JIT function).

    The picks: @triton.autotune over CONFIGS with the export's prune (softmax with check=the block holds
    the row) and the export's do_bench, as the README has users write it; the same under Triton's own
    benchmarker; and config_for. Every distinct pick is checked against the float64 reference and timed
    with the project's timer (cuda_timer, L2 flushed before each sample), one after the other."""
    import warnings

    import torch

    from triton_sweep.measure import check
    from triton_sweep.export.generalization import as_triton_config

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    inputs = spec.make_inputs(shape, getattr(torch, dtype), 0, torch.device(device))
    references = check.references(spec, inputs)
    bound = spec.accumulation_bound(*inputs) if spec.accumulation_bound else None
    row = {"shape": shape, "dtype": dtype, "picks": {"exhaustive": best}, "notes": []}
    kept = {}
    rule = holds_row if kernel == "softmax" else None
    prune = exported.make_prune(check=rule)

    def counting_prune(configs, named_args, **kwargs):
        kept["configs"] = prune(configs, named_args, **kwargs)
        return kept["configs"]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", exported.ExportRangeWarning)
        try:
            # config_for is given the whole shape, as a caller that holds the tensors can (README).
            row["picks"]["config_for"] = as_dict(exported.config_for(dtype, check=rule,
                                                                     **dict(zip(spec.dims, shape))))
            # The export's own timer, as the README has users pass it (do_bench=...), where no other is
            # given (the interpreter's tests give one).
            tuned, call = autotuned_call(kernel, exported.CONFIGS, counting_prune, inputs,
                                         spec.output_like(inputs), do_bench or exported.do_bench)
            if full:
                seconds, cold = first_call(call, sync)
            else:
                call()
                seconds, cold = None, True
            row["picks"]["export"] = as_dict(tuned.best_config)
            if device == "cuda":  # the same list and prune under Triton's own benchmarker
                default_timer, default_call = autotuned_call(kernel, exported.CONFIGS, prune, inputs,
                                                             spec.output_like(inputs))
                default_call()
                row["picks"]["export_triton_bench"] = as_dict(default_timer.best_config)
            row["kept"] = len(kept.get("configs", exported.CONFIGS))
            if "configs" not in kept:  # triton's Autotuner prunes only a list of 2 or more
                row["notes"].append("autotune called no prune: CONFIGS holds one config")
            row["first_call_short_s"] = seconds
            row["notes"] += [] if cold or device != "cuda" else ["short list's first call found a warm cache"]
        except exported.ExportLookupError as error:
            row["notes"].append(f"export: {error}")
    row["range_warning"] = any(issubclass(w.category, exported.ExportRangeWarning) for w in caught)
    if full:
        configs = [as_triton_config(c) for c in full_space(sweep_space(kernel, spec), spec, shape, dtype)]
        tuned, call = autotuned_call(kernel, configs, None, inputs, spec.output_like(inputs), do_bench)
        seconds, cold = first_call(call, sync)
        row["picks"]["autotune_full"] = as_dict(tuned.best_config)
        row["full_configs"] = len(configs)
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


def pct_of_best(row: dict, pick: str) -> float | None:
    us, best = row["us"].get(pick), row["us"]["exhaustive"]
    return None if us is None or best is None else 100 * best / us


def _percent(row: dict, pick: str) -> str:
    pct = pct_of_best(row, pick)
    return "—" if pct is None else f"{row['us'][pick]:.1f} ({pct:.0f}%)"


def _timed_under_triton_bench(results: list[dict]) -> bool:
    """Whether the picks under Triton's own benchmarker were timed (on a GPU only)."""
    return any("export_triton_bench" in row["us"] for result in results for row in result["rows"])


def table(results: list[dict]) -> str:
    """One line per held-out shape and dtype."""
    full = any("autotune_full" in row["us"] for result in results for row in result["rows"])
    full_columns = "autotune, full space µs (% of best) | first call s: export / full | " if full else ""
    default = _timed_under_triton_bench(results)
    lines = ["| kernel | dtype | held-out shape | where | best µs | export under autotune µs (% of best) | "
             + ("same, Triton's do_bench µs (% of best) | " if default else "")
             + "config_for µs (% of best) | range warning | " + full_columns + "kept of the list |",
             "|---|---|---|---|---|---|---|---|" + ("---|" if default else "") + ("---|---|" if full else "")
             + "---|"]
    for result in results:
        for row in result["rows"]:
            best = row["us"]["exhaustive"]
            extra = ""
            if full:
                short = row.get("first_call_short_s")
                extra = (f"{_percent(row, 'autotune_full')} | {'—' if short is None else f'{short:.1f}'} / "
                         f"{row['first_call_full_s']:.1f} ({row['full_configs']} configs) | ")
            best = "—" if best is None else f"{best:.1f}"
            warned = "yes" if row["range_warning"] else "no"
            kept = f"{row.get('kept', 'none')} of {result['list_length'][row['dtype']]}"
            lines.append(f"| {result['kernel']} | {row['dtype']} | {'x'.join(map(str, row['shape']))} | "
                         f"{row['where']} | {best} | {_percent(row, 'export')} | "
                         + (f"{_percent(row, 'export_triton_bench')} | " if default else "")
                         + f"{_percent(row, 'config_for')} | {warned} | {extra}{kept} |")
    return "\n".join(lines)


def _share(figures: list) -> tuple[int, float]:
    """(how many reached GOOD, their geometric mean), a missing pick counted as 0% (not in the mean)."""
    good = sum(f is not None and f >= GOOD for f in figures)
    present = [f for f in figures if f is not None]
    return good, math.exp(sum(math.log(f) for f in present) / len(present)) if present else float("nan")


def summary(results: list[dict]) -> str:
    """Per kernel and dtype: the held-out figures of each path beside the leave-one-out estimate's."""
    default = _timed_under_triton_bench(results)
    lines = ["| kernel | dtype | export-grade sweep s (trials) | held-out shapes | autotune + prune >= 97% "
             "(geomean) | leave-one-out estimate | "
             + ("same, Triton's do_bench | " if default else "")
             + "config_for >= 97% (geomean) | leave-one-out estimate |",
             "|---|---|---|---|---|---|" + ("---|" if default else "") + "---|---|"]
    for result in results:
        for dtype in DTYPES:
            rows = [row for row in result["rows"] if row["dtype"] == dtype]
            cells = []
            for pick, path in (("export", "autotune"), ("config_for", "config_for")):
                good, mean = _share([pct_of_best(row, pick) for row in rows])
                loo = result["leave_one_out"][dtype]["summary"][path]
                loo_mean = "—" if loo["geomean_pct"] is None else f"{loo['geomean_pct']:.1f}%"
                cells += [f"{good}/{len(rows)} ({mean:.1f}%)", f"{loo['good']}/{loo['shapes']} ({loo_mean})"]
                if pick == "export" and default:
                    good, mean = _share([pct_of_best(row, "export_triton_bench") for row in rows])
                    cells.append(f"{good}/{len(rows)} ({mean:.1f}%)")
            lines.append(f"| {result['kernel']} | {dtype} | {result['tune_s']:.0f} ({result['trials']}) | "
                         f"{len(rows)} | {' | '.join(cells)} |")
    return "\n".join(lines)


def _trials(work: Path, kernel: str, sweep_id: str) -> int:
    from triton_sweep.store.result_store import ResultStore

    store = ResultStore(work / "results.sqlite")
    frame = store.load(sweep_id=sweep_id, kernel=kernel)
    store.close()
    return int((frame["status"] != "pruned").sum())


def tune(kernel: str, work: Path) -> dict:
    """Step 1: the export-grade sweep, its wall time, trials, leave-one-out lines and export."""
    seconds, out = sweep(kernel, f"tune_{kernel}", work, work / "exports")
    module = work / "exports" / f"{kernel}_configs.py"
    if not module.exists():
        raise SystemExit(f"the tuning sweep of {kernel} exported nothing (see {work}/run_tune_{kernel})")
    lines = [line for line in out.splitlines() if "at sizes the sweep did not measure" in line]
    print(f"{kernel}: export-grade sweep {seconds:.0f} s\n" + "\n".join(lines), flush=True)
    return {"kernel": kernel, "tune_s": seconds, "trials": _trials(work, kernel, f"tune_{kernel}"),
            "loo_lines": lines, "module": module}


def bench_kernel(kernel: str, work: Path, timer, full: bool) -> dict:
    from triton_sweep.model.spec_sources import load_spec

    began = time.perf_counter()
    result = tune(kernel, work)
    exported = load_export(result.pop("module"))
    sweep(kernel, f"held_out_{kernel}", work, work / "held_out_exports", shapes=CASES[kernel])
    best = winners(work, kernel, f"held_out_{kernel}")
    spec = load_spec(kernel, None)
    gpu = exported.gpu_name()
    data = json.loads((work / "exports" / f"{kernel}_configs.json").read_text())
    (section,) = data["gpus"][gpu].values()
    measured = [tuple(at["shape"]) for at in section["dtypes"][DTYPES[0]]["best_by_shape"]]
    result.update(leave_one_out={dtype: section["dtypes"][dtype]["leave_one_out"] for dtype in DTYPES},
                  list_length={dtype: len(exported.cover_for(dtype, gpu)) for dtype in DTYPES}, rows=[])
    for dtype, shape in itertools.product(DTYPES, map(tuple, CASES[kernel])):
        row = bench_shape(kernel, spec, exported, shape, dtype, best[(dtype, shape)], timer, full)
        result["rows"].append({**row, "where": where(shape, measured)})
    print(f"{kernel}: {time.perf_counter() - began:.0f} s", flush=True)
    return result


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    exportable = sorted(p.stem[:-len("_export")] for p in (REPO / "sweeps").glob("*_export.yaml"))
    parser.add_argument("--kernels", nargs="+", choices=list(CASES),
                        help="kernels to tune and judge at held-out shapes (default: all of them, unless "
                             "--sweep-only is given)")
    parser.add_argument("--sweep-only", nargs="+", default=[], choices=exportable, metavar="KERNEL",
                        help="kernels whose export-grade sweep only is run: its wall time, its leave-one-out")
    parser.add_argument("--autotune-full", action="store_true",
                        help="autotune over the whole space at each held-out shape too, and the first calls")
    parser.add_argument("--work", help="folder for the store, exports and run directories (default: a "
                                       "temporary one)")
    args = parser.parse_args(argv)
    if args.kernels is None:
        args.kernels = [] if args.sweep_only else list(CASES)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("error: bench_export needs a CUDA GPU (it times the export's picks on it)", file=sys.stderr)
        return 2
    from triton_sweep.measure.device import cuda_timer

    work = Path(args.work or tempfile.mkdtemp(prefix="bench-export-"))
    began = time.perf_counter()
    timer = cuda_timer(0, _rule(), warmup_s=0.05)
    results = [bench_kernel(kernel, work, timer, args.autotune_full) for kernel in args.kernels]
    swept = [tune(kernel, work) for kernel in args.sweep_only]
    print(f"\n{torch.cuda.get_device_name(0)}; exports of sweeps/<kernel>_export.yaml (timing=screen, "
          "finalists); picks timed by triton_sweep.measure.device.cuda_timer (L2 flushed), p50\n")
    if results:
        print(table(results) + "\n\n" + summary(results))
    for result in swept:
        print(f"\n{result['kernel']}: export-grade sweep {result['tune_s']:.0f} s, {result['trials']} trials")
        print("\n".join(result["loo_lines"]))
    for result in results:
        for row in result["rows"]:
            picks = "; ".join(f"{name} {config}" for name, config in row["picks"].items())
            notes = "".join(f"\n  note: {note}" for note in row["notes"])
            print(f"- {result['kernel']} {row['dtype']} {'x'.join(map(str, row['shape']))}: {picks}{notes}")
    print(f"\nwall time {time.perf_counter() - began:.0f} s; store and exports in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

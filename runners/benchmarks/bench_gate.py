"""Benchmark (GPU): the compare gate across runs of unchanged code, and against slowdowns put into a kernel.

    python -m runners.benchmarks.bench_gate reruns [--runs 6] [--sweeps readme layernorm matmul]
    python -m runners.benchmarks.bench_gate slowdown [--tries 20 10] [--percents 5 3]
    python -m runners.benchmarks.bench_gate against OTHER.sqlite [--sweeps readme layernorm matmul]

All sweeps write to --store (outputs/gate.sqlite), with force=true, as separate processes one after the
other: each is a run, the unit the gate's rule is about.
- reruns: each sweep `--runs` times; the first is BASE, every later one is compared with it by
  runners.compare (`--fail-on-slow 2%`, defaults otherwise). Table: compared rows, rows not SAME, gate
  failures, the judged rows' thresholds; then the noise between runs as the runs show it (per class,
  the standard deviation of ln p50 across runs of the finalists' rows, and the share of it that their
  repetitions do not explain: what compare's --run-noise stands for); then the first sweep with
  `finalists.repetitions=1` beside the others, for what the repetitions cost.
- slowdown: softmax at the README's shapes (tests/softmax_slowed.py) with no spin, the base; then, for
  each of `--percents`, the spin share of each shape that slows the base's winner there by that much
  (measured: the slowed and unslowed kernels timed interleaved in this process), and `--tries` runs
  with it, each compared with the base: how often the gate fails.
- against: this machine's runs of the sweeps compared with the first run of each in OTHER.sqlite (the
  store `reruns` left on another machine of the same kind).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SWEEPS = {  # name -> overrides of `python -m runners.sweep`
    "readme": [],
    "layernorm": ["kernel=layernorm", "timing=quick", "kernel.baselines=[torch]"],
    "matmul": ["kernel=matmul", "timing=quick", "kernel.dtypes=[float16]",
               "kernel.shapes=[[4096,4096,4096],[8192,8192,8192]]"],
}
SLOWED = ["kernel=external", "kernel.spec=tests.softmax_slowed:SPEC",
          "kernel.shapes=[[4096,1024],[4096,4096],[2048,16384]]", "kernel.dtypes=[float16]", "timing=screen",
          "kernel.baselines=[torch]"]
GATE = 0.02


def sweep(overrides: list[str], sweep_id: str, store: str, **env) -> dict:
    """One run: a sweep in a process of its own; returns its summary (wall and phase seconds)."""
    run_dir = REPO / "outputs" / "gate_runs" / sweep_id
    args = [sys.executable, "-m", "runners.sweep", *overrides, "force=true", f"sweep_id={sweep_id}",
            f"store={store}", "logger.mode=disabled", f"hydra.run.dir={run_dir}"]
    began = time.perf_counter()
    result = subprocess.run(args, cwd=REPO, capture_output=True, text=True,
                            env={**os.environ, "WANDB_SILENT": "true", **env})
    if result.returncode != 0:
        raise SystemExit(f"sweep failed: {' '.join(args)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["command_s"] = time.perf_counter() - began
    finalists = summary["phase_seconds"]["finalists"]
    print(f"  {sweep_id}: {summary['command_s']:.1f} s (finalists {finalists:.1f} s)",
          flush=True)
    return summary


def frames(store: str, *sweep_ids: str):
    from runners.results.store import ResultStore

    opened = ResultStore(store)
    try:
        return [opened.load(sweep_id=s) for s in sweep_ids]
    finally:
        opened.close()


def gate(base, new) -> dict:
    """runners.compare's defaults and --fail-on-slow 2% on one pair of runs."""
    from runners import compare

    shipped = compare.shipped_keys(compare.Side("BASE", "", base), compare.sweep_export_conf().tolerance)
    result = compare.compare(base, new, compare.Rule(), shipped)
    rows = result["matched"] + result["winners"]
    judged = [r for r in rows if r["judged"]]
    failing = [r for r in judged if r["verdict"] == "SLOW" and r["ratio"] - 1 > GATE]
    broken = [c for c in result["status_changes"] if c["base"] == "ok" and c["new"] != "pruned"]
    return {"rows": len(rows), "not_same": sum(r["verdict"] != "SAME" for r in rows), "judged": len(judged),
            "failed": bool(failing or broken), "thresholds": [r["threshold"] for r in judged],
            "worst": max((r["ratio"] for r in judged), default=math.nan), "unlisted": rows}


def _rep_variance(row) -> float:
    """s^2 / R of a row: the variance its repetitions give its p50 (0 without repetitions)."""
    noise, repetitions = row["rep_noise"], row["repetitions"]
    if noise is None or math.isnan(noise) or not repetitions or math.isnan(repetitions):
        return 0.0
    return noise**2 / repetitions


def between_runs(runs) -> list[str]:
    """Per (kernel, provider, size class): the sd of ln p50 across runs of each finalist row present in
    every run, pooled, and the part of it the repetitions do not explain (var - mean s^2/R)."""
    from runners.compare import size_class

    by_trial: dict[str, list] = {}
    for frame in runs:
        final = frame[frame["phase"] == "final"]
        for key, rows in final.groupby("trial_key"):
            by_trial.setdefault(key, []).append(rows.loc[rows["id"].idxmax()])
    pooled: dict[tuple, list] = {}
    for rows in by_trial.values():
        if len(rows) != len(runs) or any(r["status"] != "ok" for r in rows):
            continue
        logs = [math.log(r["p50_us"]) for r in rows]
        within = statistics.fmean(_rep_variance(r) for r in rows)
        p50 = statistics.median(r["p50_us"] for r in rows)
        cls = (rows[0]["kernel"], rows[0]["provider"], size_class(p50))
        pooled.setdefault(cls, []).append((statistics.variance(logs), within))
    lines = ["| kernel | provider | p50 class | trials | sd of ln p50 across runs | repetitions explain (sd) "
             "| "
             "run-level rest (sd) |", "|---|---|---|---|---|---|---|"]
    for cls, values in sorted(pooled.items()):
        between = statistics.fmean(v for v, _ in values)
        within = statistics.fmean(w for _, w in values)
        rest = math.sqrt(max(between - within, 0.0))
        lines.append(f"| {' | '.join(cls)} | {len(values)} | {100 * math.sqrt(between):.2f}% | "
                     f"{100 * math.sqrt(within):.2f}% | {100 * rest:.2f}% |")
    return lines


def reruns(args) -> None:
    table = ["| sweep | runs | compares | compared rows | not SAME | judged rows | judged thresholds "
             "(median, max) | worst judged NEW/BASE | gate failures at 2% | seconds a run | finalists s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    noise = []
    for name in args.sweeps:
        print(f"{name}: {args.runs} runs", flush=True)
        summaries = [sweep(SWEEPS[name], f"{name}_{i}", args.store) for i in range(args.runs)]
        runs = frames(args.store, *[f"{name}_{i}" for i in range(args.runs)])
        results = [gate(runs[0], new) for new in runs[1:]]
        for index, result in enumerate(results, start=1):
            for r in result["unlisted"]:
                if r["verdict"] != "SAME":
                    print(f"  run {index}: {r['verdict']} {' '.join(r['row'])} {r['phase']} "
                          f"{r['ratio']:.3f} (±{100 * r['threshold']:.1f}%, {r['noise_from']})")
        thresholds = [t for r in results for t in r["thresholds"]]
        table.append(
            f"| {name} | {args.runs} | {len(results)} | {sum(r['rows'] for r in results)} | "
            f"{sum(r['not_same'] for r in results)} | {sum(r['judged'] for r in results)} | "
            f"±{100 * statistics.median(thresholds):.1f}%, ±{100 * max(thresholds):.1f}% | "
            f"{max(r['worst'] for r in results):.3f} | {sum(r['failed'] for r in results)} | "
            f"{statistics.median(s['command_s'] for s in summaries):.1f} | "
            f"{statistics.median(s['phase_seconds']['finalists'] for s in summaries):.1f} |")
        noise += between_runs(runs)[0 if not noise else 2:]
    first = args.sweeps[0]
    print(f"\nwhat the repetitions cost: {first} with finalists.repetitions=1", flush=True)
    single = sweep(SWEEPS[first] + ["finalists.repetitions=1"], f"{first}_1rep", args.store)
    print("\n".join(["", *table, "", "Noise between runs (finalists' rows, every run):", "", *noise, "",
                     f"{first}, finalists.repetitions=1: {single['command_s']:.1f} s, finalists "
                     f"{single['phase_seconds']['finalists']:.1f} s"]))


def _winners(store: str, sweep_id: str) -> dict[tuple, dict]:
    """(rows, cols) -> the config the sweep chose there."""
    from runners.engine.finalists import winner

    (frame,) = frames(store, sweep_id)
    ours = frame[(frame["provider"] == "triton") & (frame["status"] == "ok")]
    return {tuple(json.loads(shape)): json.loads(rows.loc[winner(rows), "config"])
            for shape, rows in ours.groupby("shape")}


def spin_shares(winners: dict, percents: list[float]) -> tuple[dict, list[str]]:
    """For each slowdown asked, the spin share (per mille) of each shape that slows the shape's winner by
    that much (bisection, the slowed and the unslowed kernel timed interleaved: CUPTI kernel time, L2
    flushed, the median to 0.2%); and a table of what each share gives."""
    import torch

    from runners.measure import device as device_info
    from runners.measure.stop_rule import StopRule
    from runners.measure.timing import summarize
    from tests import softmax_slowed

    rule = StopRule(min_samples=100, min_time_s=0.1, rel_precision=0.002, max_time_s=3.0)
    timer = device_info.cuda_timer(0, rule, 0.05)
    shares = {p: {} for p in percents}
    lines = ["| shape | winner | 0% p50 us | " + " | ".join(f"{p:g}%: share, measured" for p in percents)
             + " |", "|---|---|---|" + "---|" * len(percents)]
    for shape, config in sorted(winners.items()):
        (x,) = softmax_slowed.SPEC.make_inputs(shape, torch.float16, 0, "cuda")
        out = torch.empty_like(x)

        def call(per_mille):
            return lambda: softmax_slowed._softmax_slowed_kernel[(shape[0],)](
                out, x, shape[1], x.stride(0), out.stride(0), SLOWDOWN_PER_MILLE=per_mille, **config)

        def slowdown(per_mille):
            base, slowed = timer.measure_interleaved([call(0), call(per_mille)])
            return summarize(slowed.samples_s)["p50_us"] / summarize(base.samples_s)["p50_us"] - 1

        cells = []
        for percent in percents:
            low, high, found = 0, 2000, None
            for _ in range(10):  # per mille: to within 2 of the share that gives the slowdown asked
                middle = (low + high) // 2
                got = slowdown(middle)
                found = (middle, got)
                if abs(got - percent / 100) < 0.002 or high - low <= 2:
                    break
                low, high = (middle, high) if got < percent / 100 else (low, middle)
            shares[percent][shape[1]] = found[0]
            cells.append(f"{found[0]}, {100 * found[1]:+.1f}%")
        p50 = summarize(timer.measure(call(0)).samples_s)["p50_us"]
        settings = " ".join(f"{k}={v}" for k, v in config.items())
        lines.append(f"| {shape[0]}x{shape[1]} | {settings} | {p50:.2f} | " + " | ".join(cells) + " |")
    return shares, lines


def slowdown(args) -> None:
    from tests.softmax_slowed import SPIN_VARIABLE

    sweep(SLOWED, "slowed_base", args.store, **{SPIN_VARIABLE: "0"})
    shares, measured = spin_shares(_winners(args.store, "slowed_base"), args.percents)
    print("\n".join(measured), flush=True)
    table = ["| slowdown asked | tries | gate failures at 2% | judged rows SLOW | judged NEW/BASE (median) |",
             "|---|---|---|---|---|"]
    by_shape = ["| slowdown asked | shape | tries its judged rows alone fail | its judged rows SLOW | "
                "their NEW/BASE (median) |", "|---|---|---|---|---|"]
    for percent, tries in zip(args.percents, args.tries):
        setting = ",".join(f"{cols}:{share}" for cols, share in shares[percent].items())
        results = []
        for index in range(tries):
            sweep_id = f"slowed_{percent:g}_{index}"
            sweep(SLOWED, sweep_id, args.store, **{SPIN_VARIABLE: setting})
            base, new = frames(args.store, "slowed_base", sweep_id)
            results.append(gate(base, new))
        judged = [r for result in results for r in result["unlisted"] if r["judged"]]
        for shape in sorted({r["row"][3] for r in judged}):
            alone = sum(any(r["judged"] and r["row"][3] == shape and r["verdict"] == "SLOW"
                            and r["ratio"] > 1 + GATE for r in result["unlisted"]) for result in results)
            rows = [r for r in judged if r["row"][3] == shape]
            by_shape.append(f"| {percent:g}% | {shape} | {alone} of {tries} | "
                            f"{sum(r['verdict'] == 'SLOW' for r in rows)} of {len(rows)} | "
                            f"{statistics.median(r['ratio'] for r in rows):.3f} |")
        failures = sum(r["failed"] for r in results)
        table.append(f"| {percent:g}% ({SPIN_VARIABLE}={setting}) | {tries} | {failures} "
                     f"| {sum(r['verdict'] == 'SLOW' for r in judged)} of {len(judged)} | "
                     f"{statistics.median(r['ratio'] for r in judged):.3f} |")
    print("\n".join(["", *measured, "", *table, "", *by_shape]))


def against(args) -> None:
    table = ["| sweep | BASE (other machine) | compared rows | not SAME | judged rows | judged thresholds "
             "(max) "
             "| worst judged NEW/BASE | gate at 2% |", "|---|---|---|---|---|---|---|---|"]
    for name in args.sweeps:
        sweep(SWEEPS[name], f"{name}_here", args.store)
        (base,) = frames(args.other, f"{name}_0")
        (new,) = frames(args.store, f"{name}_here")
        result = gate(base, new)
        for r in result["unlisted"]:
            if r["verdict"] != "SAME":
                print(f"  {r['verdict']} {' '.join(r['row'])} {r['phase']} {r['ratio']:.3f} "
                      f"(±{100 * r['threshold']:.1f}%, {r['noise_from']})")
        hosts = f"{base['host'].iloc[0]} -> {new['host'].iloc[0]}"
        table.append(f"| {name} | {hosts} | {result['rows']} | {result['not_same']} | {result['judged']} | "
                     f"±{100 * max(result['thresholds']):.1f}% | {result['worst']:.3f} | "
                     f"{'FAIL' if result['failed'] else 'pass'} |")
    print("\n".join(["", *table]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("reruns", "slowdown", "against"))
    parser.add_argument("other", nargs="?", help="against: the store `reruns` left on another machine")
    parser.add_argument("--store", default="outputs/gate.sqlite")
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--sweeps", nargs="+", default=list(SWEEPS), choices=list(SWEEPS))
    parser.add_argument("--tries", type=int, nargs="+", default=[20, 10])
    parser.add_argument("--percents", type=float, nargs="+", default=[5.0, 3.0])
    args = parser.parse_args(argv)
    if args.step == "against" and not args.other:
        parser.error("against: name the other machine's store")
    {"reruns": reruns, "slowdown": slowdown, "against": against}[args.step](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

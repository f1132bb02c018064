"""Benchmark (GPU): compare's gate across runs of unchanged code, across machines of one kind, and against
a slowdown put into a kernel.

    python -m triton_sweep.benchmarks.bench_gate reruns [--runs 6] [--reruns 3] [--sweeps readme matmul]
    python -m triton_sweep.benchmarks.bench_gate slowdown [--tries 20] [--percents 5] [--calibration-runs 5]
    python -m triton_sweep.benchmarks.bench_gate against OTHER.sqlite [--runs 3] [--sweeps readme matmul]

Every sweep is a process of its own (a run: the unit of runners/compare/between_runs.py) into --store.
reruns: `--runs` runs calibrate, `--reruns` more are each compared with run 0 at `--fail-on-slow 2%`.
slowdown: softmax slowed by a spin (tests/fixtures/softmax_slowed.py) by each of `--percents`, `--tries` runs
each compared with an unslowed base: how often the gate fails. against: this machine's runs compared with run
0 of OTHER.sqlite (another machine's reruns). A calibration never holds the compared runs themselves."""
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
SWEEPS = {  # name -> overrides of `python -m triton_sweep.sweep`
    "readme": [],
    "layernorm": ["kernel=layernorm", "timing=quick", "kernel.baselines=[torch]"],
    "matmul": ["kernel=matmul", "timing=quick", "kernel.dtypes=[float16]",
               "kernel.shapes=[[4096,4096,4096],[8192,8192,8192]]"],
}
SLOWED = ["kernel=external", "kernel.spec=tests.fixtures.softmax_slowed:SPEC",
          "kernel.shapes=[[4096,1024],[4096,4096],[2048,16384]]", "kernel.dtypes=[float16]", "timing=screen",
          "kernel.baselines=[torch]"]
GATE = 0.02


def sweep(overrides: list[str], sweep_id: str, store: str, **env) -> dict:
    """One run: a sweep in a process of its own; returns its summary (wall and phase seconds)."""
    run_dir = REPO / "outputs" / "gate_runs" / sweep_id
    args = [sys.executable, "-m", "triton_sweep.sweep", *overrides, "force=true", f"sweep_id={sweep_id}",
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
    from triton_sweep.store.result_store import ResultStore

    opened = ResultStore(store)
    try:
        return [opened.load(sweep_id=s) for s in sweep_ids]
    finally:
        opened.close()


def gate(base, new, calibrated: dict) -> dict:
    """triton_sweep.compare's defaults, the calibration and --fail-on-slow 2% on one pair of runs."""
    from triton_sweep.compare import between_runs, matching, sides
    from triton_sweep.compare.report import gate_verdict
    from triton_sweep.export.settings import sweep_export_conf

    rule = between_runs.Rule(fail_on_slow=GATE)
    shipped = sides.shipped_keys(sides.Side("BASE", "", base), sweep_export_conf().tolerance)
    result = matching.compare(base, new, rule, shipped, calibrated=calibrated)
    rows = result["matched"] + result["winners"]
    judged = [r for r in rows if r["judged"] and not math.isnan(r["threshold"])]
    ours = [s for (domain, _), s in result["shifts"].items() if domain[2] == "triton" and s is not None]
    line, status = gate_verdict(result, rule)
    return {"rows": len(rows), "not_same": sum(r["verdict"] != "SAME" for r in rows), "judged": len(judged),
            "status": status, "line": line, "thresholds": [r["threshold"] for r in judged],
            "catches": [r["catches"] for r in judged], "shifts": ours, "unlisted": rows}


def calibration(runs: list, source: str) -> dict:
    from triton_sweep.compare.matching import calibration_of

    return calibration_of(runs, source)


def calibration_table(calibrated: dict) -> list[str]:
    lines = ["| GPU | kernel | provider | runs' shift (sd) | each shape's own (sd) | df | measured on |",
             "|---|---|---|---|---|---|---|"]
    for (gpu, kernel, provider), spread in sorted(calibrated.items()):
        lines.append(f"| {gpu} | {kernel} | {provider} | {100 * spread.shift:.2f}% | "
                     f"{100 * spread.shape:.2f}% | {spread.shift_df:g}, {spread.shape_df:g} | "
                     f"{spread.source} |")
    return lines


def _describe(results: list[dict]) -> str:
    """The table cells of a set of comparisons."""
    thresholds = [t for r in results for t in r["thresholds"]]
    catches = [c for r in results for c in r["catches"]]
    shifts = [s for r in results for s in r["shifts"]]
    statuses = [r["status"] for r in results]
    worst_shift = max(shifts, key=lambda s: abs(s.value))
    return (f"{sum(r['rows'] for r in results)} | {sum(r['not_same'] for r in results)} | "
            f"{sum(r['judged'] for r in results)} | ±{100 * statistics.median(thresholds):.1f}%, "
            f"±{100 * max(thresholds):.1f}% | +{100 * min(catches):.1f}% to +{100 * max(catches):.1f}% | "
            f"{math.exp(worst_shift.value):.3f} (±{100 * math.expm1(worst_shift.threshold):.1f}%) | "
            f"{statuses.count(0)} pass, {statuses.count(1)} fail, {statuses.count(2)} refused |")


HEAD = ("| compared rows | not SAME | judged rows | judged thresholds (median, max) | catches in 95% (best, "
        "worst) | our shift, worst (threshold) | gate at 2% |")


def _report(results: list[dict], label: str) -> None:
    for index, result in enumerate(results, start=1):
        for r in result["unlisted"]:
            if r["verdict"] != "SAME":
                print(f"  {label} {index}: {r['verdict']} {' '.join(r['row'])} {r['phase']} NEW/BASE "
                      f"{r['ratio']:.3f}, against the shift {r['vs_shift']:.3f} "
                      f"(±{100 * r['threshold']:.1f}%)")
        if result["status"]:
            print(f"  {label} {index}: {result['line']}")


def reruns(args) -> None:
    table = ["| sweep | calibration runs | compares " + HEAD, "|---|---|---|---|---|---|---|---|---|---|"]
    calibrations = []
    for name in args.sweeps:
        print(f"{name}: {args.runs} runs to calibrate, {args.reruns} to compare", flush=True)
        ids = [f"{name}_{i}" for i in range(args.runs + args.reruns)]
        for sweep_id in ids:
            sweep(SWEEPS[name], sweep_id, args.store)
        runs = frames(args.store, *ids)
        calibrated = calibration(runs[1:args.runs], f"{name} on one machine: ")  # BASE is not its own
        calibrations += calibration_table(calibrated)[0 if not calibrations else 2:]
        results = [gate(runs[0], new, calibrated) for new in runs[args.runs:]]
        _report(results, "re-run")
        table.append(f"| {name} | {args.runs} | {len(results)} | " + _describe(results))
    print("\n".join(["", "Calibration (between_runs.calibrate):", "", *calibrations, "", *table]))


def _winners(store: str, sweep_id: str) -> dict[tuple, dict]:
    """(rows, cols) -> the config the sweep chose there."""
    from triton_sweep.model.finalists import winner

    (frame,) = frames(store, sweep_id)
    ours = frame[(frame["provider"] == "triton") & (frame["status"] == "ok")]
    return {tuple(json.loads(shape)): json.loads(rows.loc[winner(rows), "config"])
            for shape, rows in ours.groupby("shape")}


def spin_shares(winners: dict, percents: list[float]) -> tuple[dict, list[str]]:
    """For each slowdown asked, the spin share (per mille) of each shape that slows the shape's winner by
    that much (bisection, the slowed and the unslowed kernel timed interleaved: CUPTI kernel time, L2
    flushed, the median to 0.2%); and a table of what each share gives."""
    import torch

    from triton_sweep.measure import device as device_info
    from triton_sweep.measure.stop_rule import StopRule
    from triton_sweep.measure.timing import summarize
    from tests.fixtures import softmax_slowed

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
    from tests.fixtures.softmax_slowed import SPIN_VARIABLE

    ids = [f"slowed_base_{i}" for i in range(1 + args.calibration_runs)]
    for sweep_id in ids:
        sweep(SLOWED, sweep_id, args.store, **{SPIN_VARIABLE: "0"})
    runs = frames(args.store, *ids)
    calibrated = calibration(runs[1:], "the unslowed kernel: ")  # BASE, runs[0], is not its own
    shares, measured = spin_shares(_winners(args.store, ids[0]), args.percents)
    print("\n".join(measured + [""] + calibration_table(calibrated)), flush=True)
    table = ["| slowdown asked | tries | gate failures at 2% | by the shift | by rows | our shift NEW/BASE "
             "(median) | judged rows SLOW against it |", "|---|---|---|---|---|---|---|"]
    for percent, tries in zip(args.percents, args.tries):
        setting = ",".join(f"{cols}:{share}" for cols, share in shares[percent].items())
        results = []
        for index in range(tries):
            sweep_id = f"slowed_{percent:g}_{index}"
            sweep(SLOWED, sweep_id, args.store, **{SPIN_VARIABLE: setting})
            (new,) = frames(args.store, sweep_id)
            results.append(gate(runs[0], new, calibrated))
        _report(results, f"{percent:g}% try")
        judged = [r for result in results for r in result["unlisted"] if r["judged"]]
        by_shift = sum(any(s.verdict == "SLOW" and math.expm1(s.value) > GATE for s in r["shifts"])
                       for r in results)
        by_rows = sum(any(r["judged"] and r["verdict"] == "SLOW" and r["vs_shift"] - 1 > GATE
                          for r in result["unlisted"]) for result in results)
        shift = statistics.median(math.exp(s.value) for r in results for s in r["shifts"])
        table.append(f"| {percent:g}% ({SPIN_VARIABLE}={setting}) | {tries} | "
                     f"{sum(r['status'] == 1 for r in results)} | {by_shift} | {by_rows} | {shift:.3f} | "
                     f"{sum(r['verdict'] == 'SLOW' for r in judged)} of {len(judged)} |")
    print("\n".join(["", *measured, "", *table]))


def against(args) -> None:
    table = ["| sweep | BASE (other machine) | runs here | calibrated on " + HEAD,
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    everything = {}
    for name in args.sweeps:
        ids = [f"{name}_here_{i}" for i in range(args.runs)]
        for sweep_id in ids:
            sweep(SWEEPS[name], sweep_id, args.store)
        theirs = _runs_of(args.other, name)
        here = frames(args.store, *ids)
        results = []
        for index, new in enumerate(here):
            others = theirs[1:] + here[:index] + here[index + 1:]  # neither BASE's run nor NEW's
            calibrated = calibration(others, f"{name} on two machines: ")
            results.append(gate(theirs[0], new, calibrated))
        _report(results, "machine B run")
        table.append(f"| {name} | {len(theirs)} runs | {args.runs} | {len(theirs) + args.runs - 2} runs, "
                     "two machines | " + _describe(results))
        everything.update(calibration(theirs + here, f"{name} on two machines: "))
    print("\n".join(["", *table, "", "Calibration of all runs of both machines:", "",
                     *calibration_table(everything)]))


def _runs_of(store: str, name: str) -> list:
    """The runs `reruns` left of a sweep in another machine's store, calibration and re-runs alike."""
    from triton_sweep.store.result_store import ResultStore

    opened = ResultStore(store)
    ids = sorted({s for s in opened.load()["sweep_id"].unique() if s.rsplit("_", 1)[0] == name},
                 key=lambda s: int(s.rsplit("_", 1)[1]))
    opened.close()
    return frames(store, *ids)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("reruns", "slowdown", "against"))
    parser.add_argument("other", nargs="?", help="against: the store `reruns` left on another machine")
    parser.add_argument("--store", default="outputs/gate.sqlite")
    parser.add_argument("--runs", type=int, default=6,
                        help="reruns: runs to calibrate on; against: runs here")
    parser.add_argument("--reruns", type=int, default=3, help="reruns: runs compared with the first")
    parser.add_argument("--sweeps", nargs="+", default=["readme", "matmul"], choices=list(SWEEPS))
    parser.add_argument("--tries", type=int, nargs="+", default=[20])
    parser.add_argument("--percents", type=float, nargs="+", default=[5.0])
    parser.add_argument("--calibration-runs", type=int, default=5,
                        help="slowdown: unslowed runs beside the base")
    args = parser.parse_args(argv)
    if args.step == "against" and not args.other:
        parser.error("against: name the other machine's store")
    {"reruns": reruns, "slowdown": slowdown, "against": against}[args.step](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

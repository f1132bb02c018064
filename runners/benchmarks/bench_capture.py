"""Benchmark (GPU): tune what a program calls. The example program (kernels/examples/transformer_steps.py)
captured, its shapes swept, exported weighted by calls, then run again with the exported configs.

    python -m triton_sweep.benchmarks.bench_capture [--work DIR] [--steps 100] [--part capture|run|all]
        [--repeats 3]

capture: the program's wall time without and with `python -m triton_sweep.capture` (in turn, --repeats each),
then the capture with `--bucket pow2` into DIR/conf/sweep/, a sweep of each file (screen preset with
finalists) into DIR/results.sqlite and its call-weighted export into DIR/exports. run: the program with
the default configs, the exported ones (config_for at every call) and @triton.autotune over each whole
space, each running its steps twice (the first's wall time: the tuning cost; the second's Triton kernel
GPU time). Prints each step's output, then a table."""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROGRAM = [sys.executable, "-m", "triton_sweep.kernels.examples.transformer_steps"]
KERNELS = ("softmax", "layernorm", "matmul")
SMALL_PROGRAM = ["--small", "--dtype", "float32"]  # --small: the capture part on the CPU interpreter


def run(args: list[str], env: dict | None = None) -> tuple[str, float]:
    began = time.perf_counter()
    result = subprocess.run(args, cwd=REPO, capture_output=True, text=True,
                            env={**os.environ, "WANDB_SILENT": "true", **(env or {})})
    seconds = time.perf_counter() - began
    print(f"$ {' '.join(args[1:])}\n{result.stdout[-5000:]}{result.stderr[-3000:]}", flush=True)
    if result.returncode != 0:
        raise SystemExit(f"failed ({result.returncode}): {' '.join(args)}")
    return result.stdout, seconds


def hook_cost(calls: int = 100_000) -> str:
    """The hook's own time per launch: called directly with the arguments of a launch of the matmul
    kernel (4 tensors, 9 ints, 10 constexpr and option keywords), as Triton's pre-run hook is."""
    import torch

    sys.path.insert(0, str(REPO / "runners" / "capture" / "launch_hook"))
    import triton_launch_hook

    from triton_sweep.kernels.matmul import _matmul_kernel

    hook = triton_launch_hook._hook_for(_matmul_kernel)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a = torch.empty((256, 256), device=device, dtype=torch.float16)
    args = (a, a, a, a, 256, 256, 256, 256, 1, 256, 1, 256, 1)
    keywords = dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, HAS_BIAS=False, ACTIVATION=0,
                    EXACT_FP32=False, INT64_OFFSETS=False, num_warps=4, num_stages=3)
    began = time.perf_counter()
    for _ in range(calls):
        hook(*args, **keywords)
    return f"the hook's own time: {1e6 * (time.perf_counter() - began) / calls:.2f} us per launch"


def overhead_part(work: Path, program: list[str], repeats: int) -> list[str]:
    """The program alone and under capture, in turn, repeats times each: the process's wall time (Python,
    torch and Triton starting up, noisy) and the wall time of its steps as it prints it (where the hook
    runs at every launch)."""
    run(program)  # Triton's cache warm for both sides
    loop = r"steps \(\w+\): ([\d.]+) s wall"
    alone = {"process": [], "steps": []}
    under = {"process": [], "steps": []}
    for _ in range(repeats):
        out, seconds = run(program)
        alone["process"].append(seconds)
        alone["steps"].append(float(re.search(loop, out).group(1)))
        out, _ = run([sys.executable, "-m", "triton_sweep.capture", "--no-time", "--out",
                      str(work / "overhead"),
                      "--", *program])
        under["process"].append(float(re.search(r"Triton launches of \d+ function\(s\) in ([\d.]+) s",
                                                out).group(1)))
        under["steps"].append(float(re.search(loop, out).group(1)))
    steps = program[program.index("--steps") + 1]
    lines = [hook_cost()]
    for what in ("process", "steps"):
        a, u = statistics.median(alone[what]), statistics.median(under[what])
        lines.append(f"{steps} steps, {what} wall time (median of {repeats}): {a:.2f} s alone, {u:.2f} s "
                     f"under capture ({100 * (u / a - 1):+.1f}%); alone "
                     f"{', '.join(f'{x:.2f}' for x in alone[what])}; under "
                     f"{', '.join(f'{x:.2f}' for x in under[what])}")
    return lines


def capture_part(work: Path, steps: int, repeats: int, small: bool) -> list[str]:
    program = [*PROGRAM, "--steps", str(steps), *SMALL_PROGRAM * small]
    lines = overhead_part(work, program, repeats)
    sweeps = work / "conf" / "sweep"
    sweeps.mkdir(parents=True, exist_ok=True)
    out, _ = run([sys.executable, "-m", "triton_sweep.capture", "--bucket", "pow2",
                  "--out", str(sweeps / "captured"), "--", *program])
    lines += [line for line in out.splitlines() if line.startswith(("captured", "sweep file", "note"))]
    for kernel in KERNELS:
        out, seconds = run([sys.executable, "-m", "triton_sweep.sweep",
                            f"hydra.searchpath=[file://{work}/conf]",
                            f"+sweep=captured_{kernel}", f"store={work}/results.sqlite",
                            f"export_dir={work}/exports", f"hydra.run.dir={work}/runs/{kernel}",
                            "logger.mode=disabled", f"sweep_id=captured_{kernel}", "kernel.baselines=[]",
                            *["backend=interpret", "timing=quick", "finalists.top_k=0"] * small])
        lines += [f"sweep of captured_{kernel}: {seconds:.0f} s"]
        lines += [line for line in out.splitlines() if "weighted by" in line or "trials:" in line]
    return lines


def run_part(work: Path, steps: int) -> list[str]:
    lines = [f"{'configs':<10} {'first pass s (compile, tune)':>28} {'Triton kernel time ms':>22}"]
    for configs in ("default", str(work / "exports"), "autotune"):
        out, _ = run([*PROGRAM, "--steps", str(steps), "--configs", configs, "--kernel-time"])
        first = float(re.search(r": ([\d.]+) s wall, first pass", out).group(1))
        kernel_ms = float(re.search(r": ([\d.]+) ms of Triton kernel time", out).group(1))
        label = "exported" if configs.endswith("exports") else configs
        lines.append(f"{label:<10} {first:>28.1f} {kernel_ms:>22.2f}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("outputs/bench_capture"))
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--part", choices=["capture", "run", "all", "overhead"], default="all",
                        help="overhead: only the program alone against under capture")
    parser.add_argument("--small", action="store_true", help="interpreter sizes (a check of the script)")
    args = parser.parse_args(argv)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    lines = []
    if args.part == "overhead":
        lines += overhead_part(work, [*PROGRAM, "--steps", str(args.steps)], args.repeats)
    if args.part in ("capture", "all"):
        lines += capture_part(work, args.steps, args.repeats, args.small)
    if args.part in ("run", "all"):
        lines += run_part(work, args.steps)
    print("\n".join(["", *lines]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

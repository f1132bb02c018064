"""Benchmark (GPU): re-validation of an export after no change, after its figures were edited to look
faster, and after a kernel change that broke one config (runners/revalidate.py).

    python -m triton_sweep.benchmarks.bench_revalidate [--work DIR]

1. The README sweep (softmax at 3 shapes), its export in DIR/exports.
2. `python -m triton_sweep.revalidate` of that export as it is: every shape SAME (or FAST), nothing re-tuned.
3. A copy with two shapes' recorded p50s divided by 1.1: those two shapes alone re-screened; exit 1.
4. A copy re-validated with `--spec tests.fixtures.softmax_broken:SPEC` (BLOCK_SIZE 16384 with 32 warps now
wrong):
   that config broken, its shape re-screened, the new section without it; exit 1.
Prints each run's report, then a table: verdicts, re-screened shapes, the seconds each took."""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EDITED = 1.1  # the edited shapes' recorded p50s are divided by this


def run(args: list[str]) -> tuple[int, str, float]:
    began = time.perf_counter()
    result = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                            env={**os.environ, "WANDB_SILENT": "true"})
    print(result.stdout[-6000:], result.stderr[-2000:], flush=True)
    return result.returncode, result.stdout, time.perf_counter() - began


def edit(path: Path, shapes: list[list[int]]) -> None:
    """The recorded p50s at `shapes` divided by EDITED, in every section of the export."""
    data = json.loads(path.read_text())
    for versions in data["gpus"].values():
        for section in versions.values():
            for lists in section["dtypes"].values():
                for item in lists["configs"]:
                    for at in item["ok_at"]:
                        if at["shape"] in shapes:
                            at["p50_us"] /= EDITED
                for best in lists["best_by_shape"]:
                    if best["shape"] in shapes:
                        for name in ("p50_us", "fastest_p50_us", "list_p50_us"):
                            best[name] /= EDITED
    path.write_text(json.dumps(data, indent=1))


def summary(out: str) -> tuple[str, list[str], str]:
    """(the summary line's counts, the shapes re-screened, GPU seconds) of a revalidate report."""
    counts = next((line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("summary:")), "-")
    rescreened = [line.split(" | ")[1] for line in out.splitlines()
                  if line.startswith("| ") and line.rstrip().endswith("| re-screen |")]
    seconds = [float(s) for s in re.findall(r"\(([\d.]+) s of GPU time\)", out)]
    return counts, rescreened, f"{sum(seconds):.1f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", help="a directory for the store and exports (default: a temporary one)")
    args = parser.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-revalidate-"))
    store = str(work / "results.sqlite")
    status, _, seconds = run(["-m", "triton_sweep.sweep", "sweep_id=reval_base", f"store={store}",
                              f"export_dir={work / 'exports'}", "logger.mode=disabled",
                              f"hydra.run.dir={work / 'run_base'}"])
    if status:
        raise SystemExit("the base sweep failed")
    export = work / "exports" / "softmax_configs.json"
    data = json.loads(export.read_text())
    (section,) = [s for versions in data["gpus"].values() for s in versions.values()]
    shapes = sorted(b["shape"] for b in section["dtypes"]["float16"]["best_by_shape"])
    table = ["| run | exit | shapes | re-screened | seconds (GPU time of the sweeps) |",
             "|---|---|---|---|---|",
             f"| the README sweep and its export | {status} | {len(shapes)} | - | {seconds:.1f} |"]
    scenarios = [("no change", [], []), (f"2 shapes recorded {EDITED}x faster: {shapes[0]}, {shapes[1]}",
                                         shapes[:2], []),
                 ("a kernel change broke BLOCK_SIZE 16384 with 32 warps", [],
                  ["--spec", "tests.fixtures.softmax_broken:SPEC"])]
    for index, (name, edited, extra) in enumerate(scenarios):
        copy = work / f"exports_{index}" / export.name
        copy.parent.mkdir(exist_ok=True)
        shutil.copy(export, copy)
        edit(copy, edited)
        status, out, seconds = run(["-m", "triton_sweep.revalidate", str(copy), f"--store={store}", *extra])
        counts, rescreened, gpu = summary(out)
        table.append(f"| {name} | {status} | {counts} | {', '.join(rescreened) or 'none'} | "
                     f"{seconds:.1f} ({gpu}) |")
        if extra:
            after = json.loads(copy.read_text())
            listed = [item["config"] for versions in after["gpus"].values() for s in versions.values()
                      for item in s["dtypes"]["float16"]["configs"]]
            table.append(f"| (the new section's configs) | | {listed} | | |")
    print("\n".join(["", *table]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark (GPU): a change of the code's rooms changes nothing a user sees. The same sweeps run by an older
tree of the project (--old: `git worktree add ../old <commit>`, or an unpacked `git archive`) and by this
one, one after the other on this GPU; then:
- rows: the trials each run screened, with their statuses: the same set (finalists counted beside it);
- exports: each run's store exported by both trees: byte for byte the same, the export time aside;
- compare: this tree's `runners.compare` of the old run, and of the old tree's export of it, against the
  new run, calibrated on --calibration (3 or more earlier runs on machines of this kind) and gated at
  2%: the rows not SAME, and the gate's line.

    python -m runners.benchmarks.bench_refactor --old ../old --calibration outputs/gate.sqlite:readme_0,..."""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SWEEPS = {  # name -> (kernel, overrides of `python -m runners.sweep`)
    "readme": ("softmax", []),  # the README's sweep: the grid
    "random": ("softmax", ["search=random", "search.budget_trials=4", "search.seed=7"]),  # a seeded sample
}
EXPORT_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00")


def run(tree: Path, args: list[str]) -> subprocess.CompletedProcess:
    """`python -m <args>` with `tree` the project imported (its modules, its conf/)."""
    python_path = os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": python_path, "WANDB_SILENT": "true"}
    return subprocess.run([sys.executable, "-m", *args], cwd=tree, env=env, capture_output=True, text=True)


def sweep(tree: Path, label: str, name: str, out: Path) -> Path:
    """One run of the sweep by `tree` (old or new: its label) into a store of its own (sweep id
    <label>_<name>); the store's path."""
    store = out / f"{label}_{name}.sqlite"
    done = run(tree, ["runners.sweep", *SWEEPS[name][1], "force=true", f"sweep_id={label}_{name}",
                      f"store={store}", "logger.mode=disabled",
                      f"hydra.run.dir={out / 'runs' / label / name}",
                      f"export_dir={out / 'sweep_exports' / label / name}"])
    if done.returncode != 0:
        raise SystemExit(f"{tree} {name}: the sweep failed\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return store


def screened(store: Path) -> tuple[set, set]:
    """(the screening rows, the finalists' trials) of a store, each as (kernel, provider, dtype, shape,
    config, status)."""
    from runners.store.result_store import ResultStore

    frame = ResultStore(store).load()
    fields = ["kernel", "provider", "dtype", "shape", "config", "status"]
    final = frame["phase"] == "final"
    return (set(map(tuple, frame.loc[~final, fields].values)),
            set(map(tuple, frame.loc[final, fields[:-1]].values)))


def exported(tree: Path, label: str, store: Path, kernel: str, out: Path) -> str:
    """The tree's export of the store (its .json and .py), the export time masked."""
    folder = out / "exports" / f"{store.stem}_by_{label}"
    done = run(tree, ["runners.export", "--store", str(store), "--kernel", kernel, "--out-dir", str(folder),
                      "--no-merge"])
    if done.returncode != 0:
        raise SystemExit(f"{tree}: the export of {store} failed\n{done.stdout[-3000:]}\n"
                         f"{done.stderr[-3000:]}")
    return "".join(EXPORT_TIME.sub("EXPORTED_AT", (folder / f"{kernel}_configs{suffix}").read_text())
                   for suffix in (".json", ".py"))


def compared(base: str, new: str, calibration: str, out: Path, label: str) -> tuple[str, str]:
    """This tree's compare, gated at 2%: (its summary line, its gate line); the report kept in out."""
    done = run(REPO, ["runners.compare", base, new, "--calibration", calibration, "--fail-on-slow", "2%"])
    (out / f"compare_{label}.txt").write_text(done.stdout + done.stderr)
    lines = done.stdout.splitlines()
    summary = next((line for line in lines if line.startswith("summary:")), done.stderr.strip()[-300:])
    return summary, next((line for line in lines if line.startswith("gate ")), f"exit {done.returncode}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, type=Path, help="the older tree of the project")
    parser.add_argument("--calibration", required=True, help="STORE[:ID,...]: runs of the sweeps to judge by")
    parser.add_argument("--sweeps", nargs="+", default=list(SWEEPS), choices=list(SWEEPS))
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "refactor")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    trees = {"old": args.old.resolve(), "new": REPO}
    table = ["| sweep | screened rows (old, new) | same rows | finalists in both | export by old = by new "
             "(old run, new run) | compare old run -> new run | compare old export -> new run |",
             "|---|---|---|---|---|---|---|"]
    for name in args.sweeps:
        kernel = SWEEPS[name][0]
        stores = {label: sweep(tree, label, name, args.out) for label, tree in trees.items()}
        (old_rows, old_final), (new_rows, new_final) = screened(stores["old"]), screened(stores["new"])
        same_export = [exported(trees["old"], "old", store, kernel, args.out)
                       == exported(trees["new"], "new", store, kernel, args.out) for store in stores.values()]
        new_run = f"{stores['new']}:new_{name}"
        run_line = compared(f"{stores['old']}:old_{name}", new_run, args.calibration, args.out,
                            f"{name}_runs")
        old_export = args.out / "exports" / f"{stores['old'].stem}_by_old" / f"{kernel}_configs.json"
        export_line = compared(str(old_export), new_run, args.calibration, args.out, f"{name}_export")
        print(f"{name}: {run_line[0]}\n  {run_line[1]}\n  export: {export_line[0]}\n  {export_line[1]}")
        table.append(f"| {name} | {len(old_rows)}, {len(new_rows)} | {old_rows == new_rows} | "
                     f"{len(old_final & new_final)} of {len(old_final | new_final)} | "
                     f"{', '.join(map(str, same_export))} | {run_line[1]} | {export_line[1]} |")
    print("\n".join(["", *table]))
    (args.out / "table.md").write_text("\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

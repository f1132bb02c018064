"""Benchmark: a change of the code's rooms changes nothing a user sees. The same sweeps run by an older tree
of the project (--old: `git worktree add ../old <commit>`, or an unpacked `git archive`) and by this one:
- rows: the trials each run screened (trial key, statuses), the finalists, the configs chosen;
- exports: each run's store exported by both trees: byte for byte the same, the export time aside;
- compare (GPU): this tree's `triton_sweep.compare` of the old run, and of the old tree's export of it,
  against the new run, calibrated on --calibration (else on --calibration-runs runs of this tree), gated at
  2%.
--part interpret runs small sweeps on the Triton interpreter (CPU); --part synthetic exports and compares
seeded synthetic stores (tests/fixtures/synthetic_store.py) with both trees: the same files and reports.

    python -m triton_sweep.benchmarks.bench_refactor --old ../old [--part gpu|interpret|synthetic]"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SWEEPS = {  # name -> (kernel, overrides of `python -m triton_sweep.sweep`)
    "readme": ("softmax", []),  # the README's sweep: the grid
    "random": ("softmax", ["search=random", "search.budget_trials=4", "search.seed=7"]),  # a seeded sample
    # an export-grade sweep, with a baseline so that compare has controls (runners/compare/GATE.md)
    "export": ("softmax", ["+sweep=softmax_export", "kernel.baselines=[torch]"]),
}
# On the interpreter: small shapes and blocks 4x apart, where the interpreter's time follows the block (the
# programs it runs one after the other, the lanes it computes), so that the finalists and the configs
# chosen do not depend on the noise of the CPU's timings; num_warps, which it ignores, held at one value.
INTERPRET = ["backend=interpret", "kernel.space.num_warps=[4]"]
INTERPRET_SWEEPS = {
    "vector_add": ("vector_add", [*INTERPRET, "kernel=vector_add", "kernel.shapes=[[4096],[1000]]",
                                  "kernel.space.BLOCK_SIZE=[64,256,1024,4096]"]),
    "softmax": ("softmax", [*INTERPRET, "kernel=softmax", "kernel.shapes=[[8,256],[4,1000]]",
                            "kernel.dtypes=[float32]", "kernel.space.BLOCK_SIZE=[256,1024,4096]"]),
}
# times, paths of files, and the module a report cites for its rule (it moved with the rooms)
MASKS = (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00"), re.compile(r"/tmp\S*|\S*/outputs/\S*"),
         re.compile(r"runners/[\w/]+\.py"))


def run(tree: Path, args: list[str]) -> subprocess.CompletedProcess:
    """`python -m <args>` with `tree` the project imported (its modules, its conf/)."""
    python_path = os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": python_path, "WANDB_SILENT": "true"}
    return subprocess.run([sys.executable, "-m", *args], cwd=tree, env=env, capture_output=True, text=True)


def masked(text: str) -> str:
    """The text with its times and paths masked (what two runs of the same code may differ in)."""
    for pattern in MASKS:
        text = pattern.sub("MASKED", text)
    return text


def sweep(tree: Path, label: str, name: str, out: Path, overrides: list[str], store: Path = None
          ) -> Path:
    """One run of the sweep by `tree` (old or new: its label) into a store of its own unless given
    (sweep id <label>_<name>); the store's path."""
    store = store or out / f"{label}_{name}.sqlite"
    done = run(tree, ["triton_sweep.sweep", *overrides, "force=true", f"sweep_id={label}_{name}",
                      f"store={store}", "logger.mode=disabled",
                      f"hydra.run.dir={out / 'runs' / label / name}",
                      f"export_dir={out / 'sweep_exports' / label / name}"])
    if done.returncode != 0:
        raise SystemExit(f"{tree} {name}: the sweep failed\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return store


def screened(store: Path, sweep_id: str = None) -> tuple[set, set, set]:
    """(the screening rows, the finalists' trials, the rows chosen) of a store (or of one sweep of it),
    each as (trial key, kernel, provider, dtype, shape, config, status)."""
    from triton_sweep.store.result_store import ResultStore

    frame = ResultStore(store).load(sweep_id=sweep_id)
    fields = ["trial_key", "kernel", "provider", "dtype", "shape", "config", "status"]
    final = frame["phase"] == "final"
    chosen = frame["chosen"].fillna(False).astype(bool)
    return tuple(set(map(tuple, frame.loc[rows, fields].values)) for rows in (~final, final, chosen))


def exported(tree: Path, label: str, store: Path, kernel: str, out: Path) -> str:
    """The tree's export of the store (its .json and .py), the export time masked."""
    folder = out / "exports" / f"{store.stem}_by_{label}"
    done = run(tree, ["triton_sweep.export", "--store", str(store), "--kernel", kernel, "--out-dir",
                      str(folder),
                      "--no-merge"])
    if done.returncode != 0:
        raise SystemExit(f"{tree}: the export of {store} failed\n{done.stdout[-3000:]}\n"
                         f"{done.stderr[-3000:]}")
    return "".join(masked((folder / f"{kernel}_configs{suffix}").read_text()) for suffix in (".json", ".py"))


def compared(base: str, new: str, calibration: str, out: Path, label: str) -> tuple[str, str]:
    """This tree's compare, gated at 2%: (its summary line, its gate line); the report kept in out."""
    done = run(REPO, ["triton_sweep.compare", base, new, "--calibration", calibration, "--fail-on-slow",
                      "2%"])
    (out / f"compare_{label}.txt").write_text(done.stdout + done.stderr)
    lines = done.stdout.splitlines()
    summary = next((line for line in lines if line.startswith("summary:")), done.stderr.strip()[-300:])
    return summary, next((line for line in lines if line.startswith("gate ")), f"exit {done.returncode}")


def gpu(trees: dict, args) -> list[str]:
    """The GPU part: each sweep by both trees, the rows, the exports and this tree's compare; the picks of
    the two trees side by side with those of two runs of this tree (where the picks differ by chance)."""
    table = ["| sweep | screened rows (old, new) | same rows | finalists in both | same pick old, new | same "
             "pick two runs of new | export by old = by new (old run, new run) | compare old run -> new run "
             "| compare old export -> new run |", "|---|---|---|---|---|---|---|---|---|"]
    for name in args.sweeps:
        kernel, overrides = SWEEPS[name]
        calibration, between = args.calibration, "-"
        if not calibration:  # runs of this tree into one store, apart from the two judged
            store = args.out / f"cal_{name}.sqlite"
            ids = [f"cal{i}_{name}" for i in range(args.calibration_runs)]
            for i in range(args.calibration_runs):
                sweep(REPO, f"cal{i}", name, args.out, overrides, store)
            calibration = f"{store}:{','.join(ids)}"
            between = _same_picks(*(screened(store, sweep_id)[2] for sweep_id in ids[:2]))
        stores = {label: sweep(tree, label, name, args.out, overrides) for label, tree in trees.items()}
        (old_rows, old_final, old_chosen), (new_rows, new_final, new_chosen) = map(screened, stores.values())
        same_export = [exported(trees["old"], "old", store, kernel, args.out)
                       == exported(trees["new"], "new", store, kernel, args.out) for store in stores.values()]
        new_run = f"{stores['new']}:new_{name}"
        run_line = compared(f"{stores['old']}:old_{name}", new_run, calibration, args.out, f"{name}_runs")
        old_export = args.out / "exports" / f"{stores['old'].stem}_by_old" / f"{kernel}_configs.json"
        export_line = compared(str(old_export), new_run, calibration, args.out, f"{name}_export")
        print(f"{name}: {run_line[0]}\n  {run_line[1]}\n  export: {export_line[0]}\n  {export_line[1]}")
        table.append(f"| {name} | {len(old_rows)}, {len(new_rows)} | {old_rows == new_rows} | "
                     f"{len(old_final & new_final)} of {len(old_final | new_final)} | "
                     f"{_same_picks(old_chosen, new_chosen)} | {between} | "
                     f"{', '.join(map(str, same_export))} | "
                     f"{run_line[1]} | {export_line[1]} |")
        (args.out / "table_gpu.md").write_text("\n".join(table) + "\n")  # each sweep's row as it is done
    return table


def _same_picks(one: set, other: set) -> str:
    """In how many of the (kernel, dtype, shape) groups two runs chose the same config of ours."""
    picks = [{(row[1], row[3], row[4]): row[5] for row in rows if row[2] == "triton"}
             for rows in (one, other)]
    groups = set(picks[0]) | set(picks[1])
    return f"{sum(picks[0].get(g) == picks[1].get(g) for g in groups)} of {len(groups)}"


def _configs(rows: set) -> set:
    """The (kernel, provider, dtype, shape, config) of rows, without their trial key and status."""
    return {row[1:-1] for row in rows}


def interpret(trees: dict, args) -> list[str]:
    """The interpreter part: each small sweep by both trees; rows (trial keys and statuses), finalists and
    the configs chosen (the export refuses interpreter timings)."""
    table = ["| sweep | screened rows (old, new) | same rows | same finalists | same chosen |",
             "|---|---|---|---|---|"]
    for name, (_, overrides) in INTERPRET_SWEEPS.items():
        stores = {label: sweep(tree, label, name, args.out, overrides) for label, tree in trees.items()}
        old, new = map(screened, stores.values())
        table.append(f"| {name} | {len(old[0])}, {len(new[0])} | {old[0] == new[0]} | "
                     f"{_configs(old[1]) == _configs(new[1])} | {_configs(old[2]) == _configs(new[2])} |")
    return table


def synthetic(trees: dict, args) -> list[str]:
    """Seeded synthetic stores (made by this tree) exported and compared by both trees: the same files,
    the same reports (paths and times masked)."""
    import numpy as np

    from triton_sweep.store.result_store import ResultStore
    from tests.fixtures.synthetic_store import noisy_run, softmax_sweep

    table = ["| case | export by old = by new | compare by old = by new | exit codes (old, new) |",
             "|---|---|---|---|"]
    store_path = args.out / "synthetic.sqlite"
    store_path.unlink(missing_ok=True)
    store = ResultStore(store_path)
    softmax_sweep(store, "plain", seed=1)
    rng = np.random.default_rng(5)
    for i in range(6):
        noisy_run(store, f"run{i}", rng, slower=1.25 if i == 5 else 1.0)
    store.close()
    same = exported(trees["old"], "old", store_path, "softmax", args.out) == \
        exported(trees["new"], "new", store_path, "softmax", args.out)
    calibration = f"{store_path}:run1,run2,run3"  # base run0 and the new runs left out of it
    for case, new in {"same code": "run4", "25% slower": "run5"}.items():
        command = ["triton_sweep.compare", f"{store_path}:run0", f"{store_path}:{new}",
                   "--calibration", calibration, "--fail-on-slow", "2%"]
        reports = [run(tree, command) for tree in trees.values()]
        same_report = masked(reports[0].stdout) == masked(reports[1].stdout)
        (args.out / f"synthetic_{case.replace(' ', '_')}.txt").write_text(
            "".join(f"== {label}\n{r.stdout}{r.stderr}" for label, r in zip(trees, reports)))
        codes = f"{reports[0].returncode}, {reports[1].returncode}"
        table.append(f"| {case} | {same} | {same_report} | {codes} |")
    return table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, type=Path, help="the older tree of the project")
    parser.add_argument("--part", choices=["gpu", "interpret", "synthetic"], default="gpu")
    parser.add_argument("--calibration", help="STORE:ID,...: runs of the sweeps to judge by (GPU part)")
    parser.add_argument("--calibration-runs", type=int, default=3, help="else runs of this tree, each sweep")
    parser.add_argument("--sweeps", nargs="+", default=list(SWEEPS), choices=list(SWEEPS))
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "refactor")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    trees = {"old": args.old.resolve(), "new": REPO}
    table = {"gpu": gpu, "interpret": interpret, "synthetic": synthetic}[args.part](trees, args)
    print("\n".join(["", *table]))
    (args.out / f"table_{args.part}.md").write_text("\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

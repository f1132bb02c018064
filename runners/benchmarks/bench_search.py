"""Benchmark (CPU): each search strategy over seeds against the spaces of record (runners/benchmarks/
spaces/*.csv.gz, every config screened on a GPU; runners/model/search/simulate.py). Per space and
strategy, over its (shape, dtype)s and seeds: the configs measured until one is within 97% (99%) of the
recorded best, as a share of the configs that pass the constraints (median, 90th percentile), the
configs measured in all, and the simulated wall time against measuring them all (grid).

    python -m triton_sweep.benchmarks.bench_search [--spaces FILE ...] [--seeds 10] [--strategies ...]
    python -m triton_sweep.benchmarks.bench_search record STORE SWEEP_ID OUT.csv.gz   # a space of record
    python -m triton_sweep.benchmarks.bench_search check EXPORT.json SPACE.csv.gz  # a live sweep's export
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from triton_sweep.model.search.simulate import RecordedSpace, simulate

SPACES = Path(__file__).parent / "spaces"
# They never stop by themselves: simulated until both shares are reached; their measured and wall unsaid.
UNTIL_REACHED = ("random", "optuna")
STRATEGIES = {"grid": "grid.Grid", "random": "random.Random", "optuna": "optuna.Optuna",
              "guided": "guided.Guided"}


def strategy_class(name: str):
    import importlib

    module, _, cls = STRATEGIES[name].rpartition(".")
    return getattr(importlib.import_module(f"triton_sweep.model.search.{module}"), cls)


def record(store: str, sweep_id: str, out: str) -> None:
    """A sweep's rows of a store (screened whole, one kernel) as a space of record."""
    from triton_sweep.store.result_store import ResultStore

    columns = ["kernel", "shape", "dtype", "config", "status", "p50_us", "compile_s", "first_call_s",
               "measure_s", "gpu_name", "triton_version", "torch_version", "provider"]
    rows = ResultStore(store).load(sweep_id=sweep_id, columns=columns)
    rows = rows[rows["provider"] == "triton"]
    frame = pd.DataFrame({
        "shape": ["x".join(map(str, json.loads(text))) for text in rows["shape"]],
        "dtype": rows["dtype"], "config": rows["config"], "status": rows["status"],
        "p50_us": rows["p50_us"], "compile_s": rows["compile_s"],
        "gpu_s": rows["first_call_s"].fillna(0) + rows["measure_s"].fillna(0)})
    about = {name: next(v for v in rows[name] if isinstance(v, str)) for name in
             ("gpu_name", "triton_version", "torch_version")}
    RecordedSpace(rows["kernel"].iloc[0], frame).write(out, about)
    print(f"{out}: {len(frame)} trials of {rows['kernel'].iloc[0]} at {frame['shape'].nunique()} shapes, "
          f"{frame['dtype'].nunique()} dtypes; {about}")


def check(export: str, space_path: str) -> None:
    """An export's winner at each (shape, dtype) its sweep measured, against a space of record of those
    shapes (screened whole on the same GPU): the recorded best p50 over the winner's recorded p50, and how
    many configs the export's sweep measured there of how many."""
    space = RecordedSpace.read(space_path)
    frame, best = space.frame, space.best()
    canonical = lambda config: json.dumps(config if isinstance(config, dict) else json.loads(config),
                                          sort_keys=True)
    ok = frame[frame["status"] == "ok"]
    p50 = dict(zip(zip(ok["shape"], ok["dtype"], map(canonical, ok["config"])), ok["p50_us"]))
    rows = []
    for versions in json.loads(Path(export).read_text())["gpus"].values():
        for section in versions.values():
            for dtype, of_dtype in section["dtypes"].items():
                for entry in of_dtype["best_by_shape"]:
                    shape = "x".join(map(str, entry["shape"]))
                    recorded = p50.get((shape, dtype, canonical(entry["config"])), np.nan)
                    rows.append({"shape": shape, "dtype": dtype, "measured": entry.get("configs_measured"),
                                 "of": entry.get("configs_planned"),
                                 "% of the best": 100 * best.get((shape, dtype), np.nan) / recorded})
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    print(f"within 97% of the recorded best at {(table['% of the best'] >= 97).sum()} of {len(table)}")


def run(space: RecordedSpace, name: str, seeds: int) -> dict:
    """One strategy over `seeds` seeds: its figures over every (shape, dtype) of every seed."""
    tables = []
    for seed in range(seeds if name not in ("grid",) else 1):
        strategy = strategy_class(name)(space.trials, budget_trials=None, seed=seed, batch=8)
        table = simulate(space, strategy, until_reached=name in UNTIL_REACHED)
        tables.append(table.assign(wall_s=table.attrs["wall_s"]))
    every = pd.concat(tables)
    if name in UNTIL_REACHED:
        every[["measured", "wall_s"]] = np.nan
    share = lambda column: 100 * every[column] / every["configs"]
    return {"space": space.kernel, "strategy": name, "groups": len(every),
            "to_97 median %": np.median(share("to_97")), "to_97 p90 %": np.percentile(share("to_97"), 90),
            "to_99 median %": np.median(share("to_99")), "measured median %": np.median(share("measured")),
            "wall_s": every["wall_s"].median()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    if argv is None:
        import sys
        argv = sys.argv[1:]
    if argv[:1] == ["record"]:
        if len(argv) != 4:
            parser.error("record takes STORE SWEEP_ID OUT.csv.gz")
        record(*argv[1:])
        return
    if argv[:1] == ["check"]:
        if len(argv) != 3:
            parser.error("check takes EXPORT.json SPACE.csv.gz")
        check(*argv[1:])
        return
    parser.add_argument("--spaces", nargs="*", default=sorted(map(str, SPACES.glob("*.csv.gz"))))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--strategies", nargs="*", default=list(STRATEGIES))
    args = parser.parse_args(argv)
    if not args.spaces:
        parser.error(f"no space of record in {SPACES} and none given (--spaces): record one with "
                     "`triton-sweep +sweep=matmul_space sweep_id=space`, then `record`")
    rows = []
    for path in args.spaces:
        space = RecordedSpace.read(path)
        print(f"{Path(path).name}: {space.kernel}, {space.about}", flush=True)
        found = [run(space, name, args.seeds) for name in args.strategies]
        grid = next((r["wall_s"] for r in found if r["strategy"] == "grid"), None)
        for row in found:
            row["space"] = Path(path).name.split(".")[0]
            row["wall vs grid"] = row["wall_s"] / grid if grid else np.nan
        rows += found
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.2f}"))


if __name__ == "__main__":
    main()

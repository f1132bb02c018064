"""What the sweep's W&B run holds, as plain data (pandas; wandb is not imported here): the trials table,
the charts built from it, the summary keys of every shape's best config, the run's config.
runners/outputs/wandb/logger.py writes them; the README's "Compare runs in W&B" says which answers what.
"""
from __future__ import annotations

import json
import math
import re
from typing import Optional

import pandas as pd

from triton_sweep.model.columns import SAMPLE_COLUMNS
from triton_sweep.model.trial import TRITON_PROVIDER
from triton_sweep.export.rows import newest_per_trial
from triton_sweep.store.result_store import shape_label


def pct_of_best(frame: pd.DataFrame) -> pd.Series:
    """100 x the fastest ok p50 of the row's (kernel, dtype, shape), any provider / the row's p50:
    100 for the fastest, 50 for one twice as slow; None for rows that are not ok."""
    ok = frame["status"] == "ok"
    best = frame[ok].groupby(["kernel", "dtype", "shape"])["p50_us"].transform("min")
    return (100 * (best / frame.loc[ok, "p50_us"])).reindex(frame.index)  # the fastest: exactly 100


def summary_table(frame: pd.DataFrame, dims: Optional[dict] = None) -> pd.DataFrame:
    """The trials as the sweep run's table, with the keys of a trial run's config and summary: no
    samples, pct_of_best, a column per meta-parameter (config.NAME where NAME is already a column) and
    per shape dim (`dims`: kernel -> its dim names), and shape_label, so the table's panels can group and
    plot by them."""
    # samples stay in the store
    table = frame.drop(columns=list(SAMPLE_COLUMNS), errors="ignore").assign(pct_of_best=pct_of_best(frame))
    table["shape_label"] = [shape_label(shape) for shape in frame["shape"]]
    configs = [json.loads(c) for c in frame["config"]]
    for name in dict.fromkeys(k for config in configs for k in config):
        column = f"config.{name}" if name in table.columns else name
        table[column] = [config.get(name) for config in configs]
    shapes = [json.loads(shape) for shape in frame["shape"]]
    for kernel, names in (dims or {}).items():
        mine = (frame["kernel"] == kernel).tolist()
        for index, name in enumerate(names):
            column = f"shape.{name}" if name in frame.columns else name
            earlier = table[column].tolist() if column in table.columns else [None] * len(table)
            table[column] = [shape[index] if of_kernel else value
                             for of_kernel, shape, value in zip(mine, shapes, earlier)]
    return table.astype(object).where(table.notna(), None)  # wandb.Table wants None, not NaN


def _config_text(config_json: str) -> str:
    return " ".join(f"{name}={value}" for name, value in sorted(json.loads(config_json).items()))


def best_keys(frame: pd.DataFrame) -> dict:
    """The sweep run's summary keys, stable across sweeps, GPUs and versions: for every (kernel, dtype,
    shape) our winner (the finalists' choice, else the lowest p50) as best/<kernel>/<dtype>/<shape>/
    p50_us, gbps, tflops and config ("BLOCK_SIZE=1024 num_stages=1 num_warps=4"), and speedup_vs_<baseline>
    (the baseline's p50 over ours) for each baseline measured there."""
    from triton_sweep.model.finalists import winner
    keys = {}
    newest = newest_per_trial(frame[(frame["status"] == "ok") & frame["p50_us"].notna()])
    for (kernel, dtype, shape), group in newest.groupby(["kernel", "dtype", "shape"]):
        ours = group[group["provider"] == TRITON_PROVIDER]
        if ours.empty:
            continue
        best = ours.loc[winner(ours)]
        prefix = f"best/{kernel}/{dtype}/{shape_label(shape)}"
        keys[f"{prefix}/p50_us"] = float(best["p50_us"])
        keys[f"{prefix}/config"] = _config_text(best["config"])
        for name in ("gbps", "tflops"):
            if pd.notna(best.get(name)):
                keys[f"{prefix}/{name}"] = float(best[name])
        for _, baseline in group[group["provider"] != TRITON_PROVIDER].iterrows():
            keys[f"{prefix}/speedup_vs_{baseline['provider']}"] = float(baseline["p50_us"] / best["p50_us"])
    return keys


def _reason(message) -> str:
    """A failure's message as a category: its first line, numbers as #, so that alike failures count
    together ("BLOCK_SIZE # < row length #")."""
    lines = str(message or "").strip().splitlines()
    line = lines[0] if lines else "no message"
    return re.sub(r"\d+(\.\d+)?", "#", line)[:100]


def _plain(values) -> list:
    """Meta-parameter values as ints where they are whole (pandas made them floats beside None)."""
    return [int(v) if isinstance(v, float) and v.is_integer() else v for v in values]


def chart_tables(table: pd.DataFrame) -> dict:
    """The sweep run's charts, as plain data: name -> (kind, data frame, {field: column}, title); kind is
    a wandb.plot function (scatter, bar). They answer the README's dashboard questions across the
    sweep's shapes, where p50s do not compare but a share of the best at the same shape does:
    pct_of_our_best, 100 x our fastest config's p50 there / this one's."""
    charts = {}
    newest = newest_per_trial(table)  # a finalist's re-timed row
    ok = newest[(newest["status"] == "ok") & newest["p50_us"].notna()]
    ours = ok[ok["provider"] == TRITON_PROVIDER]
    group = ["kernel", "dtype", "shape_label"]
    # the ratio first: the fastest config's own is then exactly 100 (100 * x / x need not be)
    fastest = ours.groupby(group)["p50_us"].transform("min")
    ours = ours.assign(pct_of_our_best=100 * (fastest / ours["p50_us"]))
    for name in dict.fromkeys(k for config in ours["config"] for k in json.loads(config)):
        column = f"config.{name}" if f"config.{name}" in ours.columns else name
        if ours[column].nunique() > 1:  # a meta-parameter that varied
            # Its best value at each shape: a point per (shape, value), however many configs share it.
            data = (ours.rename(columns={column: name}).groupby([*group, name], as_index=False)
                    ["pct_of_our_best"].max())
            charts[f"pct_of_best_vs_{name}"] = ("scatter", data.assign(**{name: _plain(data[name])}),
                                                {"x": name, "y": "pct_of_our_best"},
                                                f"% of our best at its shape against {name} (the best "
                                                f"config of each {name} at each shape)")
    speedups = []
    for (kernel, dtype, shape), rows in ok.groupby(group):
        mine = rows[rows["provider"] == TRITON_PROVIDER]["p50_us"]
        for provider, theirs in rows[rows["provider"] != TRITON_PROVIDER].groupby("provider")["p50_us"]:
            if not mine.empty:
                speedups.append({"label": f"{kernel} {dtype} {shape} vs {provider}",
                                 "speedup": float(theirs.min() / mine.min())})
    if speedups:
        charts["speedup_vs_baselines"] = ("bar", pd.DataFrame(speedups),
                                          {"label": "label", "value": "speedup"},
                                          "Ours (the fastest config) against each baseline: its p50 / ours")
    ranked = []
    for (kernel, dtype, config), rows in ours.groupby(["kernel", "dtype", "config"]):
        shapes = ours[(ours["kernel"] == kernel) & (ours["dtype"] == dtype)]["shape_label"].nunique()
        mean = math.exp(sum(math.log(v) for v in rows["pct_of_our_best"]) / len(rows))
        ranked.append({"label": f"{kernel} {dtype} {_config_text(config)} ({len(rows)}/{shapes} shapes)",
                       "pct_of_our_best": round(mean, 3), "ok_at": len(rows)})
    if ranked:
        top = pd.DataFrame(ranked).sort_values(["ok_at", "pct_of_our_best"], ascending=False).head(25)
        charts["configs_by_pct_of_best"] = ("bar", top[["label", "pct_of_our_best"]],
                                            {"label": "label", "value": "pct_of_our_best"},
                                            "Configs by geometric mean % of our best, over the shapes "
                                            "where ok (top 25, most shapes first)")
    outcomes = newest.assign(reason=[("ok" if status == "ok" else f"{status}: {_reason(message)}")
                                     for status, message in zip(newest["status"], newest["message"])])
    counts = outcomes.groupby("reason").size().reset_index(name="trials")
    charts["outcomes"] = ("bar", counts, {"label": "reason", "value": "trials"},
                          "Trials by outcome: failures and why")
    return charts


def sweep_config(frame: pd.DataFrame, sweep_id: str, runs: str, timing: Optional[dict]) -> dict:
    """The sweep run's config: what sets two sweeps apart in the runs table (the newest row's GPU and
    versions, the kernels and dtypes, how W&B logged it)."""
    from triton_sweep.model.columns import ENV_KEY

    env = {}
    if len(frame):
        newest = frame.loc[frame["id"].idxmax()]
        env = {name: (None if pd.isna(newest[name]) else newest[name])
               for name in (*ENV_KEY, "cuda_version", "python_version") if name in frame.columns}
    return {"sweep_id": sweep_id, "runs": runs, "kernels": sorted(frame["kernel"].unique().tolist()),
            "dtypes": sorted(frame["dtype"].unique().tolist()), "timing": timing,
            **{name: (value.item() if hasattr(value, "item") else value) for name, value in env.items()}}

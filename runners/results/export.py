"""The export of tuned configs: `<kernel>_configs.json` (the data of record) and `<kernel>_configs.py`,
written at the end of a sweep (runners/results/outputs/export.py) and by `python -m runners.export`.

Only ok trials of the kernel itself (not baselines) timed on a GPU are exported; interpreter timings
are refused. Per GPU, the rows measured with its newest kernel source and versions (a version that was
not recorded, NULL, compares equal to itself), the newest row of each trial.

A covering set per (GPU, dtype): the smallest list found such that at every measured shape the fastest
config of the list that was ok there is within `tolerance` (default 3%) of the fastest config measured
there. At a shape whose finalists were re-timed round-robin (runners/engine/finalists.py), only the finalists'
re-timed p50s compete, so that every time compared was taken in the same rounds; elsewhere the p50s of
screening. Greedy set cover: each step adds the config that covers the most shapes still uncovered;
ties go to the config that is the winner (the finalists' choice, else the lowest p50) at more of those
shapes, then to the higher geometric mean of best p50 / its p50 over them, then to the fewest
resources (num_stages, num_warps, BLOCK product: the finalists' tie rule), then to the first measured.
Every shape has an ok config (its fastest covers it), so the list is never empty. Greedy may return more
configs than the minimum (at most 1 + ln(number of shapes) times as many, the set-cover bound).
Weighted by calls (`kernel.calls`, from python -m runners.capture; `--calls` of the command): each step
first adds the config with the most call-weighted speed over the shapes it newly covers (the sum of
calls x best p50 / its p50), so that the shapes called most get the configs nearest their best; the
tolerance still bounds every shape, a shape of no calls included. The section then gives the
call-weighted expected loss (the mean over calls of the list's p50 / the best - 1).

The exported list is the covering set followed by the alternates: every other config within `tolerance`
of the fastest at one measured shape at least (those within it at more shapes first, then the first
measured). The covering set is enough at the measured shapes; between them the best is often a config
that was only near-best at the points around (a block's ragged last tile, a wave of programs more or
less): on an H200, at 14 held-out shapes, the covering set alone held a config within 3% of the best at
8 (float16) and 10 (bfloat16) for layernorm, the list with its alternates at 13 and 14 (BENCHMARKS.md,
issue 20). The prune (export_runtime.py) keeps only the alternates plausible around a call, and at a
measured shape none.

Validity travels with each config: the shapes where it was ok, with its p50 there (and, where it
was timed in repetitions, their number and spread: what `runners.compare` and `runners.revalidate`
judge a later measurement against); each shape's winner carries its baselines' p50s. The module
(imports only triton) holds, for every GPU and Triton version exported: the covering sets (COVER), the
winner of each measured shape (BEST_BY_SHAPE), all their configs once (CONFIGS, for @triton.autotune),
the map from the kernel's arguments to the sweep's dims (KEY, from the kernel's export key or --key), a
prune function for autotune and config_for() (the measured shapes around the call, the running Triton
version's section or the nearest; runners/results/export_runtime.py says how). Each (GPU, dtype)
carries the leave-one-out estimate of how the export holds between its measured shapes
(runners/results/generalization.py), which the export prints in one line.

One file pair per kernel for all GPUs and Triton versions (format 3: gpus -> Triton version ->
section): the section of this export's GPU and Triton version replaces the one exported before; the
other sections are kept from the existing JSON (`--no-merge` / export.merge=false: rewrite from this
export alone), so that a repository keeps working configs for each version it meets. Files of format 2
(one section a GPU) still load: `upgraded` files each section under its Triton version. The .py is
generated from the merged JSON.
"""
from __future__ import annotations

import copy
import datetime
import json
import math
from pathlib import Path
from typing import Optional

import pandas as pd

from runners.engine.finalists import resource_key, winner
from runners.engine.trial import TRITON_PROVIDER, ConfigError
from runners.engine.trials import check_key
from runners.engine.row import ENV_KEY

FORMAT = 3  # of the JSON; 2 had one section a GPU, 1 one file a GPU with the configs ok at every shape
LAUNCH_OPTIONS = ("num_warps", "num_stages")  # triton.Config keywords; every other key is a meta-parameter
# Rows exported together share the resume environment; backend and GPU name are already fixed here.
EXPORT_ENV = [name for name in ENV_KEY if name not in ("backend", "gpu_name")]
WINNER_FIELDS = ("p50_us", "gbps", "tflops", "pct_copy_bw")  # of each shape's winner, in BEST_BY_SHAPE
PROVENANCE = ("timing_method", "driver_version", "cuda_version", "torch_version", "triton_version",
              "kernel_hash")
RUNTIME = Path(__file__).resolve().parent / "export_runtime.py"
RUNTIME_MARKER = "# ---- generated modules copy everything below this line ----\n"


class ExportError(ValueError):
    pass


def newest_per_trial(rows: pd.DataFrame) -> pd.DataFrame:
    return rows.sort_values("id").groupby("trial_key", as_index=False).tail(1)


def _same_env(group: pd.DataFrame) -> pd.Series:
    """Rows measured in the environment of the group's newest row; a missing value equals a missing one
    (pandas' NaN != NaN dropped every row whose driver_version was NULL)."""
    env = group[EXPORT_ENV].astype(object)
    newest = env.loc[group["id"].idxmax()]
    same = pd.Series(True, index=group.index)
    for name in EXPORT_ENV:
        if pd.isna(newest[name]):
            same &= env[name].isna()
        else:
            same &= env[name] == newest[name]
    return same


def select_rows(frame: pd.DataFrame, kernel: str) -> dict[str, pd.DataFrame]:
    """gpu_name -> the exportable rows measured on it."""
    rows = frame[(frame["kernel"] == kernel) & (frame["provider"] == TRITON_PROVIDER)
                 & (frame["status"] == "ok") & frame["p50_us"].notna()]
    if rows.empty:
        raise ExportError(f"no ok trials of kernel {kernel!r} to export")
    gpu_rows = rows[rows["backend"] == "cuda"]
    if gpu_rows.empty:
        raise ExportError(
            f"refusing to export {kernel!r}: its ok trials are interpreter timings (backend=interpret), "
            "which say nothing about a GPU; run the sweep on a GPU"
        )
    return {gpu: newest_per_trial(group[_same_env(group)]) for gpu, group in gpu_rows.groupby("gpu_name")}


def _beside(frame: pd.DataFrame, ours: pd.DataFrame) -> pd.DataFrame:
    """Every row of the store measured beside `ours` (one GPU's exportable rows): the same kernel, GPU
    and environment, any provider and status."""
    newest = ours.loc[ours["id"].idxmax()]
    rows = frame[(frame["kernel"] == newest["kernel"]) & (frame["gpu_name"] == newest["gpu_name"])]
    for name in EXPORT_ENV:
        rows = rows[rows[name].isna()] if pd.isna(newest[name]) else rows[rows[name] == newest[name]]
    return rows


def baseline_rows(frame: pd.DataFrame, ours: pd.DataFrame) -> pd.DataFrame:
    """The ok baseline rows measured beside `ours`, the newest row of each trial (the finalists' rounds
    where they were re-timed)."""
    rows = _beside(frame, ours)
    rows = rows[(rows["provider"] != TRITON_PROVIDER) & (rows["status"] == "ok") & rows["p50_us"].notna()]
    return newest_per_trial(rows)


def trial_statuses(frame: pd.DataFrame, ours: pd.DataFrame) -> dict:
    """(dtype, canonical config, shape) -> the status of the newest row of each of our trials measured
    beside `ours`, whatever the status."""
    rows = _beside(frame, ours)
    rows = newest_per_trial(rows[rows["provider"] == TRITON_PROVIDER])
    return {(dtype, _canonical(config), _shape(shape)): status for dtype, config, shape, status
            in zip(rows["dtype"], rows["config"], rows["shape"], rows["status"])}


def _canonical(config_json: str) -> str:
    return json.dumps(json.loads(config_json), sort_keys=True)


def _shape(shape_json: str) -> tuple:
    return tuple(json.loads(shape_json))


def _number(value):
    """A JSON-safe float: None for a missing value (NaN is not JSON)."""
    return None if value is None or pd.isna(value) else float(value)


def _noise(row: pd.Series) -> dict:
    """What `runners.compare` judges a later measurement of the export against: a row's repetitions, their
    medians (the mean of their logs is the figure it compares) and the spread of their logs, where it was
    timed in several; else the precision of its one median (the half-width of its 95% interval)."""
    repetitions = row.get("repetitions")
    if repetitions is None or pd.isna(repetitions) or repetitions < 2:
        precision = _number(row.get("p50_precision"))
        return {} if precision is None or not math.isfinite(precision) else {"p50_precision": precision}
    medians = row.get("rep_p50s_us")
    return {"repetitions": int(repetitions), "rep_noise": _number(row.get("rep_noise")),
            **({"rep_p50s_us": [round(float(m), 4) for m in medians]} if medians is not None else {})}


def _baselines_at(baselines: Optional[pd.DataFrame], shape_json: str) -> dict:
    """provider -> the p50 (and repetitions) of each baseline measured at the shape."""
    if baselines is None or baselines.empty:
        return {}
    rows = baselines[baselines["shape"] == shape_json]
    return {row["provider"]: {"p50_us": float(row["p50_us"]), **_noise(row)} for _, row in rows.iterrows()}


class Measured:
    """One (GPU, dtype)'s rows, as the covering set and the leave-one-out estimate read them: every
    config (canonical JSON -> the config, its first row id, {shape: its figures there} where ok), the
    p50s that compete at each shape (`timed`: the finalists' where they were re-timed), the best of them,
    and each shape's winner row."""

    def __init__(self, rows: pd.DataFrame):
        rows = rows.sort_values("id")
        self.shapes = list(dict.fromkeys(_shape(s) for s in rows["shape"]))
        self.configs: dict[str, dict] = {}
        for (_, row) in rows.iterrows():
            entry = self.configs.setdefault(_canonical(row["config"]), {
                "config": json.loads(row["config"]), "first_id": row["id"], "ok_at": {}})
            entry["ok_at"][_shape(row["shape"])] = {"p50_us": float(row["p50_us"]), **_noise(row)}
        self.best, self.timed, self.winners = {}, {}, {}
        for shape_json, group in rows.groupby("shape", sort=False):
            shape = _shape(shape_json)
            final = group[group["phase"] == "final"]
            competing = final if not final.empty else group
            self.timed[shape] = {_canonical(config): float(p50)
                                 for config, p50 in zip(competing["config"], competing["p50_us"])}
            self.best[shape] = min(self.timed[shape].values())
            self.winners[shape] = group.loc[winner(group)]
        self.winner_keys = {shape: _canonical(row["config"]) for shape, row in self.winners.items()}

    def without(self, shapes: list) -> "Measured":
        """The same rows less those at `shapes` (the leave-one-out's remaining shapes)."""
        rest = copy.copy(self)
        gone = set(shapes)
        rest.shapes = [s for s in self.shapes if s not in gone]
        rest.configs = {key: {**entry, "ok_at": {s: at for s, at in entry["ok_at"].items() if s not in gone}}
                        for key, entry in self.configs.items()}
        rest.best, rest.timed, rest.winners, rest.winner_keys = (
            {s: v for s, v in table.items() if s not in gone}
            for table in (self.best, self.timed, self.winners, self.winner_keys))
        return rest

    def p50_at(self, key: str, shape: tuple) -> Optional[float]:
        """The config's p50 of record at the shape (its re-timed one where it was a finalist), None where
        it was not ok there."""
        at = self.configs[key]["ok_at"].get(shape)
        return None if at is None else at["p50_us"]

    def near(self, shapes: list, tolerance: float) -> dict[str, list]:
        """Each config -> the shapes of `shapes` where it is within `tolerance` of the best, in order."""
        limit = {s: (1 + tolerance) * self.best[s] for s in shapes}
        return {key: [s for s in shapes if self.timed[s].get(key, math.inf) <= limit[s]]
                for key in self.configs}

    def cover(self, shapes: list, tolerance: float, calls: Optional[dict] = None) -> list[str]:
        """The covering set of `shapes` (module doc: the greedy rule, weighted by `calls`: shape -> count,
        where given), as canonical configs, best first."""
        return self._greedy(shapes, self.near(shapes, tolerance), calls)

    def _greedy(self, shapes: list, near: dict, calls: Optional[dict]) -> list[str]:
        """The covering set (module doc: the greedy rule), given each config's shapes within the tolerance."""
        covers = {key: set(at) for key, at in near.items()}

        def rank(key: str, uncovered: set) -> tuple:
            gain = covers[key] & uncovered
            wins = sum(self.winner_keys[s] == key for s in gain)
            speed = math.exp(sum(math.log(self.best[s] / self.timed[s][key]) for s in gain) / len(gain))
            weighted = sum(calls.get(s, 0) * self.best[s] / self.timed[s][key] for s in gain) if calls else 0
            entry = self.configs[key]
            return -weighted, -len(gain), -wins, -speed, resource_key(entry["config"]), entry["first_id"]

        chosen, uncovered = [], set(shapes)
        while uncovered:
            pick = min((key for key in self.configs if covers[key] & uncovered),
                       key=lambda key: rank(key, uncovered))
            chosen.append(pick)
            uncovered -= covers[pick]
        return chosen

    def listed(self, shapes: list, tolerance: float, calls: Optional[dict] = None) -> list[str]:
        """The exported list (module doc): the covering set of `shapes`, then the alternates, every other
        config within `tolerance` of the best at one of them at least, those within it at more shapes
        first (then the first measured)."""
        near = self.near(shapes, tolerance)
        chosen = self._greedy(shapes, near, calls)
        alternates = sorted((key for key, at in near.items() if at and key not in chosen),
                            key=lambda key: (-len(near[key]), self.configs[key]["first_id"]))
        return chosen + alternates


def weighted_loss(list_p50: dict, best: dict, calls: dict) -> Optional[float]:
    """The mean over calls of list p50 / best p50 - 1 (shape -> figure), None without calls."""
    total = sum(calls.get(s, 0) for s in best)
    if not total:
        return None
    return sum(calls.get(s, 0) * (list_p50[s] / best[s] - 1) for s in best) / total


def covering_set(rows: pd.DataFrame, tolerance: float, baselines: Optional[pd.DataFrame] = None,
                 calls: Optional[dict] = None) -> dict:
    """The covering set and the winner of each shape, from one (GPU, dtype)'s rows (module doc: how);
    weighted by `calls` (shape -> count) where given."""
    measured = Measured(rows)
    shapes, configs, timed, winners = measured.shapes, measured.configs, measured.timed, measured.winners
    chosen = measured.listed(shapes, tolerance, calls)
    covers = measured.near(shapes, tolerance)

    # (p50, canonical config) of the list's fastest at each shape
    list_best = {s: min((timed[s][key], key) for key in chosen if key in timed[s]) for s in shapes}
    weighted = {}
    if calls:
        loss = weighted_loss({s: p50 for s, (p50, _) in list_best.items()}, measured.best, calls)
        weighted = {"calls": {json.dumps(list(s)): calls.get(s, 0) for s in shapes}, "weighted_loss": loss}
    return {
        **weighted,
        "configs": [{"config": configs[key]["config"],
                     "ok_at": [{"shape": list(s), **configs[key]["ok_at"][s]} for s in shapes
                               if s in configs[key]["ok_at"]],
                     "covers": [list(s) for s in covers[key]]} for key in chosen],
        "best_by_shape": [{"shape": list(s), "config": json.loads(winners[s]["config"]),
                           **{name: _number(winners[s][name]) for name in WINNER_FIELDS},
                           **_noise(winners[s]),
                           "fastest_p50_us": measured.best[s], "list_p50_us": list_best[s][0],
                           "list_config": json.loads(list_best[s][1]),
                           "baselines": _baselines_at(baselines, json.dumps(list(s)))} for s in shapes],
    }


def gpu_section(rows: pd.DataFrame, tolerance: float, baselines: Optional[pd.DataFrame] = None,
                dims: Optional[tuple] = None, key_dims: Optional[list] = None,
                calls: Optional[dict] = None, rule=None, statuses: Optional[dict] = None) -> dict:
    """Provenance and the covering set of every dtype of one GPU's rows (with the baselines measured
    beside them, for each shape's winner); given the dims and the export key's dims, each dtype's
    leave-one-out estimate too (runners/results/generalization.py), with the kernel's constraints `rule`
    as its check and `statuses` ((dtype, canonical config, shape) -> status, every status) to score the
    picks that were not ok."""
    from runners.results.generalization import Lookup, estimate  # it builds on this module's Measured

    newest = rows.loc[rows["id"].idxmax()]
    dtypes = {}
    for dtype, group in sorted(rows.groupby("dtype")):
        dtypes[dtype] = covering_set(group, tolerance,
                                     None if baselines is None else baselines[baselines["dtype"] == dtype],
                                     calls)
        if dims is not None:
            of_dtype = {(key, shape): status for (d, key, shape), status in (statuses or {}).items()
                        if d == dtype}
            dtypes[dtype]["leave_one_out"] = estimate(Measured(group), tolerance, dims, key_dims,
                                                      Lookup(rule, dtype, of_dtype))
    return {
        **{name: (None if pd.isna(newest[name]) else str(newest[name])) for name in PROVENANCE},
        "sweep_ids": sorted(rows["sweep_id"].unique().tolist()),
        "exported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "trials": int(len(rows)),
        "tolerance": tolerance,
        "dtypes": dtypes,
    }


def kernel_dims(kernel: str, rank: int) -> tuple[str, ...]:
    """The names of a built-in kernel's shape dims (its KernelSpec's), else d0, d1, ... (see --dims)."""
    from runners.engine.specs import builtin_spec

    spec = builtin_spec(kernel)
    if spec is not None and len(spec.dims) == rank:
        return tuple(spec.dims)
    return tuple(f"d{i}" for i in range(rank))


def parse_key(items: list[str]) -> dict[str, str]:
    """["n_cols=cols", ...] (the --key option) -> {"n_cols": "cols"}."""
    key = {}
    for item in items:
        argument, sep, dim = item.partition("=")
        if not sep:
            raise ExportError(f"--key: {item!r} must look like ARGUMENT=DIM, e.g. n_cols=cols")
        key[argument.strip()] = dim.strip()
    return key


def upgraded(data: dict) -> dict:
    """An export's data in the current format: format 2 (gpus -> section) files each section under its
    Triton version (gpus -> version -> section)."""
    if data.get("format") == 2:
        gpus = {gpu: {section["triton_version"]: section} for gpu, section in data["gpus"].items()}
        return {**data, "format": FORMAT, "gpus": gpus}
    return data


def read_export(path: str | Path) -> dict:
    """An export's JSON (format 2 or 3), in the current format; ExportError naming the file otherwise."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ExportError(f"{path}: not a readable export ({error})") from None
    if not isinstance(data, dict) or data.get("format") not in (2, FORMAT) or "gpus" not in data:
        raise ExportError(f"{path}: not an export of format 2 or {FORMAT} (runners/results/export.py)")
    return upgraded(data)


def sections(data: dict):
    """(gpu, Triton version, section) of every section of an export, in file order."""
    for gpu, versions in data["gpus"].items():
        for version, section in versions.items():
            yield gpu, version, section


def _merged(path: Path, kernel: str, dims: tuple, merge: bool) -> dict:
    """The sections to keep from an existing JSON export of the kernel."""
    if not merge or not path.exists():
        return {}
    how = "move it away, or export with --no-merge (export.merge=false)"
    try:
        data = read_export(path)
    except ExportError as error:
        raise ExportError(f"cannot merge into {error}; {how}") from None
    if data.get("kernel") != kernel or tuple(data.get("dims", ())) != dims:
        raise ExportError(f"cannot merge into {path}: it holds kernel {data.get('kernel')!r}, dims "
                          f"{data.get('dims')}, not {kernel!r}, {list(dims)}; {how}")
    return data


def _config_source(config: dict) -> str:
    meta = {k: v for k, v in config.items() if k not in LAUNCH_OPTIONS}
    options = "".join(f", {k}={config[k]}" for k in LAUNCH_OPTIONS if k in config)
    return f"triton.Config({meta!r}{options})"


def _identity(config: dict) -> str:
    return json.dumps(config, sort_keys=True)


def _literal_lines(data: dict, configs: dict) -> tuple[list[str], list[str]]:
    """The lines of the COVER and BEST_BY_SHAPE literals: gpu -> Triton version -> ..."""
    cover_lines, best_lines = [], []
    for gpu, versions in data["gpus"].items():
        cover_lines.append(f"    {gpu!r}: {{")
        best_lines.append(f"    {gpu!r}: {{")
        for version, section in versions.items():
            cover_lines.append(f"        {version!r}: {{")
            best_lines.append(f"        {version!r}: {{")
            for dtype, dtype_data in section["dtypes"].items():
                cover_lines.append(f"            {dtype!r}: [")
                for entry in dtype_data["configs"]:
                    verified = ", ".join(f"{tuple(at['shape'])!r}: {round(at['p50_us'], 3)!r}"
                                         for at in entry["ok_at"])
                    index = configs[_identity(entry["config"])][0]
                    cover_lines.append(f"                (CONFIGS[{index}], {{{verified}}}),")
                cover_lines.append("            ],")
                for shape in dtype_data["best_by_shape"]:
                    throughput = f", {shape['gbps']:.0f} GB/s" if shape["gbps"] is not None else ""
                    best_lines.append(f"            # p50 {shape['p50_us']:.2f} us{throughput}; fastest "
                                      f"there {shape['fastest_p50_us']:.2f} us, the list's best "
                                      f"{shape['list_p50_us']:.2f} us")
                    best_lines.append(f"            ({dtype!r}, {tuple(shape['shape'])!r}): "
                                      f"{_config_source(shape['config'])},")
            cover_lines.append("        },")
            best_lines.append("        },")
        cover_lines.append("    },")
        best_lines.append("    },")
    return cover_lines, best_lines


def _aligned_apart_literal(all_sections: list) -> str:
    """The ALIGNED_APART literal: (GPU, Triton version, dtype) of the sections whose leave-one-out estimate
    chose to look the kinds of size up apart (runners/results/generalization.py)."""
    apart = [(gpu, version, dtype) for gpu, version, section in all_sections
             for dtype, dtype_data in section["dtypes"].items()
             if dtype_data.get("leave_one_out", {}).get("aligned_apart")]
    return "{" + ", ".join(map(repr, apart)) + "}" if apart else "set()"


def render_module(data: dict, json_name: str) -> str:
    """The .py of an export: its data as literals, then the lookup code of
    runners/results/export_runtime.py."""
    kernel, all_sections = data["kernel"], list(sections(data))
    configs = {}  # every config of the covering sets once, in GPU, version, dtype, list order
    for _, _, section in all_sections:
        for dtype_data in section["dtypes"].values():
            for entry in dtype_data["configs"]:
                configs.setdefault(_identity(entry["config"]), (len(configs), entry["config"]))
    provenance = "\n".join(
        f"- {gpu}, Triton {version}: driver {s['driver_version'] or 'not recorded'}, CUDA "
        f"{s['cuda_version'] or 'not recorded'},\n  torch {s['torch_version']}, kernel source "
        f"{s['kernel_hash']};"
        f"\n  timed by {s.get('timing_method') or 'CUDA events (before timing_method was recorded)'};"
        f"\n  {s['trials']} ok trials of sweeps {', '.join(s['sweep_ids'])}; within "
        f"{100 * s['tolerance']:g}%; exported {s['exported_at']}" for gpu, version, s in all_sections)
    key_args = list(data["key"]) or [d for d in data["dims"]]
    cover_lines, best_lines = _literal_lines(data, configs)
    config_lines = "\n".join(f"    {_config_source(config)}," for _, config in configs.values())
    rules = RUNTIME.read_text().split('"""')[1].split("Lookups, ", 1)[1].strip()
    runtime = RUNTIME.read_text().split(RUNTIME_MARKER, 1)[1].lstrip("\n")
    tolerances = sorted({f"{100 * s['tolerance']:g}%" for _, _, s in all_sections})
    return f'''"""{kernel} launch configs measured by the triton-sweep runner.
Generated from {json_name}: do not edit.

{provenance}

COVER[gpu][triton version][dtype] starts with a covering set: at every measured shape, the fastest of
its configs that was ok there is within {" / ".join(tolerances)} of the fastest config measured there (p50
of the kernel time of record, timed as each section's line above says; where finalists were re-timed
round-robin, their re-timed p50s); then the alternates, every other config within that of the fastest at
one measured shape at least, which the space between measured shapes can need. Each config comes with
the shapes where it was verified (ok) and its p50 there, in us. Use:

    from {json_name[:-len(".json")]} import CONFIGS, config_for, do_bench, make_prune, prune_configs

    @triton.autotune(configs=CONFIGS, key={key_args!r}, do_bench=do_bench,
                     prune_configs_by={{"early_config_prune": prune_configs}})  # or make_prune(check=...)
    @triton.jit
    def kernel(...): ...

    config = config_for("float16", {key_args[0]}=...)  # without autotune (the rules below)

@triton.autotune never calls the prune when it is given a single config: pass CONFIGS whole.
Lookups, {rules}
"""
import triton

KERNEL = {kernel!r}
DIMS = {tuple(data["dims"])!r}
# The kernel's argument -> the dim of the measured shapes it gives (export --key, or export.key).
KEY = {data["key"]!r}
GPU_ENV = "TRITON_EXPORT_GPU"  # names the GPU whose configs apply, instead of the CUDA device's name
TRITON_ENV = "TRITON_EXPORT_TRITON"  # names the Triton version whose configs apply, not the running one

# Every config of COVER once: autotune over all of them, and let prune_configs keep the right ones.
CONFIGS = [
{config_lines}
]

# GPU -> Triton version -> dtype -> the covering set, best first, then the alternates: (config, {{shape
# where it was ok: its p50 there, us}}).
COVER = {{
{chr(10).join(cover_lines)}
}}

# GPU -> Triton version -> (dtype, shape) -> the winner measured there (the finalists' choice, else the
# lowest p50).
BEST_BY_SHAPE = {{
{chr(10).join(best_lines)}
}}

# (GPU, Triton version, dtype) where sizes that are multiples of 16 and sizes that are not are looked up
# apart: the export's leave-one-out estimate was higher so (the rules below).
ALIGNED_APART = {_aligned_apart_literal(all_sections)}


{runtime}'''


def write_export(kernel: str, new: dict[str, dict], out_dir: str | Path, dims: tuple, key: dict | None,
                 merge: bool = True) -> list[Path]:
    """Write <kernel>_configs.json (the sections of this export, gpu -> section, each filed under its
    Triton version, over those kept from the existing file) and the .py generated from it; returns
    their paths."""
    out_dir = Path(out_dir)
    json_path = out_dir / f"{kernel}_configs.json"
    existing = _merged(json_path, kernel, dims, merge)
    gpus: dict[str, dict] = {}
    for gpu, version, section in sections(existing) if existing else ():
        if not (gpu in new and new[gpu]["triton_version"] == version):
            print(f"note: {json_path.name} keeps {gpu}'s configs of Triton {version}, exported "
                  f"{section['exported_at']}")
            gpus.setdefault(gpu, {})[version] = section
    for gpu, section in new.items():
        gpus.setdefault(gpu, {})[section["triton_version"]] = section
    data = {"format": FORMAT, "kernel": kernel, "dims": list(dims),
            "key": key if key else existing.get("key", {}),
            "gpus": {gpu: dict(sorted(gpus[gpu].items())) for gpu in sorted(gpus)}}
    out_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=1)
    json_path.write_text(text)
    py_path = out_dir / f"{kernel}_configs.py"
    py_path.write_text(render_module(json.loads(text), json_path.name))  # from the JSON as written
    return [py_path, json_path]


def export_kernel(frame: pd.DataFrame, kernel: str, out_dir: str | Path, *, tolerance: float = 0.03,
                  key: dict | None = None, dims: tuple | None = None, merge: bool = True,
                  key_field: str = "--key", calls: Optional[dict] = None, rule=None) -> list[Path]:
    """Write the kernel's export from the store's rows (module doc); `rule`: the kernel's constraints,
    (shape, dtype, config) -> reason or None, which the leave-one-out estimate plays as `check`."""
    if not (isinstance(tolerance, (int, float)) and 0 <= tolerance < 1):
        raise ExportError(f"export.tolerance: {tolerance!r} must be a share in [0, 1), e.g. 0.03 for 3%")
    by_gpu = select_rows(frame, kernel)
    rank = len(_shape(next(iter(by_gpu.values()))["shape"].iloc[0]))
    if dims is None:
        dims = kernel_dims(kernel, rank)
    elif len(dims) != rank:
        raise ExportError(f"--dims: {', '.join(dims)} names {len(dims)} dims; {kernel}'s shapes have {rank}")
    try:
        key = check_key(key or {}, dims, kernel, key_field)
    except ConfigError as error:
        raise ExportError(str(error)) from None
    from runners.results.generalization import summary_line

    key_dims = [d for d in dims if d in key.values()] or list(dims)  # no key: a call gives every dim
    sections = {gpu: gpu_section(rows, tolerance, baseline_rows(frame, rows), dims, key_dims, calls, rule,
                                 trial_statuses(frame, rows))
                for gpu, rows in by_gpu.items()}
    for gpu, section in sections.items():
        for dtype, dtype_data in section["dtypes"].items():
            print(f"{kernel} on {gpu}, {dtype}: {summary_line(dtype_data['leave_one_out'], dims)}")
            if dtype_data.get("weighted_loss") is not None:
                total = sum(dtype_data["calls"].values())
                print(f"{kernel} on {gpu}, {dtype}: weighted by {total} calls, the list loses "
                      f"{100 * dtype_data['weighted_loss']:.2f}% of the best p50 on average")
    return write_export(kernel, sections, out_dir, dims, key, merge)


def settings_from_config(cfg, kernel: str) -> dict:
    """export_kernel's settings from a sweep's config (conf/config.yaml's export section)."""
    from omegaconf import OmegaConf

    from runners.engine.specs import load_spec

    from runners.engine.trials import parse_calls

    spec_path = cfg.kernel.spec if cfg.kernel.name == "external" else None
    settings = _settings(cfg.export, kernel, spec_path)
    if cfg.kernel.get("calls") is not None:
        spec = load_spec(cfg.kernel.name, spec_path)
        if spec.name == kernel:  # the calls weigh the shapes of the sweep's own kernel
            kernel_conf = OmegaConf.to_container(cfg.kernel, resolve=True)
            settings["calls"] = parse_calls(kernel_conf["calls"], kernel_conf["shapes"], len(spec.dims))
    return settings


def _settings(export_conf, kernel: str, spec_path) -> dict:
    """The export's settings: the tolerance and merge of the export section, the key the section gives
    the kernel (export.key.<kernel>), else the one the kernel declares (KernelSpec.export_key); an
    external kernel's dims from its spec."""
    from runners.engine.specs import builtin_spec, load_spec

    spec = load_spec("external", spec_path) if spec_path else builtin_spec(kernel)
    spec = spec if spec is not None and spec.name == kernel else None
    key = export_conf.key.get(kernel)
    settings = {"tolerance": export_conf.tolerance, "merge": export_conf.merge,
                "key": dict(key) if key else dict(spec.export_key if spec else {}),
                "key_field": f"export.key.{kernel}" if key else f"{kernel}'s KernelSpec.export_key",
                "rule": spec.constraints if spec is not None else None}
    if spec_path and spec is not None:  # not a built-in kernel: its dims come from its spec
        settings["dims"] = tuple(spec.dims)
    return settings

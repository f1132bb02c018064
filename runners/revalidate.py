"""Re-validate an export on this machine and re-tune only what got slower:

    triton-sweep-revalidate outputs/exports/softmax_configs.json [--check] [--spec pkg.mod:SPEC]

1. The export's section for this GPU and the running Triton (else the nearest measured version) is read.
2. Each config it ships is re-timed where it was recorded, with the shape's winner and the baselines, in
   repetitions and round-robin as the recorded figures were taken.
3. Per shape, compare's rule judges new against recorded: SAME, FAST, SLOW, or broken (no longer passes).
4. Shapes that broke, or that lose more than the export's tolerance and are SLOW (or unjudgeable), are
   re-screened over the kernel's default space; the section is rewritten from those rows (`--check`: no).
Exit 0 when every shape is SAME or FAST; 1 when one was SLOW beyond the tolerance or broke; 2 on bad input
and where another process ran kernels on the GPU meanwhile. `--backend interpret`: the interpreter's own."""
from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import time
from pathlib import Path
from typing import Optional

import pandas as pd

from triton_sweep import version as tool_version
from triton_sweep.model.schema import CONF_DIR
from triton_sweep.model.trial import TRITON_PROVIDER, ConfigError, Trial
from triton_sweep.compare import between_runs
from triton_sweep.export import export_kernel
from triton_sweep.export.fileformat import read_export
from triton_sweep.export.fileformat import sections as export_sections
from triton_sweep.export.runtime import pick_version
from triton_sweep.export.settings import ExportError, from_export
from triton_sweep.store.damage import StoreError
from triton_sweep.store.result_store import shape_label

SHAPE_LIST = 20  # shapes listed in the report unless --all


class RevalidateError(ValueError):
    """Bad input; the message names the argument."""


def compose(overrides: list[str]):
    """The sweep's config with these overrides, as `python -m triton_sweep.sweep` composes it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from triton_sweep.model.schema import register_configs

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose("config", overrides=overrides)


def running_gpu(backend: str) -> str:
    """The name the trial workers will record for this machine's first GPU (or the interpreter)."""
    from triton_sweep.measure.device import INTERPRETER_DEVICE_NAME

    if backend == "interpret":
        return INTERPRETER_DEVICE_NAME
    import torch

    if not torch.cuda.is_available():
        raise RevalidateError("no CUDA GPU is visible: re-validation times the configs on this machine's GPU")
    return torch.cuda.get_device_name(0)


def recorded_section(data: dict, gpu: str, running: str) -> tuple[str, dict, str]:
    """(Triton version, section, how it was chosen) of the export for this GPU."""
    versions = {version: section for g, version, section in export_sections(data) if g == gpu}
    if not versions:
        measured = sorted({g for g, _, _ in export_sections(data)})
        raise RevalidateError(f"EXPORT: no section for this GPU, {gpu!r} (the export holds "
                              f"{', '.join(measured)}): re-validation times on the GPU it is run on")
    version, how = pick_version(list(versions), running)
    return version, versions[version], how


def shipped_trials(kernel: str, section: dict) -> list[Trial]:
    """Every config the section ships at each shape where it was recorded, each shape's winner, and the
    baselines recorded beside it."""
    trials = {}
    for dtype, lists in section["dtypes"].items():
        for item in lists["configs"]:
            for at in item["ok_at"]:
                trial = Trial(kernel, TRITON_PROVIDER, tuple(at["shape"]), dtype, item["config"])
                trials[trial.key] = trial
        for best in lists["best_by_shape"]:
            trial = Trial(kernel, TRITON_PROVIDER, tuple(best["shape"]), dtype, best["config"])
            trials[trial.key] = trial
            for provider in best.get("baselines", {}):
                trial = Trial(kernel, provider, tuple(best["shape"]), dtype, {})
                trials[trial.key] = trial
    return list(trials.values())


def run_sweep(cfg, sweep_id: str, store: str, trials: Optional[list] = None) -> tuple[pd.DataFrame, float]:
    """A sweep (runners/engine/job.py) of these trials (or of the config's grid), its outputs off; its
    rows and the seconds its GPU worked (trials and finalists)."""
    from triton_sweep.engine.fork_server import start_wanted_home_server
    from triton_sweep.engine.job import Job
    from triton_sweep.outputs import Outputs
    from triton_sweep.store.result_store import ResultStore

    start_wanted_home_server()
    output_dir = Path(store).parent / "revalidate" / sweep_id
    output_dir.mkdir(parents=True, exist_ok=True)
    job = Job(cfg, sweep_id, output_dir, store, None, ResultStore, Outputs({}), trials=trials)
    summary = job.run(finish=False)
    opened = ResultStore(store)
    rows = opened.load(sweep_id=sweep_id)
    opened.close()
    seconds = summary["phase_seconds"]
    return rows, seconds.get("trials", 0.0) + seconds.get("finalists", 0.0)


def judge_shapes(result: dict, base: pd.DataFrame, tolerance: float) -> list[dict]:
    """Per (dtype, shape) of the export: the verdict of its winner against the list's best now
    (triton_sweep.compare's winners, against our kernel's shift), broken where a shipped config stopped
    passing; `rescreen` where it broke or the list now loses more than the tolerance: slower by more than
    it, and SLOW against the shift or with a shift that is SLOW itself or that no measured spread judges
    (an upgrade that slows every shape moves the shift, not the rows)."""
    shifts = [shift for (domain, _), shift in result["shifts"].items() if domain[2] == TRITON_PROVIDER]
    shapes = {}
    for _, row in base[base["provider"] == TRITON_PROVIDER].iterrows():
        key = (row["dtype"], shape_label(row["shape"]))
        shapes.setdefault(key, {"dtype": row["dtype"], "shape": row["shape"], "verdict": "NOT TIMED",
                                "ratio": math.nan, "threshold": math.nan, "broken": []})
    for entry in result["winners"]:
        _, _, dtype, shape_text, config = entry["row"]
        if (dtype, shape_text) in shapes:
            shapes[(dtype, shape_text)].update(verdict=entry["verdict"], ratio=entry["ratio"],
                                               threshold=entry["threshold"], base_p50=entry["base_p50"],
                                               new_p50=entry["new_p50"], config=config)
    for change in result["status_changes"]:
        _, provider, dtype, shape_text, config = change["row"]
        if change["base"] == "ok" and provider == TRITON_PROVIDER and (dtype, shape_text) in shapes:
            shapes[(dtype, shape_text)]["broken"].append(f"{config} ({change['new']})")
    shift_slow = any(shift is None or shift.verdict in ("SLOW", "NOT JUDGED") for shift in shifts)
    for item in shapes.values():
        slower = item["ratio"] - 1 > tolerance and (item["verdict"] == "SLOW" or shift_slow)
        item["rescreen"] = bool(item["broken"]) or slower
    return sorted(shapes.values(), key=lambda s: (s["dtype"], json.loads(s["shape"])))


def _table(shapes: list[dict], list_all: bool) -> list[str]:
    lines = ["| dtype | shape | recorded best p50 us | the list's best now | NOW/RECORDED | threshold "
             "| verdict | action |", "|---|---|---|---|---|---|---|---|"]
    for item in shapes if list_all else shapes[:SHAPE_LIST]:
        verdict = "broken: " + ", ".join(item["broken"]) if item["broken"] else item["verdict"]
        ratio = "-" if math.isnan(item["ratio"]) else f"{item['ratio']:.3f}"
        threshold = "-" if math.isnan(item["threshold"]) else f"±{100 * item['threshold']:.1f}%"
        recorded = f"{item['base_p50']:.2f}" if "base_p50" in item else "-"
        now = f"{item['new_p50']:.2f}" if "new_p50" in item else "-"
        lines.append(f"| {item['dtype']} | {shape_label(item['shape'])} | {recorded} | {now} | {ratio} | "
                     f"{threshold} | {verdict} | {'re-screen' if item['rescreen'] else 'keep'} |")
    if len(shapes) > SHAPE_LIST and not list_all:
        lines.append(f"... {len(shapes) - SHAPE_LIST} more shapes (--all lists them)")
    return lines


def _overrides(kernel: str, spec_path: Optional[str], backend: str, store: str, sweep_id: str) -> list[str]:
    """The sweep config of a re-validation sweep: this kernel, its rows in `store`, measured afresh, no
    outputs; in repetitions and round-robin, as the recorded figures were."""
    kernel_choice = ["kernel=external", f"kernel.spec={spec_path}"] if spec_path else [f"kernel={kernel}"]
    return [*kernel_choice, f"backend={backend}", f"store={store}", f"sweep_id={sweep_id}", "force=true",
            "output=[]", "logger.mode=disabled"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="What is re-timed, judged and re-tuned: runners/revalidate.py's docstring.")
    parser.add_argument("--version", action="version", version=tool_version())
    parser.add_argument("export", metavar="EXPORT",
                        help="an export's JSON: outputs/exports/<kernel>_configs.json")
    parser.add_argument("--store", default="outputs/results.sqlite", help="where the sweeps' rows go")
    parser.add_argument("--spec", metavar="PKG.MODULE:ATTR",
                        help="the kernel's KernelSpec, for a kernel not built in (or a changed one), as "
                             "kernel.spec")
    parser.add_argument("--check", action="store_true", help="report only: no re-screen, no new section")
    parser.add_argument("--out-dir", help="where the export is written (default: beside EXPORT)")
    parser.add_argument("--backend", choices=("cuda", "interpret"), default="cuda",
                        help="interpret: the Triton interpreter, for an export's interpreter section "
                             "(triton-sweep-export --interpreter): to try the flow on a CPU")
    parser.add_argument("--all", dest="list_all", action="store_true", help="list every shape")
    args = parser.parse_args(argv)
    try:
        data = read_export(args.export)
        gpu = running_gpu(args.backend)
        import triton

        version, section, how = recorded_section(data, gpu, triton.__version__)
    except (ExportError, RevalidateError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return revalidate(args, data, gpu, version, section, how, triton.__version__)


def revalidate(args, data: dict, gpu: str, version: str, section: dict, how: str, running: str) -> int:
    """Steps 2 to 4 of the module docstring; the exit status.

    Re-timed in repetitions on buffers placed anew (`timing.repetitions`) and round-robin as finalists:
    a sweep of exactly the shipped trials. SLOW: the list's best at a shape is now slower beyond the
    noise against the shift of every row. Re-screened (`timing=screen`, finalists): shapes that broke,
    or slower by more than the tolerance and SLOW against the shift, or whose shift of every row is SLOW
    itself or judged by no measured spread of this GPU (a re-screen costs GPU time, a stale config
    more). The section of this GPU and the running Triton is written, the other sections kept, where
    the running Triton had none yet or something was re-screened. Each sweep's GPU time is printed; its
    rows go to --store like any sweep's (sweep ids revalidate-<kernel>-<time>)."""
    from triton_sweep.compare import matching, report, sides

    kernel, tolerance = data["kernel"], section["tolerance"]
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    print(f"{kernel} on {gpu}, Triton {running}: the export's section of Triton {version} ({how}), "
          f"tolerance {100 * tolerance:g}%")
    base, _ = sides.export_frame(data, [(gpu, version)])
    trials = shipped_trials(kernel, section)
    top_k = max(base[base["provider"] == TRITON_PROVIDER].groupby(["dtype", "shape"]).size())
    sweep_id = f"revalidate-{kernel}-{stamp}"
    try:
        # finalists.of_screening=null: the re-timing of a few shipped configs screens in a fraction of the
        # sweep's screening, and its finalists are to be as long as those the recorded figures came from
        cfg = compose(_overrides(kernel, args.spec, args.backend, args.store, sweep_id)
                      + ["timing=screen", "timing.repetitions=5", f"finalists.top_k={max(top_k, 2)}",
                         "finalists.of_screening=null"])
        began = time.perf_counter()
        new, gpu_s = run_sweep(cfg, sweep_id, args.store, trials)
    except (ConfigError, StoreError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"re-timed {len(trials)} trials in {time.perf_counter() - began:.1f} s "
          f"({_device_time(gpu_s, args)})")
    result = matching.compare(base, new, between_runs.Rule(), gate_all=True)
    if result["shared"]["NEW"]:  # a shape judged SLOW there may be the other process's work, and re-tuned
        print(f"error: {result['shared']['NEW']} re-timed rows were measured while another process ran "
              "kernels on the GPU (gpu_shared): nothing judged, nothing re-tuned; run it again on a GPU of "
              "its own", file=sys.stderr)
        return 2
    print("\n".join(["the shift of every row (runners/compare/between_runs.py):",
                     *report.shift_lines(result)]))
    shapes = judge_shapes(result, base, tolerance)
    print("\n".join(_table(shapes, args.list_all)))
    stale = [s for s in shapes if s["rescreen"]]
    counts = {v: sum(s["verdict"] == v and not s["broken"] for s in shapes) for v in ("SAME", "FAST", "SLOW")}
    print(f"summary: {len(shapes)} shapes: {counts['SAME']} SAME, {counts['FAST']} FAST, {counts['SLOW']} "
          f"SLOW, {sum(bool(s['broken']) for s in shapes)} broken; {len(stale)} to re-screen")
    if args.check:
        return 1 if stale else 0
    rows = new
    if stale:
        rows = _rescreen(args, kernel, stale, new, rows)
        if rows is None:
            return 2
    if stale or version != running:
        _write(args, data, kernel, rows, tolerance)
    else:
        print(f"nothing re-tuned; the section of Triton {version} stands")
    return 1 if stale else 0


def _device_time(seconds: float, args) -> str:
    return f"{seconds:.1f} s of {'interpreter' if args.backend == 'interpret' else 'GPU'} time"


def _rescreen(args, kernel: str, stale: list[dict], new: pd.DataFrame, rows: pd.DataFrame):
    """The kernel's default space at the stale shapes; the rows the new section is made from: these at
    the stale shapes, the re-timed ones elsewhere."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    sweep_id = f"revalidate-{kernel}-{stamp}-screen"
    baselines = sorted(set(new.loc[new["provider"] != TRITON_PROVIDER, "provider"]))
    frames = []
    for dtype in sorted({s["dtype"] for s in stale}):
        shapes = [json.loads(s["shape"]) for s in stale if s["dtype"] == dtype]
        overrides = _overrides(kernel, args.spec, args.backend, args.store, f"{sweep_id}-{dtype}")
        overrides += ["timing=screen", f"kernel.shapes={json.dumps(shapes)}", f"kernel.dtypes=[{dtype}]",
                      f"kernel.baselines=[{','.join(baselines)}]"]
        try:
            began = time.perf_counter()
            screened, gpu_s = run_sweep(compose(overrides), f"{sweep_id}-{dtype}", args.store)
        except ConfigError as error:
            print(f"error: {error}", file=sys.stderr)
            return None
        print(f"re-screened {len(shapes)} {dtype} shape(s) in {time.perf_counter() - began:.1f} s "
              f"({_device_time(gpu_s, args)})")
        frames.append(screened)
    stale_keys = {(s["dtype"], s["shape"]) for s in stale}
    kept = rows[[(d, sh) not in stale_keys for d, sh in zip(rows["dtype"], rows["shape"])]]
    return pd.concat([kept, *frames], ignore_index=True)


def _write(args, data: dict, kernel: str, rows: pd.DataFrame, tolerance: float) -> None:
    """The section of this GPU and Triton version, from `rows`, into the export (the others kept)."""
    out_dir = Path(args.out_dir) if args.out_dir else Path(args.export).parent
    try:
        paths = export_kernel(rows, kernel, out_dir, source=args.store,
                              **from_export(data, tolerance, args.spec, args.backend == "interpret"))
    except ExportError as error:  # nothing ok: the existing file is left as it is
        print(f"no new section written: {error}")
        return
    for path in paths:
        print(f"exported: {path}")



def cli() -> int:
    """The command (`triton-sweep-revalidate`, `python -m triton_sweep.revalidate`): main() with the home
    server its sweeps' workers are forked from (runners/engine/fork_server.py)."""
    from triton_sweep.engine.fork_server import want_home_server
    from triton_sweep.engine.hydra_jobs import stop_on_signals

    want_home_server()
    stop_on_signals()  # SIGTERM stops its sweeps' workers as Ctrl-C does
    return main()


if __name__ == "__main__":
    sys.exit(cli())

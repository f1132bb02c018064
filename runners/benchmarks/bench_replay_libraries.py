"""Benchmark: two public libraries' Triton kernels, replayed with no spec written. libraries_app
(Liger-Kernel's norms, softmax and cross-entropy; flash-linear-attention's cumsums and l2norm, with FLA's
own autotuner, heuristics and varlen offsets) is captured with `--replay`, every sweep file written is
swept (screen timing, no finalists, a grid narrowed around the launched configs: space_options), and
OUT/report.md says per @triton.jit function: replayed or refused (the capture's reason), trials by
status, the (shape, dtype)s with an ok config, the program's own config's p50 against the best ok one.

    python -m triton_sweep.benchmarks.bench_replay_libraries --out DIR [--small] [--interpret] [--timeout S]
        [--deadline S] [--max-configs 24] [--only KERNEL ...] [--shapes RxH,...] [--dtypes a,b]

Each step runs with a timeout in its own process group (bench_replay.run_step), logged to DIR/logs/; a
failing step is a row of the table with its cause, never the benchmark's end. DIR/results.sqlite is kept."""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import re
import shutil
import sys
import time
from pathlib import Path

from triton_sweep.benchmarks.bench_replay import (NEVER_LAUNCHED, STATUSES, State, environment, run_step,
                                                  step_table, trial_counts)

APP = [sys.executable, "-m", "triton_sweep.benchmarks.libraries_app"]
OPTIONS = ("num_warps", "num_stages")
MIN_STEP_S = 30  # a sweep given less time than this before the deadline is not started
TRITON_DEFAULTS = {"num_warps": 4, "num_stages": 3}  # what a launch passing neither runs with (CUDA)
REPLAYED = re.compile(r"^replay: (\S+): sweep file (\S+) ")
APP_NOTES = ("skipped on the interpreter", "interpreter:", "device:", "ops run:", "check failed:")
TABLE_NOTE = ("One row per @triton.jit function the program launched; trials by status (the store, the "
              "newest row of each); own/best: the program's own config's p50 over the best ok p50, per "
              "(shape, dtype) it launched (1.000x: the program already runs the best).")
MATCH_NOTE = ("The program's own config is, per launch record, replay_records.launched_config (its blocks, "
              "autotune keys and options as launched) with Triton's defaults (num_warps 4, num_stages 3) for "
              "an option it did not pass; its row is the one whose config agrees on every key.")


def capture_part(args, out: Path, env: dict, state: State) -> None:
    sweeps = out / "sweeps"
    for old in sweeps.glob("lib_*"):
        old.unlink()  # this capture's files, not a previous one's
    sweeps.mkdir(parents=True, exist_ok=True)
    app = [*APP, "--steps", "2", *(["--small"] if args.small else []),
           *(["--device", "cpu"] if args.interpret else []),
           *(["--shapes", args.shapes] if args.shapes else []),
           *(["--dtypes", args.dtypes] if args.dtypes else [])]
    command = [sys.executable, "-m", "triton_sweep.capture", "--replay", "--out", str(sweeps / "lib"),
               "--no-time", "--", *app]
    step, output = run_step(out, "capture", command, env, min(args.timeout, args.deadline - time.monotonic()))
    state.step(step)
    lines = output.splitlines()
    state.data["capture_line"] = next((line for line in lines if line.startswith("captured ")), None)
    state.data["app_notes"] = [line for line in lines if line.startswith(APP_NOTES)]
    state.data["capture_notes"] = [line for line in lines
                                   if line.lstrip().startswith(("not replayed", "note:"))]
    state.data["replayed"] = {m.group(1): m.group(2) for m in map(REPLAYED.match, lines) if m}
    try:
        functions = json.loads((sweeps / "lib_launches.json").read_text())["functions"]
    except (OSError, ValueError, KeyError) as error:  # no capture: the table says so
        functions = {}
        state.data["capture_line"] = f"no launches file ({type(error).__name__}: {error})"
    state.data["functions"] = sorted(functions)
    state.save()


def why_refused(function: str, notes: list[str]) -> tuple[str, list[str]]:
    """(the capture's reason for not replaying the function at all, or ""; its notes on some calls left
    out and on the import path)."""
    named = re.compile(re.escape(function) + r"[: ]")
    whole = [line for line in notes if line.startswith("not replayed:") and named.search(line)]
    partial = [line.strip() for line in notes if line.startswith("  ") and f" of {function}:" in line]
    if whole:
        why = whole[0].removeprefix("not replayed: ").replace(f"{function} cannot be replayed: ", "")
        return why, partial
    return "", partial


def space_options(launches: Path, function: str, max_configs: int) -> tuple[list[str], dict]:
    """kernel.space overrides that keep a grid of at most max_configs per (shape, dtype) and always hold
    the program's own configs: narrowed step by step until it fits (num_stages to the launched values;
    the blocks to the launched values and their halves and doubles, then to the launched values; then
    num_warps likewise). A block beside the launched one rarely runs: a row kernel's block is its row,
    and the replay prunes a block that a fixed grid no longer fits; num_warps is what such a sweep tunes."""
    from triton_sweep.capture.replay import Replay

    replay = Replay(launches, function, None, allow=None)
    space = replay.space()
    own = [own_config(record) for record in replay.records]
    launched = {name: sorted({config[name] for config in own if name in config}) for name in space}
    blocks = [name for name in space if name not in OPTIONS]

    def near(name):
        return sorted(v for v in space[name] if any(v in (x // 2, x, 2 * x) for x in launched[name]))

    steps = [{"num_stages": launched.get("num_stages")}, {name: near(name) for name in blocks},
             {name: launched[name] for name in blocks},
             {"num_warps": near("num_warps") if "num_warps" in space else None},
             {"num_warps": launched.get("num_warps")}]
    chosen = dict(space)
    for narrowed in steps:
        if math.prod(map(len, chosen.values())) <= max_configs:
            break
        chosen.update({name: values for name, values in narrowed.items() if name in space and values})
    options = [f"+kernel.space.{name}={json.dumps(values).replace(' ', '')}"
               for name, values in chosen.items() if values != space[name]]
    return options, {"space": math.prod(map(len, space.values())),
                     "swept": math.prod(map(len, chosen.values())), "dims": list(replay.dims),
                     "kernel": replay.name}


def own_config(record: dict) -> dict:
    """The program's config of a launch: launched_config, with Triton's defaults for options not passed."""
    from triton_sweep.capture.replay_records import launched_config

    return {**TRITON_DEFAULTS, **launched_config(record)}


def sweep_part(args, out: Path, env: dict, state: State) -> None:
    conf = out / "conf" / "sweep"
    conf.mkdir(parents=True, exist_ok=True)
    launches = out / "sweeps" / "lib_launches.json"
    for function, path in sorted(state.data.get("replayed", {}).items()):
        path = Path(path)
        try:
            options, info = space_options(launches, function, args.max_configs)
        except Exception as error:  # the replay itself refuses it: the sweep's own message says why
            options, info = [], {"note": f"space not read ({type(error).__name__}: {error})",
                                 "kernel": path.stem.removeprefix("lib_")}
        kernel = info["kernel"]
        if args.only and kernel not in args.only and function not in args.only:
            continue
        shutil.copy(path, conf / path.name)
        left = args.deadline - time.monotonic()
        if left < MIN_STEP_S:
            state.data["sweeps"][function] = {"file": str(path), **info,
                                              "skipped": f"not swept: --deadline reached ({left:.0f} s left)"}
            continue
        refusal = [line for line in state.data.get("capture_notes", [])
                   if "a sweep run here refuses it" in line and function in line]
        command = [sys.executable, "-m", "triton_sweep.sweep", f"hydra.searchpath=[file://{out / 'conf'}]",
                   f"+sweep={path.stem}", f"store={out / 'results.sqlite'}", "logger.mode=disabled",
                   "output=[parquet,table]", "timing=screen", "finalists.top_k=0",
                   f"hydra.run.dir={out / 'runs' / path.stem}", f"sweep_id=lib_{kernel}", *options,
                   *([allow_option(path)] if refusal else []),
                   *(["backend=interpret"] if args.interpret else [])]
        step, output = run_step(out, f"sweep_{kernel}", command, env, min(args.timeout, left))
        state.step(step)
        info["lines"] = [line for line in output.splitlines() if re.match(r"\d+ trials: ", line)]
        if step.rc != 0:
            info["failure"] = failure_line(output)
        state.data["sweeps"][function] = {"file": str(path), "step": f"sweep_{kernel}", **info}
        state.save()


def failure_line(output: str) -> str:
    """The line of a failed step's log that says why: its last error line, else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip() and not line.startswith("[exit")]
    errors = [line for line in lines if re.search(r"Error|error:|timed out|refused", line)]
    return (errors or lines or ["no output"])[-1][:300]


def allow_option(path: Path) -> str:
    """kernel.spec with ;allow=<the folder the library's top package sits in> (replay_kernel.trusted_file)."""
    spec = re.search(r'spec: "(replay:[^"]*)"', path.read_text()).group(1)
    function = spec.split("#", 1)[1]
    record = next(iter(json.loads(Path(spec[len("replay:"):].split("#")[0]).read_text())["functions"]
                       [function].values()))["replay"]
    root = Path(record["file"]).resolve().parents[len(record["module"].split(".")) - 1]
    return f"kernel.spec='{spec};allow={root}'"


def load_rows(out: Path):
    path = out / "results.sqlite"
    if not path.is_file():
        return None
    try:
        from triton_sweep.store.result_store import ResultStore

        frame = ResultStore(path).load()
    except Exception as error:
        print(f"report: the store {path} could not be read ({type(error).__name__}: {error})")
        return None
    frame = frame.drop_duplicates("trial_key", keep="last") if "trial_key" in frame else frame
    return frame[frame["provider"] == "triton"] if "provider" in frame else frame


def own_and_best(out: Path, function: str, rows) -> list[dict]:
    """Per (shape, dtype) the program launched: its own config's row (the row whose config equals
    own_config on every key the row has) and the fastest ok row."""
    from triton_sweep.capture.replay import Replay

    try:
        replay = Replay(out / "sweeps" / "lib_launches.json", function, None, allow=None)
    except Exception:
        return []
    found = []
    for (shape, dtype), index in sorted(replay.by_key.items(), key=str):
        own = own_config(replay.records[index])
        at = rows[(rows["shape"].map(lambda s: tuple(json.loads(s))) == tuple(shape))
                  & (rows["dtype"] == dtype)]
        configs = at["config"].map(json.loads)
        mine = at[configs.map(lambda c: all(own.get(k) == v for k, v in c.items()))]
        ok = at[at["status"] == "ok"]
        best = ok.loc[ok["p50_us"].idxmin()] if len(ok) else None
        found.append({"shape": list(shape), "dtype": dtype, "own": own,
                      "own_status": mine["status"].iloc[0] if len(mine) else "not swept",
                      "own_us": float(mine["p50_us"].iloc[0]) if len(mine) and mine["status"].iloc[0] == "ok"
                      else None, "best": None if best is None else json.loads(best["config"]),
                      "best_us": None if best is None else float(best["p50_us"])})
    return found


def ratios(found: list[dict]) -> str:
    values = [f["own_us"] / f["best_us"] for f in found if f["own_us"] and f["best_us"]]
    if not values:
        return "- | -"
    return f"{math.exp(sum(map(math.log, values)) / len(values)):.3f}x | {max(values):.3f}x"


def function_rows(state: dict, counts: dict, details: dict) -> list[str]:
    head = ["library", "function", "replay", "sweep", *STATUSES, "other", NEVER_LAUNCHED,
            "(shape, dtype) ok", "own/best geomean", "own/best worst"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for function in state.get("functions", []):
        module, _, name = function.rpartition(".")
        refused, partial = why_refused(function, state.get("capture_notes", []))
        sweep = state["sweeps"].get(function, {})
        step = state["steps"].get(sweep.get("step", ""), {})
        if function in state.get("replayed", {}):
            replay = "replayed" + "".join(f"; {p.removeprefix('not replayed: ')}" for p in partial)
        else:
            replay = f"refused: {refused or 'no sweep file written (see logs/capture.log)'}"
        ran = f"exit {step['rc']}{' (timed out)' * (step['rc'] == 124)}, {step['wall_s']:.0f} s" if step \
            else sweep.get("skipped", "not swept")
        ran += f": {sweep['failure']}" if step and step["rc"] else ""
        found = counts.get(sweep.get("kernel"), {})
        other = sum(n for status, n in found.items() if status not in (*STATUSES, NEVER_LAUNCHED))
        cells = [str(found.get(status, 0)) if found else "-" for status in (*STATUSES,)]
        per = details.get(function, [])
        covered = f"{sum(f['best_us'] is not None for f in per)}/{len(per)}" if per else "-"
        lines.append("| " + " | ".join([module.split(".")[0], f"`{module}.{name}`", replay, ran, *cells,
                                        str(other) if found else "-",
                                        str(found.get(NEVER_LAUNCHED, 0)) if found else "-", covered,
                                        ratios(per)]) + " |")
    return lines


def detail_rows(details: dict) -> list[str]:
    lines = ["| function | shape | dtype | own config | own status | own p50 us | best ok config | "
             "best p50 us | own/best |", "|---|---|---|---|---|---|---|---|---|"]
    for function, found in details.items():
        for f in found:
            ratio = f"{f['own_us'] / f['best_us']:.3f}x" if f["own_us"] and f["best_us"] else "-"
            lines.append(f"| `{function.rsplit('.', 1)[-1]}` | {f['shape']} | {f['dtype']} | "
                         f"`{json.dumps(f['own'])}` | {f['own_status']} | {_us(f['own_us'])} | "
                         f"`{json.dumps(f['best']) if f['best'] else '-'}` | {_us(f['best_us'])} | {ratio} |")
    return lines


def _us(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def first_failures(rows) -> list[str]:
    """The first message of each failing status, per kernel (the never-launched prunes aside)."""
    if rows is None or not len(rows):
        return []
    failing = rows[(rows["status"] != "ok") & ~rows["message"].fillna("").str.contains(NEVER_LAUNCHED)]
    return [f"- `{kernel}` {status} ({len(group)}): {str(group['message'].iloc[0]).strip()[:400]}"
            for (kernel, status), group in failing.groupby(["kernel", "status"])]


def versions() -> str:
    found = []
    for name in ("liger_kernel", "fla-core", "triton", "torch"):
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} not installed")
    return ", ".join(found)


def report(out: Path, state: dict, interpret: bool) -> str:
    rows = load_rows(out)
    counts = trial_counts(rows)
    details = {}
    for function, sweep in state["sweeps"].items() if rows is not None else ():
        try:
            details[function] = own_and_best(out, function, rows[rows["kernel"] == sweep.get("kernel")])
        except Exception as error:  # a row nothing here foresaw: this kernel's loss, not the report's
            sweep["note"] = f"own/best not read ({type(error).__name__}: {error})"
    device = "the Triton interpreter (CPU)" if interpret else next(
        (n.removeprefix("device: ") for n in state.get("app_notes", []) if n.startswith("device:")), "GPU")
    lines = [f"## Replay of two libraries' kernels (libraries_app): {device}", "", versions(), "",
             f"capture: {state.get('capture_line') or 'no capture line (see logs/capture.log)'}", "",
             *[f"    {note}" for note in state.get("app_notes", []) + state.get("capture_notes", [])], "",
             TABLE_NOTE + (" Interpreter timings: they say nothing of a GPU." if interpret else ""), "",
             *function_rows(state, counts, details), "", MATCH_NOTE, "",
             *detail_rows(details), "", "First message of each failing status:", "",
             *(first_failures(rows) or ["- none"]), ""]
    for function, sweep in state["sweeps"].items():
        lines.append(f"- `{function}`: space {sweep.get('space', '-')}, swept {sweep.get('swept', '-')} per "
                     f"(shape, dtype); {'; '.join(sweep.get('lines', [])) or sweep.get('note', '')}")
    lines += ["", *step_table(state), ""]
    text = "\n".join(lines)
    (out / "report.md").write_text(text)
    return text


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--small", action="store_true", help="libraries_app --small (interpreter sizes)")
    parser.add_argument("--interpret", action="store_true",
                        help="the program on the Triton interpreter (--device cpu), sweeps backend=interpret")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a step may take")
    parser.add_argument("--deadline", type=float, help="seconds for the whole run: a sweep that would start "
                                                       "later is skipped (a row saying so), one running cut")
    parser.add_argument("--max-configs", type=int, help="grid per (shape, dtype) (default 24; --interpret 6)")
    parser.add_argument("--only", nargs="+", help="sweep only these kernels (replayed names or functions)")
    parser.add_argument("--shapes", help="libraries_app --shapes ROWSxHIDDEN,...")
    parser.add_argument("--dtypes", help="libraries_app --dtypes")
    args = parser.parse_args(argv)
    args.max_configs = args.max_configs or (6 if args.interpret else 24)
    args.deadline = time.monotonic() + (args.deadline or math.inf)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = environment(None, args.interpret)
    state = State(out)
    state.data.update(sweeps={}, steps={})
    capture_part(args, out, env, state)
    sweep_part(args, out, env, state)
    print("\n" + report(out, state.data, args.interpret))
    failed = [step["name"] for step in state.data["steps"].values() if step["rc"] != 0]
    if failed:
        print(f"\nfailed steps: {', '.join(failed)} (their logs are in {out / 'logs'})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

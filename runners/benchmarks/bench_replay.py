"""Benchmark (GPU): kernels with no spec, replayed. A held-out program (runners/benchmarks/replay_app.py: a
decoder layer's step calling Liger-Kernel's RMSNorm, SwiGLU and RoPE forward kernels and one of its own)
is captured with `--replay`, each kernel it launched is swept with no spec written, exported, and the
program is run again with the exported configs, its kernels' CUDA time set against the library's defaults.

    python -m triton_sweep.benchmarks.bench_replay [--out outputs/replay] [--liger-path DIR]
        [--part all|capture|sweep|run|report] [--steps 3] [--profile-steps 20] [--budget 48]
        [--max-space 5000] [--tokens 1024,2048,4096] [--dtypes bfloat16,float16] [--only KERNEL ...]
        [--timeout 540] [--interpret]

Parts: capture; sweep (over --budget configs searched at random, over --max-space the non-BLOCK entries
pinned as launched); run (profiled, defaults against the export, every result checked); report."""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[2]
APP = [sys.executable, "-m", "triton_sweep.benchmarks.replay_app"]
# The program's kernels, by the name the profiler gives them (the @triton.jit function's name).
KERNELS = {"_rms_norm_forward_kernel": "Liger RMSNorm fwd", "_swiglu_forward_kernel": "Liger SwiGLU fwd",
           "_triton_rope": "Liger RoPE fwd", "residual_scale_kernel": "own residual+scale"}
STATUSES = ("ok", "incorrect", "pruned", "compile_error")
NEVER_LAUNCHED = "never launched"  # a replay's (shape, dtype) the program did not launch: pruned
OPTIONS = ("num_warps", "num_stages")
CAPTURE_LINE = re.compile(r"^captured \d+ Triton launches.*$", re.MULTILINE)


@dataclass
class Step:
    name: str
    command: str
    rc: int
    wall_s: float
    log: str


def run_step(out: Path, name: str, command: list[str], env: dict, timeout_s: float) -> tuple[Step, str]:
    """Run a command in its own process group, its output streamed to OUT/logs/<name>.log; never raises.
    On a timeout the whole group (a sweep's workers too) is ended. (the step, its output)."""
    log = out / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    with open(log, "w") as handle:
        handle.write(f"$ {shlex.join(command)}\n")
        handle.flush()
        try:
            process = subprocess.Popen(command, cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        except OSError as error:
            handle.write(f"could not start: {error}\n")
            rc = 127
        else:
            rc = _wait(process, timeout_s, handle)
    wall = time.perf_counter() - began
    with open(log, "a") as handle:
        handle.write(f"\n[exit status {rc}, {wall:.1f} s]\n")
    output = log.read_text(errors="replace")
    print(f"== {name}: exit {rc}, {wall:.1f} s, log {log}", flush=True)
    if rc != 0:
        print("\n".join(output.splitlines()[-25:]), flush=True)
    return Step(name, shlex.join(command), rc, round(wall, 2), str(log)), output


def _wait(process: subprocess.Popen, timeout_s: float, handle) -> int:
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        handle.write(f"\n[timed out after {timeout_s:.0f} s: ending its process group]\n")
        handle.flush()
        for sig, grace in ((signal.SIGTERM, 20), (signal.SIGKILL, 20)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue
        return 124


class State:
    """OUT/bench_state.json: what each part found, for the parts after it and the report."""

    def __init__(self, out: Path):
        self.path = out / "bench_state.json"
        self.data = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.data.setdefault("steps", {})
        self.data.setdefault("sweeps", {})
        self.data.setdefault("profiles", {})

    def step(self, step: Step) -> None:
        self.data["steps"][step.name] = asdict(step)
        self.save()

    def save(self) -> None:
        self.path.write_text(json.dumps(self.data, indent=1))


def environment(liger_path: Optional[str], interpret: bool) -> dict:
    env = {**os.environ, "WANDB_SILENT": "true", "PYTHONUNBUFFERED": "1"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    if liger_path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(liger_path).resolve()),
                                                          env.get("PYTHONPATH")]))
    return env


def app_options(args) -> list[str]:
    return [*(["--tokens", args.tokens] if args.tokens else []),
            *(["--dtypes", args.dtypes] if args.dtypes else []),
            *(["--device", "cpu"] if args.interpret else [])]


def capture_part(args, out: Path, env: dict, state: State) -> None:
    check = "import importlib.metadata as m, liger_kernel.ops.rope, liger_kernel.ops.rms_norm, " \
            "liger_kernel.ops.swiglu as s; print('liger_kernel', m.version('liger_kernel'), s.__file__)"
    step, output = run_step(out, "liger", [sys.executable, "-c", check], env, 300)
    state.step(step)
    state.data["liger"] = next((line for line in output.splitlines() if line.startswith("liger_kernel ")),
                               None)
    sweeps = out / "sweeps"
    for old in sweeps.glob("app_*"):
        old.unlink()  # a capture's files, not a previous one's
    sweeps.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "triton_sweep.capture", "--replay", "--out", str(sweeps / "app"),
               "--no-time",
               "--", *APP, "--steps", str(args.steps), *app_options(args)]
    step, output = run_step(out, "capture", command, env, args.timeout)
    state.step(step)
    found = CAPTURE_LINE.search(output)
    state.data["capture_line"] = found.group(0) if found else None
    notes = ("replay:", "not replayed", "  not replayed", "not mapped")
    state.data["capture_notes"] = [line for line in output.splitlines() if line.startswith(notes)]
    state.save()


def sweep_files(out: Path) -> list[tuple[Path, str]]:
    """(sweep file, the function it replays) of each file the capture wrote."""
    files = []
    for path in sorted((out / "sweeps").glob("app_*.yaml")):
        found = re.search(r'spec: "replay:(.*)#([^";]*)', path.read_text())
        if found:
            files.append((path, found.group(2)))
    return files


def kernel_name(function: str) -> str:
    """The replayed kernel's name, by the replay's own rule among the program's four kernels."""
    from triton_sweep.capture.replay import kernel_name as named

    return named(function, KERNELS)


def search_options(launches: Path, function: str, budget: int, max_space: int) -> tuple[list[str], dict]:
    """The sweep's search and space overrides for a replayed kernel, and what they did."""
    try:
        from triton_sweep.capture.replay import Replay
        from triton_sweep.capture.replay_records import launched_config

        replay = Replay(launches, function, None)
        space = replay.space()
    except Exception as error:  # the space unknown: sample it
        return (["search=random", f"search.budget_trials={budget}", "search.seed=0"],
                {"space": None, "note": f"space not read ({type(error).__name__}: {error})"})
    size = math.prod(len(values) for values in space.values())
    info, options = {"space": size, "dims": list(replay.dims)}, []
    if max_space and size > max_space:
        pinned = {}
        for name in space:
            if "BLOCK" in name.upper() or name in OPTIONS:
                continue
            launched = sorted({launched_config(r)[name] for r in replay.records
                               if name in launched_config(r)})
            if launched:
                pinned[name] = launched
                options.append(f"+kernel.space.{name}={json.dumps(launched).replace(' ', '')}")
        size = math.prod(len(pinned.get(name, values)) for name, values in space.items())
        info.update(pinned=pinned, space_swept=size)
    if size > budget:
        options += ["search=random", f"search.budget_trials={budget}", "search.seed=0"]
        info["search"] = f"random, {budget} per shape and dtype"
    else:
        info["search"] = "grid"
    return options, info


def sweep_part(args, out: Path, env: dict, state: State) -> None:
    conf = out / "conf" / "sweep"
    conf.mkdir(parents=True, exist_ok=True)
    files = sweep_files(out)
    if not files:
        print("sweep: no replay sweep file in", out / "sweeps", "(did the capture run?)")
    for path, function in files:
        kernel = kernel_name(function)
        if args.only and kernel not in args.only:
            continue
        shutil.copy(path, conf / path.name)
        options, info = search_options(out / "sweeps" / "app_launches.json", function, args.budget,
                                       args.max_space)
        command = [sys.executable, "-m", "triton_sweep.sweep", f"hydra.searchpath=[file://{out / 'conf'}]",
                   f"+sweep={path.stem}", f"store={out / 'replay.sqlite'}", f"export_dir={out / 'exports'}",
                   "logger.mode=disabled", f"hydra.run.dir={out / 'runs' / path.stem}",
                   f"sweep_id=replay_{kernel}", *options,
                   *(["backend=interpret", "finalists.top_k=0"] if args.interpret else [])]
        step, output = run_step(out, f"sweep_{kernel}", command, env, args.timeout)
        state.step(step)
        info["lines"] = [line for line in output.splitlines()
                         if line.startswith(("sweep replay_", "trials:", "export", "wall time"))
                         or " at sizes the sweep did not measure" in line]
        state.data["sweeps"][kernel] = {"function": function, "file": str(path), **info}
        state.save()


def profile_of(output: str) -> Optional[dict]:
    for line in output.splitlines():
        if line.startswith("PROFILE "):
            return json.loads(line[len("PROFILE "):])
    return None


def run_part(args, out: Path, env: dict, state: State) -> None:
    """The program with the library's defaults and with the export, profiled in --rounds alternating
    pairs (each pair's ratio shows the spread between runs of the program), then checked once."""
    exported = ["--export-dir", str(out / "exports")]
    profiled = ["--profile", "--steps", str(args.profile_steps)]
    runs = [(f"{name}_{r}" if r else name, options) for r in range(args.rounds)
            for name, options in (("default", profiled), ("exported", [*profiled, *exported]))]
    runs.append(("exported_checked", ["--steps", str(args.steps), *exported]))
    state.data["rounds"] = args.rounds
    for name, options in runs:
        if args.interpret and "--profile" in options:
            continue  # the profiler's CUDA times need a GPU
        step, output = run_step(out, f"app_{name}", [*APP, *options, *app_options(args)], env, args.timeout)
        state.step(step)
        if name != "exported_checked":
            state.data["profiles"][name] = profile_of(output) if step.rc == 0 else None
        device = re.search(r"^device: (.*)$", output, re.MULTILINE)
        if device:
            state.data["device"] = device.group(1)
        if name.startswith("exported"):
            state.data[f"picks_{name}"] = [line for line in output.splitlines() if line.startswith("export:")]
        state.save()


def trial_counts(frame) -> dict:
    """kernel -> {status: trials} over the kernel's own trials (the newest row of each), the pruned
    (shape, dtype)s the program never launched apart."""
    if frame is None or len(frame) == 0:
        return {}
    if "provider" in frame:
        frame = frame[frame["provider"] == "triton"]
    if "trial_key" in frame:
        frame = frame.drop_duplicates("trial_key", keep="last")
    counts = {}
    for kernel, group in frame.groupby("kernel"):
        messages = group["message"].fillna("") if "message" in group else group["status"].map(lambda _: "")
        never = (group["status"] == "pruned") & messages.str.contains(NEVER_LAUNCHED)
        kernel_counts = {status: int(n) for status, n in group.loc[~never, "status"].value_counts().items()}
        kernel_counts[NEVER_LAUNCHED] = int(never.sum())
        counts[kernel] = kernel_counts
    return counts


def ok_by_dtype(frame) -> dict:
    """kernel -> "bfloat16 40/48, float16 0/48": ok of the trials that ran (not pruned), per dtype (a dtype
    whose every trial fails points at the replay, not at the configs)."""
    if frame is None or len(frame) == 0:
        return {}
    if "trial_key" in frame:
        frame = frame.drop_duplicates("trial_key", keep="last")
    ran = frame[(frame["status"] != "pruned") & (frame.get("provider", "triton") == "triton")]
    return {kernel: ", ".join(f"{dtype} {int((rows['status'] == 'ok').sum())}/{len(rows)}"
                              for dtype, rows in group.groupby("dtype"))
            for kernel, group in ran.groupby("kernel")}


def load_store(out: Path):
    path = out / "replay.sqlite"
    if not path.is_file():
        return None
    try:
        from triton_sweep.store.result_store import ResultStore

        return ResultStore(path).load()
    except Exception as error:
        print(f"report: the store {path} could not be read ({type(error).__name__}: {error})")
        return None


def _per_pass(profile: Optional[dict], name: str, dtype: Optional[str] = None) -> Optional[float]:
    """us of CUDA time per pass (every (tokens, dtype) once, or the dtype's token counts) of the kernel
    named, None where not run."""
    if not profile:
        return None
    times = profile["kernels"] if dtype is None else profile.get("by_dtype", {}).get(dtype, {})
    entry = times.get(name)
    return None if entry is None else entry["us"] / max(profile["steps"], 1)


def _speedup(before: Optional[float], after: Optional[float]) -> str:
    return f"{before / after:.3f}x" if before and after else "-"


def _us(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.1f}"


def kernel_table(state: dict, counts: dict) -> list[str]:
    head = ["kernel", "replayed as", "space (swept)", "search", *STATUSES, "other", NEVER_LAUNCHED,
            "default us/pass", "exported us/pass", "speedup"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    default, exported = state["profiles"].get("default"), state["profiles"].get("exported")
    for name, label in KERNELS.items():
        kernel = kernel_name(name)
        sweep = state["sweeps"].get(kernel, {})
        found = counts.get(kernel, {})
        other = sum(n for status, n in found.items() if status not in (*STATUSES, NEVER_LAUNCHED))
        space = "-" if sweep.get("space") is None else f"{sweep['space']:,}"
        if sweep.get("space_swept") is not None:
            space += f" ({sweep['space_swept']:,})"
        before, after = _per_pass(default, name), _per_pass(exported, name)
        speedup = _speedup(before, after)
        dims = ", ".join(sweep.get("dims", [])) or "-"
        cells = [label, f"`{kernel}` ({dims})", space, sweep.get("search", "-"),
                 *(str(found.get(status, 0)) if found else "-" for status in STATUSES),
                 str(other) if found else "-", str(found.get(NEVER_LAUNCHED, 0)) if found else "-",
                 _us(before), _us(after), speedup]
        lines.append("| " + " | ".join(cells) + " |")
    before = [_per_pass(default, name) for name in KERNELS]
    after = [_per_pass(exported, name) for name in KERNELS]
    if None not in before + after:
        empty = "| " * (3 + len(STATUSES) + 2)
        lines.append(f"| all four {empty}| {sum(before):.1f} | {sum(after):.1f} | "
                     f"{_speedup(sum(before), sum(after))} |")
    return lines


def dtype_table(state: dict) -> list[str]:
    """CUDA time per pass of each kernel per dtype: default, exported, speedup."""
    default, exported = state["profiles"].get("default"), state["profiles"].get("exported")
    dtypes = sorted({*((default or {}).get("by_dtype") or {}), *((exported or {}).get("by_dtype") or {})})
    if not dtypes:
        return []
    lines = ["| kernel | dtype | default us/pass | exported us/pass | speedup |", "|---|---|---|---|---|"]
    for name, label in KERNELS.items():
        for dtype in dtypes:
            before, after = _per_pass(default, name, dtype), _per_pass(exported, name, dtype)
            lines.append(f"| {label} | {dtype} | {_us(before)} | {_us(after)} | {_speedup(before, after)} |")
    return lines


def rounds_table(state: dict) -> list[str]:
    """Each kernel's exported/default CUDA time per pass in every alternating round: the median ratio
    and its range over rounds (what one run of the program against another shows)."""
    rounds = state.get("rounds", 1)
    pairs = [(state["profiles"].get(f"default_{r}" if r else "default"),
              state["profiles"].get(f"exported_{r}" if r else "exported")) for r in range(rounds)]
    if rounds < 2:
        return []
    lines = ["| kernel | default us/pass by round | exported us/pass by round | speedup median (min-max) |",
             "|---|---|---|---|"]
    for name, label in KERNELS.items():
        before = [_per_pass(d, name) for d, _ in pairs]
        after = [_per_pass(e, name) for _, e in pairs]
        if None in before + after:
            continue
        ratios = sorted(b / a for b, a in zip(before, after))
        lines.append(f"| {label} | {', '.join(map(_us, before))} | {', '.join(map(_us, after))} | "
                     f"{ratios[len(ratios) // 2]:.3f}x ({ratios[0]:.3f}-{ratios[-1]:.3f}) |")
    return lines


def step_table(state: dict) -> list[str]:
    lines = ["| step | exit | wall s | log |", "|---|---|---|---|"]
    for step in state["steps"].values():
        lines.append(f"| {step['name']} | {step['rc']} | {step['wall_s']:.1f} | `{step['log']}` |")
    return lines


def report(out: Path, state: dict, frame) -> str:
    counts = trial_counts(frame)
    gpu = state.get("device") or (str(frame["gpu_name"].dropna().iloc[0]) if frame is not None and len(frame)
                                  and frame["gpu_name"].notna().any() else "unknown")
    lines = [f"## Replay of a held-out program's kernels (issue 35): {gpu}", "",
             f"Liger: {state.get('liger') or 'not checked'}", "",
             f"capture: {state.get('capture_line') or 'no capture line (see the capture log)'}", ""]
    lines += [f"    {note}" for note in state.get("capture_notes", [])]
    steps = {name: (state["profiles"].get(name) or {}).get("steps") for name in ("default", "exported")}
    lines += ["", "Trials per kernel (the store, newest row of each trial) and CUDA time per pass (every "
                  f"token count and dtype once; profiled passes: default {steps['default']}, exported "
                  f"{steps['exported']}):", "", *kernel_table(state, counts), ""]
    by_round = rounds_table(state)
    lines += ["The first pair's figures above; every round (default and exported alternating, each a fresh "
              "process):", "", *by_round, ""] if by_round else []
    per_dtype = dtype_table(state)
    lines += ["Per dtype (a dtype with no export falls back to the library's settings; see the picks):", "",
              *per_dtype, ""] if per_dtype else []
    for kernel, sweep in state["sweeps"].items():
        if sweep.get("pinned"):
            lines.append(f"- `{kernel}`: space of {sweep['space']:,} configs over --max-space; pinned to the "
                         f"launched values: {json.dumps(sweep['pinned'])}")
        for line in sweep.get("lines", []):
            lines.append(f"- `{kernel}` sweep: {line.strip()}")
    lines += [f"- `{kernel}` ok trials by dtype: {summary}" for kernel, summary in ok_by_dtype(frame).items()]
    checked = state["steps"].get("app_exported_checked")
    if checked:
        verdict = "passed" if checked["rc"] == 0 else "FAILED"
        lines.append(f"- the program with the exported configs, every result checked: {verdict}")
    lines += [f"- {line}" for line in state.get("picks_exported", [])]
    lines += ["", *step_table(state), ""]
    text = "\n".join(lines)
    (out / "report.md").write_text(text)
    return text


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("outputs/replay"))
    parser.add_argument("--liger-path", help="folder Liger-Kernel was installed into (pip --target): put on "
                                             "PYTHONPATH of every step")
    parser.add_argument("--part", choices=["all", "capture", "sweep", "run", "report"], default="all")
    parser.add_argument("--steps", type=int, default=3, help="program passes under capture, and checked")
    parser.add_argument("--profile-steps", type=int, default=20, help="passes under the profiler")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternating default/exported profiled runs (the spread between runs)")
    parser.add_argument("--budget", type=int, default=48, help="random search over spaces larger than this")
    parser.add_argument("--max-space", type=int, default=5000,
                        help="pin the non-block entries of a larger space (0: never)")
    parser.add_argument("--tokens", help="the program's --tokens (default its own: 1024,2048,4096)")
    parser.add_argument("--dtypes", help="the program's --dtypes (default its own: bfloat16,float16)")
    parser.add_argument("--only", nargs="+", help="sweep only these kernels (replayed names)")
    parser.add_argument("--timeout", type=float, default=540, help="seconds a step may take (its process "
                                                                   "group is ended then; a sweep resumes)")
    parser.add_argument("--interpret", action="store_true",
                        help="a check of the script on the CPU: the program on the Triton interpreter "
                             "(--device cpu; pass small --tokens and --dtypes float32,float16), sweeps with "
                             "backend=interpret (not exported), no profiles. Liger's RMSNorm and SwiGLU "
                             "do not run on Triton 3.9's interpreter as they are (a float argument's .to(), "
                             "libdevice's rsqrt): a sitecustomize on PYTHONPATH must patch both")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = environment(args.liger_path, args.interpret)
    state = State(out)
    if args.part in ("all", "capture"):
        capture_part(args, out, env, state)
    if args.part in ("all", "sweep"):
        sweep_part(args, out, env, state)
    if args.part in ("all", "run"):
        run_part(args, out, env, state)
    print("\n" + report(out, state.data, load_store(out)))
    failed = [step["name"] for step in state.data["steps"].values() if step["rc"] != 0]
    if failed:
        print(f"\nfailed steps: {', '.join(failed)} (their logs are in {out / 'logs'})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

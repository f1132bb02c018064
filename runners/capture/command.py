"""Tune what a program really calls: `python -m runners.capture [--out sweeps/NAME] [--spec PKG.MOD:SPEC]
[--bucket pow2] [--replay] -- python my_app.py ARGS` runs the program unchanged (its exit status is the
command's) with a hook on its Triton launches (runners/capture/launch_hook/triton_launch_hook.py).

Then it maps each launch to a kernel spec (the built-in kernels by their @triton.jit functions, another
package's by `--spec`; a launch no spec maps is listed with the reason, never dropped), writes a sweep
file per kernel (`<out>_<kernel>.yaml`: the captured shapes, `--bucket pow2` rounding up the dims that
vary, their call counts as `kernel.calls`, the dtypes) and `<out>_launches.json`; with `--replay` also a
sweep file per function no spec maps (runners/capture/replay.py). It prints the workload (calls and, on a
GPU, the share of kernel time per kernel, shape and dtype) and the hook's own time. The program runs in a
session of its own: a signal sent to the capture goes on to its process group, and a stopped capture
writes nothing."""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import glob
import inspect
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from runners import version

HOOK_DIR = Path(__file__).resolve().parent / "launch_hook"
FLOAT_DTYPES = ("float16", "bfloat16", "float32")


STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # sent to the capture: on to the program's group
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_capture():
    """A preexec_fn giving the program SIGKILL when the capture dies, even by SIGKILL (Linux's parent-death
    signal, as bwrap's --die-with-parent); None where there is no prctl."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    capture = os.getpid()

    def in_child():
        prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL))
        if os.getppid() != capture:  # the capture died before: no signal will come
            os._exit(128 + signal.SIGKILL)

    return in_child


def run_program(command: list[str], folder: str, replay: bool = False) -> tuple[int, float, Optional[int]]:
    """Run the program with the hook on its PYTHONPATH, in a session of its own; (its exit status as a shell
    gives it: 128 + N when a signal N ended it, its wall seconds, the first of STOPS the capture got, else
    None). Each of STOPS the capture gets goes to the program's process group (the program and what it
    started there) once; the capture waits for the program to end. replay: the hook records what a
    replay needs."""
    # On the main thread (signal.signal refuses any other): the parent-death signal fires when the thread
    # that started the program ends.
    python_path = os.pathsep.join(filter(None, [str(HOOK_DIR), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": python_path, "TRITON_CAPTURE_DIR": folder}
    if replay:
        env["TRITON_CAPTURE_REPLAY"] = "1"
    began = time.perf_counter()
    # Its own session: a terminal's Ctrl-C reaches the capture's group alone, so the program gets it once.
    process = subprocess.Popen(command, env=env, start_new_session=True, preexec_fn=die_with_capture())
    stops = []

    def stop(signum, _frame):
        stops.append(signum)
        with contextlib.suppress(ProcessLookupError):  # the group has ended
            os.killpg(process.pid, signum)

    # A signal ignored on entry (nohup, a script's `cmd &`) stays ignored: the program inherited it so.
    # One before these handlers ends the capture as it would have, and the parent-death signal the program.
    previous = {number: signal.signal(number, stop) for number in STOPS
                if signal.getsignal(number) is not signal.SIG_IGN}
    try:
        status = process.wait()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    return (128 - status if status < 0 else status), time.perf_counter() - began, (stops or [None])[0]


def read_launches(folder: str) -> tuple[dict, float]:
    """function -> {args as JSON: {"args", "calls", "tuning_calls"}} over every process of the program,
    and the seconds spent in the hook."""
    functions: dict[str, dict] = {}
    hook_seconds = 0.0
    for path in sorted(glob.glob(os.path.join(folder, "launches-*.json"))):
        record = json.loads(Path(path).read_text())
        hook_seconds += record["hook_seconds"]
        for function in record["functions"]:
            merged = functions.setdefault(function["function"], {})
            for launch in function["launches"]:
                key = json.dumps(launch["args"], sort_keys=True)
                slot = merged.setdefault(key, {"args": launch["args"], "calls": 0, "tuning_calls": 0})
                slot["calls"] += launch["calls"]
                slot["tuning_calls"] += launch["tuning_calls"]
                if "replay" in launch:  # the first process that launched it recorded it
                    slot.setdefault("replay", launch["replay"])
    return functions, hook_seconds


def _function_name(obj) -> Optional[str]:
    """"module.qualname" of a @triton.jit function (or of the one an autotuner or heuristics wraps)."""
    for _ in range(4):
        if inspect.isfunction(obj):
            return f"{obj.__module__}.{obj.__qualname__}"
        obj = getattr(obj, "fn", None)
        if obj is None:
            return None
    return None


def jit_functions(spec) -> set[str]:
    """The @triton.jit functions of the module that defines the spec's launch."""
    module = sys.modules.get(getattr(spec.launch, "__module__", ""), None)
    names = set()
    for value in vars(module).values() if module else ():
        if type(value).__name__ in ("JITFunction", "InterpretedFunction", "Autotuner", "Heuristics"):
            name = _function_name(value)
            if name:
                names.add(name)
    return names


def launch_shape(spec, args: dict) -> Optional[tuple]:
    """The launch's shape in the spec's dims, None when the launch is not the spec's (kernels/spec.py)."""
    if spec.launch_shape is not None:
        try:
            shape = spec.launch_shape(args)
        except (KeyError, IndexError, TypeError):  # an argument it reads is not there: not its launch
            return None
        if shape is not None and len(shape) != len(spec.dims):
            raise ValueError(f"{spec.name}'s launch_shape gave {list(shape)}, not one size for each of "
                             f"its dims {spec.dims}")
        return None if shape is None else tuple(int(d) for d in shape)
    sizes = {dim: args[arg] for arg, dim in spec.export_key.items() if type(args.get(arg)) is int}
    sizes.update({dim: args[dim] for dim in spec.dims if dim not in sizes and type(args.get(dim)) is int})
    return tuple(sizes[dim] for dim in spec.dims) if len(sizes) == len(spec.dims) else None


def launch_dtype(args: dict) -> Optional[str]:
    """The dtype of the launch's first floating-point tensor argument."""
    for value in args.values():
        if isinstance(value, list) and len(value) == 2 and value[0] in FLOAT_DTYPES:
            return value[0]
    return None


def map_launches(functions: dict, specs: list) -> tuple[dict, list]:
    """kernel -> {(shape, dtype): {"calls", "configs": {config JSON: calls}}}, and the launches no spec
    maps: (function, calls, argument sets, why)."""
    owners = {spec.name: jit_functions(spec) for spec in specs}
    mapped: dict[str, dict] = {}
    unmapped = []
    for function, launches in sorted(functions.items()):
        candidates = [spec for spec in specs if function in owners[spec.name]]
        left = {"calls": 0, "sets": 0, "why": set()}
        for launch in launches.values():
            if not launch["calls"]:
                continue  # launched only by an autotuner's benchmark
            args, found, why = launch["args"], False, set()
            dtype = launch_dtype(args)
            for spec in candidates:
                shape = launch_shape(spec, args)
                if shape is None:
                    continue
                if min(shape) <= 0:
                    why.add(f"a dim of {list(shape)} is 0 (a launch on an empty tensor)")
                    continue
                if dtype not in spec.dtypes:
                    why.add(f"dtype {dtype} is not one of {spec.name}'s ({', '.join(spec.dtypes)})")
                    continue
                entry = mapped.setdefault(spec.name, {}).setdefault((shape, dtype),
                                                                    {"calls": 0, "configs": {}})
                entry["calls"] += launch["calls"]
                config = json.dumps({k: args[k] for k in spec.space if k in args}, sort_keys=True)
                entry["configs"][config] = entry["configs"].get(config, 0) + launch["calls"]
                found = True
                break
            if not found:  # the reasons of the launches left out, and only theirs
                left["calls"] += launch["calls"]
                left["sets"] += 1
                if not candidates:
                    why.add("no spec names this function (a kernel of another package: --spec "
                            "pkg.module:SPEC)")
                elif not why:
                    why.add("no spec of its module gives a shape for these arguments (its "
                            "launch_shape, or the integer arguments of its export key)")
                left["why"] |= why
        if left["calls"]:
            unmapped.append((function, left["calls"], left["sets"], "; ".join(sorted(left["why"]))))
    return mapped, unmapped


VARYING = 4  # a dim taking more sizes than this varies from call to call (a model's widths take a few)


def bucketed(entries: dict, bucket: Optional[str], dims: tuple, named: Optional[list] = None) -> dict:
    """The entries with the dims that vary from call to call (`named`, else those taking more than
    VARYING sizes) rounded up to a power of two (bucket="pow2"; in the lowest bucket, to the smallest
    size called), merged where they meet."""
    if bucket is None:
        return entries
    import triton

    shapes = [shape for shape, _ in entries]
    varying = [dim in named if named else len({shape[i] for shape in shapes}) > VARYING
               for i, dim in enumerate(dims)]
    smallest = [min(shape[i] for shape in shapes) for i in range(len(dims))]

    def rounded(size: int, low: int) -> int:
        # The lowest bucket keeps the smallest size called: what is measured spans every call.
        up = triton.next_power_of_2(size)
        return low if up == triton.next_power_of_2(low) else up

    merged: dict = {}
    for (shape, dtype), entry in entries.items():
        rounded_shape = tuple(rounded(d, low) if vary else d
                              for d, vary, low in zip(shape, varying, smallest))
        into = merged.setdefault((rounded_shape, dtype), {"calls": 0, "configs": {}})
        into["calls"] += entry["calls"]
        for config, calls in entry["configs"].items():
            into["configs"][config] = into["configs"].get(config, 0) + calls
    return merged


def unrunnable(spec, entries: dict) -> list[tuple]:
    """The (shape, dtype) of the entries where no config of the spec's default space passes its
    constraints: a sweep of the captured file would prune every trial there."""
    from runners.model.space import space_configs

    configs = space_configs(spec.space)
    return [(shape, dtype) for shape, dtype in entries
            if all(spec.constraints(shape, dtype, config) is not None for config in configs)]


def sweep_file(spec, spec_path: Optional[str], entries: dict, command: list[str], bucket: Optional[str],
               name: str, notes: tuple = ()) -> str:
    """The sweep file of one kernel: its captured shapes, their calls (summed over dtypes), the dtypes;
    `notes`, comment lines of its own (a replayed kernel's)."""
    calls: dict[tuple, int] = {}
    for (shape, _), entry in entries.items():
        calls[shape] = calls.get(shape, 0) + entry["calls"]
    shapes = sorted(calls, key=lambda s: -calls[s])
    dtypes = sorted({dtype for _, dtype in entries})
    kernel = "external" if spec_path else spec.name
    lines = ["# @package _global_",
             f"# Captured by python -m runners.capture from: {' '.join(command)}",
             f"# {spec.name}: {sum(calls.values())} calls at {len(shapes)} shapes"
             + (" (dims that vary rounded up to powers of two)" if bucket else "")
             + f", dtypes {', '.join(dtypes)}; shapes by calls, most first.",
             "# The export weighs each shape by its calls (kernel.calls); every dtype is swept at every "
             "shape.",
             *(f"# {note}" for note in notes),
             f"# to run (the file in sweeps/): python -m runners.sweep +sweep={name}",
             "defaults:", f"  - override /kernel: {kernel}", "  - override /timing: screen", "",
             "kernel:"]
    if spec_path:
        lines.append(f"  spec: {json.dumps(spec_path)}")
    lines += [f"  shapes: {json.dumps([list(s) for s in shapes])}",
              f"  calls: {json.dumps([calls[s] for s in shapes])}",
              f"  dtypes: {json.dumps(dtypes)}", ""]
    return "\n".join(lines)


def replay_file(out: Path, function: str, command: list[str]) -> Optional[Path]:
    """The sweep file that replays the launches of a function no spec maps, or a line saying why it
    cannot be replayed (the capture goes on with the others)."""
    from runners.capture.replay import PREFIX, Replay
    from runners.model.trial import ConfigError

    target = f"{out}_launches.json#{function}"
    try:
        replay = Replay(Path(f"{out}_launches.json"), function, None)
        spec, calls = replay.spec(), replay.calls()
    except ConfigError as error:
        print(f"not replayed: {str(error).removeprefix('kernel.spec: ')}")
        return None
    except Exception as error:  # a record nothing here foresaw: this kernel's loss, not the capture's
        print(f"not replayed: {function}: {type(error).__name__}: {error}")
        return None
    name = f"{out.name}_{replay.name}"
    path = out.parent / f"{name}.yaml"
    notes = (f"Replayed ({function}, dims {', '.join(replay.dims)}): no spec; each launch is checked "
             "against the program's own config (runners/capture/replay.py).",
             "TFLOPS: append ;flops=<expression of the dims> to kernel.spec.")
    entries = {key: {"calls": count} for key, count in calls.items()}
    path.write_text(sweep_file(spec, PREFIX + target, entries, command, None, name, notes))
    print(f"replay: {function}: sweep file {path} ({len(calls)} shape(s) x dtype(s))")
    for why in sorted({why for why, _ in replay.left_out}):
        calls_left = sum(c for w, c in replay.left_out if w == why)
        print(f"  not replayed: {calls_left} call(s) of {function}: {why}")
    return path


def kernel_seconds(specs: dict, mapped: dict) -> dict:
    """(kernel, shape, dtype) -> seconds of GPU time per call, at the config the program launched most
    there (timed with the sweep's CUPTI timer; the spec's launch); {} without a GPU."""
    import torch

    if not torch.cuda.is_available():
        return {}
    import numpy as np
    import scipy.stats  # noqa: F401  (the stop rule's ranks: imported here, not in the first timer loop)

    from runners.measure.device import cuda_timer
    from runners.measure.stop_rule import StopRule

    rule = StopRule(min_samples=10, min_time_s=0.01, rel_precision=0.02, max_time_s=0.2)
    timer = cuda_timer(torch.cuda.current_device(), rule, warmup_s=0.01)
    seconds = {}
    for kernel, entries in mapped.items():
        spec = specs[kernel]
        for (shape, dtype), entry in entries.items():
            config = json.loads(max(entry["configs"], key=entry["configs"].get))
            try:
                inputs = spec.make_inputs(shape, getattr(torch, dtype), 0, torch.device("cuda"))
                out = spec.output_like(inputs)
                (measured,) = timer.measure_interleaved([lambda: spec.launch(inputs, out, config)], rule)
                seconds[(kernel, shape, dtype)] = float(np.median(measured.samples_s))
            except Exception as error:  # a shape the spec cannot launch: its share is left blank
                print(f"note: {kernel} {list(shape)} {dtype} not timed ({type(error).__name__}: {error})")
    return seconds


def workload_table(mapped: dict, seconds: dict) -> list[str]:
    total_calls = sum(e["calls"] for entries in mapped.values() for e in entries.values())
    total_time = sum(seconds.get((k, s, d), 0) * e["calls"] for k, entries in mapped.items()
                     for (s, d), e in entries.items())
    lines = [f"{'kernel':<22} {'shape':<22} {'dtype':<9} {'calls':>9} {'of kernel':>9} {'of all':>7}"
             + (f" {'of kernel time':>14}" if seconds else "")]
    for kernel, entries in sorted(mapped.items()):
        kernel_calls = sum(e["calls"] for e in entries.values())
        for (shape, dtype), entry in sorted(entries.items(), key=lambda item: -item[1]["calls"]):
            line = (f"{kernel:<22} {'x'.join(map(str, shape)):<22} {dtype:<9} {entry['calls']:>9} "
                    f"{100 * entry['calls'] / kernel_calls:>8.1f}% "
                    f"{100 * entry['calls'] / total_calls:>6.1f}%")
            if seconds:
                time_s = seconds.get((kernel, shape, dtype))
                line += f" {100 * time_s * entry['calls'] / total_time:>13.1f}%" if time_s else f" {'-':>14}"
            lines.append(line)
    return lines


def load_specs(spec_paths: list[str]) -> tuple[dict, dict]:
    """name -> spec of every built-in kernel and of each --spec; name -> the --spec path of the latter."""
    from kernels import builtin
    from runners.model.spec_sources import load_spec

    specs = {name: load_spec(name, None) for name in builtin()}
    paths = {}
    for path in spec_paths:
        spec = load_spec("external", path)
        specs[spec.name], paths[spec.name] = spec, path
    return specs, paths


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=version())
    parser.add_argument("--out", default="sweeps/captured",
                        help="prefix of the files written: <out>_<kernel>.yaml, <out>_launches.json")
    parser.add_argument("--spec", action="append", default=[], metavar="PKG.MODULE:ATTR",
                        help="a kernel of another package to map launches to (repeatable)")
    parser.add_argument("--bucket", choices=["pow2"], help="round dims that vary per call up to powers of 2")
    parser.add_argument("--bucket-dims", type=lambda text: text.split(","), metavar="DIM,DIM",
                        help=f"the dims --bucket rounds (default: those taking more than {VARYING} sizes)")
    parser.add_argument("--no-time", action="store_true", help="skip timing the shapes on the GPU")
    parser.add_argument("--replay", action="store_true",
                        help="record what replaying each launch takes; a sweep file per kernel no spec maps")
    args = parser.parse_args(argv[:split])
    command = argv[split + 1:]
    if not command:
        print("error: give the program after --: python -m runners.capture [options] -- python app.py ARGS",
              file=sys.stderr)
        return 2
    try:
        specs, spec_paths = load_specs(args.spec)
    except Exception as error:  # a --spec that does not import names itself here, before the program runs
        print(f"error: --spec: {error}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="capture_") as folder:
        status, wall_s, stop = run_program(command, folder, args.replay)
        if stop is not None:
            print(f"stopped: the capture got {signal.Signals(stop).name} after {wall_s:.1f} s and sent it to "
                  "the program's process group; no file written (a partial capture)", file=sys.stderr)
            return 128 + stop
        functions, hook_seconds = read_launches(folder)
    report(args, command, specs, spec_paths, functions, hook_seconds, wall_s)
    return status


def report(args, command: list[str], specs: dict, spec_paths: dict, functions: dict, hook_seconds: float,
           wall_s: float) -> None:
    """Map the launches, write the sweep files and the launches, print the workload."""
    out = Path(args.out[:-5] if args.out.endswith(".yaml") else args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    launches = sum(l["calls"] for f in functions.values() for l in f.values())
    print(f"captured {launches} Triton launches of {len(functions)} function(s) in {wall_s:.1f} s; the hook "
          f"took {hook_seconds:.3f} s of it ({100 * hook_seconds / max(wall_s, 1e-9):.2f}%)")
    Path(f"{out}_launches.json").write_text(json.dumps(
        {"command": command, "wall_s": wall_s, "hook_seconds": hook_seconds, "functions": functions},
        indent=1))
    mapped, unmapped = map_launches(functions, list(specs.values()))
    for kernel in mapped:
        unknown = [dim for dim in args.bucket_dims or [] if dim not in specs[kernel].dims]
        if unknown and not any(dim in specs[kernel].dims for dim in args.bucket_dims):
            print(f"note: --bucket-dims: {', '.join(unknown)} is no dim of {kernel} "
                  f"({', '.join(specs[kernel].dims)}); its shapes are kept as called")
    mapped = {kernel: bucketed(entries, args.bucket, specs[kernel].dims, args.bucket_dims)
              for kernel, entries in mapped.items()}
    for function, calls, sets, why in unmapped:
        if args.replay:
            replay_file(out, function, command)
        else:
            print(f"not mapped: {function}: {calls} calls at {sets} argument set(s): {why}")
    if not mapped:
        print("no launch of a known kernel: no sweep file written")
        return
    for kernel, entries in sorted(mapped.items()):
        path = Path(f"{out}_{kernel}.yaml")
        path.write_text(sweep_file(specs[kernel], spec_paths.get(kernel), entries, command, args.bucket,
                                   path.stem))
        print(f"sweep file: {path} ({len(entries)} shape(s) x dtype(s))")
        left = unrunnable(specs[kernel], entries)
        if left:
            named = ", ".join(f"{'x'.join(map(str, shape))} {dtype}" for shape, dtype in left[:4])
            print(f"note: {kernel}: at {len(left)} of its {len(entries)} shapes no config of its default "
                  f"space can run ({named}{', ...' if len(left) > 4 else ''}): widen kernel.space in "
                  f"{path.name}")
    seconds = {} if args.no_time else kernel_seconds(specs, mapped)
    print("\n".join(workload_table(mapped, seconds)))
    if not seconds:
        print("(share of kernel time: on a GPU, timing each shape at the config the program launched)")


"""Tune what a program really calls: `triton-sweep-capture [--out sweeps/NAME] [--spec PKG.MOD:SPEC]
[--bucket pow2] [--replay] -- python my_app.py ARGS` runs the program unchanged (its exit status is the
command's) with a hook on its Triton launches (runners/capture/launch_hook/triton_launch_hook.py).

Then it maps each launch to a kernel spec (the built-in kernels by their @triton.jit functions, another
package's by `--spec`; a launch no spec maps is listed with the reason, never dropped) and writes a sweep
file per kernel (`<out>_<kernel>.yaml`: the captured shapes, `--bucket pow2` rounding up the dims that
vary, their call counts, the dtypes, the BLOCKs widened down where no default config fits a shape) and
`<out>_launches.json`; `--replay` one per function no spec maps (runners/capture/replay.py). It prints
the workload and the hook's own time. The program runs in a session of its own: a signal sent to the
capture goes on to its process group, and a stopped capture writes nothing."""
from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
from pathlib import Path

from triton_sweep import version
from triton_sweep.capture.launches import VARYING, bucketed, map_launches, unrunnable, widened_space
from triton_sweep.capture.program import read_launches, run_program
from triton_sweep.capture.sweep_files import replay_file, sweep_file
from triton_sweep.capture.workload import kernel_seconds, workload_table
from triton_sweep.model.files import write_atomic


def load_specs(spec_paths: list[str]) -> tuple[dict, dict]:
    """name -> spec of every built-in kernel and of each --spec; name -> the --spec path of the latter."""
    from triton_sweep.kernels import builtin
    from triton_sweep.model.spec_sources import load_spec

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
        print("error: give the program after --: triton-sweep-capture [options] -- python app.py ARGS",
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
    write_atomic(f"{out}_launches.json", json.dumps(
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
    replayed = [replay_file(out, function, command) for function, _, _, _ in unmapped if args.replay]
    for function, calls, sets, why in unmapped if not args.replay else ():
        print(f"not mapped: {function}: {calls} calls at {sets} argument set(s): {why}")
    if not mapped:
        if not any(replayed):
            print("no sweep file written: no launch of a known kernel" + (
                " or of one that can be replayed" if args.replay else " (--replay sweeps one with no spec)"))
        return
    for kernel, entries in sorted(mapped.items()):
        path = Path(f"{out}_{kernel}.yaml")
        space, left = widened_space(specs[kernel], entries)
        write_atomic(path, sweep_file(specs[kernel], spec_paths.get(kernel), entries, command, args.bucket,
                                      path.stem, space=space))
        print(f"sweep file: {path} ({len(entries)} shape(s) x dtype(s))")
        if space:
            widened = ", ".join(f"{name} from {values[0]}" for name, values in space.items())
            stranded = len(unrunnable(specs[kernel], entries))
            print(f"note: {kernel}: at {stranded} of its {len(entries)} shapes no config of its default "
                  f"space can run: {path.name} widens kernel.space ({widened})")
        if left:
            named = ", ".join(f"{'x'.join(map(str, shape))} {dtype}" for shape, dtype in left[:4])
            print(f"note: {kernel}: at {len(left)} of its {len(entries)} shapes no config of "
                  f"{'the widened' if space else 'its default'} space can run ({named}"
                  f"{', ...' if len(left) > 4 else ''}): widen kernel.space in {path.name}")
    seconds = {} if args.no_time else kernel_seconds(specs, mapped)
    print("\n".join(workload_table(mapped, seconds)))
    if not seconds:
        print("(share of kernel time: on a GPU, timing each shape at the config the program launched)")

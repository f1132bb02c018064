"""The sweep files a capture writes: one per kernel a spec maps (`<out>_<kernel>.yaml`: its captured
shapes, their calls as kernel.calls, its dtypes), and with --replay one per function no spec maps, whose
kernel.spec is a replay target (runners/capture/replay.py)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from triton_sweep.model.files import write_atomic


def sweep_file(spec, spec_path: Optional[str], entries: dict, command: list[str], bucket: Optional[str],
               name: str, notes: tuple = (), space: Optional[dict] = None) -> str:
    """The sweep file of one kernel: its captured shapes, their calls (summed over dtypes), the dtypes;
    `notes`, comment lines of its own (a replayed kernel's); `space`, kernel.space entries that replace
    the kernel's defaults (launches.widened_space)."""
    calls: dict[tuple, int] = {}
    for (shape, _), entry in entries.items():
        calls[shape] = calls.get(shape, 0) + entry["calls"]
    shapes = sorted(calls, key=lambda s: -calls[s])
    dtypes = sorted({dtype for _, dtype in entries})
    kernel = "external" if spec_path else spec.name
    lines = ["# @package _global_",
             f"# Captured by triton-sweep-capture from: {' '.join(command)}",
             f"# {spec.name}: {sum(calls.values())} calls at {len(shapes)} shapes"
             + (" (dims that vary rounded up to powers of two)" if bucket else "")
             + f", dtypes {', '.join(dtypes)}; shapes by calls, most first.",
             "# The export weighs each shape by its calls (kernel.calls); every dtype is swept at every "
             "shape.",
             *(f"# {note}" for note in notes),
             f"# to run (the file in sweeps/): triton-sweep +sweep={name}",
             "defaults:", f"  - override /kernel: {kernel}", "  - override /timing: screen", "",
             "kernel:"]
    if spec_path:
        lines.append(f"  spec: {json.dumps(spec_path)}")
    lines += [f"  shapes: {json.dumps([list(s) for s in shapes])}",
              f"  calls: {json.dumps([calls[s] for s in shapes])}",
              f"  dtypes: {json.dumps(dtypes)}"]
    if space:
        lines += ["  # widened down from the kernel's default space, which has no config its constraints",
                  "  # keep at some of these shapes (smaller than it was made for)",
                  f"  space: {json.dumps(space)}"]
    return "\n".join(lines + [""])


def replay_file(out: Path, function: str, command: list[str]) -> Optional[Path]:
    """The sweep file that replays the launches of a function no spec maps, or a line saying why it
    cannot be replayed (the capture goes on with the others)."""
    from triton_sweep.capture.replay import PREFIX, Replay
    from triton_sweep.capture.replay_kernel import trusted_file
    from triton_sweep.model.trial import ConfigError

    target = f"{out}_launches.json#{function}"
    try:
        replay = Replay(Path(f"{out}_launches.json"), function, None, allow=None)  # the program just run
        spec, calls = replay.spec(), replay.calls()
    except ConfigError as error:
        print(f"not replayed: {str(error).removeprefix('kernel.spec: ')}")
        return None
    except Exception as error:  # a record nothing here foresaw: this kernel's loss, not the capture's
        print(f"not replayed: {function}: {type(error).__name__}: {error}")
        return None
    name = f"{out.name}_{replay.name}"
    path = out.parent / f"{name}.yaml"
    fixed = sorted({block for record in replay.records if "fixed" in record["grid"] and not record["autotune"]
                    for block in record["blocks"]})
    notes = (f"Replayed ({function}, dims {', '.join(replay.dims)}): no spec; each launch is checked "
             "against the program's own config (runners/capture/replay.py).",
             "TFLOPS: append ;flops=<expression of the dims> to kernel.spec.")
    if fixed:
        notes += (f"Launched with a fixed grid: {', '.join(fixed)} kept as launched; to vary, append "
                  f";grid=<the grid, e.g. cdiv(n, {fixed[0]})> to kernel.spec.",)
    entries = {key: {"calls": count} for key, count in calls.items()}
    write_atomic(path, sweep_file(spec, PREFIX + target, entries, command, None, name, notes))
    print(f"replay: {function}: sweep file {path} ({len(calls)} shape(s) x dtype(s))")
    try:  # where a sweep run here would refuse to import the program (replay_kernel.trusted_file)
        trusted_file(replay.records[0], Path(f"{out}_launches.json"))
    except ConfigError as error:
        print(f"  note: a sweep run here refuses it: its {str(error).split(': its ', 1)[-1]}")
    for why in sorted({why for why, _ in replay.left_out}):
        calls_left = sum(c for w, c in replay.left_out if w == why)
        print(f"  not replayed: {calls_left} call(s) of {function}: {why}")
    return path

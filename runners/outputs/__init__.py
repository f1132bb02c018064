"""What a sweep writes besides its store: one module an output, chosen by the config group `output`.

Each `conf/output/<name>.yaml` names an Output class (`_target_`) and its settings under the key <name>;
conf/config.yaml selects `output: [parquet, table, export, plots, wandb]`, in that order, and
`python -m triton_sweep.sweep 'output=[parquet,table]'` selects others. A new output is a module here with an
Output subclass and a YAML beside the others: the job calls it (runners/engine/job.py), whatever it is,
at five moments (Output: begin, check, start, row, write). All are written before the command returns;
with finish_in_background=true those marked `background` (the plots, the W&B summary run) are left to a
process of their own (runners/outputs/finisher.py). The store, and so every result, never depends on an
output: a failing output says so in a line and the others go on."""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Optional

from triton_sweep.model.trial import ConfigError
from triton_sweep.outputs.output import DEFAULT_STORE, Finished, Output, shown


class Outputs:
    """The sweep's outputs in their configured order."""

    def __init__(self, outputs: dict[str, Output]):
        for name, output in outputs.items():
            output.name = name
        self.all = list(outputs.values())

    @classmethod
    def from_config(cls, cfg) -> "Outputs":
        """Each `output.<name>` node instantiated (hydra.utils.instantiate: `_target_` and settings, as
        plain values, which the background finish is sent)."""
        from omegaconf import OmegaConf

        nodes = OmegaConf.to_container(cfg.output, resolve=True, enum_to_str=True)
        return cls({name: _made(name, node) for name, node in nodes.items()})

    def begin(self, cfg) -> None:
        for output in self.all:
            output.begin(cfg)

    def check(self, cfg, spec) -> None:
        for output in self.all:
            output.check(cfg, spec)

    def start(self, cfg, sweep_id: str, dims: tuple, planned: int = 0, multirun: bool = False) -> None:
        for output in self.all:
            output.planned, output.multirun = planned, multirun
            output.start(cfg, sweep_id, dims)

    def row(self, trial, row: dict, label: str) -> None:
        for output in self.all:
            output.row(trial, row, label)

    def close(self) -> None:
        for output in self.all:
            output.close()

    def finish(self, cfg, sweep_id: str, output_dir: Path) -> dict:
        """Every output written in order: the foreground ones, then (the trial-time work closed) the
        background ones, here or, with cfg.finish_in_background, by a process of their own. Returns what
        was written and `finish_seconds`: where the finish's seconds went, in the order they were spent."""
        from triton_sweep.store.result_store import ResultStore

        seconds: dict[str, float] = {}
        clock = [time.perf_counter()]

        def lap(name: str) -> None:
            now = time.perf_counter()
            seconds[name], clock[0] = now - clock[0], now

        done = Finished(cfg, sweep_id, Path(output_dir), str(cfg.store))
        store = ResultStore(cfg.store)
        done.frame = store.load(sweep_id=sweep_id)
        store.close()
        lap("load")
        background = [o for o in self.all if o.background]
        for output in self.all:
            if output not in background:
                done.files[output.name] = _written(output, done)
                lap(output.name)
        self.close()  # the trial-time work (W&B trial runs) is over before the summary run
        lap("closing")
        left = None
        if background and cfg.get("finish_in_background"):
            from triton_sweep.outputs.finisher import start

            left = start(done, background)
            names = ", ".join(o.name for o in background)
            print(f"{names}: written in the background by process {left}, which says what it did in "
                  f"{shown(done.output_dir / 'finish.log')}")
        else:
            for output in background:
                done.files[output.name] = _written(output, done, output.handover())
                lap(output.name)
        written = {name: [str(p) for p in paths] for name, paths in done.files.items()}
        step = next_step(done)
        if step:
            print(step)
        return {"written": written, "finish_in_background": left, "finish_seconds": seconds,
                **{key: value for o in self.all for key, value in o.seconds().items()}}


def next_step(done: Finished) -> Optional[str]:
    """One line: what to run after this sweep. Interpreter rows: the sweep on a GPU; an export written:
    its module in your code; else the export command. Then the compare of a later sweep with this one.
    Commands by their console scripts (pyproject.toml), paths as shown() names them."""
    frame = done.frame
    if frame is None or frame.empty:
        return None
    store = "" if shown(done.store) == DEFAULT_STORE else f" --store {shown(done.store)}"
    compare = f"triton-sweep-compare {done.sweep_id} NEW_SWEEP_ID{store}"
    if "backend" in frame.columns and (frame["backend"] == "interpret").all():
        return ("next: the same sweep on a GPU (without backend=interpret) measures configs to export; "
                f"{compare} compares two sweeps")
    modules = [path for path in done.files.get("export", []) if str(path).endswith(".py")]
    if modules:
        return (f"next: copy {shown(modules[0])} next to your kernel (README: \"Use the tuned configs in "
                f"another repo\"); {compare} compares a later sweep with this one")
    return (f"next: triton-sweep-export --sweep-id {done.sweep_id}{store} writes the configs; "
            f"{compare} compares a later sweep with this one")


def _written(output: Output, done: Finished, handover=None) -> list:
    """The files an output wrote; none, said in one line, where the disk refused them (full, read-only)."""
    try:
        return output.write(done, handover)
    except OSError as error:
        print(f"error: {output.name}: not written ({error}); the rows are in {shown(done.store)}",
              file=sys.stderr)
        return []


def _made(name: str, node: dict) -> Output:
    """The output `output.<name>` names; ConfigError naming the field where its class cannot be made."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate(node, _convert_="all")
    except InstantiationException as error:
        cause = error
        while cause.__cause__ is not None:  # hydra's words wrap the cause (and send to HYDRA_FULL_ERROR)
            cause = cause.__cause__
        raise ConfigError(f"output.{name}._target_: {node.get('_target_')!r} cannot be made "
                          f"({type(cause).__name__}: {cause})") from None
